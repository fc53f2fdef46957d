"""Run issue 40's missed first calls (an empty store), each a few times, then cuBLAS on the same
arrays, for Nsight Compute:

    ncu --launch-skip 0 --launch-count 40 --section SpeedOfLight --section LaunchStats \
        --section Occupancy --section WarpStateStats python benchmarks/issue40_first_calls_profile.py

The calls as autogemm.gemm runs them untuned (their staging copies and transposes included), at
tf32 (float32 arrays) or on bfloat16 arrays: 1024x1024x1024:nn, 512x4096x1024:tn,
256x256x8192:tn, 3072x96x768:tn at tf32; 8192x8192x256:nn and 1000x1000x1000:tt on bfloat16.
`--shapes` and `--arith` pick others (MxNxK:op, tf32|bf16|fp32|bfloat16).
"""
import argparse

import cupy

import autogemm
from autogemm.store import lookup
from autogemm.tuning.targets import parse_shapes

RUNS = 2
MISSES = {"tf32": "1024x1024x1024:nn,512x4096x1024:tn,256x256x8192:tn,3072x96x768:tn",
          "bfloat16": "8192x8192x256:nn,1000x1000x1000:tt"}


def run(shape: str, arith: str):
    """The untuned call of `shape` at `arith`, RUNS times, then cuBLAS's, RUNS times."""
    s, = parse_shapes(shape)
    rng = cupy.random.default_rng(0)
    a = rng.standard_normal((s.k, s.m) if s.trans_a else (s.m, s.k), dtype=cupy.float32)
    b = rng.standard_normal((s.n, s.k) if s.trans_b else (s.k, s.n), dtype=cupy.float32)
    precision = "bf16" if arith == "bfloat16" else arith
    if arith == "bfloat16":
        a, b = autogemm.to_bf16(a), autogemm.to_bf16(b)
    out = cupy.empty((s.m, s.n), dtype=cupy.float32)
    with lookup.untuned():
        plan = autogemm.plan_gemm(a, b, out, trans_a=s.trans_a, trans_b=s.trans_b, precision=precision)
        print(f"{shape} {arith}: {plan.instance.name}", flush=True)
        for _ in range(RUNS):
            plan()
    for _ in range(RUNS):
        autogemm.cublas_gemm(a, b, out, s.trans_a, s.trans_b, precision)
    cupy.cuda.get_current_stream().synchronize()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes")
    ap.add_argument("--arith", choices=("fp32", "tf32", "bf16", "bfloat16"))
    args = ap.parse_args()
    if args.shapes:
        calls = [(shape, args.arith or "tf32") for shape in args.shapes.split(",")]
    else:
        calls = [(shape, arith) for arith, shapes in MISSES.items() for shape in shapes.split(",")]
    for shape, arith in calls:
        run(shape, arith)


if __name__ == "__main__":
    main()
