"""Checking a kernel's output against a float64 reference computed on the host with NumPy.

The tolerance of each element follows the rounding-error bound of a length-K dot product:
(K + 4) * eps * (|alpha| (|op(A)| |op(B)|)_ij + |beta C_ij| + |bias_j|), times the epilogue's
derivative bound. A wrong index or a missed tile misses it by orders of magnitude; honest
float32 rounding stays far below it.
"""
from dataclasses import dataclass, field

import numpy as np

ACTIVATION_SLOPE = {None: 1.0, "bias": 1.0, "bias_sigmoid": 0.25, "bias_relu": 1.0}


@dataclass
class Verdict:
    ok: bool
    max_rel_error: float                  # ||out - ref||_inf / ||ref||_inf
    worst_ratio: float                    # max over elements of |out - ref| / tolerance
    mismatches: list = field(default_factory=list)   # first few (i, j, got, want)
    unwritten: int = 0                    # elements still holding the poison value (NaN)

    def describe(self) -> str:
        if self.ok:
            return f"ok (max-norm relative error {self.max_rel_error:.2e})"
        first = ", ".join(f"[{i},{j}] got {g:.6g} want {w:.6g}" for i, j, g, w in self.mismatches)
        extra = f", {self.unwritten} never written" if self.unwritten else ""
        return f"mismatch (max-norm relative error {self.max_rel_error:.2e}{extra}): {first}"


def reference_gemm(a, b, alpha=1.0, beta=0.0, trans_a=False, trans_b=False, c=None,
                   epilogue=None, bias=None, aux=None):
    """(value, magnitude): the float64 result and the bound's magnitude term, both (M, N)."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    opa, opb = (a64.T if trans_a else a64), (b64.T if trans_b else b64)
    value = alpha * (opa @ opb)
    magnitude = abs(alpha) * (np.abs(opa) @ np.abs(opb))
    if beta != 0:
        c64 = np.asarray(c, np.float64)
        value += beta * c64
        magnitude += abs(beta * c64)
    if epilogue in ("bias", "bias_sigmoid", "bias_relu"):
        bias64 = np.asarray(bias, np.float64)
        value += bias64
        magnitude += np.abs(bias64)
        magnitude *= ACTIVATION_SLOPE[epilogue]
        if epilogue == "bias_sigmoid":
            value = 1.0 / (1.0 + np.exp(-value))
        elif epilogue == "bias_relu":
            value = np.maximum(value, 0.0)
    elif epilogue == "dsigmoid":
        s = np.asarray(aux, np.float64)
        value *= s * (1 - s)
        magnitude *= np.abs(s * (1 - s))
    elif epilogue == "drelu":
        mask = np.asarray(aux) > 0
        value *= mask
        magnitude *= mask
    return value, magnitude


def reference_linear_xent(a, w, bias, labels, scale, activation=None) -> tuple[dict, float]:
    """The output layer in float64 (kernels/linear_xent.py): {"logits" | "grad" | "grad_in": (value,
    magnitude, k)} for `compare`, and the summed loss. An error e in a row of Z moves P_c by at most
    2 P_c max|e|, so G's and G_in's bounds carry Z's (K-scaled) one."""
    a64, w64, b64 = (np.asarray(x, np.float64) for x in (a, w, bias))
    rows, inputs = a64.shape
    z = a64 @ w64.T + b64                                           # Z: (rows, C)
    z_mag = np.abs(a64) @ np.abs(w64).T + np.abs(b64)
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    onehot = np.eye(w64.shape[0])[labels]
    g = (p - onehot) * scale                                        # G: (rows, C)
    g_mag = (p + onehot + 2 * p * z_mag.max(1, keepdims=True)) * abs(scale)
    expected = {"logits": (z, z_mag, inputs), "grad": (g, g_mag, inputs)}
    if activation:
        slope = a64 * (1 - a64) if activation == "sigmoid" else (a64 > 0).astype(np.float64)
        expected["grad_in"] = (g @ w64 * slope, g_mag @ np.abs(w64) * slope, inputs)   # G_in: (rows, K)
    return expected, float(-np.log(p[np.arange(rows), labels]).sum())


def compare(out, value, magnitude, k: int, dtype, show: int = 5) -> Verdict:
    """Elementwise check of `out` against the reference within the K- and dtype-scaled bound."""
    out = np.asarray(out, np.float64)
    eps = np.finfo(dtype).eps
    tol = (k + 4) * eps * magnitude + 4 * eps * np.abs(value) + np.finfo(dtype).tiny
    err = np.abs(out - value)
    bad = ~(err <= tol)                  # NaN counts as bad
    ref_norm = np.max(np.abs(value)) if value.size else 0.0
    max_rel = float(np.nanmax(err) / ref_norm) if ref_norm > 0 and not np.isnan(err).all() else float(err.max(initial=0))
    if np.isnan(out).any():
        max_rel = float("nan")
    idx = np.argwhere(bad)[:show]
    mismatches = [(int(i), int(j), float(out[i, j]), float(value[i, j])) for i, j in idx]
    with np.errstate(invalid="ignore", divide="ignore"):
        worst = float(np.nanmax(np.where(bad & np.isnan(err), np.inf, err / tol))) if err.size else 0.0
    return Verdict(not bad.any(), max_rel, worst, mismatches, int(np.isnan(out).sum()))
