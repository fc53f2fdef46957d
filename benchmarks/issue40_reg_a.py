"""gemm_wgmma with an M-major op(A) read into registers (reg_a) against its untuned default (A
copied K-major first or transposed in shared memory) and cuBLAS at the call's precision, on the
same operands (issue 40: the tf32 first calls with M/N-major operands).

    python benchmarks/issue40_reg_a.py --json out.json [--precision tf32|fp32] [--shapes MxNxK:op,...] [--each 6]

For each shape (op(A) M-major: ops tn and tt): gemm_wgmma's default and its first --each
candidates with reg_a, each checked against float64 and timed as the tuner times it (any copies
included), and cuBLAS; a line per shape, over cuBLAS's time.
"""
import argparse
import json

from autogemm.runtime.device import this_device
from autogemm.runtime.family import family
from autogemm.store.keys import key_of
from autogemm.tuning.measures import measure_for
from kernels.gemm.call import Problem

SHAPES = ["512x4096x1024:tn", "3072x96x768:tn", "256x256x8192:tn", "1000x1000x1000:tt", "1024x1024x1024:tt",
          "1024x1024x1024:tn", "4096x4096x4096:tt", "4096x4096x4096:tn", "1000x784x800:tn", "4096x784x8192:tn",
          "8192x8192x256:tt"]


def problem_of(text: str, precision: str) -> Problem:
    sizes, op = text.split(":")
    m, n, k = map(int, sizes.split("x"))
    return Problem.contiguous(m, n, k, "float32", op[0] == "t", op[1] == "t", precision=precision)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--precision", choices=("tf32", "fp32"), default="tf32")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--each", type=int, default=6)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    args = ap.parse_args()
    device, rows = this_device(), []
    wgmma = family("gemm_wgmma")
    print(f"{'shape':20} {'default':>8} {'reg_a first':>11} {'reg_a best':>10}   (time over cuBLAS's)")
    for text in args.shapes.split(","):
        problem = problem_of(text, args.precision)
        default = wgmma.default(problem, device)
        in_registers = wgmma.restricted({"reg_a": (1,)}).candidates(problem, device)[:args.each]
        configs = [default] + [c for c in in_registers if c != default]
        measure = measure_for(key_of("gemm_wgmma", problem), device)
        measure.prepare(configs)
        base = measure.baseline(args.reps).median_us
        timed = []
        for i, cfg in enumerate(configs):
            row = dict(shape=text, precision=args.precision, kernel=wgmma.instance_name(cfg, problem),
                       config=dict(cfg), default=i == 0, cublas_us=base)
            try:
                row["median_us"] = measure(cfg, args.reps).median_us
                row["vs_cublas"] = row["median_us"] / base
                timed.append(row)
            except Exception as exc:      # a mismatch or launch failure is a result too
                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
            rows.append(row)
        first = next((r["vs_cublas"] for r in timed if r["default"]), float("nan"))
        ra = [r for r in rows if r["shape"] == text and r["config"]["reg_a"]]
        ra_first = ra[0].get("vs_cublas", float("nan")) if ra else float("nan")
        ra_best = min((r["vs_cublas"] for r in ra if "vs_cublas" in r), default=float("nan"))
        print(f"{text:20} {first:7.2f}x {ra_first:10.2f}x {ra_best:9.2f}x", flush=True)
    json.dump(rows, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
