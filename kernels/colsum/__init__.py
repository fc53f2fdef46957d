"""Column-sum family (colsum.cu.j2): bias gradients, optionally fused with the bias SGD step."""
import numpy as np

from kernels.contract import (DTYPES, ITEMSIZE, NO_OP, SHORT, Geometry, RowsProblem, ceil_div,
                              rows_key_of, rows_problem_of)

NAME = "colsum"
TEMPLATE = "colsum/colsum.cu.j2"

PARAMS = {
    "tx": (8, 16, 32, 64, 128),    # columns per block
    "ty": (1, 2, 4, 8, 16, 32),    # lanes of rows per block
}

Problem = RowsProblem
KEY_SIZES = ("rows", "cols")
KEY_OPS = (NO_OP,)
key_of, problem_of = rows_key_of, rows_problem_of

CONSTRAINTS = (
    ("threads per block must be a multiple of 32 and fit the device",
     lambda c, p, d: (c.tx * c.ty) % 32 == 0 and c.tx * c.ty <= d.max_threads_per_block),
    ("shared memory must fit 48 KB", lambda c, p, d: c.tx * c.ty * ITEMSIZE[p.dtype] <= 48 * 1024),
)


def template_args(c, p: Problem) -> dict:
    return dict(c, ctype=DTYPES[p.dtype])


def instance_name(c, p: Problem) -> str:
    dt = SHORT[p.dtype]
    return f"colsum_{dt}_tx{c.tx}_ty{c.ty}"


def geometry(c, p: Problem) -> Geometry:
    return Geometry(grid=(ceil_div(p.cols, c.tx), 1, 1), block=(c.tx * c.ty, 1, 1))


def flops(p: Problem) -> int:
    return p.rows * p.cols


def default_candidates(p: Problem, d):
    yield dict(tx=32, ty=8)
    yield dict(tx=32, ty=1)


def reference(p: Problem, g) -> dict:
    """{"out": the column sums of G}, as one row."""
    g64 = np.asarray(g, np.float64)
    return {"out": (g64.sum(0)[None, :], np.abs(g64).sum(0)[None, :], p.rows)}     # (1, cols)
