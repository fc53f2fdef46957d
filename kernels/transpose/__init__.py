"""Transpose family (transpose.cu.j2): out = x^T through shared-memory tiles, both sides coalesced.
What gemm_wgmma's `pretranspose` runs first: wgmma reads TF32 operands K-major alone, so an
operand with M or N contiguous is copied K-major once rather than transposed in every block's
shared memory.
"""
import numpy as np

from kernels.contract import (DTYPES, ITEMSIZE, NO_OP, SHORT, Geometry, RowsProblem, ceil_div,
                              rows_key_of, rows_problem_of)

NAME = "transpose"
TEMPLATE = "transpose/transpose.cu.j2"

PARAMS = {
    "tile": (32, 64),               # the square tile a block moves
    "block_rows": (4, 8, 16, 32),   # rows of 32 threads per block
}

Problem = RowsProblem           # x's rows and columns
KEY_SIZES = ("rows", "cols")
KEY_OPS = (NO_OP,)
key_of, problem_of = rows_key_of, rows_problem_of

CONSTRAINTS = (
    ("the block's rows must not outnumber the tile's", lambda c, p, d: c.block_rows <= c.tile),
    ("the tile must fit 48 KB of static shared memory",
     lambda c, p, d: c.tile * (c.tile + 1) * ITEMSIZE[p.dtype] <= 48 * 1024),
)
MAX_GRID_ROWS = 65535   # the blocks of a grid column step down the rows past this many tiles


def template_args(c, p: Problem) -> dict:
    return dict(c, ctype=DTYPES[p.dtype])


def instance_name(c, p: Problem) -> str:
    return f"transpose_{SHORT[p.dtype]}_t{c.tile}_r{c.block_rows}"


def geometry(c, p: Problem) -> Geometry:
    return Geometry(grid=(ceil_div(p.cols, c.tile), min(ceil_div(p.rows, c.tile), MAX_GRID_ROWS), 1),
                    block=(32, c.block_rows, 1))


def flops(p: Problem) -> int:
    """The elements moved (GFLOP/s in its records reads as giga-elements a second)."""
    return p.rows * p.cols


def default_candidates(p: Problem, d):
    """64-element tiles and 1024 threads a block: the fastest config on each of the trainers'
    operands measured (benchmarks/issue18-h100/pretranspose-stale); then 32-element tiles."""
    yield dict(tile=64, block_rows=32)
    yield dict(tile=32, block_rows=8)


def reference(p: Problem, x) -> dict:
    """{"out": x^T}: exact, so its magnitude is zero (verify then asks for equality)."""
    value = np.asarray(x, np.float64).T
    return {"out": (value, np.zeros_like(value), 1)}
