"""Checking a kernel's output against its family's float64 reference, computed on the host with
NumPy (`reference` in kernels/<family>.py). The check runs where its arrays are: NumPy's on the
host, CuPy's on the GPU (the tuner's, so that checking a candidate does not copy its output back).

The tolerance of each element follows the rounding-error bound of a length-K dot product:
(K + 4) * eps * (|alpha| (|op(A)| |op(B)|)_ij + |beta C_ij| + |bias_j|), times the epilogue's
derivative bound; at precision tf32, each product's operands are rounded to TF32 first, which adds
2 * 2^-10 of the same magnitude (truncation: one TF32 unit each), at bf16 to bfloat16, 2 * 2^-8
(to nearest: half a bfloat16 unit each). A wrong index or a missed tile
misses it by orders of magnitude; honest rounding stays far below it.
"""
import sys
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Verdict:
    ok: bool
    max_rel_error: float                  # ||out - ref||_inf / ||ref||_inf
    worst_ratio: float                    # max over elements of |out - ref| / tolerance
    mismatches: list = field(default_factory=list)   # first few (*index, got, want): (i, j, got, want) in 2-D
    unwritten: int = 0                    # elements still holding the poison value (NaN)

    def describe(self) -> str:
        if self.ok:
            return f"ok (max-norm relative error {self.max_rel_error:.2e})"
        first = ", ".join(f"[{','.join(map(str, at))}] got {g:.6g} want {w:.6g}" for *at, g, w in self.mismatches)
        extra = f", {self.unwritten} never written" if self.unwritten else ""
        return f"mismatch (max-norm relative error {self.max_rel_error:.2e}{extra}): {first}"


# FP32-accurate (precision fp32, float32 arrays) means as accurate as FP32: a candidate's max-norm
# relative error at most this many times cuBLAS FP32's on the same operands, or the tuner refuses it.
FP32_ERROR_BOUND = 2.0


def fp32_error_ratio(error: float, reference: float) -> float:
    """An FP32-accurate result's max-norm relative error over `reference`, cuBLAS FP32's on the same
    data, taken as at least float32's epsilon (a short K can leave cuBLAS exact)."""
    return error / max(reference, float(np.finfo(np.float32).eps))


def within_fp32_bound(error: float, reference: float) -> bool:
    """Whether that ratio is at most FP32_ERROR_BOUND."""
    return fp32_error_ratio(error, reference) <= FP32_ERROR_BOUND


# Relative rounding of each operand before its product, by precision (kernels.gemm.call.PRECISIONS):
# TF32 truncated or rounded (its top 19 bits), BF16 rounded to nearest.
OPERAND_ROUNDING = {"fp32": 0.0, "tf32": 2.0 ** -10, "bf16": 2.0 ** -8}


def compare(out, value, magnitude, k: int, dtype, precision: str = "fp32", show: int = 5,
            output_rounding: float = 0.0) -> Verdict:
    """Elementwise check of `out` against the reference within the K-, dtype- and precision-scaled
    bound; `output_rounding`: the relative rounding of an output stored narrower than `dtype` (a
    bfloat16 D: OPERAND_ROUNDING["bf16"]). NumPy arrays, or CuPy arrays all three."""
    xp = array_module(out)
    out = xp.asarray(out, xp.float64)
    eps = np.finfo(dtype).eps
    product = (1 + OPERAND_ROUNDING[precision]) ** 2 - 1          # both operands of a product rounded
    tol = (((k + 4) * eps + product) * magnitude + (4 * eps + output_rounding) * xp.abs(value)
           + np.finfo(dtype).tiny)
    err = xp.abs(out - value)
    bad = ~(err <= tol)                  # NaN counts as bad
    unwritten = int(xp.isnan(out).sum())
    ref_norm = float(xp.max(xp.abs(value))) if value.size else 0.0
    if unwritten:
        max_rel = float("nan")
    elif ref_norm > 0:
        max_rel = float(xp.max(err)) / ref_norm
    else:
        max_rel = float(err.max()) if err.size else 0.0
    if not bool(bad.any()):
        worst = float(xp.max(err / tol)) if err.size else 0.0
        return Verdict(True, max_rel, worst)
    out, value, err, tol, bad = (host(a) for a in (out, value, err, tol, bad))
    idx = np.argwhere(bad)[:show]
    mismatches = [(*map(int, at), float(out[tuple(at)]), float(value[tuple(at)])) for at in idx]
    with np.errstate(invalid="ignore", divide="ignore"):
        worst = float(np.nanmax(np.where(bad & np.isnan(err), np.inf, err / tol)))
    return Verdict(False, max_rel, worst, mismatches, unwritten)


def array_module(array):
    """CuPy for a CuPy array (without importing CuPy where nothing has), else NumPy."""
    cupy = sys.modules.get("cupy")
    return cupy if cupy is not None and isinstance(array, cupy.ndarray) else np


def host(array) -> np.ndarray:
    """`array` as a NumPy array (a CuPy one copied back)."""
    return array.get() if array_module(array) is not np else np.asarray(array)
