"""float32 to bfloat16 (to_bf16.cu.j2): the operands of a GEMM that reads bfloat16, rounded to
nearest even (NaN stays NaN), written as the uint16 of their bits (CuPy has no bfloat16 dtype).
"""
from dataclasses import dataclass

import numpy as np

from kernels.bf16 import bf16_bits
from kernels.contract import NO_OP, Geometry, ceil_div, check_problem

NAME = "to_bf16"
TEMPLATE = "to_bf16/to_bf16.cu.j2"

KEY_SIZES = ("n",)
KEY_OPS = (NO_OP,)
KEY_DTYPES = ("float32",)

PARAMS = {
    "block": (64, 128, 256, 512, 1024),   # threads per block
    "ept": (1, 2, 4, 8),                  # vectors per thread, THREADS apart
    "vec": (1, 2, 4, 8),                  # floats per vector: VEC / 2 words of bfloat16 pairs out
}


@dataclass(frozen=True)
class Problem:
    """n float32 elements rounded; `aligned`: the widest vector (elements) both pointers allow."""

    n: int
    dtype: str = "float32"
    aligned: int = 8

    def __post_init__(self):
        check_problem(self, KEY_SIZES, "to_bf16")
        if self.dtype != "float32":
            raise ValueError(f"to_bf16 rounds float32; this is {self.dtype}")
        if self.aligned not in (1, 2, 4, 8):
            raise ValueError("aligned must be 1, 2, 4 or 8")


CONSTRAINTS = (
    ("VEC must suit the alignment of both arrays", lambda c, p, d: c.vec <= p.aligned),
    ("threads per block must fit the device", lambda c, p, d: c.block <= d.max_threads_per_block),
    ("one block past the end must still be indexable in 32 bits",
     lambda c, p, d: p.n + c.block * c.ept * c.vec < 2**31),
)


def default_candidates(p: Problem, d):
    for vec in (8, 4, 2, 1):
        yield dict(block=256, ept=2, vec=vec)


def template_args(c, p: Problem) -> dict:
    return dict(c)


def instance_name(c, p: Problem) -> str:
    return f"to_bf16_b{c.block}_e{c.ept}_v{c.vec}"


def geometry(c, p: Problem) -> Geometry:
    return Geometry(grid=(ceil_div(p.n, c.block * c.ept * c.vec), 1, 1), block=(c.block, 1, 1))


def flops(p: Problem) -> int:
    return p.n


def key_of(p: Problem) -> tuple[tuple[int, ...], str]:
    return (p.n,), NO_OP


def problem_of(sizes: tuple[int, ...], op: str, dtype: str) -> Problem:
    return Problem(*sizes, dtype)


def reference(p: Problem, x) -> dict:
    """{"out": the bits}: exact, so its magnitude is zero (verify then asks for equality)."""
    bits = bf16_bits(x).astype(np.float64)
    return {"out": (bits, np.zeros_like(bits), 1)}
