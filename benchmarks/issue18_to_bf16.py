"""Issue 18 on a GPU: what rounding float32 operands to bfloat16 costs (autogemm.to_bf16, the
to_bf16 family's default and each vector width) against the bytes it moves, on the trainers'
operand sizes; each config checked bit for bit first, then timed with autogemm's one timer.

    python benchmarks/issue18_to_bf16.py [--json PATH]
"""
import argparse
import json

# (rows, cols): X and W1 of the CME 213 step, its hidden layer's gradient, the large network's X and W1
SIZES = ((800, 784), (1000, 784), (800, 1000), (8192, 784), (4096, 784), (8192, 4096))


def main():
    import cupy
    import numpy as np

    import autogemm
    from autogemm.tuning.timing import time_interleaved
    from kernels.gemm import bf16_bits

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    args = parser.parse_args()
    configs = {"default": "default", **{f"vec{v}": dict(block=256, ept=2, vec=v) for v in (8, 4, 2)}}
    results = []
    for rows, cols in SIZES:
        host = np.random.default_rng(rows + cols).standard_normal((rows, cols)).astype(np.float32)
        x, out = cupy.asarray(host), cupy.empty((rows, cols), np.uint16)
        for name, config in configs.items():
            out.fill(0)
            autogemm.to_bf16(x, out, config=config)
            assert np.array_equal(cupy.asnumpy(out), bf16_bits(host)), name
        timings = time_interleaved({name: (lambda c=c: autogemm.to_bf16(x, out, config=c))
                                    for name, c in configs.items()}, reps=60)
        moved = 6 * rows * cols                                        # 4 bytes read, 2 written each
        row = {"shape": f"{rows}x{cols}",
               **{name: {"us": t.median_us, "GB/s": moved / t.median_us / 1e3} for name, t in timings.items()}}
        results.append(row)
        print(f"{rows:5d}x{cols:<5d} " + "  ".join(f"{name} {t.median_us:6.1f} µs ({moved / t.median_us / 1e3:5.0f} GB/s)"
                                               for name, t in timings.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
