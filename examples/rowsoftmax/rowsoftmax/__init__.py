"""Row-wise softmax (rowsoftmax.cu.j2), a kernel family outside autogemm: out[r, :] = softmax(x[r, :]).

It keeps the contract every family keeps (kernels/contract.py): the space (PARAMS), what can run
(CONSTRAINTS), the untuned seeds, the values rendered, the launch geometry, its keys and its float64
reference; `problem_for` and `arguments` let autogemm.launch("rowsoftmax", x=x, out=out) run it.
Like a built-in family's module it imports nothing of autogemm (its measure.py does).
"""
from dataclasses import dataclass

import numpy as np

from kernels.contract import DTYPES, ITEMSIZE, NO_OP, SHORT, Geometry, ceil_div, check_problem

NAME = "rowsoftmax"
TEMPLATE = "rowsoftmax/rowsoftmax.cu.j2"

PARAMS = {
    "lanes": (32, 64, 128, 256, 512, 1024),   # threads that share a row
    "vec": (1, 2, 4),                         # elements a load (at most 16 bytes)
    "rows": (1, 2, 4, 8),                     # rows a block
    "cached": (False, True),                  # the row kept in registers between the passes
}
KEY_SIZES = ("rows", "cols")
KEY_OPS = (NO_OP,)
MAX_HELD = 64                                 # values a thread may keep in registers
MAX_CHUNKS = 16                               # and loads of them (each unrolled)
LOWEST = {"float32": "-3.402823466e+38f", "float64": "-1.7976931348623157e+308"}


@dataclass(frozen=True)
class Problem:
    """`rows` rows of `cols` elements, C-contiguous; `aligned`: the widest vector (elements) that
    the row length and both pointers allow (one tuned config serves every alignment)."""

    rows: int
    cols: int
    dtype: str = "float32"
    aligned: int = 4

    def __post_init__(self):
        check_problem(self, ("rows", "cols"), "rowsoftmax")
        if self.aligned not in (1, 2, 4):
            raise ValueError("aligned must be 1, 2 or 4")


def chunks(c, p: Problem) -> int:
    """Loads a lane makes of its row."""
    return ceil_div(p.cols, c.lanes * c.vec)


def held_words(c, p: Problem) -> int:
    """32-bit registers a lane's cached row takes."""
    return chunks(c, p) * c.vec * ITEMSIZE[p.dtype] // 4


def registers_each(c, d) -> int:
    return min(255, d.regs_per_block // (c.lanes * c.rows))


# Registers the rest of the kernel takes beside a cached row (ptxas, sm_90a): float64's exponential
# needs more.
OTHER_WORDS = {"float32": 32, "float64": 48}


CONSTRAINTS = (
    ("a block (lanes x rows threads) must fit the device", lambda c, p, d: c.lanes * c.rows <= d.max_threads_per_block),
    ("a load must be at most 16 bytes and suit the row length and the pointers",
     lambda c, p, d: c.vec * ITEMSIZE[p.dtype] <= 16 and c.vec <= p.aligned and p.cols % c.vec == 0),
    (f"a cached row must fit a lane's registers ({MAX_HELD} values, and beside the rest of the kernel's "
     f"within what a block of lanes x rows threads may have each)",
     lambda c, p, d: not c.cached or (chunks(c, p) * c.vec <= MAX_HELD and chunks(c, p) <= MAX_CHUNKS
                                      and held_words(c, p) + OTHER_WORDS[p.dtype] <= registers_each(c, d))),
    ("more lanes than the row has loads leave lanes idle (but a warp's)",
     lambda c, p, d: c.lanes == 32 or c.lanes * c.vec <= p.cols),
)


def template_args(c, p: Problem) -> dict:
    return dict(c, ctype=DTYPES[p.dtype], lowest=LOWEST[p.dtype], chunks=chunks(c, p))


def instance_name(c, p: Problem) -> str:
    held = f"_c{chunks(c, p)}" if c.cached else ""
    return f"rowsoftmax_{SHORT[p.dtype]}_l{c.lanes}_v{c.vec}_r{c.rows}{held}"


def geometry(c, p: Problem) -> Geometry:
    return Geometry(grid=(ceil_div(p.rows, c.rows), 1, 1), block=(c.lanes * c.rows, 1, 1))


def flops(p: Problem) -> int:
    return 5 * p.rows * p.cols       # a comparison, a subtraction, an exponential, a sum, a product


def key_of(p: Problem) -> tuple[tuple[int, ...], str]:
    return (p.rows, p.cols), NO_OP


def problem_of(sizes: tuple[int, ...], op: str, dtype: str) -> Problem:
    return Problem(*sizes, dtype)


def default_candidates(p: Problem, d):
    """A warp a row of up to 1024 elements, 128 lanes a longer row; 16-byte loads where they fit,
    the row held in registers where it fits, 4 rows a block; then the other layouts."""
    vec = max(v for v in (1, 2, 4) if v * ITEMSIZE[p.dtype] <= 16 and v <= p.aligned and p.cols % v == 0)
    lanes = 32 if p.cols <= 1024 else 128
    yield dict(lanes=lanes, vec=vec, rows=4, cached=True)
    yield dict(lanes=lanes, vec=vec, rows=4, cached=False)
    yield dict(lanes=32, vec=1, rows=1, cached=False)


def reference(p: Problem, x) -> dict:
    """{"out": softmax of each row of x} in float64, the magnitude its own (every term positive)."""
    x64 = np.asarray(x, np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    out = e / e.sum(axis=1, keepdims=True)
    return {"out": (out, out, p.cols)}


def problem_for(x, out) -> Problem:
    """The problem of a call on CuPy arrays x and out: 2-D, of one shape and dtype (float32 or
    float64), C-contiguous, apart."""
    for name, a in (("x", x), ("out", out)):
        if getattr(a, "ndim", None) != 2 or str(a.dtype) not in DTYPES or not a.flags.c_contiguous:
            raise ValueError(f"{name} must be a C-contiguous 2-D float32 or float64 CuPy array")
    if x.shape != out.shape or x.dtype != out.dtype:
        raise ValueError(f"x {x.shape} {x.dtype} and out {out.shape} {out.dtype} must agree")
    if x.size and abs(x.data.ptr - out.data.ptr) < x.nbytes:
        raise ValueError("out must not overlap x")
    item = x.dtype.itemsize
    aligned = max(v for v in (1, 2, 4) if x.shape[1] % v == 0 and x.data.ptr % (v * item) == 0
                  and out.data.ptr % (v * item) == 0)
    return Problem(x.shape[0], x.shape[1], str(x.dtype), aligned)


def arguments(p: Problem, g: Geometry, x, out) -> tuple:
    """The kernel's arguments, in order."""
    return x, out, np.int32(p.rows), np.int32(p.cols), np.int32(p.cols), np.int32(p.cols)
