"""The interface every trainer backend implements: GEMM with fused epilogues and the elementwise pieces.

The MLP (nn/mlp.py) is written against this class alone. Arrays are the backend's own (NumPy arrays
here, CuPy arrays on a GPU); every operation writes into a caller-owned, preallocated `out`, so a GPU
backend can capture a whole training step in a CUDA graph and never synchronise inside an epoch.
"""
import contextlib
import os
from abc import ABC, abstractmethod

import numpy as np

from autogemm import GEMM_EPILOGUES, GEMM_PRECISIONS
from nn.errors import NNError

ACTIVATIONS = ("sigmoid", "relu")
DTYPES = ("float32", "float64")
# Epilogues of `gemm`, autogemm's: None, "bias", "bias_<act>" (forward), "d<act>" (backward) for each
# activation. Every backend implements each of them.
EPILOGUES = GEMM_EPILOGUES
# What a GPU backend's GEMMs may round their operands to (autogemm's precisions: fp32, tf32, bf16).
PRECISIONS = GEMM_PRECISIONS


def host_free_bytes() -> int | None:
    """Memory the host can still give (Linux's MemAvailable, else free pages), None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


class Backend(ABC):
    """Array storage and the operations of one training step, in one floating-point dtype."""

    name: str
    xp = None  # the array module (numpy, cupy): argmax / vdot at epoch boundaries, slicing views

    def __init__(self, dtype):
        if np.dtype(dtype).name not in DTYPES:
            raise NNError(f"dtype {np.dtype(dtype).name} is not supported; choose one of {', '.join(DTYPES)}")
        self.dtype = np.dtype(dtype)

    # ---- storage --------------------------------------------------------------------------

    @abstractmethod
    def asarray(self, a: np.ndarray):
        """Copy a host array to the backend; floating arrays become `self.dtype`, integer arrays keep theirs."""

    def read_only(self, x):
        """Declare that `x` (a backend array) is never written again, so that derived copies of it
        stay valid (a GPU backend's: the bfloat16 copy its bf16 GEMMs read, the column-major copy
        its tf32 GEMMs read where they would read x M/N-major); returns x."""
        return x

    @abstractmethod
    def to_numpy(self, a) -> np.ndarray:
        """The host copy of `a` (may share memory with `a` on a host backend)."""

    @abstractmethod
    def empty(self, shape):
        """An uninitialised array of `self.dtype`."""

    @abstractmethod
    def zeros(self, shape):
        """A zero-filled array of `self.dtype`."""

    def empty_input_gradient(self, shape, classes: int):
        """An uninitialised (rows, n) array for the input gradient that linear_backward (`classes`
        outputs) writes where the first layer's weight GEMM (G^T X) alone reads it: row-major here;
        a backend whose GEMMs read G^T faster K-major lays it out column-major."""
        return self.empty(shape)

    def empty_output_layer_input(self, shape):
        """An uninitialised (rows, n) array for the output layer's input, the last hidden activation,
        which its GEMM writes and the output layer's kernels alone read (linear_xent, linear_backward
        with the weight step): here plain; a backend may store it narrower."""
        return self.empty(shape)

    def free_bytes(self) -> int | None:
        """Bytes free for this backend's arrays now, None where unknown."""
        return None

    # ---- the step's operations -----------------------------------------------------------

    @abstractmethod
    def gemm(self, a, b, out, *, alpha=1.0, beta=0.0, trans_a=False, trans_b=False, c=None,
             epilogue=None, bias=None, aux=None, precision=None):
        """out = epi(alpha * op(a) @ op(b) + beta * c); returns `out`.

        op(x) is x.T when trans_x. `c` defaults to `out` (BLAS semantics: beta=1 accumulates into
        `out`, and c=out with beta != 0 updates in place). Epilogues: None; "bias": + bias row;
        "bias_sigmoid" / "bias_relu": act(. + bias row); "dsigmoid": . * aux * (1 - aux) with
        aux = the saved sigmoid output; "drelu": . * (aux > 0). A K = 0 product is zero.
        `precision`: this product's (fp32, tf32, bf16) instead of the backend's (None), on its float32
        operands as they are.
        """

    @abstractmethod
    def softmax_xent(self, z, labels, grad_out, scale, loss_acc) -> None:
        """One fused op on logits z (n, C) and integer labels (n,):
        P = softmax(z) row-wise; loss_acc[0] += sum_i -log P[i, labels[i]]; grad_out = (P - onehot) * scale."""

    def linear_xent(self, a, w, bias, labels, logits, grad_out, scale, loss_acc, grad_in=None, activation=None):
        """The output layer and its loss: logits = a w^T + bias, then softmax_xent into grad_out and
        loss_acc; with `grad_in`, the input's gradient grad_in = (grad_out w) * act'(a), `a` being the
        saved output of `activation`. Here three operations; a GPU backend fuses them into one kernel."""
        self.gemm(a, w, logits, trans_b=True, epilogue="bias", bias=bias)
        self.softmax_xent(logits, labels, grad_out, scale, loss_acc)
        if grad_in is not None:
            self.gemm(grad_out, w, grad_in, epilogue=f"d{activation}", aux=a)

    def linear_backward(self, g, w, a, grad_in, activation, dw, db, alpha=1.0, beta=0.0, accumulate_db=False):
        """The backward pass of a layer with few outputs from its output gradient g: grad_in =
        (g w) * act'(a), `a` being the saved output of `activation`; dw = alpha g^T a + beta dw (dw
        may be w: the SGD step in place, w read first); db = alpha times grad_in's column sums (the
        bias gradient of the layer below), added to db with `accumulate_db`. Here three operations; a
        GPU backend fuses them into one kernel."""
        self.gemm(g, w, grad_in, epilogue=f"d{activation}", aux=a)
        self.gemm(g, a, dw, trans_a=True, alpha=alpha, beta=beta)
        self.column_sums(grad_in, db, alpha, accumulate_db)

    def fuses_dense_stack(self, widths: tuple[int, ...]) -> bool:
        """Whether `dense_stack` on these widths (inputs, hidden layers', classes) is one kernel here,
        worth calling in place of the layers' own operations."""
        return False

    def dense_stack(self, x, weights, biases, labels, outs, grads, scale, loss_acc, activation, grad_in=None,
                    where=None):
        """Dense layers and their loss, forward and back: outs[i] = act(A_i weights[i]^T +
        biases[i]) (A_0 = x; the last, the logits, without act, its loss into loss_acc and gradient
        into grads[-1] as linear_xent), then each grads[i-1] = (grads[i] weights[i]) * act'(outs[i-1])
        and, with `grad_in`, grad_in = grads[0] weights[0]; with `where` too (x a 2 x 2 max-pool's
        output, an activation's, and its maxima), that gradient times act'(x) below the pool, into
        grad_in (n, C, H, W). Not the weight gradients. Here the layers' own operations; a GPU
        backend fuses them into one kernel (autogemm.dense_stack)."""
        a = x
        for w, b, out in zip(weights[:-1], biases[:-1], outs[:-1]):
            self.gemm(a, w, out, trans_b=True, epilogue=f"bias_{activation}", bias=b)
            a = out
        self.linear_xent(a, weights[-1], biases[-1], labels, outs[-1], grads[-1], scale, loss_acc, grads[-2],
                         activation)
        for i in reversed(range(1, len(weights) - 1)):
            self.gemm(grads[i], weights[i], grads[i - 1], epilogue=f"d{activation}", aux=outs[i - 1])
        if where is not None:
            pooled_grad = self.empty(x.shape)                       # (n, C * (H // 2) * (W // 2))
            self.gemm(grads[0], weights[0], pooled_grad)
            self.maxpool2x2_backward(pooled_grad.reshape(where.shape), where, grad_in, x.reshape(where.shape),
                                     activation)
        elif grad_in is not None:
            self.gemm(grads[0], weights[0], grad_in)

    @abstractmethod
    def column_sums(self, g, out, scale=1.0, accumulate=False):
        """out[j] = scale * sum_i g[i, j] (the bias gradients), or out[j] += that with `accumulate`
        (scale = -lr: the bias SGD step in one pass); returns `out`."""

    @abstractmethod
    def sgd_update(self, w, grad, lr, reg):
        """w -= lr * (grad + reg * w), in place; returns `w`."""

    # ---- the CNN's operations (images NCHW, filters (F, C, K, K); nn/backends/numpy_cnn.py) ----

    def conv2d(self, x, w, b, out, activation=None, where=None, unpooled=None):
        """out (N, F, H-K+1, W-K+1) = act(x (N, C, H, W) correlated with w, plus b): a valid
        convolution, stride 1; activation None, "relu" or "sigmoid". With `where`, the 2 x 2
        max-pool too: out and where as maxpool2x2 of that output gives them (`unpooled`: a buffer
        of the convolution's output, for a backend that forms it)."""
        raise NNError(f"the {self.name} backend has no convolution kernels; use --backend numpy or cupy")

    def conv2d_backward_data(self, g, w, out, aux=None, activation=None, where=None, unpooled=None):
        """out (N, C, H, W) = dL/dx from g = dL/dz (N, F, H', W'), times act'(aux) when aux, the
        saved output of the layer below's activation, is given. With `where` (N, C, H, W), x is the
        2 x 2 max-pool below and its backward pass done too: out (N, C, 2H, 2W) as
        maxpool2x2_backward of that gradient gives it (`unpooled`: a buffer of that gradient)."""
        raise NNError(f"the {self.name} backend has no convolution kernels; use --backend numpy or cupy")

    def conv2d_backward_weights(self, g, x, dw, db):
        """dw (F, C, K, K) and db (F,) from g = dL/dz (N, F, H', W') and the input x (N, C, H, W)."""
        raise NNError(f"the {self.name} backend has no convolution kernels; use --backend numpy or cupy")

    def maxpool2x2(self, x, out, where):
        """out (N, C, H//2, W//2): each 2 x 2 window's maximum; where (same shape, int8): its position."""
        raise NNError(f"the {self.name} backend has no pooling kernels; use --backend numpy or cupy")

    def maxpool2x2_backward(self, g, where, out, y=None, activation=None):
        """out (N, C, H, W) = dL/dx from g = dL/dy: each window's gradient at its maximum, times
        act'(y) when the pooled outputs y are given (the pooled layer's activation derivative at each
        maximum, which its value there decides)."""
        raise NNError(f"the {self.name} backend has no pooling kernels; use --backend numpy or cupy")

    def adam_update(self, w, g, m, v, steps, lr, beta1, beta2, eps):
        """One Adam step in place on w with its moments m, v (nn/backends/numpy_cnn.adam_update);
        steps, a (1,) int32 backend array of the steps done, is advanced by one."""
        raise NNError(f"the {self.name} backend has no Adam kernel; use --backend numpy or cupy")

    def synchronize(self) -> None:
        """Wait until queued work has finished (a no-op on a synchronous backend)."""

    # ---- concurrency inside a step ----------------------------------------------------------

    @contextlib.contextmanager
    def side_branch(self, lane: int = 0):
        """Operations enqueued inside start after everything enqueued before, and may run alongside
        what is enqueued after, until `join_branch`, and alongside other lanes' (a stream a lane on a
        GPU, branches of the captured graph; plain program order here). A lane keeps its own order."""
        yield

    def join_branch(self) -> None:
        """Operations enqueued from now on wait for every side branch's."""

    # ---- timing (resolved at epoch boundaries, so asynchronous backends need no sync per step) ----

    @abstractmethod
    def mark(self):
        """A point in the backend's stream of work (a host clock, or a recorded CUDA event)."""

    @abstractmethod
    def elapsed_ms(self, start, end) -> float:
        """Milliseconds between two marks; may wait for `end` to complete."""
