"""Entry points of the CNN's families (CuPy arrays, NCHW, C-contiguous): the convolution forward and
its two backward passes, 2 x 2 max-pooling and its backward pass.

Each checks its arrays, takes the tuned config of its problem (or the one given) and launches one
kernel on the current stream, writing into the caller's arrays (a convolution with a pool that its
kernel cannot fuse, two): nothing is allocated but scratch (split-K's, an unpooled output's the
caller gave no buffer for), once per stream.
"""
import math
from dataclasses import replace

import numpy as np

from autogemm.errors import BadArguments
from autogemm.ops.kernels import implementation, launch, scratch
from autogemm.runtime.device import require_cupy, this_device
from kernels import conv2d as conv_family
from kernels import conv2d_dgrad as dgrad_family
from kernels import conv2d_wgrad as wgrad_family
from kernels import pool2x2 as pool_family

_NULL = np.uint64(0)


def _check(what: str, arrays: dict, shapes: dict, dtype):
    """BadArguments unless each named array is a C-contiguous cupy array of its shape, in `dtype`
    (a floating dtype), or int8 where its name starts with "where"."""
    cupy = require_cupy()
    if np.dtype(dtype) not in (np.float32, np.float64):
        raise BadArguments(f"{what}: arrays must be float32 or float64, got {np.dtype(dtype)}")
    for name, x in arrays.items():
        want = np.int8 if name.startswith("where") else dtype
        if not isinstance(x, cupy.ndarray) or not x.flags.c_contiguous:
            raise BadArguments(f"{what}: {name} must be a C-contiguous cupy array, got {type(x).__name__}")
        if x.dtype != want or x.shape != shapes[name]:
            raise BadArguments(f"{what}: {name} must be {np.dtype(want)} of shape {shapes[name]}, "
                               f"got {x.dtype} {x.shape}")


def _conv_sizes(what: str, x_shape, w) -> tuple:
    """(n, c, h, w, f, k) of a convolution of images x_shape by filters w."""
    if len(x_shape) != 4 or w.ndim != 4 or w.shape[2] != w.shape[3] or w.shape[1] != x_shape[1]:
        raise BadArguments(f"{what}: images must be (N, C, H, W) and filters (F, C, K, K) with the same C, "
                           f"got {tuple(x_shape)} and {w.shape}")
    n, c, h, width = x_shape
    f, _, k, _ = w.shape
    if k > min(h, width):
        raise BadArguments(f"{what}: a {k}x{k} filter does not fit a {h}x{width} image")
    return n, c, h, width, f, k


def _problem(family, sizes, dtype, activation, precision, pool=False):
    try:
        return family.Problem(*sizes, str(np.dtype(dtype)), activation, precision, pool)
    except ValueError as exc:
        raise BadArguments(f"{family.NAME}: {exc}") from None


# Each convolution's `precision` is what its products may round float32 operands to, as a GEMM's
# (autogemm.gemm): "fp32" (FP32-accurate), "tf32" or "bf16" (served by TF32 products, or FP32-accurate).


def conv2d(x, w, b, out, activation=None, config=None, precision="fp32", where=None, unpooled=None):
    """out (N, F, H-K+1, W-K+1) = act(x (N, C, H, W) correlated with w (F, C, K, K), plus b (F,));
    activation None, "relu" or "sigmoid".

    With `where` (int8), the 2 x 2 max-pool too: out and where (N, F, (H-K+1)//2, (W-K+1)//2) each
    window's maximum and its position (0..3, row by row), as maxpool2x2 gives them. Fused into one
    kernel where the direct kernels, which alone fuse it, are what this call runs without the pool
    (its tuned records, else the untuned order: `pool_fused`); else the convolution into `unpooled`
    (N, F, H-K+1, W-K+1), or scratch, then maxpool2x2."""
    sizes = _conv_sizes("conv2d", x.shape, w)
    n, c, h, width, f, k = sizes
    pooled = where is not None
    problem = _problem(conv_family, sizes, x.dtype, activation, precision)
    z = (n, f, problem.out_h, problem.out_w)
    shapes = {"x": x.shape, "w": w.shape, "b": (f,), "out": (n, f, *problem.pooled) if pooled else z}
    _check("conv2d", {"x": x, "w": w, "b": b, "out": out} | ({"where": where} if pooled else {}),
           shapes | {"where": shapes["out"]}, x.dtype)
    if not pooled:
        launch("conv2d", problem, config, lambda g: (x, w, b, out, np.int32(n)))
    elif pool_fused("conv2d", problem, config):
        launch("conv2d", replace(problem, pool=True), config, lambda g: (x, w, b, out, where, np.int32(n)))
    else:
        z = _unpooled("conv2d", unpooled, z, x.dtype)
        launch("conv2d", problem, config, lambda g: (x, w, b, z, np.int32(n)))
        maxpool2x2(z, out, where)
    return out


def conv2d_backward_data(g, w, out, aux=None, activation=None, config=None, precision="fp32", where=None,
                         unpooled=None):
    """out (N, C, H, W) = dL/dx from g = dL/dz (N, F, H-K+1, W-K+1) and the filters w (F, C, K, K),
    times act'(aux) with an activation: aux (N, C, H, W) the saved output of the layer below's.

    With `where` (N, C, H, W) int8, x is the layer below's 2 x 2 max-pool (maxpool2x2's positions of
    its maxima, aux its pooled values) and its backward pass is done too: out (N, C, 2H, 2W) gets
    each gradient at its window's maximum, zero elsewhere. Fused where the direct kernels are what
    this call runs without the pool (`pool_fused`), else through `unpooled` (N, C, H, W), or
    scratch, and maxpool2x2_backward."""
    pooled = where is not None
    n, c, h, width = out.shape if not pooled else (*out.shape[:2], out.shape[2] // 2, out.shape[3] // 2)
    sizes = _conv_sizes("conv2d_backward_data", (n, c, h, width), w)
    f, k = sizes[4:]
    maps = (n, c, h, width)
    arrays = {"g": g, "w": w, "out": out} | ({"aux": aux} if activation else {}) | ({"where": where} if pooled else {})
    _check("conv2d_backward_data", arrays,
           {"g": (n, f, h - k + 1, width - k + 1), "w": w.shape, "aux": maps, "where": maps,
            "out": (n, c, 2 * h, 2 * width) if pooled else maps}, out.dtype)
    problem = _problem(dgrad_family, sizes, out.dtype, activation, precision)
    saved = aux if activation else _NULL
    if not pooled:
        launch("conv2d_dgrad", problem, config, lambda geo: (g, w, saved, out, np.int32(n)))
    elif pool_fused("conv2d_dgrad", problem, config):
        launch("conv2d_dgrad", replace(problem, pool=True), config,
               lambda geo: (g, w, saved, where, out, np.int32(n)))
    else:
        dx = _unpooled("conv2d_backward_data", unpooled, maps, out.dtype)
        launch("conv2d_dgrad", replace(problem, activation=None), config, lambda geo: (g, w, _NULL, dx, np.int32(n)))
        maxpool2x2_backward(dx, where, out, aux, activation)
    return out


def pool_fused(call: str, problem, config=None) -> bool:
    """Whether `call` (conv2d or conv2d_dgrad) of `problem` (without a pool) fuses a 2 x 2 pool
    beside it: where its direct family is the one it runs (kernels.IMPLEMENTATIONS' choice on this
    GPU, for `config` as conv2d takes it)."""
    return implementation(call, problem, config, this_device()) == f"{call}_direct"


def _unpooled(what: str, given, shape: tuple, dtype):
    """`given` checked as a C-contiguous array of `shape`, else scratch of that shape."""
    if given is None:
        size = math.prod(shape)
        return scratch(f"{what} unpooled", dtype, size)[:size].reshape(shape)
    _check(what, {"unpooled": given}, {"unpooled": shape}, dtype)
    return given


def conv2d_backward_weights(g, x, dw, db, config=None, precision="fp32"):
    """dw (F, C, K, K) and db (F,) from g = dL/dz (N, F, H-K+1, W-K+1) and the input x (N, C, H, W):
    sums over the batch and the output pixels, split-K across the GPU and reduced in a fixed order."""
    sizes = _conv_sizes("conv2d_backward_weights", x.shape, dw)
    n, c, h, width, f, k = sizes
    _check("conv2d_backward_weights", {"g": g, "x": x, "dw": dw, "db": db},
           {"g": (n, f, h - k + 1, width - k + 1), "x": x.shape, "dw": dw.shape, "db": (f,)}, x.dtype)
    problem = _problem(wgrad_family, sizes, x.dtype, None, precision)

    def args(geo):
        workspace = scratch("workspace", x.dtype, geo.workspace_elems) if geo.workspace_elems else _NULL
        counters = scratch("counters", np.int32, geo.counters) if geo.counters else _NULL
        return g, x, dw, db, workspace, counters, np.int32(n)

    launch("conv2d_wgrad", problem, config, args)
    return dw, db


def _pool_problem(shape, dtype, op, activation=None):
    if len(shape) != 4:
        raise BadArguments(f"maxpool2x2: maps must be (N, C, H, W), got {tuple(shape)}")
    try:
        return pool_family.Problem(*shape, str(np.dtype(dtype)), op, activation)
    except ValueError as exc:
        raise BadArguments(f"maxpool2x2: {exc}") from None


def maxpool2x2(x, out, where, config=None):
    """out (N, C, H//2, W//2): each 2 x 2 window's maximum of x (N, C, H, W); where (same shape,
    int8): its position in the window, 0..3 row by row."""
    p = _pool_problem(x.shape, x.dtype, "forward")
    pooled = (p.n, p.c, p.h // 2, p.w // 2)
    _check("maxpool2x2", {"x": x, "out": out, "where": where}, {"x": x.shape, "out": pooled, "where": pooled}, x.dtype)
    launch("pool2x2", p, config, lambda geo: (x, _NULL, _NULL, out, where, np.int32(p.n)))
    return out


def maxpool2x2_backward(g, where, out, y=None, activation=None, config=None):
    """out (N, C, H, W) = dL/dx from g = dL/dy and where (N, C, H//2, W//2): g at each window's
    maximum, zero elsewhere; times act'(y) with an activation, y the pooled outputs."""
    p = _pool_problem(out.shape, out.dtype, "backward", activation)
    pooled = (p.n, p.c, p.h // 2, p.w // 2)
    arrays = {"g": g, "where": where, "out": out} | ({"y": y} if activation else {})
    _check("maxpool2x2_backward", arrays, {"g": pooled, "where": pooled, "out": out.shape, "y": pooled}, out.dtype)
    launch("pool2x2", p, config, lambda geo: (g, where, y if activation else _NULL, out, _NULL, np.int32(p.n)))
    return out
