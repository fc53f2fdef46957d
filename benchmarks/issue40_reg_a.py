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
from issue40_timing import best, problem_of, ratio, timed_rows

SHAPES = ["512x4096x1024:tn", "3072x96x768:tn", "256x256x8192:tn", "1000x1000x1000:tt", "1024x1024x1024:tt",
          "1024x1024x1024:tn", "4096x4096x4096:tt", "4096x4096x4096:tn", "1000x784x800:tn", "4096x784x8192:tn",
          "8192x8192x256:tt"]


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
        timed = timed_rows("gemm_wgmma", configs, problem, device, args.reps, shape=text, precision=args.precision)
        rows += timed
        in_registers = [r for r in timed if r["config"]["reg_a"]]
        print(f"{text:20} {ratio(timed[0]):7.2f}x {ratio(in_registers[0] if in_registers else None):10.2f}x "
              f"{best(in_registers):9.2f}x", flush=True)
    json.dump(rows, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
