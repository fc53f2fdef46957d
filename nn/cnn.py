"""A CNN of nn.layers' layers and one training step on it, written against the Backend interface alone.

Layer l maps A_{l-1} to A_l (A_{-1} = X, the images viewed as (n, C, H, W)): a convolution and the
activation, a 2 x 2 max-pool, or a dense layer and the activation; the last dense layer gives the
logits Z, and softmax + cross-entropy the loss. Only the activations A_l are kept: act'(Z) is a
function of A, and a pool's backward pass needs only where each window's maximum was.
"""
import math

import numpy as np

from nn.backends import ACTIVATIONS, Backend
from nn.backends.numpy_cnn import ADAM
from nn.layers import Layer

OPTIMIZERS = ("adam", "sgd")


def init_cnn_params(layers: list[Layer], seed: int = 0):
    """Host float64 (W_l, b_l) per conv or dense layer (He: W = randn * sqrt(2 / fan_in), b = 0),
    from one seeded Generator, in layer order."""
    rng = np.random.default_rng(seed)
    params = []
    for layer in layers:
        c, h, w = layer.shape_in
        if layer.kind == "conv":
            shape = (layer.width, c, layer.kernel, layer.kernel)     # W_l: (F, C, K, K)
        elif layer.kind == "dense":
            shape = (layer.width, c * h * w)                         # W_l: (N, features)
        else:
            continue
        params.append((rng.standard_normal(shape) * math.sqrt(2.0 / math.prod(shape[1:])), np.zeros(layer.width)))
    return params


class CNN:
    """The weights and biases of `layers` on a backend; W[l], b[l] are None for a pooling layer."""

    def __init__(self, backend: Backend, layers: list[Layer], activation: str, params):
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}")
        self.backend, self.layers, self.activation = backend, list(layers), activation
        arrays = iter(params)
        self.W, self.b = [], []
        for layer in self.layers:
            w, b = next(arrays) if layer.kind != "pool" else (None, None)
            self.W.append(None if w is None else backend.asarray(w))   # conv (F, C, K, K), dense (N, features)
            self.b.append(None if b is None else backend.asarray(b))   # (F,) or (N,)

    def activated(self, l: int) -> bool:
        """Whether A_l is an activation's output (conv and hidden dense layers; not pools, not the logits)."""
        return self.layers[l].kind != "pool" and l < len(self.layers) - 1


class CNNStep:
    """One step of Adam or SGD on at most `max_rows` rows of a `batch`-row batch; buffers allocated once."""

    def __init__(self, model: CNN, max_rows: int, batch: int, optimizer: str = "adam", lr: float = ADAM["lr"],
                 reg: float = 0.0):
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {optimizer!r}")
        bk = model.backend
        self.model, self.batch, self.optimizer, self.lr, self.reg = model, batch, optimizer, lr, reg
        shapes = [(max_rows, *layer.shape_out) if layer.kind != "dense" else (max_rows, layer.width)
                  for layer in model.layers]
        self.acts = [bk.empty(s) for s in shapes]            # A_l: (rows, C, H, W) or (rows, N) dtype
        self.deltas = [bk.empty(s) for s in shapes]          # G_l = dLoss/d(layer l's output before act)
        self.where = [bk.xp.empty(s, np.int8) if layer.kind == "pool" else None   # pool: (rows, C, H, W) int8
                      for s, layer in zip(shapes, model.layers)]
        self.dW = [None if w is None else bk.zeros(w.shape) for w in model.W]
        self.db = [None if b is None else bk.zeros(b.shape) for b in model.b]
        moments = [(bk.zeros(p.shape), bk.zeros(p.shape)) for p in (*model.W, *model.b) if p is not None]
        self.moments = moments if optimizer == "adam" else []  # Adam's (m, v) per parameter, W's then b's
        self.steps = 0
        self.loss_sum = bk.zeros((1,))
        self._x = None

    def reset_loss(self):
        self.loss_sum[...] = 0

    def _input(self, l: int, n: int):
        """A_{l-1}: the images (n, C, H, W) for the first layer."""
        return self._x if l == 0 else self.acts[l - 1][:n]

    def forward(self, x, labels):
        """x (n, features) images as rows: every A_l, the logits, the loss into loss_sum and
        G_last = (softmax(Z) - Y) / batch."""
        m, bk = self.model, self.model.backend
        n = x.shape[0]
        self._x = x.reshape(n, *m.layers[0].shape_in)
        last = len(m.layers) - 1
        for l, layer in enumerate(m.layers):
            a, out = self._input(l, n), self.acts[l][:n]
            if layer.kind == "conv":
                bk.conv2d(a, m.W[l], m.b[l], out, m.activation)
            elif layer.kind == "pool":
                bk.maxpool2x2(a, out, self.where[l][:n])
            else:
                epilogue = "bias" if l == last else f"bias_{m.activation}"
                bk.gemm(a.reshape(n, -1), m.W[l], out, trans_b=True, epilogue=epilogue, bias=m.b[l])
        bk.softmax_xent(self.acts[last][:n], labels, self.deltas[last][:n], 1.0 / self.batch, self.loss_sum)

    def backward(self):
        """dW_l, db_l of every conv and dense layer, and each G_{l-1} = the gradient carried down,
        times act'(A_{l-1}) where layer l-1 is activated."""
        m, bk = self.model, self.model.backend
        n = self._x.shape[0]
        for l in reversed(range(len(m.layers))):
            layer, g, a = m.layers[l], self.deltas[l][:n], self._input(l, n)
            below = self.deltas[l - 1][:n] if l > 0 else None
            aux = a if l > 0 and m.activated(l - 1) else None
            if layer.kind == "dense":
                bk.gemm(g, a.reshape(n, -1), self.dW[l], trans_a=True)
                bk.column_sums(g, self.db[l])
                if below is not None:
                    bk.gemm(g, m.W[l], below.reshape(n, -1), epilogue=f"d{m.activation}" if aux is not None else None,
                            aux=None if aux is None else aux.reshape(n, -1))
            elif layer.kind == "conv":
                bk.conv2d_backward_weights(g, a, self.dW[l], self.db[l])
                if below is not None:
                    bk.conv2d_backward_data(g, m.W[l], below, aux, m.activation)
            elif below is not None:
                bk.maxpool2x2_backward(g, self.where[l][:n], below, aux, m.activation)

    def update(self):
        """Adam (its defaults beyond lr) or SGD with L2 on every weight and bias."""
        m, bk = self.model, self.model.backend
        params = [(p, g) for p, g in zip((*m.W, *m.b), (*self.dW, *self.db)) if p is not None]
        self.steps += 1
        if self.optimizer == "adam":
            for (p, g), (mom, var) in zip(params, self.moments):
                bk.adam_update(p, g, mom, var, self.steps, self.lr, ADAM["beta1"], ADAM["beta2"], ADAM["eps"])
        else:
            for i, (p, g) in enumerate(params):
                bk.sgd_update(p, g, self.lr, self.reg if i < sum(w is not None for w in m.W) else 0.0)

    def train_batch(self, x, labels):
        self.forward(x, labels)
        self.backward()
        self.update()
