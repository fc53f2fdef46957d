"""The convolution's backward pass to its input, as an implicit GEMM (conv2d_dgrad.cu.j2).

dx[n, c, y, x] = act'(aux) * sum_{f,i,j} g[n, f, y-i, x-j] w[f, c, i, j] (terms with y-i, x-j outside
the OH x OW output dropped), NCHW: a GEMM of M = N*H*W input pixels by C channels over F*K*K, whose
A operand (the output gradient, gathered backwards through each filter tap) is never formed. With
an activation, aux is the layer below's saved output, and act' its derivative there (ReLU', sigma').
"""
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from kernels import conv2d
from kernels.contract import Geometry, ceil_div

NAME = "conv2d_dgrad"
TEMPLATE = "conv2d_dgrad/conv2d_dgrad.cu.j2"

KEY_SIZES = conv2d.KEY_SIZES              # (n, c, h, w, f, k) of the forward convolution
KEY_OPS = conv2d.KEY_OPS
KEY_DTYPES, served_by, at_precision = conv2d.KEY_DTYPES, conv2d.served_by, conv2d.at_precision
PARAMS = conv2d.PARAMS                    # the same tiles: bm input pixels by bn channels, bk of F*K*K
MATH_PRECISION, KERNEL_PRECISIONS = conv2d.MATH_PRECISION, conv2d.KERNEL_PRECISIONS


@dataclass(frozen=True)
class Problem(conv2d.Problem):
    """The backward pass to x of the forward convolution (n, c, h, w, f, k); `activation` names the
    layer below's, whose derivative dx takes (None: dx alone). With `pool`, x is the layer below's
    2 x 2 max-pool of (n, c, 2h, 2w) maps, whose backward pass is fused: dx reaches each window's
    maximum (its position given), zero elsewhere."""

    # the two-stage gather's tables: g's offset and the tap i*K + j of each (f, i, j), and w's offset
    DEPTH_TABLE_BYTES: ClassVar[int] = 8 + 4

    def check_pool(self):
        """Any input pools from maps twice its sides."""

    @property
    def m(self) -> int:
        """The implicit GEMM's rows: input pixels of every image."""
        return self.n * self.h * self.w

    @property
    def depth(self) -> int:
        """The implicit GEMM's K: F*K*K."""
        return self.f * self.k * self.k


CONSTRAINTS = conv2d.CONSTRAINTS + (
    ("the two-stage gather keeps a pixel's taps in 64 bits: K at most 8",
     lambda c, p, d: c.stages == 1 or p.k * p.k <= 64),
)
key_of = conv2d.key_of


def untuned_first(p: Problem, d) -> bool:
    """As the forward convolution's, where its tensor-core seeds apply: 16 channels or more (its N)."""
    return conv2d.untuned_first(p, d) and p.c >= 16


def default_candidates(p: Problem, d):
    """As the forward convolution's, with the channels C in place of the filters."""
    forward = conv2d.Problem(p.n, p.f, p.h, p.w, p.c, p.k, p.dtype, precision=p.precision)   # C and F swapped
    return conv2d.default_candidates(forward, d)


def template_args(c, p: Problem) -> dict:
    grad = {None: "none", "relu": "drelu", "sigmoid": "dsigmoid"}[p.activation]
    return dict(conv2d.template_args(c, p), epilogue=grad)


def instance_name(c, p: Problem) -> str:
    return conv2d.instance_name(c, p, NAME)


def geometry(c, p: Problem) -> Geometry:
    return Geometry(grid=(ceil_div(p.c, c.bn), ceil_div(p.m, c.bm), 1), block=(conv2d.threads(c), 1, 1),
                    smem_bytes=conv2d.smem_bytes(c, p))


def flops(p: Problem) -> int:
    return 2 * p.n * p.out_h * p.out_w * p.f * p.c * p.k * p.k


def problem_of(sizes: tuple[int, ...], op: str, dtype: str) -> Problem:
    return conv2d.problem_of(sizes, op, dtype, Problem)


def reference(p: Problem, g, w, aux=None, where=None) -> dict:
    """{"dx": the gradient of x, times act'(aux) with an activation} in float64: g (n, f, oh, ow),
    w (f, c, k, k), aux (n, c, h, w) the layer below's saved output; with a fused pool, dx scattered
    to (n, c, 2h, 2w) at the positions `where` (n, c, h, w) of the windows' maxima, zero elsewhere."""
    g64, w64 = np.asarray(g, np.float64), np.asarray(w, np.float64)
    padded = np.pad(g64, ((0, 0), (0, 0), (p.k - 1, p.k - 1), (p.k - 1, p.k - 1)))
    windows = sliding_window_view(padded, (p.k, p.k), axis=(2, 3))      # (N, F, H, W, K, K)
    rotated = w64[:, :, ::-1, ::-1]
    value = np.einsum("nfhwij,fcij->nchw", windows, rotated, optimize=True)
    abs_windows = sliding_window_view(np.abs(padded), (p.k, p.k), axis=(2, 3))   # a view, not a copy
    magnitude = np.einsum("nfhwij,fcij->nchw", abs_windows, np.abs(rotated), optimize=True)  # dX: (N, C, H, W)
    if p.activation is not None:
        y = np.asarray(aux, np.float64)
        slope = y * (1 - y) if p.activation == "sigmoid" else (y > 0).astype(np.float64)
        value, magnitude = value * slope, magnitude * np.abs(slope)
    if p.pool:
        value, magnitude = (unpool(a, where) for a in (value, magnitude))
    return {"dx": (value, magnitude, p.depth)}


def unpool(d, where):
    """d (N, C, H, W) at the positions `where` (0..3, row by row) of 2 x 2 windows of (N, C, 2H, 2W), zero elsewhere."""
    n, c, h, w = d.shape
    windows = np.zeros((n, c, h, w, 4))
    np.put_along_axis(windows, np.asarray(where, np.intp)[..., None], d[..., None], axis=-1)
    return windows.reshape(n, c, h, w, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, 2 * h, 2 * w)
