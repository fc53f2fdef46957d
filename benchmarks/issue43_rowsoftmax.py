"""The plugin example's tuned config against its default, and PyTorch's softmax, on this GPU.

    python benchmarks/issue43_rowsoftmax.py --shapes 4096x1024,8192x4096

Each: autogemm.launch("rowsoftmax") with the family's default config and with the tuned one (the
store's, as lookup gives it), checked against float64, then timed as `autogemm tune` times a
candidate (autogemm.tuning.timing.time_gpu: the GPU kept busy while the host issues the call, L2
flushed before each run, the median of --reps); torch.softmax on the same data where PyTorch is here.
"""
import argparse
import statistics
from pathlib import Path

import cupy
import numpy as np

import autogemm
from autogemm.runtime.device import this_device
from autogemm.runtime.family import family
from autogemm.store import lookup
from autogemm.tuning.timing import time_gpu
from autogemm.tuning.verify import compare

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "rowsoftmax" / "rowsoftmax"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="4096x1024,8192x4096")
    p.add_argument("--reps", type=int, default=200)
    args = p.parse_args()
    name = autogemm.load_family(EXAMPLE)
    fam, device = family(name), this_device()
    try:
        import torch
    except ImportError:
        torch = None
    print(f"{device.name}: rowsoftmax, µs (median of {args.reps}, L2 flushed), float32")
    print(f"{'shape':>12} {'default':>9} {'tuned':>9} {'speed-up':>9} {'torch':>9}  tuned config")
    for shape in args.shapes.split(","):
        rows, cols = map(int, shape.split("x"))
        x = cupy.asarray(np.random.default_rng(0).standard_normal((rows, cols)), dtype=cupy.float32)
        out = cupy.empty_like(x)
        problem = fam.Problem(rows, cols)
        value, magnitude, k = fam.module.reference(problem, x=x.get())["out"]
        choice = lookup.choose(name, problem, device)
        runs = {"default": lambda: autogemm.launch(name, config="default", x=x, out=out),
                "tuned": lambda: autogemm.launch(name, x=x, out=out)}
        for label, run in runs.items():
            out.fill(cupy.nan)
            run()
            verdict = compare(out.get(), value, magnitude, k, "float32")
            assert verdict.ok, f"{label}: {verdict.describe()}"
        if torch is not None:
            tx, ty = torch.as_tensor(x, device="cuda"), torch.empty((rows, cols), device="cuda")
            runs["torch"] = lambda: torch.softmax(tx, 1, out=ty)
        times = {label: [] for label in runs}
        for _ in range(4):                        # interleaved rounds: each gets the same clocks
            for label, run in runs.items():
                times[label].append(time_gpu(run, reps=args.reps // 4).median_us)
        med = {label: statistics.median(t) for label, t in times.items()}
        print(f"{shape:>12} {med['default']:9.2f} {med['tuned']:9.2f} {med['default'] / med['tuned']:8.2f}x "
              f"{med.get('torch', float('nan')):9.2f}  {dict(choice.config)} ({choice.source})")


if __name__ == "__main__":
    main()
