"""Train a network written in plain PyTorch with autogemm's layers swapped in, one CUDA graph a step.

    python examples/torch_train.py --model lenet               # autogemm.torch.convert(model), Adam, batch 1000
    python examples/torch_train.py --model mlp                 # the CME 213 MLP, SGD, batch 800
    python examples/torch_train.py --model lenet --torch-only  # PyTorch's own layers, to compare
    python examples/torch_train.py --model lenet --precision tf32

Fashion-MNIST is found (or downloaded) by nn.data, as `python -m nn.train` finds it. Prints ms an
epoch (the median of --epochs, after one warm-up epoch) and the test accuracy.
"""
import statistics
import sys
import time

import numpy as np

from nn.data import load_dataset
from nn.errors import ArgumentParser, NNError, exit_status

RECIPES = {"mlp": dict(batch=800, optimizer="sgd", shape=(784,)),
           "lenet": dict(batch=1000, optimizer="adam", shape=(1, 28, 28))}


def main():
    """Train, time and test the model the arguments name; bad input raises NNError."""
    p = ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=RECIPES, default="lenet")
    p.add_argument("--epochs", type=int, default=5, help="timed epochs, after one warm-up (default: 5)")
    p.add_argument("--precision", choices=("fp32", "tf32"), default="fp32",
                   help="tf32: torch.backends.cuda.matmul.allow_tf32 (and cuDNN's), which autogemm follows too")
    p.add_argument("--torch-only", action="store_true", help="keep PyTorch's own layers")
    p.add_argument("--seed", type=int, default=0, help="torch's seed: the initial weights")
    args = p.parse_args()
    if args.epochs < 1:
        raise NNError(f"--epochs must be at least 1 (timed after one warm-up epoch), not {args.epochs}")
    import autogemm.torch as agt      # first: without PyTorch, its one-line error
    import torch
    import torch_models               # beside this file

    if not torch.cuda.is_available():
        raise NNError("this example trains on a CUDA GPU; PyTorch sees none")
    recipe = RECIPES[args.model]
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
    torch.manual_seed(args.seed)
    data = load_dataset("fashion-mnist", scale="unit", dtype=np.float32)

    # All the GPU work runs on one stream (not the default one, which cannot capture): a PyTorch
    # graph replays slower once its kernels have run on a second stream (benchmarks/issue42-h200,
    # streams/).
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        x = torch.from_numpy(data.train.x).cuda().reshape(-1, *recipe["shape"])  # X: (54000, *shape)
        y = torch.from_numpy(data.train.y).cuda()                                 # (54000,) int64
        model = getattr(torch_models, args.model)().cuda()
        if not args.torch_only:
            agt.convert(model)
        params = list(model.parameters())
        opt = (torch.optim.Adam(params, lr=1e-3, eps=1e-7, capturable=True) if recipe["optimizer"] == "adam"
               else torch.optim.SGD(params, lr=0.1, weight_decay=1e-4))

        def step(xb, yb):
            torch.nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()

        # A graph for each batch size (the full one, the last partial one), warmed up first: kernels
        # compiled and tuned configs looked up outside the capture. The gradients are None when a
        # graph is captured, so its backward pass writes them rather than adds to them.
        batch = recipe["batch"]
        starts = range(0, len(y), batch)
        sizes = sorted({min(batch, len(y) - s) for s in starts})
        for rows in sizes:
            for _ in range(3):
                opt.zero_grad()
                step(x[:rows], y[:rows])
        graphs = {}
        for rows in sizes:
            xs, ys = x[:rows].clone(), y[:rows].clone()            # the graph's static inputs
            opt.zero_grad()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=stream):
                step(xs, ys)
            graphs[rows] = (graph, xs, ys)

        times = []
        for epoch in range(args.epochs + 1):
            torch.cuda.synchronize()
            start = time.perf_counter()
            for s in starts:
                graph, xs, ys = graphs[min(batch, len(y) - s)]
                xs.copy_(x[s:s + batch])
                ys.copy_(y[s:s + batch])
                graph.replay()
            torch.cuda.synchronize()
            if epoch:                                               # the first is a warm-up
                times.append((time.perf_counter() - start) * 1e3)
        with torch.no_grad():
            test_x = torch.from_numpy(data.test.x).cuda().reshape(-1, *recipe["shape"])
            accuracy = (model(test_x).argmax(1).cpu().numpy() == data.test.y).mean()
    layers = "PyTorch's layers" if args.torch_only else "autogemm's layers"
    print(f"{args.model} ({layers}, {args.precision}): {statistics.median(times):.2f} ms an epoch, "
          f"test accuracy {100 * accuracy:.2f}% after {args.epochs + 1} epochs")


if __name__ == "__main__":
    sys.exit(exit_status(main))
