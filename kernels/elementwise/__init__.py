"""Elementwise family (elementwise.cu.j2): bias + activation, activation derivative, SGD + L2 update.

These are the pieces a GEMM epilogue fuses; the cuBLAS baseline and MPI updates launch them alone.
"""
from dataclasses import dataclass

import numpy as np

from kernels.contract import DTYPES, ITEMSIZE, SHORT, Geometry, ceil_div, check_problem

NAME = "elementwise"
TEMPLATE = "elementwise/elementwise.cu.j2"

OPS = {
    "bias": "out = x + bias[col]",
    "bias_sigmoid": "out = sigmoid(x + bias[col])",
    "bias_relu": "out = relu(x + bias[col])",
    "dsigmoid": "out = x * y * (1 - y), y the saved sigmoid output",
    "drelu": "out = x * (y > 0), y the saved relu output",
    "sgd": "out -= lr * (x + reg * out): SGD with L2 on weights out and gradient x",
}
ROW_OPS = ("bias", "bias_sigmoid", "bias_relu")
KEY_SIZES = ("rows", "cols")
KEY_OPS = tuple(OPS)

PARAMS = {
    "block": (64, 128, 256, 512, 1024),   # threads per block
    "ept": (1, 2, 4, 8),                  # vectors per thread (register blocking)
    "vec": (1, 2, 4),                     # elements per vector
}


@dataclass(frozen=True)
class Problem:
    op: str
    rows: int
    cols: int
    dtype: str = "float32"
    aligned: int = 4     # widest vector (elements) that every pointer allows

    def __post_init__(self):
        if self.op not in OPS:
            raise ValueError(f"elementwise op {self.op!r} is not one of {', '.join(OPS)}")
        check_problem(self, ("rows", "cols"), "elementwise")
        if self.aligned not in (1, 2, 4):
            raise ValueError("aligned must be 1, 2 or 4")

    @property
    def total(self) -> int:
        return self.rows * self.cols


CONSTRAINTS = (
    ("vectors must be at most 16 bytes", lambda c, p, d: c.vec * ITEMSIZE[p.dtype] <= 16),
    ("VEC must suit the alignment of every array", lambda c, p, d: c.vec <= p.aligned),
    ("threads per block must fit the device", lambda c, p, d: c.block <= d.max_threads_per_block),
    ("the grid must have at most 2^31 - 1 blocks",
     lambda c, p, d: ceil_div(p.total, c.block * c.ept * c.vec) < 2**31),
)


def index_is_32bit(total: int) -> bool:
    """Whether every index (at most one block of the largest config past the end) fits an int32."""
    largest = max(PARAMS["block"]) * max(PARAMS["ept"]) * max(PARAMS["vec"])
    return total + largest < 2**31


def template_args(c, p: Problem) -> dict:
    return dict(c, ctype=DTYPES[p.dtype], op=p.op, description=OPS[p.op],
                index_type="int" if index_is_32bit(p.total) else "long long")


def instance_name(c, p: Problem) -> str:
    dt = SHORT[p.dtype]
    return f"ew_{p.op}_{dt}_b{c.block}_e{c.ept}_v{c.vec}"


def geometry(c, p: Problem) -> Geometry:
    return Geometry(grid=(ceil_div(p.total, c.block * c.ept * c.vec), 1, 1), block=(c.block, 1, 1))


def flops(p: Problem) -> int:
    return p.total


def key_of(p: Problem) -> tuple[tuple[int, ...], str]:
    return (p.rows, p.cols), p.op


def problem_of(sizes: tuple[int, ...], op: str, dtype: str) -> Problem:
    return Problem(op, *sizes, dtype, aligned=4)


def default_candidates(p: Problem, d):
    for vec in (4, 2, 1):
        yield dict(block=256, ept=2, vec=vec)


def reference(p: Problem, x, y=None, w0=None, lr=0.0, reg=0.0) -> dict:
    """{"out": OPS[p.op]} in float64: y the bias (cols,) or the saved activation (rows, cols), w0
    sgd's weights before the update (with lr and reg)."""
    x64 = np.asarray(x, np.float64)                                 # X: (rows, cols)
    y64 = None if y is None else np.asarray(y, np.float64)
    if p.op in ROW_OPS:
        s = x64 + y64
        value = {"bias": s, "bias_sigmoid": 1 / (1 + np.exp(-s)), "bias_relu": np.maximum(s, 0)}[p.op]
        magnitude = np.abs(x64) + np.abs(y64) + np.abs(value)
    elif p.op == "sgd":
        w = np.asarray(w0, np.float64)
        value = w - lr * (x64 + reg * w)
        magnitude = np.abs(w) + lr * (np.abs(x64) + reg * np.abs(w))
    else:
        value = x64 * y64 * (1 - y64) if p.op == "dsigmoid" else x64 * (y64 > 0)
        magnitude = np.abs(value)
    return {"out": (value, magnitude, 4)}
