"""2 x 2 max-pooling with stride 2, NCHW, forward and backward (pool2x2.cu.j2).

forward: y[n, c, py, px] = the maximum of x's window at rows 2py, 2py+1 and columns 2px, 2px+1, and
where = its position in the window (0..3, row by row; the first of equal values), an odd side's last
row or column dropped. backward: dx = g at each window's maximum, zero elsewhere, times act'(y) with
an activation: the pooled layer's activation derivative at its maximum, a function of y alone.
"""
from dataclasses import dataclass

import numpy as np

from kernels.contract import DTYPES, SHORT, Geometry, ceil_div, check_problem

NAME = "pool2x2"
TEMPLATE = "pool2x2/pool2x2.cu.j2"

OPS = ("forward", "backward")
ACTIVATIONS = (None, "relu", "sigmoid")
KEY_SIZES = ("n", "c", "h", "w")
KEY_OPS = OPS                      # one backward config serves every activation

PARAMS = {
    "block": (64, 128, 256, 512, 1024),   # threads per block
    "ept": (1, 2, 4, 8),                  # outputs per thread, THREADS apart
}


@dataclass(frozen=True)
class Problem:
    """n maps of c x h x w pooled (forward), or their gradient (backward, with the pooled layer's
    activation)."""

    n: int
    c: int
    h: int
    w: int
    dtype: str = "float32"
    op: str = "forward"
    activation: str | None = None

    def __post_init__(self):
        check_problem(self, KEY_SIZES, "pool2x2")
        if self.op not in OPS:
            raise ValueError(f"pool2x2 op {self.op!r} is not forward or backward")
        if self.h < 2 or self.w < 2:
            raise ValueError(f"a 2 x 2 pool does not fit a {self.h}x{self.w} map")
        if self.activation not in ACTIVATIONS or (self.activation and self.op == "forward"):
            raise ValueError(f"activation {self.activation!r}: relu, sigmoid or None, and only backward")
        if self.n * self.c * self.h * self.w >= 2**31:
            raise ValueError(f"pool2x2 of {self.n} maps: more than 2^31 - 1 elements")

    @property
    def outputs(self) -> int:
        """Elements a launch writes, one a thread: pooled values (forward) or input gradients (backward)."""
        return self.n * self.c * (self.h // 2 * (self.w // 2) if self.op == "forward" else self.h * self.w)


CONSTRAINTS = (
    ("threads per block must fit the device", lambda c, p, d: c.block <= d.max_threads_per_block),
    ("the grid must have at most 2^31 - 1 blocks", lambda c, p, d: ceil_div(p.outputs, c.block * c.ept) < 2**31),
)


def default_candidates(p: Problem, d):
    for block, ept in ((256, 2), (256, 1), (128, 4)):
        yield dict(block=block, ept=ept)


def template_args(c, p: Problem) -> dict:
    grad = {None: "none", "relu": "drelu", "sigmoid": "dsigmoid"}[p.activation]
    return dict(c, ctype=DTYPES[p.dtype], op=p.op, channels=p.c, height=p.h, width=p.w, grad=grad)


def instance_name(c, p: Problem) -> str:
    return f"pool2x2_{p.op}_{SHORT[p.dtype]}_c{p.c}_h{p.h}_w{p.w}_{p.activation or 'linear'}_b{c.block}_e{c.ept}"


def geometry(c, p: Problem) -> Geometry:
    return Geometry(grid=(ceil_div(p.outputs, c.block * c.ept), 1, 1), block=(c.block, 1, 1))


def flops(p: Problem) -> int:
    return 3 * p.outputs if p.op == "forward" else p.outputs


def key_of(p: Problem) -> tuple[tuple[int, ...], str]:
    return (p.n, p.c, p.h, p.w), p.op


def problem_of(sizes: tuple[int, ...], op: str, dtype: str) -> Problem:
    return Problem(*sizes, dtype, op)


def _windows(x64, p: Problem):
    """x (n, c, h, w) as (n, c, h//2, w//2, 4): each window's values, row by row."""
    hp, wp = p.h // 2, p.w // 2
    x64 = x64[:, :, :2 * hp, :2 * wp].reshape(p.n, p.c, hp, 2, wp, 2)
    return x64.transpose(0, 1, 2, 4, 3, 5).reshape(p.n, p.c, hp, wp, 4)


def reference(p: Problem, x=None, g=None, where=None, y=None) -> dict:
    """forward from x (n, c, h, w): {"y": maxima, "where": their positions (exact)}; backward from
    g and where (n, c, h//2, w//2) and, with an activation, y the pooled outputs: {"dx"} (n, c, h, w)."""
    if p.op == "forward":
        windows = _windows(np.asarray(x, np.float64), p)                # (N, C, H/2, W/2, 4)
        at = windows.argmax(axis=-1)
        value = np.take_along_axis(windows, at[..., None], axis=-1)[..., 0]
        return {"y": (value, np.abs(value), 1), "where": (at.astype(np.float64), np.zeros(at.shape), 1)}
    g64 = np.asarray(g, np.float64)
    if p.activation is not None:
        y64 = np.asarray(y, np.float64)
        g64 = g64 * (y64 * (1 - y64) if p.activation == "sigmoid" else (y64 > 0))
    hp, wp = p.h // 2, p.w // 2
    windows = np.zeros((p.n, p.c, hp, wp, 4))                           # (N, C, H/2, W/2, 4)
    np.put_along_axis(windows, np.asarray(where, np.intp)[..., None], g64[..., None], axis=-1)
    dx = np.zeros((p.n, p.c, p.h, p.w))                                 # dX: (N, C, H, W), dropped rows zero
    dx[:, :, :2 * hp, :2 * wp] = windows.reshape(p.n, p.c, hp, wp, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(
        p.n, p.c, 2 * hp, 2 * wp)
    return {"dx": (dx, np.abs(dx), 1)}
