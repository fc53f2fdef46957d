"""gemm_wgmma's TF32 with M/N-major operands: copied K-major first (pretranspose 1, the untuned
default's choice) against transposed in shared memory as each stage lands (pretranspose 0), at
precision tf32 against cuBLAS TF32 on the same operands (issue 40: the profile of the missed first
calls found the copies at 42-53% of the call's time).

    python benchmarks/issue40_pretranspose.py --json out.json [--shapes MxNxK:op,...] [--each 6]

For each shape: the family's first --each tf32 candidates of each choice (the tuner's seeds, the
default first), each checked against float64 and timed as the tuner times it (the copies included),
and cuBLAS TF32; a line per shape: the default, the best of each choice, over cuBLAS's time.
"""
import argparse
import json

from autogemm.runtime.device import this_device
from autogemm.runtime.family import family
from issue40_timing import best, problem_of, ratio, timed_rows

SHAPES = ["1024x1024x1024:nn", "512x4096x1024:tn", "256x256x8192:tn", "3072x96x768:tn", "4096x4096x4096:nn",
          "8192x8192x256:nn", "1000x1000x1000:tt", "96x3072x768:nt", "2048x2048x2048:nt", "1000x784x800:tn"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--each", type=int, default=6)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    args = ap.parse_args()
    device, rows = this_device(), []
    wgmma = family("gemm_wgmma").restricted({"math": ("tf32",)})
    print(f"{'shape':20} {'default':>16} {'best copied':>12} {'best in smem':>12}   (time over cuBLAS TF32's)")
    for text in args.shapes.split(","):
        problem = problem_of(text, "tf32")
        default = family("gemm_wgmma").default(problem, device)
        runs = {0: [], 1: []}
        for c in wgmma.candidates(problem, device):
            if len(runs[c.pretranspose]) < args.each:
                runs[c.pretranspose].append(c)
        configs = [default] + [c for c in runs[1] + runs[0] if c != default]
        timed = timed_rows("gemm_wgmma", configs, problem, device, args.reps, shape=text)
        rows += timed
        copied = {p: best([r for r in timed if r["config"]["pretranspose"] == p]) for p in (1, 0)}
        print(f"{text:20} {ratio(timed[0]):6.2f}x (pt {default.pretranspose}) {copied[1]:11.2f}x {copied[0]:11.2f}x",
              flush=True)
    json.dump(rows, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
