"""The GEMM call that every GEMM family computes (gemm, gemm_wgmma, gemm_naive): its Problem, the
keys of its tuned records, the precisions it may be computed at, and its float64 reference.

D = epi(alpha * op(A) @ op(B) + beta * C), row-major, op in {N, T} on each side, any M, N, K >= 1.
"""
from dataclasses import dataclass

import numpy as np

from kernels.bf16 import bf16_values
from kernels.contract import ITEMSIZE, check_problem

EPILOGUES = (None, "bias", "bias_sigmoid", "bias_relu", "dsigmoid", "drelu")
KEY_SIZES = ("m", "n", "k")
# A key's op: op(A), op(B) (N or T), then "+" and the fused epilogue where the call has one
# ("nt+bias_sigmoid"): an epilogue's work changes which config is fastest (a persistent kernel hides
# it under the next tile's products), so the records of a layer's GEMM are tuned with it.
LAYOUTS = ("nn", "nt", "tn", "tt")
KEY_OPS = LAYOUTS + tuple(f"{layout}+{epilogue}" for layout in LAYOUTS for epilogue in EPILOGUES[1:])


def key_op(trans_a: bool, trans_b: bool, epilogue: str | None = None) -> str:
    """The op of a GEMM key: "nt" for A op(B^T), "nt+bias_sigmoid" with that epilogue."""
    layout = ("t" if trans_a else "n") + ("t" if trans_b else "n")
    return f"{layout}+{epilogue}" if epilogue else layout


def split_op(op: str) -> tuple[bool, bool, str | None]:
    """(trans_a, trans_b, epilogue) of a key op (KEY_OPS)."""
    layout, _, epilogue = op.partition("+")
    return layout[0] == "t", layout[1] == "t", epilogue or None


def served_by_ops(op: str) -> tuple[str, ...]:
    """The key ops whose records may serve a call of `op`: its own, then, for a call with an
    epilogue, its layout's records tuned without one (the same kernel, timed without the epilogue)."""
    layout = op.partition("+")[0]
    return (op, layout) if op != layout else (op,)


# What the caller accepts, most accurate first: "fp32", the dtype's own accuracy (FP32-accurate for
# float32); "tf32", float32 operands rounded to TF32 (10-bit mantissas) in each product, float32
# sums; "bf16", float32 operands rounded to bfloat16 (7-bit mantissas), float32 sums. A kernel at
# least as accurate serves a call: FP32-accurate kernels serve tf32 and bf16 calls too.
PRECISIONS = ("fp32", "tf32", "bf16")
# The arithmetic a tuned key names (its dtype field): a dtype, a reduced precision of float32 data,
# or "bfloat16": A and B held in bfloat16 (their bits, as uint16: CuPy has no bfloat16), float32
# sums and outputs.
KEY_DTYPES = ("float32", "float64", "tf32", "bf16", "bfloat16")


def at_precision(cfg: dict, precision: str) -> dict:
    """A config of a more accurate arithmetic's record, for a call at `precision`, in either GEMM
    family (their maths share names): 3xTF32's tiles with TF32 products where the call allows them
    (a third of the MMAs, no split)."""
    return dict(cfg, math="tf32") if cfg["math"] == "3xtf32" and precision != "fp32" else dict(cfg)


def serves(precision: str, call_precision: str) -> bool:
    """Whether products at `precision` may compute a call at `call_precision`: as or more accurate."""
    return PRECISIONS.index(precision) <= PRECISIONS.index(call_precision)


def served_by(arithmetic: str) -> tuple[str, ...]:
    """The key arithmetics whose records may serve a call of `arithmetic`: its own, then the more
    accurate ones (bf16: bf16, tf32, float32); a kernel reading bfloat16 operands serves those alone."""
    if arithmetic not in PRECISIONS[1:]:
        return (arithmetic,)
    return PRECISIONS[PRECISIONS.index(arithmetic):0:-1] + ("float32",)


@dataclass(frozen=True)
class Problem:
    """One GEMM call as the compiler sees it. vec_* are the widest vectors (elements) that the
    pointers and leading dimensions allow for A, B, and the outputs (C, D, aux). With bf16_operands,
    A and B hold bfloat16 bits (2 bytes; precision bf16); with bf16_out, D is written as bfloat16
    bits (precision bf16); dtype is the arithmetic's and C's, the epilogue's and (else) D's. A key
    leaves bf16_out out: a config tuned writing float32 serves it."""

    m: int
    n: int
    k: int
    dtype: str = "float32"
    trans_a: bool = False
    trans_b: bool = False
    epilogue: str | None = None
    use_c: bool = False
    vec_a: int = 4
    vec_b: int = 4
    vec_out: int = 4
    precision: str = "fp32"
    bf16_operands: bool = False
    bf16_out: bool = False

    @classmethod
    def contiguous(cls, m: int, n: int, k: int, dtype: str = "float32", trans_a: bool = False,
                   trans_b: bool = False, **kw) -> "Problem":
        """The problem of freshly allocated (contiguous, 256-byte aligned) operands."""
        operand_bytes = 2 if kw.get("bf16_operands") else ITEMSIZE[dtype]

        def widest(ld: int, itemsize: int = operand_bytes) -> int:
            return next(v for v in (8, 4, 2, 1) if ld % v == 0 and v * itemsize <= 16)

        return cls(m, n, k, dtype, trans_a, trans_b, vec_a=widest(m if trans_a else k),
                   vec_b=widest(k if trans_b else n), vec_out=widest(n, ITEMSIZE[dtype]), **kw)

    def __post_init__(self):
        check_problem(self, ("m", "n", "k"), "GEMM size")
        if self.epilogue not in EPILOGUES:
            raise ValueError(f"epilogue {self.epilogue!r} is not one of {', '.join(map(str, EPILOGUES[1:]))}")
        for flag in ("trans_a", "trans_b", "use_c", "bf16_operands", "bf16_out"):
            if type(getattr(self, flag)) is not bool:
                raise ValueError(f"{flag} must be a bool")
        for vec in ("vec_a", "vec_b", "vec_out"):
            if getattr(self, vec) not in (1, 2, 4, 8):
                raise ValueError(f"{vec} must be 1, 2, 4 or 8")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision {self.precision!r} is not one of {', '.join(PRECISIONS)}")
        if self.precision != "fp32" and self.dtype != "float32":
            raise ValueError(f"precision {self.precision} multiplies float32 data; this GEMM is {self.dtype}")
        if self.bf16_operands and self.precision != "bf16":
            raise ValueError(f"bfloat16 operands are multiplied at precision bf16, not {self.precision}")
        if self.bf16_out and self.precision != "bf16":
            raise ValueError(f"a bfloat16 D is written at precision bf16, not {self.precision}")

    @property
    def op(self) -> str:
        return key_op(self.trans_a, self.trans_b)

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self.dtype]

    @property
    def operand_itemsize(self) -> int:
        """Bytes of an element of A and B: 2 for bfloat16 operands, else dtype's."""
        return 2 if self.bf16_operands else self.itemsize

    @property
    def arithmetic(self) -> str:
        """The dtype field of its tuned key: "bfloat16" for bfloat16 operands, the precision of a
        tf32 or bf16 call, else the dtype."""
        if self.bf16_operands:
            return "bfloat16"
        return self.dtype if self.precision == "fp32" else self.precision


def flops(p: Problem) -> int:
    return 2 * p.m * p.n * p.k


def key_of(p: Problem) -> tuple[tuple[int, ...], str]:
    return (p.m, p.n, p.k), key_op(p.trans_a, p.trans_b, p.epilogue)


def problem_of(sizes: tuple[int, ...], op: str, dtype: str) -> Problem:
    """`op` is a key's (KEY_OPS: layout and epilogue); `dtype` its arithmetic (KEY_DTYPES): "tf32"
    and "bf16" are float32 data at that precision, "bfloat16" bfloat16 operands."""
    trans_a, trans_b, epilogue = split_op(op)
    if dtype == "bfloat16":
        return Problem.contiguous(*sizes, "float32", trans_a, trans_b, epilogue=epilogue, precision="bf16",
                                  bf16_operands=True)
    if dtype in PRECISIONS[1:]:
        return Problem.contiguous(*sizes, "float32", trans_a, trans_b, epilogue=epilogue, precision=dtype)
    return Problem.contiguous(*sizes, dtype, trans_a, trans_b, epilogue=epilogue)


ACTIVATION_SLOPE = {None: 1.0, "bias": 1.0, "bias_sigmoid": 0.25, "bias_relu": 1.0}   # max |epi'|


def reference(p: Problem, a, b, alpha=1.0, beta=0.0, c=None, bias=None, aux=None) -> dict:
    """{"d": (value, magnitude, K)}: D in float64, and the bound's term |alpha| |op(A)| |op(B)| +
    |beta C| + |bias| times the epilogue's slope. bfloat16 operands arrive as their bits (uint16)."""
    a64, b64 = (bf16_values(x) if p.bf16_operands else np.asarray(x, np.float64) for x in (a, b))
    opa, opb = (a64.T if p.trans_a else a64), (b64.T if p.trans_b else b64)
    value = alpha * (opa @ opb)                                     # D: (M, N)
    magnitude = abs(alpha) * (np.abs(opa) @ np.abs(opb))
    if beta != 0:
        c64 = np.asarray(c, np.float64)
        value += beta * c64
        magnitude += abs(beta * c64)
    return {"d": apply_epilogue(p.epilogue, value, magnitude, bias, aux) + (p.k,)}


def apply_epilogue(name: str | None, value, magnitude, bias, aux) -> tuple:
    """(value, magnitude) through the epilogue `name` (bias + activation, or an activation's
    derivative at the saved outputs aux)."""
    if name in ("bias", "bias_sigmoid", "bias_relu"):
        bias64 = np.asarray(bias, np.float64)
        value += bias64
        magnitude += np.abs(bias64)
        magnitude *= ACTIVATION_SLOPE[name]
        if name == "bias_sigmoid":
            value = 1.0 / (1.0 + np.exp(-value))
        elif name == "bias_relu":
            value = np.maximum(value, 0.0)
    elif name == "dsigmoid":
        s = np.asarray(aux, np.float64)
        value *= s * (1 - s)
        magnitude *= np.abs(s * (1 - s))
    elif name == "drelu":
        mask = np.asarray(aux) > 0
        value *= mask
        magnitude *= mask
    return value, magnitude
