"""autogemm.torch's custom ops given CPU kernels of torch's own math, and its checks taking CPU
tensors, so that everything around the kernels (the autograd formulas, the fake implementations,
torch.compile's tracing, convert) runs on a machine without a GPU. Import it in a process of its
own: the kernels it registers stay registered."""
import inspect

import torch
import torch.nn.functional as F

from autogemm.torch import functional, layers, ops, tensors

_source = inspect.getsource(tensors.check).replace('"cuda"', '"cpu"')
_namespace = dict(tensors.__dict__)
exec(_source, _namespace)
functional.check = _namespace["check"]
layers._on_kernels = lambda x, weight: weight.dtype in (torch.float32, torch.float64)


def _act(z, activation):
    return torch.relu(z) if activation == "relu" else torch.sigmoid(z) if activation == "sigmoid" else z


def _dact(dy, y, activation):
    return dy * (y > 0) if activation == "relu" else dy * y * (1 - y) if activation == "sigmoid" else dy


def _empty(x, w, input_grad, weight_grad, dx, dw, db):
    return (dx if input_grad else x.new_empty((0,))).contiguous(), \
        (dw if weight_grad else w.new_empty((0,))).contiguous(), db if weight_grad else w.new_empty(0)


@ops.gemm.register_kernel("cpu")
def _(a, b, trans_a, trans_b, epilogue, bias, aux, precision):
    return ((a.t() if trans_a else a) @ (b.t() if trans_b else b)).contiguous()


@ops.linear.register_kernel("cpu")
def _(x, w, b, activation, precision):
    return _act(x @ w.t() + (b if b is not None else 0), activation).contiguous()


@ops.linear_backward.register_kernel("cpu")
def _(dy, x, w, y, activation, input_grad, weight_grad, precision):
    dz = _dact(dy, y, activation)
    return _empty(x, w, input_grad, weight_grad, dz @ w, dz.t() @ x, dz.sum(0))


@ops.linear_chain.register_kernel("cpu")
def _(x, ws, bs, has_bias, activations, precision):
    ys = []
    for w, b, activation in zip(ws, ops._biases(bs, has_bias), activations.split(",")):
        ys.append(_act((ys[-1] if ys else x) @ w.t() + (b if b is not None else 0), activation).contiguous())
    return ys


@ops.linear_chain_backward.register_kernel("cpu")
def _(dy, x, ws, ys, activations, input_grad, trained, precision):
    activations = activations.split(",")
    dz, dws, dbs = _dact(dy, ys[-1], activations[-1]), [], []
    for i in reversed(range(len(ws))):
        a = ys[i - 1] if i else x
        dws.insert(0, (dz.t() @ a).contiguous())
        dbs.insert(0, dz.sum(0))
        dx = dz @ ws[i]
        dz = _dact(dx, a, activations[i - 1]) if i else dx
    return (dz if input_grad else x.new_empty((0,))).contiguous(), dws, dbs


@ops.conv2d.register_kernel("cpu")
def _(x, w, b, activation, pool, precision):
    z = _act(F.conv2d(x, w, b), activation)
    if not pool:
        return z.contiguous(), x.new_empty((0,), dtype=torch.int8)
    y, at = F.max_pool2d(z, 2, return_indices=True)
    return y.contiguous(), (at // z.shape[3] % 2 * 2 + at % 2).to(torch.int8)


@ops.conv2d_backward.register_kernel("cpu")
def _(dy, x, w, y, where, activation, pool, input_grad, weight_grad, precision):
    oh, ow = x.shape[2] - w.shape[2] + 1, x.shape[3] - w.shape[3] + 1
    dz = _dact(dy, y, activation)
    if pool:       # each gradient to its window's maximum
        n, f, ph, pw = dz.shape
        picks = F.one_hot(where.long(), 4).to(dz.dtype) * dz[..., None]
        full = picks.reshape(n, f, ph, pw, 2, 2).permute(0, 1, 2, 4, 3, 5).reshape(n, f, 2 * ph, 2 * pw)
        dz = F.pad(full, (0, ow - 2 * pw, 0, oh - 2 * ph))
    dx = torch.nn.grad.conv2d_input(x.shape, w, dz)
    return _empty(x, w, input_grad, weight_grad, dx, torch.nn.grad.conv2d_weight(x, w.shape, dz), dz.sum((0, 2, 3)))


@ops.linear_xent.register_kernel("cpu")
def _(x, w, b, labels, precision):
    logits = x @ w.t() + (b if b is not None else 0)
    dlogits = (torch.softmax(logits, 1) - F.one_hot(labels, w.shape[0]).to(x.dtype)) / x.shape[0]
    return logits.contiguous(), dlogits.contiguous(), F.cross_entropy(logits, labels).reshape(1)
