"""Run the gemm_wgmma kernels that issue 18's figures rest on, a few times each, for Nsight Compute:

    ncu --kernel-name regex:gemm_wgmma --launch-skip 2 --launch-count 2 --section SpeedOfLight \
        --section ComputeWorkloadAnalysis --section WarpStateStats --section MemoryWorkloadAnalysis \
        python benchmarks/issue18_profile.py

4096^3 with the best config of the bench (128 x 256 tiles, 2 warpgroups, 2 stages) and 800x1000x784
with its tuned record's config (autogemm.gemm's choice when given gemm_wgmma's family). With
`--bfloat16`: GEMMs of bfloat16 arrays with their tuned records' configs, 4096^3 (nt: both operands
K-major) and 4096x784x8192 (tn: both read by the transposing wgmma). With `--tma`: the TMA
producer's records, 4096^3 of bfloat16 arrays and 8192x4096x784 in TF32 (nt), and 4096x784x8192 in
TF32 (tn, both operands transposed in shared memory) on the TMA config of the pipeline A/B. With
`--cluster`: 8192x4096x784 in TF32 (nt) on its record's config (128 x 256 tiles, TMA producer) alone
and in clusters of 2 x 1 blocks sharing B. With `--targets`: the GEMMs of issue 18's missed targets
on the configs a call gets (lookup's choice among the families), each twice: 4096^3 in TF32,
800x1000x784 of bfloat16 arrays, 8192x4096x784 and 800x1000x784 FP32-accurate (all nt). With
`--forward`: the large network's forward GEMM at bf16, 8192x4096x784 nt of bfloat16 arrays, as the
step runs it (bias and sigmoid fused, D in bfloat16), with D in float32, and without the epilogue,
each on the config a call gets, twice.
"""
import sys

import cupy

import autogemm

RUNS = 3


def bfloat16_runs():
    rng = cupy.random.default_rng(0)
    for (m, n, k), trans_a, trans_b in (((4096, 4096, 4096), False, True), ((4096, 784, 8192), True, False)):
        a = autogemm.to_bf16(rng.standard_normal((k, m) if trans_a else (m, k), dtype=cupy.float32))
        b = autogemm.to_bf16(rng.standard_normal((n, k) if trans_b else (k, n), dtype=cupy.float32))
        out = cupy.empty((m, n), dtype=cupy.float32)           # D: (M, N)
        for _ in range(RUNS):
            autogemm.gemm(a, b, out, trans_a=trans_a, trans_b=trans_b, precision="bf16", kernel_family="gemm_wgmma")
    cupy.cuda.get_current_stream().synchronize()


def tma_runs():
    rng = cupy.random.default_rng(0)
    tn = dict(bm=128, bn=128, warpgroups=2, stages=3, math="tf32", inflight=0, split_k=1, producer=1, tma=1, pretranspose=0,
              cluster_m=1, cluster_n=1)
    for (m, n, k), trans_a, trans_b, precision, config in (((4096, 4096, 4096), False, True, "bf16", None),
                                                           ((8192, 4096, 784), False, True, "tf32", None),
                                                           ((4096, 784, 8192), True, False, "tf32", tn)):
        a = rng.standard_normal((k, m) if trans_a else (m, k), dtype=cupy.float32)
        b = rng.standard_normal((n, k) if trans_b else (k, n), dtype=cupy.float32)
        if precision == "bf16":
            a, b = autogemm.to_bf16(a), autogemm.to_bf16(b)
        out = cupy.empty((m, n), dtype=cupy.float32)           # D: (M, N)
        for _ in range(2):
            autogemm.gemm(a, b, out, trans_a=trans_a, trans_b=trans_b, precision=precision, config=config,
                          kernel_family="gemm_wgmma")
    cupy.cuda.get_current_stream().synchronize()


def cluster_runs():
    rng = cupy.random.default_rng(0)
    tiles = dict(bm=128, bn=256, warpgroups=2, stages=4, math="tf32", inflight=0, split_k=1, producer=1, tma=1,
                 pretranspose=0)
    a = rng.standard_normal((8192, 784), dtype=cupy.float32)    # A: (M, K)
    b = rng.standard_normal((4096, 784), dtype=cupy.float32)    # B: (N, K), used as B^T
    out = cupy.empty((8192, 4096), dtype=cupy.float32)         # D: (M, N)
    for cluster_m in (1, 2):
        for _ in range(2):
            autogemm.gemm(a, b, out, trans_b=True, precision="tf32", kernel_family="gemm_wgmma",
                          config=dict(tiles, cluster_m=cluster_m, cluster_n=1))
    cupy.cuda.get_current_stream().synchronize()


def targets_runs():
    rng = cupy.random.default_rng(0)
    for (m, n, k), precision, bfloat16 in (((4096, 4096, 4096), "tf32", False), ((800, 1000, 784), "bf16", True),
                                           ((8192, 4096, 784), "fp32", False), ((800, 1000, 784), "fp32", False)):
        a = rng.standard_normal((m, k), dtype=cupy.float32)     # A: (M, K)
        b = rng.standard_normal((n, k), dtype=cupy.float32)     # B: (N, K), used as B^T
        if bfloat16:
            a, b = autogemm.to_bf16(a), autogemm.to_bf16(b)
        out = cupy.empty((m, n), dtype=cupy.float32)           # D: (M, N)
        for _ in range(2):
            autogemm.gemm(a, b, out, trans_b=True, precision=precision)
    cupy.cuda.get_current_stream().synchronize()


def forward_runs():
    rng = cupy.random.default_rng(0)
    a = autogemm.to_bf16(rng.standard_normal((8192, 784), dtype=cupy.float32))     # X: (M, K) bfloat16 bits
    b = autogemm.to_bf16(rng.standard_normal((4096, 784), dtype=cupy.float32))     # W1: (N, K), used as W1^T
    bias = rng.standard_normal(4096, dtype=cupy.float32)
    for epilogue, dtype in (("bias_sigmoid", cupy.uint16), ("bias_sigmoid", cupy.float32), (None, cupy.float32)):
        out = cupy.empty((8192, 4096), dtype=dtype)                                # A1: (M, N)
        for _ in range(2):
            autogemm.gemm(a, b, out, trans_b=True, epilogue=epilogue, bias=bias if epilogue else None, precision="bf16")
    cupy.cuda.get_current_stream().synchronize()


def main():
    if "--forward" in sys.argv[1:]:
        return forward_runs()
    if "--targets" in sys.argv[1:]:
        return targets_runs()
    if "--cluster" in sys.argv[1:]:
        return cluster_runs()
    if "--bfloat16" in sys.argv[1:]:
        return bfloat16_runs()
    if "--tma" in sys.argv[1:]:
        return tma_runs()
    rng = cupy.random.default_rng(0)
    for (m, n, k), config in (((4096, 4096, 4096), dict(bm=128, bn=256, warpgroups=2, stages=2, math="3xtf32", inflight=0, split_k=1)),
                              ((800, 1000, 784), None)):
        a = rng.standard_normal((m, k), dtype=cupy.float32)     # A: (M, K)
        b = rng.standard_normal((n, k), dtype=cupy.float32)     # B: (N, K), used as B^T
        out = cupy.empty((m, n), dtype=cupy.float32)           # D: (M, N)
        for _ in range(RUNS):
            autogemm.gemm(a, b, out, trans_b=True, config=config, kernel_family="gemm_wgmma")
        cupy.cuda.get_current_stream().synchronize()


if __name__ == "__main__":
    main()
