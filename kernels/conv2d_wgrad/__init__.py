"""The convolution's backward pass to its weights and bias, as an implicit GEMM (conv2d_wgrad.cu.j2).

dw[f, c, i, j] = sum_{n,oh,ow} g[n, f, oh, ow] x[n, c, oh+i, ow+j] and db[f] = sum g[n, f, oh, ow]:
a GEMM of F filters by C*K*K + 1 columns (every tap, then a column of ones for the bias) over every
output pixel of the batch, N*OH*OW, which is long: split-K slices it across the grid and reduces the
slices in a fixed order, so the sums are the same on every run.
"""
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from kernels import conv2d
from kernels.contract import DTYPES, ITEMSIZE, NO_OP, Geometry, ceil_div

NAME = "conv2d_wgrad"
TEMPLATE = "conv2d_wgrad/conv2d_wgrad.cu.j2"

KEY_SIZES = conv2d.KEY_SIZES              # (n, c, h, w, f, k) of the forward convolution
KEY_OPS = (NO_OP,)                        # no fused pool
KEY_DTYPES, served_by, at_precision = conv2d.KEY_DTYPES, conv2d.served_by, conv2d.at_precision
untuned_first = conv2d.untuned_first     # the forward convolution's sizes decide

PARAMS = {
    "bm": (4, 8, 16, 32, 64),       # block tile: filters (M)
    "bn": (8, 16, 32, 64, 128),     # block tile: taps and the bias column (N)
    "bk": (8, 16, 32, 64),          # output pixels per shared-memory tile
    "ty": (1, 2, 4, 8, 16, 32),     # thread-block shape: TY x TX threads
    "tx": (1, 2, 4, 8, 16, 32),
    "tm": (1, 2, 4),                # register micro-tile TM x TN, repeated over the block tile
    "tn": (1, 2, 4, 8),
    "pad": (False, True),           # pad shared-memory rows against bank conflicts (conv2d.pad_elements)
    "split_k": (1, 4, 16, 32, 64, 128, 256, 512, 1024),   # slices of the reduction over output pixels
    "math": conv2d.PARAMS["math"],  # the tiles' product (conv2d's)
    "stages": conv2d.PARAMS["stages"],   # the gather's pipeline (conv2d's)
}
MATH_PRECISION, KERNEL_PRECISIONS = conv2d.MATH_PRECISION, conv2d.KERNEL_PRECISIONS


@dataclass(frozen=True)
class Problem(conv2d.Problem):
    """The weight and bias gradients of the forward convolution (n, c, h, w, f, k); `activation` is
    unused (the output gradient g already holds the activation's derivative)."""

    DEPTH_TABLE_BYTES: ClassVar[int] = 0    # its depths, the batch's output pixels, are not tabulated

    def check_pool(self):
        raise ValueError("the weight gradient fuses no pool")

    @property
    def m(self) -> int:
        """The implicit GEMM's rows: the filters."""
        return self.f

    @property
    def cols(self) -> int:
        """The implicit GEMM's columns: C*K*K taps and the bias."""
        return self.c * self.k * self.k + 1

    @property
    def depth(self) -> int:
        """The implicit GEMM's K: the output pixels of the batch."""
        return self.n * self.out_h * self.out_w


def slice_depth(c, p: Problem) -> int:
    """Output pixels per split-K slice: a whole number of BK steps."""
    return ceil_div(p.depth, c.split_k * c.bk) * c.bk


CONSTRAINTS = conv2d.CONSTRAINTS + (
    ("every split-K slice must hold at least one BK step of the output pixels",
     lambda c, p, d: (c.split_k - 1) * slice_depth(c, p) < p.depth),
)


def default_candidates(p: Problem, d):
    """Sound untuned configs, best guess first: on tensor cores where both sides are wide enough for
    their 16 x 8 tiles (float32, at least 16 filters and 32 columns), then FMAs: the fewest filters
    and columns (up to 64) that cover F and the taps, then smaller tiles; 32 pixels a step. Each
    with enough slices for two blocks an SM."""
    def covering(size, choices):
        return next((v for v in choices if v >= size), choices[-1])

    def split(bm, bn, bk):
        tiles = ceil_div(p.f, bm) * ceil_div(p.cols, bn)
        slices = sorted(PARAMS["split_k"], key=lambda s: abs(np.log(s * tiles / (2 * d.sm_count))))
        return next(s for s in slices + [1] if (s - 1) * ceil_div(p.depth, s * bk) * bk < p.depth)

    first = covering(p.f, PARAMS["bm"]), covering(p.cols, PARAMS["bn"][:4])
    if p.dtype == "float32" and p.f >= 16 and p.cols >= 32:
        math = conv2d.MMA_MATH[p.precision]
        for bm, bn in ((first[0], first[1]), (16, first[1]), (first[0], 32)):
            for threads in (128, 256):
                for ty in (8, 16, 32):
                    tx = threads // ty
                    if tx not in PARAMS["tx"] or bm % ty or (bm // ty) % 2 or bn % tx or (bn // tx) % 2 or tx % 4:
                        continue
                    for bk in (32, 16):
                        if (bm + bn) * bk <= 16 * threads:
                            yield dict(bm=bm, bn=bn, bk=bk, ty=ty, tx=tx, tm=1, tn=2, pad=True,
                                       split_k=split(bm, bn, bk), math=math, stages=2)
    for bm, bn in (first, (min(first[0], 16), min(first[1], 32)), (8, 16)):
        for bk in (32, 16, 8):
            for tm, tn in ((2, 4), (1, 4), (2, 2), (1, 2), (1, 1)):
                ty, tx = bm // tm, bn // tn
                if ty in PARAMS["ty"] and tx in PARAMS["tx"] and ty * tx in (32, 64, 128, 256):
                    yield dict(bm=bm, bn=bn, bk=bk, ty=ty, tx=tx, tm=tm, tn=tn, pad=True, split_k=split(bm, bn, bk),
                               math="fma", stages=1)


def template_args(c, p: Problem) -> dict:
    widest = 16 // ITEMSIZE[p.dtype]
    return dict(c, ctype=DTYPES[p.dtype], channels=p.c, height=p.h, width=p.w, filters=p.f, kernel=p.k,
                pad_elements=conv2d.pad_elements(c), smem_vec_a=min(c.tm, widest), smem_vec_b=min(c.tn, widest))


def instance_name(c, p: Problem) -> str:
    return f"{conv2d.instance_name(c, p, NAME)}_sk{c.split_k}"


def geometry(c, p: Problem) -> Geometry:
    grid = (ceil_div(p.cols, c.bn), ceil_div(p.f, c.bm), c.split_k)
    split = c.split_k > 1
    return Geometry(grid=grid, block=(conv2d.threads(c), 1, 1), smem_bytes=conv2d.smem_bytes(c, p),
                    workspace_elems=c.split_k * p.f * p.cols if split else 0,
                    counters=grid[0] * grid[1] if split else 0)


def flops(p: Problem) -> int:
    return 2 * p.f * p.cols * p.depth


key_of = conv2d.key_of


def problem_of(sizes: tuple[int, ...], op: str, dtype: str) -> Problem:
    return conv2d.problem_of(sizes, op, dtype, Problem)


def reference(p: Problem, g, x) -> dict:
    """{"dw", "db"}: the weight and bias gradients in float64 from g (n, f, oh, ow), the output
    gradient, and x (n, c, h, w), the input."""
    g64, x64 = np.asarray(g, np.float64), np.asarray(x, np.float64)
    windows = sliding_window_view(x64, (p.out_h, p.out_w), axis=(2, 3))   # (N, C, K, K, OH, OW)
    dw = np.einsum("ncijhw,nfhw->fcij", windows, g64, optimize=True)
    abs_windows = sliding_window_view(np.abs(x64), (p.out_h, p.out_w), axis=(2, 3))   # a view, not a copy
    dw_magnitude = np.einsum("ncijhw,nfhw->fcij", abs_windows, np.abs(g64), optimize=True)  # dW: (F, C, K, K)
    return {"dw": (dw, dw_magnitude, p.depth),
            "db": (g64.sum(axis=(0, 2, 3)), np.abs(g64).sum(axis=(0, 2, 3)), p.depth)}             # db: (F,)
