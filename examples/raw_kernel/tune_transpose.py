"""A CUDA kernel with no template, tuned and then launched by autogemm (docs/PLUGINS.md, "No template").

    python examples/raw_kernel/tune_transpose.py --rows 8192 --cols 4096

Tunes transpose.cu's TILE and ROWS on this GPU (each candidate's output checked against NumPy's
transpose first), stores the best config under the source's hash, then runs it through
autogemm.launch_kernel and times it against its first config and CuPy's own transpose copy.
"""
import argparse
import statistics
from pathlib import Path

import numpy as np

import autogemm
from autogemm.tuning.timing import time_gpu

SOURCE = Path(__file__).resolve().parent / "transpose.cu"
KERNEL = dict(source=SOURCE, name="transpose", space={"TILE": [16, 32, 64], "ROWS": [1, 2, 4, 8, 16, 32]},
              grid=lambda cfg, p: (-(-p["cols"] // cfg["TILE"]), -(-p["rows"] // cfg["TILE"])),
              block=lambda cfg, p: (cfg["TILE"], cfg["ROWS"]),
              constraints=[lambda cfg, p: cfg["ROWS"] <= cfg["TILE"]])


def main():
    import cupy

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=8192)
    p.add_argument("--cols", type=int, default=4096)
    p.add_argument("--trials", type=int, default=40)
    args = p.parse_args()
    problem = {"rows": args.rows, "cols": args.cols}
    x = np.random.default_rng(0).standard_normal((args.rows, args.cols)).astype(np.float32)
    out = np.empty((args.cols, args.rows), np.float32)
    best = autogemm.tune_kernel(**KERNEL, problem=problem, arrays={"x": x, "out": out},
                                reference=lambda x, out: {"out": x.T.astype(np.float64)}, trials=args.trials)
    print(f"tuned: {best}")
    xd, outd = cupy.asarray(x), cupy.empty((args.cols, args.rows), cupy.float32)
    autogemm.launch_kernel(**KERNEL, problem=problem, arrays={"x": xd, "out": outd})
    assert cupy.array_equal(outd, xd.T)
    runs = {"tuned": lambda: autogemm.launch_kernel(**KERNEL, problem=problem, arrays={"x": xd, "out": outd}),
            "first config": lambda: autogemm.launch_kernel(**KERNEL, problem=problem, arrays={"x": xd, "out": outd},
                                                           config="default"),
            "cupy": lambda: cupy.copyto(outd, xd.T)}
    times = {name: statistics.median(time_gpu(run, reps=50).median_us for _ in range(3)) for name, run in runs.items()}
    gb = 2 * x.nbytes / 1e9
    for name, us in times.items():
        print(f"{name:>13}: {us:8.1f} µs, {gb / (us * 1e-6):6.0f} GB/s")


if __name__ == "__main__":
    main()
