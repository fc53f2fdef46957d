"""Adam over one flat parameter vector (adam.cu.j2): every weight and bias of a network in one launch.

t = steps + 1;  m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2;
w <- w - lr sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)     (Keras' form; steps counts from 0)
The step count lives on the device and the launch's last block advances it, so a captured CUDA
graph replays the right bias correction on every step.
"""
from dataclasses import dataclass

import numpy as np

from kernels.contract import DTYPES, NO_OP, SHORT, Geometry, ceil_div, check_problem

NAME = "adam"
TEMPLATE = "adam/adam.cu.j2"

KEY_SIZES = ("n",)
KEY_OPS = (NO_OP,)

PARAMS = {
    "block": (64, 128, 256, 512, 1024),   # threads per block
    "ept": (1, 2, 4, 8),                  # elements per thread, THREADS apart
}


@dataclass(frozen=True)
class Problem:
    """One Adam step on n parameters."""

    n: int
    dtype: str = "float32"

    def __post_init__(self):
        check_problem(self, KEY_SIZES, "adam")


CONSTRAINTS = (
    ("threads per block must fit the device", lambda c, p, d: c.block <= d.max_threads_per_block),
    ("the grid must have at most 2^31 - 1 blocks", lambda c, p, d: ceil_div(p.n, c.block * c.ept) < 2**31),
    ("one block past the end must still be indexable in 32 bits", lambda c, p, d: p.n + c.block * c.ept < 2**31),
)


def default_candidates(p: Problem, d):
    for block, ept in ((256, 4), (256, 1), (128, 2)):
        yield dict(block=block, ept=ept)


def template_args(c, p: Problem) -> dict:
    return dict(c, ctype=DTYPES[p.dtype])


def instance_name(c, p: Problem) -> str:
    return f"adam_{SHORT[p.dtype]}_b{c.block}_e{c.ept}"


def geometry(c, p: Problem) -> Geometry:
    return Geometry(grid=(ceil_div(p.n, c.block * c.ept), 1, 1), block=(c.block, 1, 1), counters=1)


def flops(p: Problem) -> int:
    return 12 * p.n


def key_of(p: Problem) -> tuple[tuple[int, ...], str]:
    return (p.n,), NO_OP


def problem_of(sizes: tuple[int, ...], op: str, dtype: str) -> Problem:
    return Problem(*sizes, dtype)


def reference(p: Problem, w, g, m, v, steps, lr, beta1, beta2, eps) -> dict:
    """{"w", "m", "v"} after one step in float64, from their values before it and `steps` done."""
    w64, g64, m64, v64 = (np.asarray(a, np.float64) for a in (w, g, m, v))
    t = int(steps) + 1
    m_new = beta1 * m64 + (1 - beta1) * g64
    v_new = beta2 * v64 + (1 - beta2) * g64 * g64
    rate = lr * np.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)
    step = rate * m_new / (np.sqrt(v_new) + eps)
    return {"w": (w64 - step, np.abs(w64) + 4 * np.abs(step), 4),
            "m": (m_new, beta1 * np.abs(m64) + (1 - beta1) * np.abs(g64), 4),
            "v": (v_new, beta2 * v64 + (1 - beta2) * g64 * g64, 4)}
