"""gemm_wgmma's 3xTF32 with a stage's wgmmas left in flight (two sets of sums, inflight 1) against
none (inflight 0), at fp32 against cuBLAS FP32 on the same operands (issue 40: summed a stage at a
time with none in flight, the large network's GEMMs took 1.1-1.2x their time before).

    python benchmarks/issue40_wgmma_inflight.py --json out.json [--shapes MxNxK:op,...] [--each 6]

For each shape: the family's first --each 3xTF32 candidates of each choice (the tuner's seeds),
each checked against float64 (a candidate beyond 2x cuBLAS FP32's error is refused, as the tuner
refuses it) and timed as the tuner times it; a line per shape: the default's choice, the best of
each choice over cuBLAS's time, and the largest error of each over cuBLAS's.
"""
import argparse
import json

from autogemm.runtime.device import this_device
from autogemm.runtime.family import family
from autogemm.store.keys import key_of
from autogemm.tuning.measures import measure_for
from kernels.gemm.call import Problem

SHAPES = ["1024x1024x1024:nn", "2048x2048x2048:nt", "4096x4096x4096:nn", "512x4096x1024:tn", "4096x512x1024:nt",
          "256x256x8192:tn", "8192x8192x256:nn", "1000x1000x1000:tt", "96x3072x768:nt", "3072x96x768:tn",
          "8192x4096x784:nt", "4096x784x8192:tn", "800x1000x784:nt", "1000x784x800:tn", "256x256x16384:nt",
          "1024x1024x16384:nt"]


def problem_of(text: str) -> Problem:
    sizes, op = text.split(":")
    m, n, k = map(int, sizes.split("x"))
    return Problem.contiguous(m, n, k, "float32", op[0] == "t", op[1] == "t")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--each", type=int, default=6)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    args = ap.parse_args()
    device, rows = this_device(), []
    wgmma = family("gemm_wgmma")
    print(f"{'shape':20} {'default':>8} {'best if0':>9} {'best if1':>9} {'err if0':>8} {'err if1':>8}"
          "   (time, error over cuBLAS FP32's)")
    for text in args.shapes.split(","):
        problem = problem_of(text)
        default = wgmma.default(problem, device)
        runs = {0: [], 1: []}
        for c in wgmma.restricted({"math": ("3xtf32",)}).candidates(problem, device):
            if len(runs[c.inflight]) < args.each:
                runs[c.inflight].append(c)
        configs = runs[0] + runs[1]
        measure = measure_for(key_of("gemm_wgmma", problem), device)
        measure.prepare(configs)
        base = measure.baseline(args.reps).median_us
        cublas_error = measure.verify(measure.cublas_launcher())
        timed = []
        for cfg in configs:
            row = dict(shape=text, kernel=wgmma.instance_name(cfg, problem), config=dict(cfg), cublas_us=base,
                       cublas_error=cublas_error)
            try:
                t = measure(cfg, args.reps)
                row.update(median_us=t.median_us, vs_cublas=t.median_us / base,
                           error_vs_cublas=t.max_rel_error / cublas_error)
                timed.append(row)
            except Exception as exc:      # a mismatch, a refusal or a launch failure is a result too
                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
            rows.append(row)

        def best(key, inflight, pick):
            return pick((r[key] for r in timed if r["config"]["inflight"] == inflight), default=float("nan"))
        print(f"{text:20} {'if' + str(default.inflight):>8} {best('vs_cublas', 0, min):8.2f}x {best('vs_cublas', 1, min):8.2f}x "
              f"{best('error_vs_cublas', 0, max):7.2f}x {best('error_vs_cublas', 1, max):7.2f}x", flush=True)
    json.dump(rows, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
