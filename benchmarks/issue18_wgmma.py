"""Issue 18 on a Hopper GPU: the gemm_wgmma family's configs against cuBLAS (FP32 and TF32) and the
tuned mma.sync path, on the issue's nt shapes; each variant checked against float64 first, then
timed with autogemm's one timer (events, L2 flushed, median), all variants of a shape interleaved.

    python benchmarks/issue18_wgmma.py [--sample N] [--json PATH]
"""
import argparse
import json


SHAPES = ((4096, 4096, 4096), (8192, 4096, 784), (800, 1000, 784), (200, 1000, 784), (8192, 784, 4096))


def main():
    from cupy import cublas

    from autogemm.ops.cublas import cublas_gemm
    from autogemm.ops.gemm import plan_gemm
    from autogemm.runtime.device import this_device
    from autogemm.runtime.family import family
    from autogemm.tuning.measure import GemmMeasure
    from autogemm.tuning.timing import time_interleaved
    from autogemm.store.keys import key_of
    from kernels.gemm import Problem

    p = argparse.ArgumentParser()
    p.add_argument("--sample", type=int, default=24)
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--json")
    args = p.parse_args()
    device, fam, results = this_device(), family("gemm_wgmma"), []
    for m, n, k in SHAPES:
        problem = Problem.contiguous(m, n, k, "float32", False, True)
        measure = GemmMeasure(key_of("gemm", problem), device)
        configs = list(dict.fromkeys(fam.candidates(problem, device)[:4] + fam.sample(problem, device, args.sample)))
        runs, names, errors = {}, {}, {}
        for cfg in configs:
            run = plan_gemm(measure.a, measure.b, measure.out, trans_b=True, config=dict(cfg), kernel_family="gemm_wgmma")
            try:
                errors[run.instance.name] = measure.verify(run)
            except Exception as exc:
                print(f"{m}x{n}x{k} {run.instance.name}: FAILED {str(exc)[:200]}")
                continue
            runs[run.instance.name], names[run.instance.name] = run, dict(cfg)
        tuned = plan_gemm(measure.a, measure.b, measure.out, trans_b=True)
        measure.verify(tuned)
        runs["mma.sync tuned"] = tuned
        runs["cublas fp32"] = lambda: cublas.gemm("N", "T", measure.a, measure.b, out=measure.out)
        runs["cublas tf32"] = lambda: cublas_gemm(measure.a, measure.b, measure.out, trans_b=True, precision="tf32")
        timings = time_interleaved(runs, reps=args.reps)
        flops = 2 * m * n * k
        best = min((t.median_us, name) for name, t in timings.items() if name in names)
        row = {"shape": f"{m}x{n}x{k}:nt", "best_wgmma": best[1], "best_config": names[best[1]],
               "max_rel_error": max(errors.values()),
               **{name: {"us": timings[name].median_us, "tflops": flops / timings[name].median_us / 1e6}
                  for name in ("mma.sync tuned", "cublas fp32", "cublas tf32", best[1])},
               "all_wgmma_us": {name: timings[name].median_us for name in names}}
        results.append(row)
        print(f"{m}x{n}x{k}: wgmma 3xTF32 best {best[0]:8.1f} us ({flops / best[0] / 1e6:6.1f} TFLOP/s) {names[best[1]]}; "
              f"mma.sync tuned {timings['mma.sync tuned'].median_us:8.1f}; cuBLAS FP32 {timings['cublas fp32'].median_us:8.1f}, "
              f"TF32 {timings['cublas tf32'].median_us:8.1f}; wgmma max relative error {max(errors.values()):.2e}",
              flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": device.name, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
