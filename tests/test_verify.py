"""autogemm.tuning.verify on the CPU: the GEMM's float64 reference (kernels/gemm/call.py), its epilogues, and the
K- and dtype-scaled check."""
import numpy as np
import pytest

from autogemm.tuning.verify import FP32_ERROR_BOUND, compare, fp32_error_ratio, within_fp32_bound
from kernels.gemm.call import EPILOGUES, Problem, reference

M, N, K = 37, 23, 301


def operands(dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, K)).astype(dtype)          # A: (M, K)
    b = rng.standard_normal((K, N)).astype(dtype)          # B: (K, N)
    c = rng.standard_normal((M, N)).astype(dtype)          # C: (M, N)
    bias = rng.standard_normal(N).astype(dtype)            # bias: (N,)
    return a, b, c, bias


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (False, True), (True, False), (True, True)])
def test_a_result_in_the_dtype_passes(dtype, trans_a, trans_b):
    a, b, c, _ = operands(dtype)
    a_in, b_in = (a.T.copy() if trans_a else a), (b.T.copy() if trans_b else b)
    out = (np.float32(1.5) * (a @ b) + np.float32(-2) * c).astype(dtype)     # computed in dtype
    problem = Problem(M, N, K, trans_a=trans_a, trans_b=trans_b)
    verdict = compare(out, *reference(problem, a_in, b_in, 1.5, -2.0, c)["d"], dtype)
    assert verdict.ok and not verdict.mismatches and verdict.unwritten == 0, verdict.describe()
    assert verdict.max_rel_error < 1e-5 and verdict.worst_ratio <= 1
    assert verdict.describe().startswith("ok")


def test_the_tolerance_follows_the_dtype():
    a, b, _, _ = operands(np.float64)
    value, magnitude, _ = reference(Problem(M, N, K), a, b)["d"]
    out32 = a.astype(np.float32) @ b.astype(np.float32)
    assert compare(out32, value, magnitude, K, np.float32).ok
    assert not compare(out32, value, magnitude, K, np.float64).ok


def test_a_shifted_result_fails_with_indices():
    a, b, _, _ = operands()
    value, magnitude, _ = reference(Problem(M, N, K), a, b)["d"]
    out = np.roll(a @ b, 1, axis=1)                        # every column off by one
    verdict = compare(out, value, magnitude, K, np.float32, show=3)
    assert not verdict.ok and verdict.unwritten == 0
    assert [(i, j) for i, j, _, _ in verdict.mismatches] == [(0, 0), (0, 1), (0, 2)]
    i, j, got, want = verdict.mismatches[1]
    assert got == pytest.approx(out[i, j]) and want == value[i, j]
    assert "[0,1] got" in verdict.describe() and "never written" not in verdict.describe()


def test_poison_left_behind_fails_and_is_counted():
    a, b, _, _ = operands()
    value, magnitude, _ = reference(Problem(M, N, K), a, b)["d"]
    out = a @ b
    out[5:7, :] = np.nan                                   # two rows the kernel never wrote
    verdict = compare(out, value, magnitude, K, np.float32)
    assert not verdict.ok and verdict.unwritten == 2 * N
    assert verdict.mismatches[0][:2] == (5, 0)
    assert f"{2 * N} never written" in verdict.describe()


def sigmoid(x):
    return 0.5 * (1 + np.tanh(x / 2))


@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_each_epilogue_matches_numpy(epilogue):
    a, b, c, bias = operands(np.float64)
    z = 0.5 * np.einsum("mk,kn->mn", a, b) + 3 * c
    aux = {"dsigmoid": sigmoid(c), "drelu": np.maximum(c, 0)}.get(epilogue)
    want = {
        None: z,
        "bias": z + bias,
        "bias_sigmoid": sigmoid(z + bias),
        "bias_relu": np.where(z + bias > 0, z + bias, 0),
        "dsigmoid": z * sigmoid(c) * (1 - sigmoid(c)),
        "drelu": np.where(c > 0, z, 0),
    }[epilogue]
    value, magnitude, k = reference(Problem(M, N, K, epilogue=epilogue), a, b, 0.5, 3.0, c, bias, aux)["d"]
    np.testing.assert_allclose(value, want, rtol=1e-12, atol=1e-12)
    assert magnitude.shape == (M, N) and (magnitude >= 0).all() and k == K
    assert compare(want.astype(np.float32), value, magnitude, K, np.float32).ok


def test_precision_tf32_allows_operands_rounded_to_tf32_and_fp32_does_not():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((64, 512)), rng.standard_normal((512, 48))
    value, magnitude = a @ b, np.abs(a) @ np.abs(b)

    def tf32(x):   # truncated to 10 mantissa bits, as the tensor cores read float32
        return (x.astype(np.float32).view(np.uint32) & np.uint32(0xffffe000)).view(np.float32).astype(np.float64)

    out = (tf32(a) @ tf32(b)).astype(np.float32)
    assert compare(out, value, magnitude, 512, np.float32, "tf32").ok
    assert not compare(out, value, magnitude, 512, np.float32).ok


def test_fp32_accurate_is_within_twice_cublas_fp32s_error():
    assert FP32_ERROR_BOUND == 2.0
    assert within_fp32_bound(2.0e-6, 1.0e-6) and not within_fp32_bound(2.1e-6, 1.0e-6)
    eps = float(np.finfo(np.float32).eps)          # cuBLAS exact on a short K: float32's epsilon stands in
    assert within_fp32_bound(2 * eps, 0.0) and not within_fp32_bound(3 * eps, 0.0)
    assert not within_fp32_bound(float("nan"), 1e-6)


def test_the_error_ratio_of_an_exact_cublas_is_over_float32s_epsilon():
    eps = float(np.finfo(np.float32).eps)
    assert fp32_error_ratio(3e-6, 1e-6) == pytest.approx(3.0)
    assert fp32_error_ratio(2 * eps, 0.0) == pytest.approx(2.0)       # no division by zero
