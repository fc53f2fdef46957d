"""A CNN of nn.layers' layers and one training step on it, written against the Backend interface alone.

Layer l maps A_{l-1} to A_l (A_{-1} = X, the images viewed as (n, C, H, W)): a convolution and the
activation, a 2 x 2 max-pool, or a dense layer and the activation; the last dense layer gives the
logits Z, and softmax + cross-entropy the loss. Only the activations A_l are kept: act'(Z) is a
function of A, and a pool's backward pass needs only where each window's maximum was.

A 2 x 2 pool beside a convolution goes with it: the forward pass asks the convolution below for the
pooled A and the positions of the maxima, the backward pass asks the convolution above for the
gradient below the pool. autogemm fuses each pair into one kernel where the direct kernels run the
convolution (the narrow layers), saving a launch and a pass over the unpooled maps.
"""
import contextlib
import math

import numpy as np

from nn.allreduce import merge_buckets
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
        shapes = [s for w, b in params for s in (np.shape(w), np.shape(b))]
        # Every parameter in one flat array [W, b, W, b, ...] (one optimizer launch); W[l], b[l] are views.
        self.flat = backend.asarray(np.concatenate([np.ravel(x) for pair in params for x in pair]))
        views = iter(flat_views(self.flat, shapes))
        self.W, self.b = [], []
        for layer in self.layers:
            w, b = (next(views), next(views)) if layer.kind != "pool" else (None, None)
            self.W.append(w)     # conv (F, C, K, K), dense (N, features)
            self.b.append(b)     # (F,) or (N,)

    def activated(self, l: int) -> bool:
        """Whether A_l is an activation's output (conv and hidden dense layers; not pools, not the logits)."""
        return self.layers[l].kind != "pool" and l < len(self.layers) - 1

    def pool_fused_forward(self, l: int) -> bool:
        """Whether layer l is a 2 x 2 pool that the convolution below it computes."""
        layers = self.layers
        return 0 < l < len(layers) - 1 and layers[l].kind == "pool" and layers[l - 1].kind == "conv"

    def pool_fused_backward(self, l: int) -> bool:
        """Whether layer l is a 2 x 2 pool whose backward pass the convolution above it does, in its
        backward data pass (the pool's input of even sides, a gradient to carry below it)."""
        layers = self.layers
        return (0 < l < len(layers) - 1 and layers[l].kind == "pool" and layers[l + 1].kind == "conv"
                and layers[l].shape_in[1] % 2 == 0 and layers[l].shape_in[2] % 2 == 0)

    def buffers(self, rows: int):
        """(acts, wheres) for `rows` rows: A_l (rows, C, H, W) or (rows, N), and each pool's
        positions of its maxima (rows, C, H, W) int8 (None for other layers)."""
        bk = self.backend
        shapes = [(rows, *layer.shape_out) if layer.kind != "dense" else (rows, layer.width) for layer in self.layers]
        acts = [bk.empty(s) for s in shapes]
        wheres = [bk.xp.empty(s, np.int8) if layer.kind == "pool" else None for s, layer in zip(shapes, self.layers)]
        return acts, wheres

    def hidden(self, x, acts, wheres, upto: int | None = None):
        """Fill A_l of every layer below `upto` (default: all but the last) from x (n, C, H, W);
        returns layer upto's input (x itself for the first)."""
        bk = self.backend
        n = x.shape[0]
        a = x
        for l, layer in enumerate(self.layers[:len(self.layers) - 1 if upto is None else upto]):
            out = acts[l][:n]
            if self.pool_fused_forward(l):
                pass                     # the convolution below wrote it
            elif layer.kind == "conv" and self.pool_fused_forward(l + 1):   # out: where the pool is not fused
                bk.conv2d(a, self.W[l], self.b[l], acts[l + 1][:n], self.activation, where=wheres[l + 1][:n],
                          unpooled=out)
            elif layer.kind == "conv":
                bk.conv2d(a, self.W[l], self.b[l], out, self.activation)
            elif layer.kind == "pool":
                bk.maxpool2x2(a, out, wheres[l][:n])
            else:
                bk.gemm(as_rows(a), self.W[l], out, trans_b=True, epilogue=f"bias_{self.activation}",
                        bias=self.b[l])
            a = out
        return a

    def forward(self, x, acts, wheres):
        """Fill every A_l from x (n, C, H, W); returns the logits (n, classes), the last A."""
        n = x.shape[0]
        a = as_rows(self.hidden(x, acts, wheres))
        return self.backend.gemm(a, self.W[-1], acts[-1][:n], trans_b=True, epilogue="bias", bias=self.b[-1])

    def dense_stack_start(self) -> int | None:
        """The first of the dense layers that end the network, where they are at least two (a hidden
        one and the output layer) and their input's gradient needs no activation derivative (the
        images, or a pool's output): what Backend.dense_stack can run. None otherwise."""
        last = len(self.layers) - 1
        first = last
        while first > 0 and self.layers[first - 1].kind == "dense":
            first -= 1
        if first == last or (first > 0 and self.activated(first - 1)):
            return None
        return first

    def stack_widths(self, first: int) -> tuple[int, ...]:
        """The widths of the dense stack from layer `first`: its inputs, then each layer's."""
        return (math.prod(self.layers[first].shape_in), *(layer.width for layer in self.layers[first:]))

    def images(self, x):
        """Rows x (n, features) viewed as images (n, C, H, W)."""
        return x.reshape(x.shape[0], *self.layers[0].shape_in)

    def count_correct(self, x, labels, chunk=1000) -> int:
        """How many rows of x (n, features) the model classifies as `labels` (host (n,) ints); syncs the host."""
        bk, n = self.backend, x.shape[0]
        rows = max(1, min(chunk, n))   # a rank's share may be no rows
        acts, wheres = self.buffers(rows)
        correct = 0
        for start in range(0, n, rows):
            m = min(rows, n - start)
            z = self.forward(self.images(x[start:start + m]), acts, wheres)
            guess = bk.to_numpy(bk.xp.argmax(z, axis=1))  # (m,) int
            correct += int(np.count_nonzero(guess == labels[start:start + m]))
        return correct

    def params(self):
        """The conv and dense layers' (W, b), in order."""
        return [(w, b) for w, b in zip(self.W, self.b) if w is not None]

    def params_numpy(self):
        """Host copies [(W_l, b_l), ...] of the conv and dense layers."""
        bk = self.backend
        return [(bk.to_numpy(w).copy(), bk.to_numpy(b).copy()) for w, b in self.params()]

    def finite(self) -> bool:
        """Whether every weight and bias is finite (syncs the host)."""
        xp = self.backend.xp
        return all(bool(xp.isfinite(x).all()) for pair in self.params() for x in pair)

    def reg_term(self, reg) -> float:
        """0.5 * reg * sum_l ||W_l||^2 (syncs the host)."""
        xp = self.backend.xp
        return 0.5 * reg * sum(float(xp.vdot(w, w)) for w, _ in self.params())


def as_rows(x):
    """x (n, ...) as (n, features): a 2-D view, also of n = 0 rows (a rank's empty share of a batch),
    which reshape(n, -1) cannot infer."""
    return x.reshape(x.shape[0], math.prod(x.shape[1:]))


def flat_views(flat, shapes) -> list:
    """Consecutive views of the flat array `flat`, one per shape."""
    views, start = [], 0
    for shape in shapes:
        views.append(flat[start:start + math.prod(shape)].reshape(shape))
        start += math.prod(shape)
    return views


def bytes_needed(layers: list[Layer], rows: int, itemsize: int, optimizer: str) -> int:
    """Backend memory of a CNN of `layers` and its step on `rows` rows: the parameters, their flat
    gradient and Adam's two moments, and per row every layer's activations and deltas."""
    params = sum(layer.params for layer in layers)
    per_row = sum(math.prod(layer.shape_out) for layer in layers)
    return itemsize * (params * (4 if optimizer == "adam" else 2) + 2 * rows * per_row)


class CNNStep:
    """One step of Adam or SGD on at most `max_rows` rows of a `batch`-row batch; buffers allocated once."""

    def __init__(self, model: CNN, max_rows: int, batch: int, optimizer: str = "adam", lr: float = ADAM["lr"],
                 reg: float = 0.0):
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {optimizer!r}")
        bk = model.backend
        self.model, self.batch, self.optimizer, self.lr, self.reg = model, batch, optimizer, lr, reg
        self.acts, self.where = model.buffers(max_rows)     # A_l and each pool's positions of its maxima
        self.deltas = [bk.empty(a.shape) for a in self.acts]   # G_l = dLoss/d(layer l's output before act)
        shapes = [p.shape for pair in model.params() for p in pair]   # W_l, b_l, W_{l+1}, ... as in model.flat
        self.grads = bk.zeros(model.flat.shape)   # flat like the parameters: one optimizer launch, one all-reduce
                                                  # or one a layer (layer_grads)
        views = flat_views(self.grads, shapes)
        grads = iter(zip(views[0::2], views[1::2]))
        self.dW, self.db = map(list, zip(*[next(grads) if w is not None else (None, None) for w in model.W]))
        # each conv or dense layer's [dW_l, db_l], one contiguous slice of the flat buffer (None for a
        # pool): the buckets of a bucketed all-reduce
        sizes = [w.size + b.size if w is not None else 0 for w, b in zip(self.dW, self.db)]
        ends = np.cumsum([0] + sizes)
        self.layer_grads = [self.grads[lo:hi] if size else None for lo, hi, size in zip(ends[:-1], ends[1:], sizes)]
        self.buckets, self.bucket_ready = merge_buckets(self.grads, [(l, ends[l], ends[l + 1])
                                                                     for l in reversed(range(len(sizes))) if sizes[l]])
        # Adam's moments (m, v), flat like the parameters, and its steps done (on the backend, so
        # a captured graph replays the right bias correction)
        self.moments = (bk.zeros(model.flat.shape), bk.zeros(model.flat.shape)) if optimizer == "adam" else None
        self.steps = bk.asarray(np.zeros(1, np.int32))
        # SGD's (parameter, its gradient, the L2 coefficient: weights only), in that order
        params = [p for pair in model.params() for p in pair]
        self._sgd = [(p, g, reg if i % 2 == 0 else 0.0) for i, (p, g) in enumerate(zip(params, views))]
        self._shapes = shapes
        self.loss_sum = bk.zeros((1,))
        # the output layer's operation also gives G_{last-1} when act' applies to it
        last = len(model.layers) - 1
        self._output_carries_down = last > 0 and model.activated(last - 1)
        # the dense layers at the top as one operation (forward, loss, gradients carried down), where
        # the backend fuses them; their weight gradients go on side branches of their own
        first = model.dense_stack_start()
        self.stack = first if first is not None and bk.fuses_dense_stack(model.stack_widths(first)) else None
        # ... and the gradient below the pool under it (with act' of the convolution under that), so
        # the pool's backward pass is the stack's
        self.stack_pools = (self.stack is not None and self.stack > 1 and model.layers[self.stack - 1].kind == "pool"
                            and model.activated(self.stack - 2))
        self._x = None

    def reset_loss(self):
        self.loss_sum[...] = 0

    def _input(self, l: int, n: int):
        """A_{l-1}: the images (n, C, H, W) for the first layer."""
        return self._x if l == 0 else self.acts[l - 1][:n]

    def forward(self, x, labels):
        """x (n, features) images as rows: every A_l, the logits, the loss into loss_sum and
        G_last = (softmax(Z) - Y) / batch; also G_{last-1} when the last layer's input is activated
        (one fused output-layer operation, Backend.linear_xent). With the dense stack
        (Backend.dense_stack), every G_l of its layers too, and the gradient below it."""
        m = self.model
        n, last = x.shape[0], len(m.layers) - 1
        self._x = m.images(x)
        if self.stack is not None:
            first = self.stack
            a = as_rows(m.hidden(self._x, self.acts, self.where, upto=first))
            below, where = (as_rows(self.deltas[first - 1][:n]) if first > 0 else None), None
            if self.stack_pools:
                below, where = self.deltas[first - 2][:n], self.where[first - 1][:n]
            m.backend.dense_stack(a, m.W[first:], m.b[first:], labels, [y[:n] for y in self.acts[first:]],
                                  [g[:n] for g in self.deltas[first:]], 1.0 / self.batch, self.loss_sum,
                                  m.activation, below, where)
            return
        a = as_rows(m.hidden(self._x, self.acts, self.where))
        below = as_rows(self.deltas[last - 1][:n]) if self._output_carries_down else None
        m.backend.linear_xent(a, m.W[last], m.b[last], labels, self.acts[last][:n], self.deltas[last][:n],
                              1.0 / self.batch, self.loss_sum, below, m.activation if below is not None else None)

    def backward(self, layer_done=lambda l: None, join=True, lanes=True):
        """dW_l, db_l of every conv and dense layer, then layer_done(l), and each G_{l-1} = the
        gradient carried down, times act'(A_{l-1}) where layer l-1 is activated.

        The gradient carried down is the critical path; each layer's weight gradient goes on a side
        branch beside it (it only reads G_l and A_{l-1}), joined at the end (or by the caller,
        without `join`), with whatever layer_done put on the side branch. The dense stack's
        gradients carried down are the forward pass's; its layers' weight gradients go on a lane
        each (with `lanes`; else on the side branch's one, in order, as layer_done may need)."""
        m, bk = self.model, self.model.backend
        n, last = self._x.shape[0], len(m.layers) - 1
        for l in reversed(range(len(m.layers))):
            if self.stack is not None and l >= self.stack:
                g, a = self.deltas[l][:n], as_rows(self._input(l, n))
                with bk.side_branch(1 + last - l if lanes else 0):   # in float32, as the stack trains
                    bk.gemm(g, a, self.dW[l], trans_a=True, precision="fp32")
                    bk.column_sums(g, self.db[l])
                layer_done(l)
                continue
            if m.pool_fused_backward(l) or (self.stack_pools and l == self.stack - 1):
                continue                 # the convolution above did its backward pass
            layer, g, a = m.layers[l], self.deltas[l][:n], self._input(l, n)
            below = self.deltas[l - 1][:n] if l > 0 and not (l == last and self._output_carries_down) else None
            aux = a if l > 0 and m.activated(l - 1) else None
            where = unpooled = None
            if l > 0 and m.pool_fused_backward(l - 1):      # the gradient below the pool l-1, at its maxima
                below, where, unpooled = self.deltas[l - 2][:n], self.where[l - 1][:n], below
                aux = a if m.activated(l - 2) else None     # the pooled values decide act' at the maxima
            act = m.activation if aux is not None else None     # the derivative to apply, with aux
            if layer.kind != "pool":
                # beside the gradient carried down; with none to carry, a branch would only add its fork and join
                with bk.side_branch() if below is not None else contextlib.nullcontext():
                    if layer.kind == "dense":
                        bk.gemm(g, as_rows(a), self.dW[l], trans_a=True)
                        bk.column_sums(g, self.db[l])
                    else:
                        bk.conv2d_backward_weights(g, a, self.dW[l], self.db[l])
                layer_done(l)
            if below is None:
                continue
            if layer.kind == "dense":
                bk.gemm(g, m.W[l], as_rows(below), epilogue=f"d{act}" if act else None,
                        aux=None if aux is None else as_rows(aux))
            elif layer.kind == "conv":
                bk.conv2d_backward_data(g, m.W[l], below, aux, act, where=where, unpooled=unpooled)
            else:   # act' of the pooled layer at each maximum: a function of the pooled value
                pooled = self.acts[l][:n] if aux is not None else None
                bk.maxpool2x2_backward(g, self.where[l][:n], below, pooled, act)
        if join:
            bk.join_branch()

    def update(self):
        """Adam (its defaults beyond lr) in one launch, or SGD with L2 on the weights, from the
        (all-reduced) gradients."""
        bk = self.model.backend
        if self.optimizer == "adam":
            m, v = self.moments
            bk.adam_update(self.model.flat, self.grads, m, v, self.steps, self.lr, ADAM["beta1"], ADAM["beta2"],
                           ADAM["eps"])
        else:
            for p, g, reg in self._sgd:
                bk.sgd_update(p, g, self.lr, reg)

    def state_numpy(self) -> dict:
        """The optimizer's state as host arrays, for a checkpoint: Adam's steps and each parameter's moments."""
        bk = self.model.backend
        steps = int(bk.to_numpy(self.steps)[0])
        if self.moments is None:
            return {"steps": steps, "moments": []}
        m, v = (flat_views(bk.to_numpy(x).copy(), self._shapes) for x in self.moments)
        return {"steps": steps, "moments": list(zip(m, v))}

    def load_state(self, state: dict):
        """Continue from state_numpy()'s dict (the shapes are the caller's to have checked)."""
        bk = self.model.backend
        self.steps[...] = bk.asarray(np.array([state["steps"]], np.int32))
        if self.moments is not None and state["moments"]:
            for flat, i in zip(self.moments, (0, 1)):
                flat[...] = bk.asarray(np.concatenate([np.ravel(pair[i]) for pair in state["moments"]]))

    def train_batch(self, x, labels, allreduce=None, lap=lambda phase: None):
        """forward, backward, [all-reduce], update; lap(phase) after each phase.

        As the MLP's step (nn.mlp.Step.train_batch): an all-reduce whose `buckets` is "overlap"
        takes each bucket of consecutive conv and dense layers' [dW_l, db_l]
        (nn.allreduce.merge_buckets) on the side branch as soon as the backward pass has made them
        (after them on the side stream, where they ran there), beside the layers below; "after",
        the same buckets in the same order (the top layers' first) once the backward pass is done
        (the same sums, bit for bit); otherwise the whole flat buffer at once.
        """
        bk = self.model.backend
        self.forward(x, labels)
        lap("forward")
        buckets = getattr(allreduce, "buckets", None) if allreduce is not None else None
        if buckets == "overlap":
            def reduce_aside(l):
                if l in self.bucket_ready:
                    with bk.side_branch():  # the side stream: after layer l's dW_l, db_l where they ran there
                        allreduce(self.buckets[self.bucket_ready[l]])
            self.backward(layer_done=reduce_aside, join=False, lanes=False)
            lap("backward")
            bk.join_branch()                # the weight gradients and every bucket's all-reduce
            lap("comm")
        else:
            self.backward()
            lap("backward")
            if allreduce is not None:
                for bucket in self.buckets if buckets == "after" else [self.grads]:
                    allreduce(bucket)
                lap("comm")
        self.update()
        lap("update")
