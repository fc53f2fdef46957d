"""The tiled family's tensor-core math (TF32 at precision tf32, 3xTF32 at fp32) against cuBLAS at the
call's precision on the same operands, beside gemm_wgmma's untuned default (issue 40: the tf32 first
calls with M/N-major operands, where wgmma must copy them K-major first).

    python benchmarks/issue40_tiled_tf32.py --json out.json [--precision tf32|fp32] [--shapes MxNxK:op,...] [--each 6]

For each shape: the tiled family's first --each candidates of that math (the tuner's seeds, its
tensor-core default first), larger tiles (EXTRA_TILES) and gemm_wgmma's default, each checked against float64 and timed as the
tuner times them (gemm_wgmma's copies included), and cuBLAS; a line per shape, over cuBLAS's time.
"""
import argparse
import json

from autogemm.runtime.device import this_device
from autogemm.runtime.family import family
from issue40_timing import best, problem_of, ratio, timed_rows

SHAPES = ["1024x1024x1024:nn", "2048x2048x2048:nt", "4096x4096x4096:nn", "512x4096x1024:tn", "4096x512x1024:nt",
          "256x256x8192:tn", "8192x8192x256:nn", "1000x1000x1000:tt", "777x555x333:nt", "96x3072x768:nt",
          "3072x96x768:tn", "1023x1025x1027:nn", "800x1000x784:nt", "1000x784x800:tn", "800x784x1000:nn"]
MATH = {"tf32": "tf32", "fp32": "3xtf32"}
# Larger block tiles than the seeds' 128 x 64 (bm, bn, ty, tx): warp tiles of 64 x 32 in 8 and 16
# warps, 32 x 64, 64 x 64; timed after the seeds where they can run.
EXTRA_TILES = ((128, 128, 16, 16), (128, 128, 32, 8), (256, 128, 32, 16), (128, 256, 16, 32), (128, 128, 16, 8))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--precision", choices=sorted(MATH), default="tf32")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--each", type=int, default=6)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    args = ap.parse_args()
    device, rows = this_device(), []
    tiled = family("gemm").restricted({"math": (MATH[args.precision],)})
    print(f"{'shape':20} {'tiled first':>11} {'tiled best':>10} {'wgmma default':>13}   (time over cuBLAS's)")
    for text in args.shapes.split(","):
        problem = problem_of(text, args.precision)
        configs = tiled.candidates(problem, device)[:args.each]
        for bm, bn, ty, tx in EXTRA_TILES:
            extra = family("gemm").config(dict(configs[0], bm=bm, bn=bn, ty=ty, tx=tx, split_k=1))
            if extra not in configs and family("gemm").fits(extra, problem, device):
                configs.append(extra)
        tiled_rows = timed_rows("gemm", configs, problem, device, args.reps, shape=text)
        wgmma_rows = []
        if family("gemm_wgmma").can_run(problem, device):
            wgmma_rows = timed_rows("gemm_wgmma", [family("gemm_wgmma").default(problem, device)], problem, device,
                                    args.reps, shape=text)
        rows += tiled_rows + wgmma_rows
        print(f"{text:20} {ratio(tiled_rows[0]):10.2f}x {best(tiled_rows):9.2f}x "
              f"{ratio(wgmma_rows[0] if wgmma_rows else None):12.2f}x", flush=True)
    json.dump(rows, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
