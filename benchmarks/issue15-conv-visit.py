"""Issue 15, first GPU look at the conv2d family: LeNet's two forward convolutions (bias + ReLU fused)
with the untuned default config and the best of 24 sampled configs, against PyTorch's cuDNN
(conv2d + bias, then ReLU in place; cudnn.benchmark) in the same process: CUDA events around 20
launches, median of 30 repeats, L2 warm for both. Run from the repository root on a GPU machine."""
import json
import sys

import cupy
import numpy as np

from autogemm.runtime import compile as compiler
from autogemm.runtime.device import this_device
from autogemm.runtime.family import family
from kernels import conv2d

LAYERS = [(1000, 1, 28, 28, 6, 3), (1000, 6, 13, 13, 10, 3), (128, 1, 28, 28, 6, 3), (128, 6, 13, 13, 10, 3)]


def median_us(launch, calls=20, repeats=30) -> float:
    launch()
    cupy.cuda.Device().synchronize()
    start, end, times = cupy.cuda.Event(), cupy.cuda.Event(), []
    for _ in range(repeats):
        start.record()
        for _ in range(calls):
            launch()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) * 1e3 / calls)
    return float(np.median(times))


def main() -> int:
    import torch

    torch.backends.cudnn.benchmark = True
    fam, device, rows = family("conv2d"), this_device(), []
    for n, c, h, w, f, k in LAYERS:
        p = conv2d.Problem(n, c, h, w, f, k, "float32", "relu")
        rng = np.random.default_rng(0)
        x = cupy.asarray(rng.uniform(0, 1, (n, c, h, w)).astype(np.float32))
        wt = cupy.asarray((rng.standard_normal((f, c, k, k)) / k).astype(np.float32))
        b = cupy.asarray(rng.standard_normal(f).astype(np.float32))
        z = cupy.empty((n, f, p.out_h, p.out_w), np.float32)
        timed = {}
        for tag, cfg in [("default", fam.default(p, device))] + [(f"s{i}", c) for i, c in
                                                                  enumerate(fam.sample(p, device, 24, seed=1))]:
            inst = fam.instance(cfg, p)
            kernel, g = compiler.load(inst), inst.geometry
            timed[tag] = (median_us(lambda: kernel(g.grid, g.block, (x, wt, b, z, np.int32(n)), shared_mem=g.smem_bytes)),
                          dict(cfg))
        tx, tw, tb = (torch.as_tensor(a, device="cuda") for a in (x, wt, b))

        def torch_conv():
            torch.relu_(torch.nn.functional.conv2d(tx, tw, tb))

        best = min((v for k_, v in timed.items() if k_ != "default"), key=lambda v: v[0])
        rows.append(dict(layer=f"{n}x{c}x{h}x{w} * {f}x{c}x{k}x{k}", default_us=timed["default"][0],
                         default=timed["default"][1], best_sampled_us=best[0], best_sampled=best[1],
                         cudnn_us=median_us(torch_conv)))
    print(f"{'layer':>28} {'default':>9} {'best of 24':>11} {'cuDNN':>8}  (µs, conv + bias + ReLU)")
    for r in rows:
        print(f"{r['layer']:>28} {r['default_us']:9.1f} {r['best_sampled_us']:11.1f} {r['cudnn_us']:8.1f}")
    if len(sys.argv) > 1:
        json.dump({"gpu": device.name, "results": rows}, open(sys.argv[1], "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
