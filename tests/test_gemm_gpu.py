"""GPU checks of the GEMM families against float64 NumPy: every op, epilogue and dtype, poisoned outputs."""
import itertools
import re

import numpy as np
import pytest

from autogemm.runtime.device import H100
from autogemm.runtime.family import family
from autogemm.tuning.verify import compare, within_fp32_bound
from kernels.gemm.call import EPILOGUES, Problem, reference
from kernels.gemm_wgmma import MATH_PRECISION

pytestmark = pytest.mark.gpu

OPS = [(ta, tb) for ta in (False, True) for tb in (False, True)]
SHAPES = [(1, 1, 1), (7, 13, 29), (17, 33, 65), (64, 64, 64), (131, 67, 257),
          (800, 1000, 784), (800, 10, 1000), (10, 1000, 800), (800, 1000, 10), (1000, 784, 800)]


def operands(rng, m, n, k, ta, tb, dtype, epilogue, beta):
    import cupy

    a = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
    c = rng.standard_normal((m, n)).astype(dtype) if beta else None
    bias = rng.standard_normal(n).astype(dtype) if epilogue and epilogue.startswith("bias") else None
    aux = None
    if epilogue == "dsigmoid":
        aux = rng.uniform(0.01, 0.99, (m, n)).astype(dtype)
    elif epilogue == "drelu":
        aux = np.maximum(rng.standard_normal((m, n)), 0).astype(dtype)
    host = dict(a=a, b=b, c=c, bias=bias, aux=aux)
    dev = {key: (cupy.asarray(v) if v is not None else None) for key, v in host.items()}
    return host, dev


def run_and_check(rng, m, n, k, ta, tb, dtype, epilogue=None, alpha=1.5, beta=0.0, config=None,
                  kernel_family="gemm", precision="fp32", bfloat16=False):
    """One call against float64; `bfloat16`: A and B passed as their bfloat16 copies, checked within
    float32's bound of the bfloat16 values' product (exact in float32)."""
    import cupy

    import autogemm
    from kernels.bf16 import bf16_bits

    host, dev = operands(rng, m, n, k, ta, tb, dtype, epilogue, beta)
    a, b = dev["a"], dev["b"]
    if bfloat16:
        a, b = autogemm.to_bf16(a), autogemm.to_bf16(b)
        host = dict(host, a=bf16_bits(host["a"]), b=bf16_bits(host["b"]))
    out = cupy.full((m, n), np.nan, dtype=dtype)          # poison: unwritten elements stay NaN
    if beta:
        out[...] = dev["c"]                               # in place: C and D are one array
    autogemm.gemm(a, b, out, alpha=alpha, beta=beta, trans_a=ta, trans_b=tb,
                  epilogue=epilogue, bias=dev["bias"], aux=dev["aux"], config=config,
                  kernel_family=kernel_family, precision=precision)
    problem = Problem(m, n, k, trans_a=ta, trans_b=tb, epilogue=epilogue, precision=precision, bf16_operands=bfloat16)
    value, magnitude, _ = reference(problem, host["a"], host["b"], alpha, beta, host["c"], host["bias"],
                                    host["aux"])["d"]
    verdict = compare(cupy.asnumpy(out), value, magnitude, k, dtype, "fp32" if bfloat16 else precision)
    assert verdict.ok, f"{m}x{n}x{k} {'tn'[ta]}{'tn'[tb]} {dtype.__name__} {epilogue} {config}: {verdict.describe()}"
    return verdict


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ta,tb", OPS)
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_default_config_every_op(m, n, k, ta, tb, dtype):
    rng = np.random.default_rng(m * 7 + n * 13 + k)
    run_and_check(rng, m, n, k, ta, tb, dtype, beta=0.5 if (m + n) % 2 else 0.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("epilogue", EPILOGUES[1:])
def test_epilogues(epilogue, dtype):
    rng = np.random.default_rng(1)
    for (m, n, k), (ta, tb) in zip([(17, 33, 65), (800, 1000, 784), (64, 128, 32), (800, 10, 1000)], OPS):
        run_and_check(rng, m, n, k, ta, tb, dtype, epilogue=epilogue, beta=0.25)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sampled_configs(dtype):
    """Random valid points of the space (split-K, one stage, every vector width, padding)."""
    fam = family("gemm")
    rng = np.random.default_rng(2)
    for (m, n, k), (ta, tb) in itertools.product([(200, 136, 520), (33, 47, 95)], OPS):
        p = Problem(m, n, k, dtype.__name__, ta, tb, vec_a=1 if (m * k) % 2 else 4, vec_b=1 if k % 2 else 4)
        for cfg in fam.sample(p, H100, 3, seed=m + k + 2 * ta + tb):
            run_and_check(rng, m, n, k, ta, tb, dtype, beta=1.0, config=dict(cfg))


ASYNC = [dict(bm=64, bn=64, bk=16, ty=16, tx=16, tm=4, tn=4, vec=4, copy="async", stages=3, split_k=1, pad=True, math="fma"),
         dict(bm=64, bn=64, bk=8, ty=16, tx=16, tm=4, tn=1, vec=4, copy="async", stages=4, split_k=2, pad=False, math="fma"),
         dict(bm=32, bn=32, bk=32, ty=8, tx=8, tm=2, tn=2, vec=1, copy="async", stages=2, split_k=3, pad=True, math="fma")]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ta,tb", OPS)
@pytest.mark.parametrize("cfg", ASYNC, ids=["s3", "s4-splitk2", "s2-vec1-splitk3"])
def test_cp_async_pipeline_every_op(cfg, ta, tb, dtype):
    """cp.async stages with K-major shared tiles: even and ragged shapes, zero-filled edges."""
    fam = family("gemm")
    rng = np.random.default_rng(6)
    ran = 0
    for m, n, k in [(800, 1000, 784), (1000, 784, 800), (256, 128, 96), (131, 67, 257), (7, 13, 29)]:
        cfg_here = dict(cfg, vec=min(cfg["vec"], 16 // np.dtype(dtype).itemsize))
        p = Problem.contiguous(m, n, k, dtype.__name__, ta, tb)
        if fam.violations(fam.config(cfg_here), p, H100):
            continue
        run_and_check(rng, m, n, k, ta, tb, dtype, epilogue="bias_sigmoid", beta=0.5, config=cfg_here)
        ran += 1
    assert ran >= 3


TF32X3 = [dict(bm=128, bn=64, bk=32, ty=16, tx=8, tm=1, tn=2, vec=4, copy="async", stages=3, split_k=1, pad=True, math="3xtf32"),
          dict(bm=64, bn=64, bk=16, ty=16, tx=8, tm=1, tn=2, vec=4, copy="async", stages=4, split_k=2, pad=True, math="3xtf32"),
          dict(bm=32, bn=64, bk=16, ty=8, tx=16, tm=1, tn=2, vec=1, copy="async", stages=2, split_k=3, pad=True, math="3xtf32")]


@pytest.mark.parametrize("ta,tb", OPS)
@pytest.mark.parametrize("cfg", TF32X3, ids=["128x64", "64x64-splitk2", "32x64-vec1-splitk3"])
def test_3xtf32_every_op(cfg, ta, tb):
    """Tensor-core float32 (3xTF32): even and ragged shapes, every op, within float32's error bound."""
    fam = family("gemm")
    rng = np.random.default_rng(7)
    ran = 0
    for m, n, k in [(800, 1000, 784), (1000, 784, 800), (256, 128, 96), (131, 67, 257), (7, 13, 29)]:
        p = Problem.contiguous(m, n, k, "float32", ta, tb)
        if fam.violations(fam.config(cfg), p, H100):
            continue
        run_and_check(rng, m, n, k, ta, tb, np.float32, epilogue="bias_sigmoid", beta=0.5, config=cfg)
        ran += 1
    assert ran >= 3


@pytest.mark.parametrize("epilogue", EPILOGUES[1:])
def test_3xtf32_epilogues(epilogue):
    rng = np.random.default_rng(8)
    for (m, n, k), (ta, tb) in zip([(17, 33, 65), (800, 1000, 784), (64, 128, 32), (800, 10, 1000)], OPS):
        run_and_check(rng, m, n, k, ta, tb, np.float32, epilogue=epilogue, beta=0.25, config=dict(TF32X3[2], split_k=1))


def test_3xtf32_sampled_configs():
    fam = family("gemm").restricted({"math": ("3xtf32",), "copy": ("async",), "tm": (1,), "tn": (2,), "pad": (True,)})
    rng = np.random.default_rng(9)
    for (m, n, k), (ta, tb) in itertools.product([(200, 136, 520), (33, 47, 95)], OPS):
        p = Problem.contiguous(m, n, k, "float32", ta, tb)
        for cfg in fam.sample(p, H100, 3, seed=m + k + 2 * ta + tb):
            run_and_check(rng, m, n, k, ta, tb, np.float32, beta=1.0, config=dict(cfg))


@pytest.mark.parametrize("ta,tb", OPS)
@pytest.mark.parametrize("cfg", TF32X3, ids=["128x64", "64x64-splitk2", "32x64-vec1-splitk3"])
@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_tf32_every_op(cfg, ta, tb, precision):
    """The tiled TF32 path (math tf32, one MMA a k step) on 3xTF32's tiles: even, ragged and
    unaligned shapes, every op, within the precision's bound (a bf16 call served by TF32 products)."""
    fam = family("gemm")
    cfg = dict(cfg, math="tf32")
    rng = np.random.default_rng(10)
    ran = 0
    for m, n, k in [(800, 1000, 784), (1000, 784, 800), (1023, 1025, 1027), (256, 128, 96), (131, 67, 257),
                    (7, 13, 29)]:
        p = Problem.contiguous(m, n, k, "float32", ta, tb, precision=precision)
        if fam.violations(fam.config(cfg), p, H100):
            continue
        run_and_check(rng, m, n, k, ta, tb, np.float32, epilogue="bias_sigmoid", beta=0.5, config=cfg,
                      precision=precision)
        ran += 1
    assert ran >= 3


@pytest.mark.parametrize("m, n, k, ta, tb", [(1023, 1025, 1027, False, False), (777, 555, 333, False, True),
                                             (97, 3072, 768, True, False)])
def test_bfloat16_rows_no_family_reads_are_widened_and_multiplied_at_bf16(m, n, k, ta, tb):
    """bfloat16 operands whose rows are not a multiple of 16 bytes (odd K or M/N): widened exactly
    to float32 in scratch, then the float32 call at precision bf16, within its bound; the plan runs
    twice (the widening is part of the call)."""
    import cupy

    import autogemm
    from kernels.bf16 import bf16_bits

    rng = np.random.default_rng(13)
    host_a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    host_b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    bits_a, bits_b = bf16_bits(host_a), bf16_bits(host_b)
    a, b = cupy.asarray(bits_a), cupy.asarray(bits_b)
    out = cupy.full((m, n), np.nan, dtype=np.float32)
    plan = autogemm.plan_gemm(a, b, out, trans_a=ta, trans_b=tb, precision="bf16")
    assert plan.widen is not None
    problem = Problem(m, n, k, trans_a=ta, trans_b=tb, precision="bf16", bf16_operands=True)
    value, magnitude, _ = reference(problem, bits_a, bits_b, 1.0, 0.0, None, None, None)["d"]
    for _ in range(2):
        out.fill(np.nan)
        plan()
        verdict = compare(cupy.asnumpy(out), value, magnitude, k, np.float32, "bf16")
        assert verdict.ok, verdict.describe()


def test_tf32_keeps_a_nan_a_nan():
    """A NaN in A reaches its row of D (rounding its bits to TF32 naively made it a zero)."""
    import cupy

    import autogemm

    rng = np.random.default_rng(12)
    a = cupy.asarray(rng.standard_normal((256, 128)).astype(np.float32))
    b = cupy.asarray(rng.standard_normal((128, 192)).astype(np.float32))
    a[3, 5] = np.nan
    out = cupy.empty((256, 192), dtype=np.float32)
    autogemm.gemm(a, b, out, config=dict(TF32X3[1], math="tf32", split_k=1), precision="tf32")
    got = cupy.asnumpy(out)
    assert np.isnan(got[3]).all() and np.isfinite(np.delete(got, 3, axis=0)).all()


@pytest.mark.parametrize("m, n, k, ta, tb", [(1023, 1025, 1027, False, False), (777, 555, 333, False, True)])
def test_an_untuned_tf32_call_on_rows_gemm_wgmma_cannot_read_copies_them_aligned(m, n, k, ta, tb):
    """Rows of odd length at tf32, which gemm_wgmma's 16-byte copies cannot read: untuned, the call
    copies them into aligned rows and gemm_wgmma multiplies those, within TF32's bound; A negated in
    place between two runs of a plan gives the negated product (the copies are part of the call).
    Told the tiled family's default, the tiled TF32 MMAs run."""
    import cupy

    import autogemm
    from autogemm.store import lookup

    rng = np.random.default_rng(11)
    a = cupy.asarray(rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32))
    b = cupy.asarray(rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32))
    problem = Problem.contiguous(m, n, k, "float32", ta, tb, precision="tf32")
    value, magnitude, _ = reference(problem, cupy.asnumpy(a), cupy.asnumpy(b), 1.0, 0.0, None, None, None)["d"]
    out = cupy.full((m, n), np.nan, dtype=np.float32)
    with lookup.untuned():
        plans = {"copied": autogemm.plan_gemm(a, b, out, trans_a=ta, trans_b=tb, precision="tf32"),
                 "tiled": autogemm.plan_gemm(a, b, out, trans_a=ta, trans_b=tb, precision="tf32", config="default")}
    assert plans["copied"].widen is not None and plans["copied"].instance.family == "gemm_wgmma"
    assert plans["tiled"].widen is None and plans["tiled"].instance.config.math == "tf32"
    for name, plan in plans.items():
        for sign in (1, -1):
            out.fill(np.nan)
            plan()
            verdict = compare(cupy.asnumpy(out), sign * value, magnitude, k, np.float32, "tf32")
            assert verdict.ok, f"{name}, A times {sign}: {verdict.describe()}"
            a *= -1


# gemm_wgmma's 3xTF32 on one 64 x 128 wgmma tile a warpgroup, a producer copying by TMA
WGMMA_3XTF32 = dict(bm=64, bn=128, warpgroups=1, stages=4, math="3xtf32", inflight=0, split_k=1, producer=1, tma=1,
                    pretranspose=0, cluster_m=1, cluster_n=1, persistent=0, reg_a=0, swap=0)


@pytest.mark.parametrize("m, n, k, ta, tb, family_name, config", [
    (800, 1000, 784, False, True, "gemm", TF32X3[0]),
    (4096, 784, 8192, True, False, "gemm", TF32X3[0]),
    (256, 256, 16384, False, True, "gemm", dict(TF32X3[1], split_k=4)),
    (800, 1000, 784, False, True, "gemm_wgmma", WGMMA_3XTF32),
    (1024, 1024, 8192, False, False, "gemm_wgmma", dict(WGMMA_3XTF32, pretranspose=1)),
    (256, 256, 16384, False, True, "gemm_wgmma", dict(WGMMA_3XTF32, split_k=4))])
def test_3xtf32_is_as_accurate_as_cublas_fp32(m, n, k, ta, tb, family_name, config):
    """FP32-accurate is FP32's error: 3xTF32's max-norm error against float64 within
    FP32_ERROR_BOUND times cuBLAS FP32's on the same operands, K up to 16384 (summed in parts, 16 k
    in the tiled family, a 32-k stage in gemm_wgmma, each added with a rounding FADD: the tensor
    cores' own adder truncates)."""
    import cupy

    from autogemm.ops.cublas import cublas_gemm

    if family_name == "gemm_wgmma" and not hopper():
        pytest.skip("gemm_wgmma needs a Hopper GPU (sm_90a)")
    rng = np.random.default_rng(10)
    tc = run_and_check(rng, m, n, k, ta, tb, np.float32, alpha=1.0, config=config, kernel_family=family_name)
    host, dev = operands(np.random.default_rng(10), m, n, k, ta, tb, np.float32, None, 0.0)
    out = cupy.empty((m, n), np.float32)
    cublas_gemm(dev["a"], dev["b"], out, ta, tb, "fp32")
    a, b = host["a"].astype(np.float64), host["b"].astype(np.float64)
    want = (a.T if ta else a) @ (b.T if tb else b)
    cublas = float(np.abs(cupy.asnumpy(out) - want).max() / np.abs(want).max())
    print(f"max-norm relative error: {family_name} 3xtf32 {tc.max_rel_error:.2e}, cuBLAS FP32 {cublas:.2e}")
    assert within_fp32_bound(tc.max_rel_error, cublas), (tc.max_rel_error, cublas)


def test_the_tuner_refuses_an_fp32_candidate_less_accurate_than_fp32():
    """FMAs summing all of K = 16384 in one sequence an output: on 256 x 256 outputs, whose K cuBLAS
    splits, several times cuBLAS FP32's error, and the measure says so rather than timing it."""
    from autogemm.runtime.device import this_device
    from autogemm.store.keys import key_of
    from autogemm.tuning.measure import Inaccurate
    from autogemm.tuning.measures import measure_for

    problem, device = Problem.contiguous(256, 256, 16384, "float32", False, True), this_device()
    fma = family("gemm").validate(dict(bm=64, bn=64, bk=16, ty=16, tx=16, tm=4, tn=4, vec=4, copy="async", stages=3,
                                       split_k=1, pad=True, math="fma"), problem, device)
    measure = measure_for(key_of("gemm", problem), device)
    with pytest.raises(Inaccurate, match="cuBLAS FP32"):
        measure(fma, 5)


def test_split_k_is_deterministic_and_reusable():
    """The tile counters reset themselves: repeated launches give bit-identical results."""
    import cupy

    import autogemm

    cfg = dict(bm=64, bn=64, bk=16, ty=16, tx=16, tm=4, tn=4, vec=2, copy="regs", stages=2, split_k=8, pad=True, math="fma")
    rng = np.random.default_rng(3)
    a = cupy.asarray(rng.standard_normal((100, 4000)).astype(np.float32))
    b = cupy.asarray(rng.standard_normal((4000, 70)).astype(np.float32))
    first = autogemm.gemm(a, b, config=cfg)
    for _ in range(5):
        assert cupy.array_equal(autogemm.gemm(a, b, config=cfg), first)
    value, magnitude, _ = reference(Problem(100, 70, 4000), cupy.asnumpy(a), cupy.asnumpy(b))["d"]
    assert compare(cupy.asnumpy(first), value, magnitude, 4000, np.float32).ok


@pytest.mark.parametrize("m,n,k", [(800, 1000, 784), (800, 10, 1000)])
def test_cme213_gemm(m, n, k):
    """CME 213's GEMM test: alpha = 2, beta = 5, float64, max-norm relative error <= 1e-12."""
    rng = np.random.default_rng(4)
    verdict = run_and_check(rng, m, n, k, False, False, np.float64, alpha=2.0, beta=5.0)
    assert verdict.max_rel_error <= 1e-12


@pytest.mark.parametrize("ta,tb", OPS)
def test_naive_family(ta, tb):
    rng = np.random.default_rng(5)
    for dtype in (np.float32, np.float64):
        run_and_check(rng, 37, 51, 77, ta, tb, dtype, epilogue="bias_relu", beta=2.0,
                      kernel_family="gemm_naive")


# ---- the Hopper path (gemm_wgmma): float32, compute capability 9.0 ----------------------------------
def hopper():
    import cupy

    return cupy.cuda.Device().compute_capability == "90"


@pytest.mark.parametrize("epilogue", (None,) + EPILOGUES[1:])
def test_wgmma_default_every_epilogue(epilogue):
    """Warpgroup MMAs from swizzled shared memory: even and ragged shapes, every op (M/N-major
    operands transposed in shared memory), within float32's bound."""
    if not hopper():
        pytest.skip("gemm_wgmma needs a Hopper GPU (sm_90a)")
    rng = np.random.default_rng(10)
    for m, n, k, ta, tb in [(800, 1000, 784, False, True), (1024, 1024, 1024, True, False), (131, 67, 260, False, True),
                            (7, 13, 28, False, True), (8192, 512, 784, False, True), (1000, 784, 800, True, False),
                            (132, 68, 260, False, False), (12, 8, 28, True, True), (800, 784, 12, False, False)]:
        run_and_check(rng, m, n, k, ta, tb, np.float32, epilogue=epilogue, beta=0.5 if m % 2 else 0.0,
                      kernel_family="gemm_wgmma")


def test_wgmma_sampled_configs():
    """Random valid points of the wgmma space: 1 to 4 wgmma tiles a warpgroup, 2 to 5 stages, N 32 to
    256, every op."""
    if not hopper():
        pytest.skip("gemm_wgmma needs a Hopper GPU (sm_90a)")
    fam = family("gemm_wgmma")
    rng = np.random.default_rng(11)
    seen = set()
    for m, n, k, ta, tb in [(800, 1000, 784, False, True), (200, 136, 520, True, False), (33, 47, 96, False, True),
                            (1000, 784, 800, True, False), (100, 784, 1000, False, False), (36, 44, 72, True, True)]:
        p = Problem.contiguous(m, n, k, "float32", ta, tb)
        for cfg in fam.sample(p, H100, 8, seed=m + k):
            run_and_check(rng, m, n, k, ta, tb, np.float32, epilogue="bias_relu", beta=1.0, config=dict(cfg),
                          kernel_family="gemm_wgmma")
            seen.add((cfg.warpgroups, cfg.stages))
    assert len(seen) >= 6


@pytest.mark.parametrize("epilogue", (None,) + EPILOGUES[1:])
def test_wgmma_tf32_products_every_epilogue(epilogue):
    """Precision tf32: single TF32 products (the family's default for a tf32 call) within the TF32
    bound, and TF32 indeed (an FP32-accurate result would hide a kernel that never ran its tf32
    path). Without config=, a tf32 call may get an FP32-accurate record (tests/test_lookup.py)."""
    if not hopper():
        pytest.skip("gemm_wgmma needs a Hopper GPU (sm_90a)")
    import autogemm
    from autogemm.ops.gemm import plan_gemm

    rng = np.random.default_rng(12)
    errors = []
    for m, n, k, ta, tb in [(800, 1000, 784, False, True), (131, 67, 260, False, True), (1024, 1024, 1024, False, True),
                            (1000, 784, 800, True, False), (800, 784, 1000, False, False)]:
        tf32 = run_and_check(rng, m, n, k, ta, tb, np.float32, epilogue=epilogue, beta=0.5, config="default",
                             kernel_family="gemm_wgmma", precision="tf32")
        fp32 = run_and_check(rng, m, n, k, ta, tb, np.float32, epilogue=epilogue, beta=0.5, config="default",
                             kernel_family="gemm_wgmma")
        errors.append((tf32.max_rel_error, fp32.max_rel_error))
    assert all(t > 4 * f for t, f in errors), errors
    import cupy

    a, b = cupy.ones((64, 64), cupy.float32), cupy.ones((64, 64), cupy.float32)
    assert "_tf32" in plan_gemm(a, b, trans_b=True, precision="tf32", config="default",
                                kernel_family="gemm_wgmma").instance.name
    with pytest.raises(autogemm.BadArguments, match="precision 'bf8' is not one of fp32, tf32, bf16"):
        autogemm.gemm(a, b, precision="bf8")


WGMMA_TILES = dict(bm=128, bn=128, warpgroups=2, stages=4, inflight=1, split_k=1, producer=0, tma=0, pretranspose=0,
                   cluster_m=1, cluster_n=1, persistent=0, reg_a=0, swap=0)


@pytest.mark.parametrize("ta,tb", OPS)
def test_wgmma_split_k_every_op_and_math(ta, tb):
    """Split-K on every op and math, C in place, each call twice (the tile counters are left at
    zero for the next launch): within each precision's bound."""
    if not hopper():
        pytest.skip("gemm_wgmma needs a Hopper GPU (sm_90a)")
    for (m, n, k), split_k, math in [((200, 1000, 784), 3, "3xtf32"), ((136, 256, 1000), 4, "tf32"),
                                      ((64, 64, 4096), 6, "bf16"), ((200, 1000, 784), 2, "tf32")]:
        precision = MATH_PRECISION[math]
        config = dict(WGMMA_TILES, bm=64, bn=64, warpgroups=1, math=math, split_k=split_k, inflight=int(math != "3xtf32"))
        for _ in range(2):
            run_and_check(np.random.default_rng(k), m, n, k, ta, tb, np.float32, epilogue="bias_relu" if tb else None,
                          beta=0.5, config=config, kernel_family="gemm_wgmma", precision=precision)


def check_wgmma_cases(ta, tb, pipeline: dict, cases: list):
    """Each case ((M, N, K), tiles, math, bfloat16 operands) with WGMMA_TILES, `pipeline` and its
    tiles, within its math's precision's bound, each call twice (the second finds every mbarrier a
    phase on); a pretransposed case only on an op with an M/N-major operand."""
    for (m, n, k), tiles, math, bfloat16 in cases:
        if tiles.get("pretranspose") and not (ta or not tb):
            continue
        config = dict(WGMMA_TILES, **pipeline) | tiles | dict(math=math)
        assert math != "3xtf32" or config["inflight"] == 0, "3xtf32 leaves no wgmmas in flight"
        for _ in range(2):
            run_and_check(np.random.default_rng(k), m, n, k, ta, tb, np.float32, epilogue="bias_relu" if tb else None,
                          beta=0.5, config=config, kernel_family="gemm_wgmma", precision=MATH_PRECISION[math],
                          bfloat16=bfloat16)


@pytest.mark.parametrize("tma", (0, 1))
@pytest.mark.parametrize("ta,tb", OPS)
def test_wgmma_producer_every_op_and_math(ta, tb, tma):
    """The warp-specialized pipeline (a producer warpgroup, mbarriers), copying by cp.async and by
    TMA, on every op and math, float32 and bfloat16 operands, 2 to 5 stages (every lag of the prepare
    step), wgmmas in flight, split-K: within each precision's bound, each call twice."""
    if not hopper():
        pytest.skip("gemm_wgmma needs a Hopper GPU (sm_90a)")
    check_wgmma_cases(ta, tb, dict(producer=1, tma=tma), [
            ((800, 1000, 784), dict(bm=128, bn=128, stages=2, inflight=0), "3xtf32", False),
            ((1000, 784, 800), dict(bm=64, bn=64, warpgroups=1, stages=4, inflight=0), "3xtf32", False),
            ((132, 68, 2600), dict(bm=64, bn=64, warpgroups=1, stages=5, inflight=0), "tf32", False),
            ((800, 1000, 784), dict(bm=128, bn=128, stages=4, inflight=1), "bf16", False),
            ((1024, 1024, 1024), dict(bm=128, bn=256, stages=4, inflight=1), "bf16", True),
            ((200, 1000, 784), dict(bm=64, bn=64, warpgroups=1, stages=2, inflight=0, split_k=3), "3xtf32", False),
            ((136, 256, 1000), dict(bm=128, bn=64, stages=3, inflight=1, split_k=2), "bf16", True),
            ((800, 784, 1000), dict(bm=64, bn=128, warpgroups=1, stages=3, inflight=1), "bf16", True)])


@pytest.mark.parametrize("ta,tb", OPS)
def test_wgmma_clusters_every_op_and_math(ta, tb):
    """Blocks in clusters of 2 x 1, 1 x 2 and 2 x 2 sharing their tiles by multicast bulk copies, on
    every op and math, float32 and bfloat16 operands, with a prepare step and without, grids padded
    to whole clusters (ragged M and N), pretransposed operands: within each precision's bound, each
    call twice."""
    if not hopper():
        pytest.skip("gemm_wgmma needs a Hopper GPU (sm_90a)")
    check_wgmma_cases(ta, tb, dict(producer=1, tma=1), [
            ((800, 1000, 784), dict(bm=128, bn=256, stages=2, inflight=0, cluster_m=2), "tf32", False),
            ((1000, 784, 800), dict(bm=128, bn=96, stages=4, inflight=1, cluster_n=2), "tf32", False),
            ((800, 1000, 784), dict(bm=128, bn=128, stages=2, inflight=0, cluster_m=2, cluster_n=2), "3xtf32", False),
            ((520, 336, 1000), dict(bm=64, bn=64, warpgroups=1, stages=4, inflight=1, cluster_m=2), "bf16", False),
            ((1024, 1024, 1024), dict(bm=128, bn=256, stages=4, inflight=0, cluster_m=2), "bf16", True),
            ((800, 784, 1000), dict(bm=128, bn=128, stages=3, inflight=1, cluster_m=2, cluster_n=2), "bf16", True),
            ((1000, 784, 800), dict(bm=128, bn=64, stages=4, inflight=0, cluster_n=2, pretranspose=1), "tf32", False)])


@pytest.mark.parametrize("ta,tb", [(True, False), (True, True)])
def test_wgmma_register_a_every_pipeline_and_math(ta, tb):
    """op(A) with M contiguous read into registers (reg_a): one, two and four 64-row tiles a
    warpgroup, both maths of TF32 products, each pipeline, TMA alone and in 1 x 2 clusters sharing
    A's tile, persistent blocks, split-K, B pretransposed beside it: within each precision's bound,
    each call twice."""
    if not hopper():
        pytest.skip("gemm_wgmma needs a Hopper GPU (sm_90a)")
    check_wgmma_cases(ta, tb, dict(reg_a=1, inflight=0, producer=1, tma=1), [
            ((800, 1000, 784), dict(bm=128, bn=128, stages=3), "tf32", False),
            ((1000, 784, 800), dict(bm=128, bn=64, warpgroups=1, stages=4), "3xtf32", False),
            ((1000, 784, 800), dict(bm=256, bn=32, warpgroups=1, stages=3, tma=0), "tf32", False),
            ((780, 556, 336), dict(bm=64, bn=128, warpgroups=1, stages=3, producer=0, tma=0), "3xtf32", False),
            ((1000, 2000, 800), dict(bm=64, bn=64, warpgroups=1, stages=4, cluster_n=2), "tf32", False),
            ((4000, 1000, 784), dict(bm=128, bn=64, stages=3, persistent=1), "tf32", False),
            ((256, 256, 8192), dict(bm=64, bn=64, warpgroups=1, stages=4, split_k=4), "3xtf32", False),
        ] + [((1000, 784, 800), dict(bm=128, bn=64, warpgroups=1, stages=4, pretranspose=1), "tf32", False)] * (not tb))


@pytest.mark.parametrize("ta", (False, True))
def test_wgmma_swap_every_pipeline_and_math(ta):
    """D^T computed (swap), an N-major op(B) read into registers: ops nn and tn (op(A) transposed in
    shared memory, or pretransposed), both maths of TF32 products, each pipeline, split-K, persistent
    blocks, C read and D written transposed: within each precision's bound, each call twice."""
    if not hopper():
        pytest.skip("gemm_wgmma needs a Hopper GPU (sm_90a)")
    check_wgmma_cases(ta, False, dict(reg_a=1, swap=1, inflight=0, producer=1, tma=1), [
            ((800, 1000, 784), dict(bm=128, bn=128, stages=3), "tf32", False),
            ((1000, 784, 800), dict(bm=128, bn=64, warpgroups=1, stages=4), "3xtf32", False),
            ((780, 556, 336), dict(bm=64, bn=128, warpgroups=1, stages=3, producer=0, tma=0), "3xtf32", False),
            ((256, 256, 8192), dict(bm=64, bn=64, warpgroups=1, stages=4, split_k=4), "tf32", False),
            ((1000, 4000, 784), dict(bm=128, bn=64, stages=3, persistent=1), "tf32", False),
        ] + [((1000, 784, 800), dict(bm=128, bn=64, warpgroups=1, stages=4, pretranspose=1), "3xtf32", False)] * ta)


@pytest.mark.parametrize("ta,tb", OPS)
def test_wgmma_persistent_every_op_and_math(ta, tb):
    """Persistent blocks, their warpgroups taking whole tiles in turn (more tiles than SMs, so that
    each block takes several, and fewer), every op and math, float32 and bfloat16 operands, each
    producer pipeline, wgmmas in flight or not, pretransposed operands, clusters of 2 x 1, 1 x 2 and
    2 x 2 taking cluster tiles: within each precision's bound, each call twice."""
    if not hopper():
        pytest.skip("gemm_wgmma needs a Hopper GPU (sm_90a)")
    check_wgmma_cases(ta, tb, dict(producer=1, persistent=1), [
            ((4000, 1000, 784), dict(bm=128, bn=128, stages=3, inflight=0, tma=1), "tf32", False),
            ((1000, 4000, 800), dict(bm=64, bn=256, stages=2, inflight=0, tma=1), "tf32", False),
            ((2400, 1000, 784), dict(bm=128, bn=64, stages=2, inflight=0, tma=1), "3xtf32", False),
            ((2000, 784, 1000), dict(bm=64, bn=128, warpgroups=1, stages=4, inflight=1, tma=0), "bf16", False),
            ((4096, 1024, 1024), dict(bm=128, bn=128, stages=4, inflight=0, tma=1), "bf16", True),
            ((800, 784, 1000), dict(bm=64, bn=128, stages=3, inflight=1, tma=0), "bf16", True),
            ((2000, 784, 800), dict(bm=128, bn=96, stages=4, inflight=1, tma=1, pretranspose=1), "tf32", False),
            ((4000, 1000, 784), dict(bm=128, bn=128, stages=3, inflight=0, tma=1, cluster_m=2), "tf32", False),
            ((4000, 1000, 1000), dict(bm=128, bn=128, stages=4, inflight=1, tma=1, cluster_n=2), "bf16", True),
            ((2400, 1000, 784), dict(bm=64, bn=128, stages=2, inflight=0, tma=1, cluster_m=2, cluster_n=2), "3xtf32",
             False)])


@pytest.mark.parametrize("ta,tb", OPS)
def test_wgmma_tiles_112_and_224_wide(ta, tb):
    """Tiles 112 and 224 wide (784 = 7 x 112): the one loop, the producer by cp.async and by TMA,
    B's tile parted in 2 x 1 clusters, persistent, every math, float32 and (B K-major) bfloat16
    operands, N = 784 and ragged: within each precision's bound, each call twice."""
    if not hopper():
        pytest.skip("gemm_wgmma needs a Hopper GPU (sm_90a)")
    check_wgmma_cases(ta, tb, dict(producer=1, tma=1), [
            ((4096, 784, 1000), dict(bm=128, bn=224, stages=4, inflight=1, pretranspose=1), "tf32", False),
            ((1000, 784, 800), dict(bm=128, bn=112, stages=2, inflight=0, pretranspose=1, tma=0), "3xtf32", False),
            ((1000, 784, 800), dict(bm=128, bn=112, stages=3, inflight=0), "tf32", False),
            ((1000, 784, 800), dict(bm=256, bn=112, stages=3, inflight=0, producer=0, tma=0, pretranspose=1), "tf32",
             False),
            ((1000, 784, 800), dict(bm=128, bn=112, stages=3, inflight=1, tma=0), "bf16", False),
            ((2000, 784, 800), dict(bm=128, bn=112, stages=3, inflight=1, persistent=1), "tf32", False),
            ((2000, 784, 800), dict(bm=64, bn=112, stages=3, inflight=0, persistent=1, pretranspose=1), "3xtf32",
             False),
            ((1000, 700, 800), dict(bm=128, bn=224, stages=3, inflight=0, cluster_m=2, pretranspose=1), "tf32", False),
            ((1000, 784, 800), dict(bm=128, bn=224, stages=2, inflight=0), "tf32", False),     # transposed in shared memory
        ] + [((1000, 784, 1000), dict(bm=128, bn=112, stages=4, inflight=1, cluster_m=2), "bf16", True)] * tb)


def padded_view(rng, rows: int, cols: int, bfloat16: bool):
    """A (rows, cols) float32 (or bfloat16-bits) view 16 bytes into a NaN-filled array whose rows are
    two 16-byte chunks wider and which has 5 more of them: what lies outside the view is NaN."""
    import cupy

    import autogemm

    e = 8 if bfloat16 else 4                               # elements in 16 bytes
    ld = -(-cols // e) * e + 2 * e
    whole = cupy.full((rows + 5, ld), np.nan, np.float32)
    whole[:rows, e:e + cols] = cupy.asarray(rng.standard_normal((rows, cols)), np.float32)
    if bfloat16:
        whole = autogemm.to_bf16(whole)
    return whole[:rows, e:e + cols]


@pytest.mark.parametrize("ta,tb", OPS)
def test_wgmma_tma_reads_views_of_padded_arrays(ta, tb):
    """TMA's tensor maps cover the view alone (its shape, its rows' pitch, its offset): operands
    that are views into NaN-padded arrays, every math, float32 and bfloat16 operands, split-K or
    not, within each precision's bound and without a NaN."""
    if not hopper():
        pytest.skip("gemm_wgmma needs a Hopper GPU (sm_90a)")
    import cupy

    import autogemm

    rng = np.random.default_rng(3)
    m, n, k = 200, 136, 300
    for math, bfloat16, split_k in itertools.product(("3xtf32", "tf32", "bf16"), (False, True), (1, 2)):
        if bfloat16 and math != "bf16":
            continue
        precision = MATH_PRECISION[math]
        a = padded_view(rng, *((k, m) if ta else (m, k)), bfloat16)     # op(A): (M, K)
        b = padded_view(rng, *((n, k) if tb else (k, n)), bfloat16)     # op(B): (K, N)
        config = dict(WGMMA_TILES, bm=128, bn=64, stages=3, producer=1, tma=1, math=math, split_k=split_k,
                      inflight=int(math != "3xtf32"))
        d = autogemm.gemm(a, b, trans_a=ta, trans_b=tb, config=config, kernel_family="gemm_wgmma", precision=precision)
        host_a, host_b = (cupy.asnumpy(x) for x in (a, b))                # bfloat16: their bits
        problem = Problem(m, n, k, trans_a=ta, trans_b=tb, precision=precision, bf16_operands=bfloat16)
        value, magnitude, _ = reference(problem, host_a, host_b, 1.0, 0.0, None, None, None)["d"]
        verdict = compare(cupy.asnumpy(d), value, magnitude, k, np.float32, "fp32" if bfloat16 else precision)
        assert verdict.ok, f"{'tn'[ta]}{'tn'[tb]} {math} bfloat16={bfloat16} split_k={split_k}: {verdict.describe()}"


@pytest.mark.parametrize("ta,tb", OPS)
def test_column_major_operands_are_their_row_major_transposes(ta, tb):
    """A and B given column-major (views x.T of padded row-major arrays) compute what their row-major
    transposes with trans flipped do, bit for bit (the same kernel), within float64's bound: both
    dtypes, and on Hopper each precision."""
    import cupy

    import autogemm

    rng = np.random.default_rng(9)
    m, n, k = 200, 136, 300
    runs = [(np.float64, "fp32"), (np.float32, "fp32")] + [(np.float32, p) for p in ("tf32", "bf16") if hopper()]
    for dtype, precision in runs:
        a_rows = cupy.asarray(rng.standard_normal((m, k + 4) if ta else (k, m + 4)), dtype)[:, :m if not ta else k]
        b_rows = cupy.asarray(rng.standard_normal((k, n + 4) if tb else (n, k + 4)), dtype)[:, :k if not tb else n]
        a, b = a_rows.T, b_rows.T                                        # column-major: op(a) is (M, K), op(b) (K, N)
        d = autogemm.gemm(a, b, trans_a=ta, trans_b=tb, precision=precision)
        want = autogemm.gemm(a_rows, b_rows, trans_a=not ta, trans_b=not tb, precision=precision)
        assert cupy.array_equal(d, want), (ta, tb, dtype, precision)
        problem = Problem(m, n, k, np.dtype(dtype).name, trans_a=ta, trans_b=tb, precision=precision)
        value, magnitude, _ = reference(problem, cupy.asnumpy(a), cupy.asnumpy(b), 1.0, 0.0, None, None, None)["d"]
        verdict = compare(cupy.asnumpy(d), value, magnitude, k, dtype, precision)
        assert verdict.ok, f"{'tn'[ta]}{'tn'[tb]} {dtype.__name__} {precision}: {verdict.describe()}"


@pytest.mark.parametrize("ta,tb", [op for op in OPS if op != (False, True)])
def test_wgmma_pretransposed_operands(ta, tb):
    """pretranspose on every op with an M/N-major operand: the operands are views into NaN-padded
    arrays (tn with K = 301 too: the copies' rows padded to 16 bytes), both maths of TF32 products,
    the one loop and the TMA producer, split-K or not, each call twice (the scratch reused): within
    each precision's bound and without a NaN."""
    if not hopper():
        pytest.skip("gemm_wgmma needs a Hopper GPU (sm_90a)")
    import cupy

    import autogemm

    rng = np.random.default_rng(5)
    for (m, n, k), math, (producer, tma), split_k in itertools.product(
            ((200, 136, 300), (200, 136, 301)), ("3xtf32", "tf32"), ((0, 0), (1, 1)), (1, 2)):
        if k % 4 and (ta, tb) != (True, False):
            continue                                                    # a K-major operand needs K % 4 == 0
        precision = MATH_PRECISION[math]
        a = padded_view(rng, *((k, m) if ta else (m, k)), False)        # op(A): (M, K)
        b = padded_view(rng, *((n, k) if tb else (k, n)), False)        # op(B): (K, N)
        config = dict(WGMMA_TILES, bm=128, bn=64, stages=3, producer=producer, tma=tma, math=math, split_k=split_k,
                      pretranspose=1, inflight=int(math != "3xtf32"))
        problem = Problem(m, n, k, trans_a=ta, trans_b=tb, precision=precision)
        value, magnitude, _ = reference(problem, cupy.asnumpy(a), cupy.asnumpy(b), 1.0, 0.0, None, None, None)["d"]
        for _ in range(2):
            d = autogemm.gemm(a, b, trans_a=ta, trans_b=tb, config=config, kernel_family="gemm_wgmma",
                              precision=precision)
            verdict = compare(cupy.asnumpy(d), value, magnitude, k, np.float32, precision)
            assert verdict.ok, f"{'tn'[ta]}{'tn'[tb]} K={k} {math} tma={tma} split_k={split_k}: {verdict.describe()}"


def test_transpose_views_and_every_config():
    """autogemm.transpose: every config, float32 and float64, of views into padded arrays and into
    views, exact; the padding beside the output untouched; bad arguments refused in one line."""
    if not hopper():
        pytest.skip("needs a GPU")
    import cupy

    import autogemm
    from autogemm.runtime.family import family
    from kernels.contract import RowsProblem

    rng = np.random.default_rng(6)
    for dtype, (rows, cols) in itertools.product((np.float32, np.float64), ((8192, 784), (33, 1000), (1, 7))):
        whole = cupy.asarray(rng.standard_normal((rows + 3, cols + 9)), dtype)
        x = whole[1:rows + 1, 4:cols + 4]                              # x: (rows, cols), rows cols + 9 apart
        want = cupy.asnumpy(x).T
        for cfg in family("transpose").sample(RowsProblem(rows, cols, np.dtype(dtype).name), H100, 8):
            out_whole = cupy.full((cols, rows + 5), np.nan, dtype)
            autogemm.transpose(x, out_whole[:, :rows], config=cfg)
            got = cupy.asnumpy(out_whole)
            assert np.array_equal(got[:, :rows], want) and np.isnan(got[:, rows:]).all(), (dtype, rows, cols, cfg)
    x = cupy.ones((4, 6), np.float32)
    with pytest.raises(autogemm.BadArguments, match=r"transpose: out must be a float32 cupy array of shape \(6, 4\)"):
        autogemm.transpose(x, cupy.ones((4, 6), np.float32))
    with pytest.raises(autogemm.BadArguments, match="transpose: out may overlap x"):
        autogemm.transpose(x, x.reshape(6, 4))
    with pytest.raises(autogemm.BadArguments, match="transpose: x must be a float32 or float64 cupy.ndarray"):
        autogemm.transpose(np.ones((4, 6), np.float32))


@pytest.mark.parametrize("epilogue", (None,) + EPILOGUES[1:])
def test_wgmma_bf16_products_every_epilogue(epilogue):
    """Precision bf16: BF16 products within the bfloat16 bound on every op, and bfloat16 indeed:
    errors well above TF32's on the same data."""
    if not hopper():
        pytest.skip("gemm_wgmma needs a Hopper GPU (sm_90a)")
    errors = []
    for m, n, k, ta, tb in [(800, 1000, 784, False, True), (131, 67, 260, False, True), (1024, 1024, 1024, False, True),
                            (1000, 784, 800, True, False), (800, 784, 1000, False, False), (12, 8, 28, True, True)]:
        bf16, tf32 = (run_and_check(np.random.default_rng(13), m, n, k, ta, tb, np.float32, epilogue=epilogue,
                                    beta=0.5, config=dict(WGMMA_TILES, math=p), kernel_family="gemm_wgmma",
                                    precision=p)
                      for p in ("bf16", "tf32"))
        errors.append((bf16.max_rel_error, tf32.max_rel_error))
    assert all(b > 2 * t for b, t in errors), errors


@pytest.mark.parametrize("args, words", [
    (dict(a="float64", precision="tf32"), "at precision tf32 a and b must both be float32, got float64 and float32"),
    (dict(precision="bf8"), "precision 'bf8' is not one of fp32, tf32, bf16"),
    (dict(out="float64"), "out must be float32 for float32 operands, got float64"),
    (dict(k2=9), "op(a) is 6x8, op(b) 9x5 and out 6x5: the sizes do not chain"),
    (dict(a_strided=True), "a must have unit stride along rows"),
])
def test_cublas_baseline_rejects_bad_arguments_in_one_line(args, words):
    import cupy

    import autogemm

    a = cupy.ones((6, 16), args.get("a", "float32"))[:, ::2] if args.get("a_strided") else \
        cupy.ones((6, 8), args.get("a", "float32"))
    b, out = cupy.ones((args.get("k2", 8), 5), np.float32), cupy.ones((6, 5), args.get("out", "float32"))
    with pytest.raises(autogemm.BadArguments, match=re.escape(words)):
        autogemm.cublas_gemm(a, b, out, precision=args.get("precision", "tf32"))


@pytest.mark.parametrize("precision", ("tf32", "bf16"))
@pytest.mark.parametrize("ta,tb", OPS)
def test_cublas_baseline_at_reduced_precision(precision, ta, tb):
    """The baseline autogemm bench times at --precision: cublasGemmEx's compute type, row-major
    operands, alpha and beta in place, within that precision's bound."""
    import cupy

    from autogemm.ops.cublas import cublas_gemm

    rng = np.random.default_rng(14)
    m, n, k = 300, 200, 520
    host, dev = operands(rng, m, n, k, ta, tb, np.float32, None, 0.5)
    out = dev["c"].copy()
    cublas_gemm(dev["a"], dev["b"], out, ta, tb, precision, alpha=1.5, beta=0.5)
    value, magnitude, _ = reference(Problem(m, n, k, trans_a=ta, trans_b=tb), host["a"], host["b"], 1.5, 0.5,
                                    host["c"])["d"]
    verdict = compare(cupy.asnumpy(out), value, magnitude, k, np.float32, precision)
    assert verdict.ok, verdict.describe()
    assert verdict.max_rel_error > 1e-5      # rounded operands indeed (FP32 would be near 1e-7)


def test_to_bf16_rounds_as_numpy_does():
    """autogemm.to_bf16 against kernels.bf16.bf16_bits: to nearest even, ties, infinities, NaN."""
    import cupy

    import autogemm
    from kernels.bf16 import bf16_bits

    rng = np.random.default_rng(15)
    x = rng.standard_normal(100_000).astype(np.float32)
    x[:4] = [np.inf, -np.inf, 3.4028235e38, 0.0]                     # the largest float rounds up to infinity
    x[4:1000] = (x[4:1000].view(np.uint32) & 0xFFFF0000 | 0x8000).view(np.float32)   # exact ties
    got = cupy.asnumpy(autogemm.to_bf16(cupy.asarray(x)))
    assert np.array_equal(got, bf16_bits(x))
    nan = cupy.asnumpy(autogemm.to_bf16(cupy.asarray(np.array([np.nan], np.float32))))
    assert (nan[0] & 0x7F80) == 0x7F80 and nan[0] & 0x7F


def test_to_bf16_every_alignment_and_config():
    """Arrays that start off the 16-byte vectors (the kernel's narrower vectors) and every vector
    width of the family's candidates, tails included; nothing past `out` written."""
    import cupy

    import autogemm
    from kernels.bf16 import bf16_bits

    rng = np.random.default_rng(17)
    x = rng.standard_normal(10_007).astype(np.float32)
    for shift_x, shift_out in ((0, 0), (1, 0), (0, 1), (2, 6), (3, 3)):
        dev_x = cupy.asarray(np.concatenate([np.zeros(shift_x, np.float32), x]))[shift_x:]
        room = cupy.full(x.size + shift_out + 5, 0xABCD, np.uint16)
        out = room[shift_out:shift_out + x.size]
        for config in (None, "default", dict(block=128, ept=4, vec=1), dict(block=64, ept=1, vec=2)):
            if isinstance(config, dict) and (shift_x % config["vec"] or shift_out % config["vec"]):
                continue
            out.fill(0)
            autogemm.to_bf16(dev_x, out, config=config)
            assert np.array_equal(cupy.asnumpy(out), bf16_bits(x)), (shift_x, shift_out, config)
        assert (cupy.asnumpy(room[:shift_out]) == 0xABCD).all() and (cupy.asnumpy(room[shift_out + x.size:]) == 0xABCD).all()


@pytest.mark.parametrize("epilogue", (None,) + EPILOGUES[1:])
def test_wgmma_bfloat16_operands_every_op_and_epilogue(epilogue):
    """A and B in bfloat16 (autogemm.to_bf16's bits), float32 out, on every op: within float32's
    bound of the bfloat16 values' product (their products are exact in float32)."""
    if not hopper():
        pytest.skip("gemm_wgmma needs a Hopper GPU (sm_90a)")
    import cupy

    import autogemm
    from kernels.bf16 import bf16_bits

    rng = np.random.default_rng(16)
    for m, n, k, ta, tb in [(800, 1000, 784, False, True), (136, 72, 264, False, True), (1000, 784, 800, True, False),
                            (800, 784, 1000, False, False), (24, 16, 40, True, True), (4096, 784, 8192, True, False)]:
        host, dev = operands(rng, m, n, k, ta, tb, np.float32, epilogue, 0.5)
        a16, b16 = autogemm.to_bf16(dev["a"]), autogemm.to_bf16(dev["b"])
        out = dev["c"].copy()
        autogemm.gemm(a16, b16, out, alpha=1.5, beta=0.5, trans_a=ta, trans_b=tb, epilogue=epilogue,
                      bias=dev["bias"], aux=dev["aux"], precision="bf16")
        problem = Problem(m, n, k, trans_a=ta, trans_b=tb, epilogue=epilogue, precision="bf16", bf16_operands=True)
        value, magnitude, _ = reference(problem, bf16_bits(host["a"]), bf16_bits(host["b"]), 1.5, 0.5, host["c"],
                                        host["bias"], host["aux"])["d"]
        verdict = compare(cupy.asnumpy(out), value, magnitude, k, np.float32)
        assert verdict.ok, f"{m}x{n}x{k} {'tn'[ta]}{'tn'[tb]} {epilogue}: {verdict.describe()}"


@pytest.mark.parametrize("epilogue", (None,) + EPILOGUES[1:])
def test_wgmma_writes_bfloat16_every_op_and_epilogue(epilogue):
    """D in bfloat16 (a uint16 out at precision bf16) from float32 and bfloat16 operands, the tuned
    or default config and sampled ones (split-K, persistent blocks): within the precision's bound
    and half a bfloat16 unit of D; C apart from D."""
    if not hopper():
        pytest.skip("gemm_wgmma needs a Hopper GPU (sm_90a)")
    import cupy

    import autogemm
    from autogemm.tuning.verify import OPERAND_ROUNDING
    from kernels.bf16 import bf16_bits, bf16_values

    rng = np.random.default_rng(18)
    fam = family("gemm_wgmma")
    for (m, n, k, ta, tb), bfloat16 in itertools.product(
            [(800, 1000, 784, False, True), (137, 73, 264, False, True), (1000, 784, 800, True, False),
             (24, 16, 40, True, True)], (False, True)):
        host, dev = operands(rng, m, n, k, ta, tb, np.float32, epilogue, 0.5)
        a, b = (autogemm.to_bf16(dev["a"]), autogemm.to_bf16(dev["b"])) if bfloat16 else (dev["a"], dev["b"])
        problem = Problem.contiguous(m, n, k, "float32", ta, tb, epilogue=epilogue, use_c=True, precision="bf16",
                                     bf16_operands=bfloat16, bf16_out=True)
        host_a, host_b = (bf16_bits(host["a"]), bf16_bits(host["b"])) if bfloat16 else (host["a"], host["b"])
        value, magnitude, _ = reference(problem, host_a, host_b, 1.5, 0.5, host["c"], host["bias"], host["aux"])["d"]
        for config in [None, *fam.sample(problem, H100, 1, seed=m + k)]:
            out = cupy.full((m, n), 0x7fc0, np.uint16)                      # bfloat16 NaNs
            autogemm.gemm(a, b, out, alpha=1.5, beta=0.5, trans_a=ta, trans_b=tb, c=dev["c"], epilogue=epilogue,
                          bias=dev["bias"], aux=dev["aux"], config=config,
                          kernel_family="gemm" if config is None else "gemm_wgmma", precision="bf16")
            verdict = compare(bf16_values(cupy.asnumpy(out)), value, magnitude, k, np.float32,
                              "fp32" if bfloat16 else "bf16", output_rounding=OPERAND_ROUNDING["bf16"])
            assert verdict.ok, f"{m}x{n}x{k} {'tn'[ta]}{'tn'[tb]} {epilogue} {config}: {verdict.describe()}"


def test_bfloat16_out_bad_calls_are_one_line_errors():
    """A uint16 out needs precision bf16, and beta a float32 c; no GPU but Hopper writes it."""
    import cupy

    import autogemm

    a, b = cupy.ones((64, 32), np.float32), cupy.ones((48, 32), np.float32)
    out = cupy.zeros((64, 48), np.uint16)
    with pytest.raises(autogemm.BadArguments, match="precision 'bf16'"):
        autogemm.gemm(a, b, out, trans_b=True)
    with pytest.raises(autogemm.BadArguments, match="needs c"):
        autogemm.gemm(a, b, out, beta=1.0, trans_b=True, precision="bf16")
    with pytest.raises(autogemm.BadArguments, match="c must be a float32"):
        autogemm.gemm(a, b, out, beta=1.0, c=out, trans_b=True, precision="bf16")
    if not hopper():
        with pytest.raises(autogemm.InvalidConfig, match="gemm_wgmma alone"):
            autogemm.gemm(a, b, out, trans_b=True, precision="bf16")


@pytest.mark.parametrize("ta,tb", OPS)
def test_cublas_baseline_of_bfloat16_operands(ta, tb):
    """cuBLAS's GemmEx on bfloat16 A and B into float32, as autogemm bench --dtype bfloat16 times it."""
    import cupy

    import autogemm
    from kernels.bf16 import bf16_bits

    rng = np.random.default_rng(17)
    m, n, k = 300, 200, 520
    host, dev = operands(rng, m, n, k, ta, tb, np.float32, None, 0.5)
    out = dev["c"].copy()
    autogemm.cublas_gemm(autogemm.to_bf16(dev["a"]), autogemm.to_bf16(dev["b"]), out, ta, tb, "bf16", 1.5, 0.5)
    problem = Problem(m, n, k, trans_a=ta, trans_b=tb, precision="bf16", bf16_operands=True)
    value, magnitude, _ = reference(problem, bf16_bits(host["a"]), bf16_bits(host["b"]), 1.5, 0.5, host["c"])["d"]
    verdict = compare(cupy.asnumpy(out), value, magnitude, k, np.float32)
    assert verdict.ok, verdict.describe()
