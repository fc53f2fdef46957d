"""The CNN's operations written plainly in NumPy: the reference that the GPU kernels are checked against.

Images are NCHW (N, C, H, W) and filters (F, C, K, K). A convolution is valid with stride 1 and,
as in every framework, a cross-correlation: z[n, f, h, w] = b[f] + sum_{c,i,j} x[n, c, h+i, w+j] w[f, c, i, j].
Max-pooling takes 2 x 2 windows with stride 2; an odd side's last row or column is dropped.
"""
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def conv2d(x, w, b):
    """z (N, F, H-K+1, W-K+1) = x (N, C, H, W) correlated with w (F, C, K, K), plus b (F,)."""
    k = w.shape[-1]
    windows = sliding_window_view(x, (k, k), axis=(2, 3))          # (N, C, H', W', K, K)
    return np.einsum("nchwij,fcij->nfhw", windows, w, optimize=True) + b[None, :, None, None]


def conv2d_backward_data(g, w):
    """dL/dx (N, C, H, W) from g = dL/dz (N, F, H', W'): g zero-padded by K-1 on each side,
    correlated with the filters rotated by 180 degrees (a full convolution)."""
    k = w.shape[-1]
    padded = np.pad(g, ((0, 0), (0, 0), (k - 1, k - 1), (k - 1, k - 1)))
    windows = sliding_window_view(padded, (k, k), axis=(2, 3))     # (N, F, H, W, K, K)
    return np.einsum("nfhwij,fcij->nchw", windows, w[:, :, ::-1, ::-1], optimize=True)


def conv2d_backward_weights(g, x):
    """(dL/dw (F, C, K, K), dL/db (F,)) from g = dL/dz (N, F, H', W') and the input x (N, C, H, W):
    a sum over the batch and the output pixels."""
    windows = sliding_window_view(x, g.shape[2:], axis=(2, 3))     # (N, C, K, K, H', W')
    return np.einsum("ncijhw,nfhw->fcij", windows, g, optimize=True), g.sum(axis=(0, 2, 3))


def _pool_windows(x):
    """x (N, C, H, W) as (N, C, H//2, W//2, 4): each 2 x 2 window's values, row by row."""
    n, c, h, w = x.shape
    x = x[:, :, :h // 2 * 2, :w // 2 * 2]
    return x.reshape(n, c, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, h // 2, w // 2, 4)


def maxpool2x2(x):
    """(y (N, C, H//2, W//2), where (N, C, H//2, W//2) int8): each window's maximum and its position
    in the window (0..3, row by row; the first of equal values), which the backward pass needs."""
    windows = _pool_windows(x)
    where = windows.argmax(axis=-1).astype(np.int8)
    return np.take_along_axis(windows, where[..., None].astype(np.intp), axis=-1)[..., 0], where


def maxpool2x2_backward(g, where, shape_in):
    """dL/dx (shape_in = (N, C, H, W)) from g = dL/dy (N, C, H//2, W//2): each window's gradient goes
    to the position of its maximum; the rest, and any dropped row or column, get zero."""
    n, c, h, w = shape_in
    hp, wp = h // 2, w // 2
    windows = np.zeros((n, c, hp, wp, 4), g.dtype)                  # (N, C, H//2, W//2, 4)
    np.put_along_axis(windows, where[..., None].astype(np.intp), g[..., None], axis=-1)
    dx = np.zeros(shape_in, g.dtype)
    dx[:, :, :hp * 2, :wp * 2] = windows.reshape(n, c, hp, wp, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(
        n, c, hp * 2, wp * 2)
    return dx


ADAM = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-7)   # Keras' defaults, the reports' recipe


def adam_update(w, g, m, v, step, lr=ADAM["lr"], beta1=ADAM["beta1"], beta2=ADAM["beta2"], eps=ADAM["eps"]):
    """One Adam step in place on w, with its moments m and v, as Keras computes it (step counts from 1):
    m <- beta1 m + (1 - beta1) g; v <- beta2 v + (1 - beta2) g^2;
    w <- w - lr sqrt(1 - beta2^step) / (1 - beta1^step) * m / (sqrt(v) + eps)."""
    m *= beta1
    m += (1 - beta1) * g
    v *= beta2
    v += (1 - beta2) * g * g
    w -= lr * np.sqrt(1 - beta2 ** step) / (1 - beta1 ** step) * m / (np.sqrt(v) + eps)
    return w
