"""Softmax + cross-entropy + gradient family (softmax_xent.cu.j2): the MLP's output layer in one kernel."""
from kernels.contract import DTYPES, NO_OP, SHORT, Geometry, RowsProblem, ceil_div

NAME = "softmax_xent"
TEMPLATE = "softmax_xent.cu.j2"
SOURCE_PARAMS = ()

PARAMS = {
    "block": (32, 64, 128, 256, 512),   # threads per block
    "tpr": (1, 2, 4, 8, 16, 32),        # threads per row (a power of two within a warp)
}

Problem = RowsProblem
KEY_SIZES = ("rows", "cols")
KEY_OPS = (NO_OP,)

CONSTRAINTS = (
    ("threads per row must divide the block", lambda c, p, d: c.block % c.tpr == 0),
    ("threads per block must fit the device", lambda c, p, d: c.block <= d.max_threads_per_block),
)


def sources(c) -> tuple[str, ...]:
    return (TEMPLATE,)


def template_args(c, p: Problem) -> dict:
    return dict(c, ctype=DTYPES[p.dtype])


def instance_name(c, p: Problem) -> str:
    dt = SHORT[p.dtype]
    return f"softmax_xent_{dt}_b{c.block}_t{c.tpr}"


def geometry(c, p: Problem) -> Geometry:
    return Geometry(grid=(ceil_div(p.rows, c.block // c.tpr), 1, 1), block=(c.block, 1, 1))


def flops(p: Problem) -> int:
    return 5 * p.rows * p.cols


def key_of(p: Problem) -> tuple[tuple[int, ...], str]:
    return (p.rows, p.cols), NO_OP


def problem_of(sizes: tuple[int, ...], op: str, dtype: str) -> Problem:
    return Problem(*sizes, dtype)


def default_candidates(p: Problem, d):
    tpr = 1 if p.cols <= 32 else 32
    yield dict(block=128, tpr=tpr)
