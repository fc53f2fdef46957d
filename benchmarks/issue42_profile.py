"""Where a PyTorch training step's GPU time goes, as written and converted by autogemm.torch: the
kernels of a few eager steps of nn.bench's CME 213 MLP (batch 800, SGD) or LeNet (batch 1000, Adam),
by torch.profiler, per step.

    python benchmarks/issue42_profile.py --model mlp --precision fp32 [--torch-only]
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import torch_models  # noqa: E402

STEPS = 10


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("mlp", "lenet"), default="mlp")
    parser.add_argument("--precision", choices=("fp32", "tf32", "bf16"), default="fp32")
    parser.add_argument("--torch-only", action="store_true", help="the model as written, not converted")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    model = getattr(torch_models, args.model)().cuda()
    batch, shape = (800, (784,)) if args.model == "mlp" else (1000, (1, 28, 28))
    opt = (torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=1e-4) if args.model == "mlp"
           else torch.optim.Adam(model.parameters(), lr=1e-3))
    if not args.torch_only:
        import autogemm.torch

        autogemm.torch.convert(model)
    x = torch.rand(batch, *shape, device="cuda")                 # (B, *shape)
    y = torch.randint(0, 10, (batch,), device="cuda")
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        with torch.autocast("cuda", torch.bfloat16, enabled=args.precision == "bf16", cache_enabled=False):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(STEPS):
            step()
        torch.cuda.synchronize()
    kernels = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            name = e.name[:90]
            count, us = kernels.get(name, (0, 0.0))
            kernels[name] = (count + 1, us + e.device_time)
    total = sum(us for _, us in kernels.values()) / STEPS
    label = f"{args.model} {args.precision} {'torch' if args.torch_only else 'converted'}"
    print(f"{label}: {total:.1f} µs of kernels a step, {sum(c for c, _ in kernels.values()) / STEPS:.0f} launches")
    for name, (count, us) in sorted(kernels.items(), key=lambda kv: -kv[1][1]):
        print(f"  {us / STEPS:8.1f} µs  {count / STEPS:4.1f}x  {name}")


if __name__ == "__main__":
    main()
