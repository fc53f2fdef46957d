"""gemm_wgmma computing D^T so that an N-major op(B) is read into registers (swap) against its
candidates without (the register A operand on op(A), op(B) transposed, or neither) and cuBLAS at
the call's precision, on the same operands (issue 40: the tf32 first calls of ops nn and tn).

    python benchmarks/issue40_swap.py --json out.json [--precision tf32|fp32] [--shapes MxNxK:op,...] [--each 4]

For each shape: the first --each candidates of gemm_wgmma with swap and without (the first
without is the default before swap), each checked against float64 and timed as the tuner times it
(any copies included), and cuBLAS; a line per shape, over cuBLAS's time.
"""
import argparse
import json

from autogemm.runtime.device import this_device
from autogemm.runtime.family import family
from issue40_timing import best, problem_of, ratio, timed_rows

SHAPES = ["1024x1024x1024:nn", "4096x4096x4096:nn", "8192x8192x256:nn", "1023x1024x1024:nn", "800x1000x784:nn",
          "512x4096x1024:tn", "256x256x8192:tn", "1024x1024x1024:tn", "4096x4096x4096:tn", "2048x4096x784:nn",
          "800x784x1000:nn"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--precision", choices=("tf32", "fp32"), default="tf32")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--each", type=int, default=4)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    args = ap.parse_args()
    device, rows = this_device(), []
    wgmma = family("gemm_wgmma")
    print(f"{'shape':20} {'default':>16} {'swap first':>10} {'swap best':>9} {'without first':>13} "
          f"{'without best':>12}   (time over cuBLAS's)")
    for text in args.shapes.split(","):
        problem = problem_of(text, args.precision)
        default = wgmma.default(problem, device)
        groups = {swap: wgmma.restricted({"swap": (swap,)}).candidates(problem, device)[:args.each] for swap in (1, 0)}
        configs = list(dict.fromkeys([default, *groups[1], *groups[0]]))
        timed = timed_rows("gemm_wgmma", configs, problem, device, args.reps, shape=text, precision=args.precision)
        rows += timed
        of = {swap: [r for r in timed if r["config"]["swap"] == swap] for swap in (1, 0)}
        print(f"{text:20} {'swap' if default.swap else 'without':>7} {ratio(timed[0]):7.2f}x "
              f"{ratio(of[1][0] if of[1] else None):9.2f}x {best(of[1]):8.2f}x "
              f"{ratio(of[0][0] if of[0] else None):12.2f}x {best(of[0]):11.2f}x", flush=True)
    json.dump(rows, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
