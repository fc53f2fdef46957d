"""The reference backend: NumPy on the host, in place (`out=`) wherever NumPy allows."""
import time

import numpy as np

from nn.backends import numpy_cnn
from nn.backends.base import EPILOGUES, Backend, host_free_bytes


class NumpyBackend(Backend):
    name = "numpy"
    xp = np

    def __init__(self, dtype):
        super().__init__(dtype)
        self._scratch = {}  # (shape, dtype) -> reused work array, so the hot path allocates nothing

    def _work(self, shape, dtype=None):
        key = (tuple(shape), np.dtype(dtype or self.dtype))
        if key not in self._scratch:
            self._scratch[key] = np.empty(key[0], key[1])
        return self._scratch[key]

    # ---- storage --------------------------------------------------------------------------

    def asarray(self, a):
        a = np.asarray(a)
        dtype = self.dtype if np.issubdtype(a.dtype, np.floating) else a.dtype
        return np.array(a, dtype=dtype, order="C", copy=True)

    def to_numpy(self, a):
        return np.asarray(a)

    def empty(self, shape):
        return np.empty(shape, self.dtype)

    def zeros(self, shape):
        return np.zeros(shape, self.dtype)

    def free_bytes(self):
        return host_free_bytes()

    # ---- the step's operations -----------------------------------------------------------

    def gemm(self, a, b, out, *, alpha=1.0, beta=0.0, trans_a=False, trans_b=False, c=None,
             epilogue=None, bias=None, aux=None, precision=None):
        if epilogue not in EPILOGUES:
            raise ValueError(f"unknown epilogue {epilogue!r}")
        op_a = a.T if trans_a else a
        op_b = b.T if trans_b else b
        c = out if c is None else c
        if beta == 0:
            np.matmul(op_a, op_b, out=out)
            if alpha != 1:
                out *= alpha
        else:
            prod = self._work(out.shape)  # op(a) @ op(b): (M, N); `out` may be `c`, so not written yet
            np.matmul(op_a, op_b, out=prod)
            if alpha != 1:
                prod *= alpha
            if c is not out:
                np.copyto(out, c)
            if beta != 1:
                out *= beta
            out += prod
        self._epilogue(out, epilogue, bias, aux)
        return out

    def _epilogue(self, out, epilogue, bias, aux):
        if epilogue is None:
            return
        if epilogue.startswith("bias"):
            out += bias
            self._activate(out, epilogue[5:] or None)
        elif epilogue == "dsigmoid":
            slope = self._work(out.shape)  # aux * (1 - aux): (M, N)
            np.subtract(1, aux, out=slope)
            slope *= aux
            out *= slope
        elif epilogue == "drelu":
            mask = self._work(out.shape, np.bool_)  # aux > 0: (M, N) bool
            np.greater(aux, 0, out=mask)
            out *= mask

    def softmax_xent(self, z, labels, grad_out, scale, loss_acc):
        n = z.shape[0]
        if n == 0:
            return
        rows = np.arange(n)
        zmax = z.max(axis=1, keepdims=True)  # (n, 1)
        z_true = z[rows, labels] - zmax[:, 0]  # (n,) shifted logit of the true class
        np.subtract(z, zmax, out=grad_out)
        np.exp(grad_out, out=grad_out)
        total = grad_out.sum(axis=1, keepdims=True)  # (n, 1) softmax denominators
        loss_acc[0] += np.log(total).sum() - z_true.sum()
        grad_out /= total
        grad_out[rows, labels] -= 1
        grad_out *= scale

    def column_sums(self, g, out, scale=1.0, accumulate=False):
        sums = self._work(out.shape) if accumulate else out  # (N,) column sums
        np.sum(g, axis=0, out=sums)
        if scale != 1:
            sums *= scale
        if accumulate:
            out += sums
        return out

    def sgd_update(self, w, grad, lr, reg):
        if reg:
            w *= 1 - lr * reg
        step = self._work(w.shape)  # lr * grad
        np.multiply(grad, lr, out=step)
        w -= step
        return w

    # ---- the CNN's operations: the plain reference of numpy_cnn ------------------------------

    @staticmethod
    def _activate(out, activation):
        """out = act(out) in place, activation None, "sigmoid" or "relu"."""
        if activation == "sigmoid":
            with np.errstate(over="ignore"):  # exp(-z) = inf for very negative z gives sigmoid 0
                np.negative(out, out=out)
                np.exp(out, out=out)
            out += 1
            np.reciprocal(out, out=out)
        elif activation == "relu":
            np.maximum(out, 0, out=out)

    def _activation_grad(self, out, aux, activation):
        if aux is not None:
            self._epilogue(out, f"d{activation}", None, aux)

    def conv2d(self, x, w, b, out, activation=None, where=None, unpooled=None):
        z = numpy_cnn.conv2d(x, w, b)
        self._activate(z, activation)
        if where is None:
            out[...] = z
        else:
            out[...], where[...] = numpy_cnn.maxpool2x2(z)
        return out

    def conv2d_backward_data(self, g, w, out, aux=None, activation=None, where=None, unpooled=None):
        dx = numpy_cnn.conv2d_backward_data(g, w)
        self._activation_grad(dx, aux, activation)
        out[...] = dx if where is None else numpy_cnn.maxpool2x2_backward(dx, where, out.shape)
        return out

    def conv2d_backward_weights(self, g, x, dw, db):
        dw[...], db[...] = numpy_cnn.conv2d_backward_weights(g, x)

    def maxpool2x2(self, x, out, where):
        out[...], where[...] = numpy_cnn.maxpool2x2(x)
        return out

    def maxpool2x2_backward(self, g, where, out, y=None, activation=None):
        if y is not None:
            g = g.copy()
            self._activation_grad(g, y, activation)
        out[...] = numpy_cnn.maxpool2x2_backward(g, where, out.shape)
        return out

    def adam_update(self, w, g, m, v, steps, lr, beta1, beta2, eps):
        steps += 1
        return numpy_cnn.adam_update(w, g, m, v, int(steps[0]), lr, beta1, beta2, eps)

    # ---- timing ---------------------------------------------------------------------------

    def mark(self):
        return time.perf_counter()

    def elapsed_ms(self, start, end):
        return (end - start) * 1e3
