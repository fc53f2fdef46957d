"""Issue 18 on a GPU: what staging an M/N-major operand costs (autogemm.transpose, each config of
the transpose family) against the bytes it moves and CuPy's own transposing copy, on the operands
of the trainers' weight-update GEMMs (tn); each config checked element for element first, then all
timed interleaved with autogemm's one timer.

    python benchmarks/issue18_transpose.py [--json PATH]
"""
import argparse
import json

# (rows, cols) as stored, K first: the CME 213 step's dZ1 and X (tn 1000x784x800), the large
# network's (tn 4096x784x8192)
SIZES = ((800, 1000), (800, 784), (8192, 4096), (8192, 784))


def main():
    import cupy
    import numpy as np

    import autogemm
    from autogemm.runtime.device import this_device
    from autogemm.runtime.family import family
    from autogemm.tuning.timing import time_interleaved
    from kernels.contract import RowsProblem

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    args = parser.parse_args()
    fam, device, results = family("transpose"), this_device(), []
    for rows, cols in SIZES:
        host = np.random.default_rng(rows + cols).standard_normal((rows, cols)).astype(np.float32)
        x, out = cupy.asarray(host), cupy.empty((cols, rows), np.float32)
        problem = RowsProblem(rows, cols)
        configs = {"default": "default", **{fam.instance_name(c, problem): c for c in fam.sample(problem, device, 8)}}
        for name, config in configs.items():
            out.fill(np.nan)
            autogemm.transpose(x, out, config=config)
            assert np.array_equal(cupy.asnumpy(out), host.T), name
        runs = {name: (lambda c=c: autogemm.transpose(x, out, config=c)) for name, c in configs.items()}
        runs["cupy"] = lambda: cupy.ascontiguousarray(x.T)
        timings = time_interleaved(runs, reps=60)
        moved = 8 * rows * cols                                        # 4 bytes read, 4 written each
        row = {"shape": f"{rows}x{cols}",
               **{name: {"us": t.median_us, "GB/s": moved / t.median_us / 1e3} for name, t in timings.items()}}
        results.append(row)
        print(f"{rows:5d}x{cols:<5d} " + "  ".join(f"{name.removeprefix('transpose_f32_')} {t.median_us:6.1f} µs "
                                                   f"({moved / t.median_us / 1e3:4.0f} GB/s)"
                                                   for name, t in timings.items()), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": device.name, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
