"""The MLP and one SGD step on it, written against the Backend interface alone.

Layer l maps n_l -> n_{l+1}: Z_l = A_{l-1} W_l^T + b_l, A_l = act(Z_l) for hidden layers (A_{-1} = X),
softmax + cross-entropy on the last Z. Only the activations A_l are kept: act'(Z) is a function of A.
"""
import math

import numpy as np

from nn.allreduce import merge_buckets
from nn.backends import ACTIVATIONS, Backend

INITS = ("cme213", "he")
# Above this many bytes of the output layer's input A, the step carries the output layer's gradient
# down in a pass of its own over A (Backend.linear_backward, with the weight and bias steps); below
# it, A stays in a GPU's L2 and the step is bound by launch latency, so the output layer's one kernel
# (linear_xent with the input gradient) with the weight and bias steps on the side branch is faster
# (benchmarks/issue18-h100/linear-backward/).
OUTPUT_BACKWARD_APART_BYTES = 16 << 20


def init_params(sizes, init="cme213", seed=0):
    """Host float64 (W_l, b_l) per layer, drawn from one seeded Generator (identical on every rank).

    "cme213": W = 0.01 * randn (the CME 213 starter); "he": W = randn * sqrt(2 / fan_in). b = 0.
    """
    if init not in INITS:
        raise ValueError(f"unknown init {init!r}")
    rng = np.random.default_rng(seed)
    params = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        std = 0.01 if init == "cme213" else math.sqrt(2.0 / n_in)
        w = rng.standard_normal((n_out, n_in)) * std  # W_l: (n_out, n_in) float64
        params.append((w, np.zeros(n_out)))  # b_l: (n_out,) float64
    return params


def param_count(sizes) -> int:
    """Weights and biases of an MLP of `sizes` = [inputs, *hidden, classes]."""
    return sum((n_in + 1) * n_out for n_in, n_out in zip(sizes[:-1], sizes[1:]))


def bytes_needed(sizes, rows, itemsize) -> int:
    """Backend memory of an MLP of `sizes` and its Step on `rows` rows: weights and biases, their
    flat gradient, and per row the activations, logits and deltas (data sets not counted)."""
    per_row = sum(sizes[1:-1]) + sizes[-1] + sum(sizes[1:])
    return itemsize * (2 * param_count(sizes) + rows * per_row)


class MLP:
    """Weights and biases on a backend; `sizes` = [inputs, *hidden, classes]."""

    def __init__(self, backend: Backend, sizes, activation, params):
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}")
        self.backend, self.sizes, self.activation = backend, tuple(sizes), activation
        self.W = [backend.asarray(w) for w, _ in params]  # W_l: (n_{l+1}, n_l) dtype
        self.b = [backend.asarray(b) for _, b in params]  # b_l: (n_{l+1},) dtype

    @property
    def layers(self) -> int:
        return len(self.W)

    def params_numpy(self):
        """Host copies [(W_l, b_l), ...]."""
        bk = self.backend
        return [(bk.to_numpy(w).copy(), bk.to_numpy(b).copy()) for w, b in zip(self.W, self.b)]

    def hidden(self, x, acts):
        """Fill acts[l] = A_l (n, n_{l+1}) for the hidden layers from x (n, D); returns the last
        layer's input (x itself without hidden layers)."""
        a = x
        for l in range(self.layers - 1):
            self.backend.gemm(a, self.W[l], acts[l], trans_b=True, epilogue=f"bias_{self.activation}", bias=self.b[l])
            a = acts[l]
        return a

    def forward(self, x, acts, logits):
        """Fill acts (hidden layers) and logits = Z_last (n, C) from x (n, D)."""
        a = self.hidden(x, acts)
        self.backend.gemm(a, self.W[-1], logits, trans_b=True, epilogue="bias", bias=self.b[-1])
        return logits

    def count_correct(self, x, labels, chunk=1000) -> int:
        """How many rows of x (n, D) the model classifies as `labels` (host (n,) ints); syncs the host."""
        bk, n = self.backend, x.shape[0]
        rows = max(1, min(chunk, n))   # a rank's share may be no rows
        acts = [bk.empty((rows, h)) for h in self.sizes[1:-1]]  # A_l: (rows, H_l) dtype
        logits = bk.empty((rows, self.sizes[-1]))  # Z: (rows, C) dtype
        correct = 0
        for start in range(0, n, rows):
            m = min(rows, n - start)
            z = self.forward(x[start:start + m], [a[:m] for a in acts], logits[:m])
            guess = bk.to_numpy(bk.xp.argmax(z, axis=1))  # (m,) int
            correct += int(np.count_nonzero(guess == labels[start:start + m]))
        return correct

    def finite(self) -> bool:
        """Whether every weight and bias is finite (syncs the host)."""
        xp = self.backend.xp
        return all(bool(xp.isfinite(x).all()) for x in (*self.W, *self.b))

    def reg_term(self, reg) -> float:
        """0.5 * reg * sum_l ||W_l||^2 (syncs the host)."""
        xp = self.backend.xp
        return 0.5 * reg * sum(float(xp.vdot(w, w)) for w in self.W)


class Step:
    """One rank's SGD step on its share (at most `max_rows` rows) of a global batch of `batch` rows.

    Buffers are allocated once; a step on n rows uses their first n rows. The cross-entropy gradient
    is scaled by 1/batch, so per-rank weight gradients sum over ranks to the one-process gradient.
    `output_backward_apart`: whether the output layer's backward pass is an operation of its own
    (linear_backward: a large input, see OUTPUT_BACKWARD_APART_BYTES) or comes with its forward pass.
    """

    may_go_apart = True     # whether the output layer's backward pass may be an operation of its own

    def __init__(self, model: MLP, max_rows, batch, lr, reg):
        bk, sizes = model.backend, model.sizes
        self.model, self.batch, self.lr, self.reg = model, batch, lr, reg
        self.output_backward_apart = (self.may_go_apart and model.layers > 1
                                      and max_rows * sizes[-2] * bk.dtype.itemsize > OUTPUT_BACKWARD_APART_BYTES)
        # G_1 of two layers going back apart: linear_backward's, read by dW_1's GEMM alone
        g1_alone = self.output_backward_apart and model.layers == 2
        # A_l: (rows, H_l) dtype; with the output layer's backward pass apart, that layer's kernels alone
        # read its input, which the backend may store narrower
        top = model.layers - 1
        self.acts = [bk.empty_output_layer_input((max_rows, h)) if l == top - 1 and self.output_backward_apart
                     else bk.empty((max_rows, h)) for l, h in enumerate(sizes[1:-1])]
        self.logits = bk.empty((max_rows, sizes[-1]))  # Z: (rows, C) dtype
        # G_l = dLoss/dZ_l: (rows, n_{l+1}) dtype
        self.deltas = [bk.empty_input_gradient((max_rows, h), sizes[-1]) if l == 0 and g1_alone
                       else bk.empty((max_rows, h)) for l, h in enumerate(sizes[1:])]
        shapes = [s for w in model.W for s in (w.shape, w.shape[:1])]
        self.grads = bk.zeros(sum(math.prod(s) for s in shapes))  # flat [dW_0, db_0, dW_1, ...]: one all-reduce
        views, start = [], 0
        for s in shapes:
            views.append(self.grads[start:start + math.prod(s)].reshape(s))
            start += math.prod(s)
        self.dW, self.db = views[0::2], views[1::2]  # dW_l: (n_{l+1}, n_l), db_l: (n_{l+1},)
        # each layer's [dW_l, db_l], contiguous in the flat buffer: the buckets of a bucketed all-reduce
        ends = np.cumsum([0] + [w.size + b.size for w, b in zip(self.dW, self.db)])
        self.layer_grads = [self.grads[lo:hi] for lo, hi in zip(ends[:-1], ends[1:])]
        self.buckets, self.bucket_ready = merge_buckets(self.grads, [(l, ends[l], ends[l + 1])
                                                                     for l in reversed(range(model.layers))])
        self.loss_sum = bk.zeros((1,))  # sum of -log P[i, y_i] over rows seen since reset_loss
        self._x = None

    def reset_loss(self):
        self.loss_sum[...] = 0

    def forward(self, x, labels):
        """Forward pass and the output layer (Backend.linear_xent): loss into loss_sum,
        G_last = (P - Y) / batch, and the last hidden layer's G_{last-1} with it unless the backward
        pass makes it (output_backward_apart)."""
        n, m = x.shape[0], self.model
        self._x = x
        a = m.hidden(x, [act[:n] for act in self.acts])
        grad_in = self.deltas[-2][:n] if m.layers > 1 and not self.output_backward_apart else None
        m.backend.linear_xent(a, m.W[-1], m.b[-1], labels, self.logits[:n], self.deltas[-1][:n], 1.0 / self.batch,
                              self.loss_sum, grad_in, m.activation if grad_in is not None else None)

    def backward(self, weight_grads=True, layer_done=lambda l: None):
        """G_{l-1} = (G_l W_l) * act'(A_{l-1}) below the last hidden layer (whose G came with the
        loss, or with output_backward_apart comes first here); dW_l = G_l^T A_{l-1} and db_l too
        when weight_grads, then layer_done(l).

        With output_backward_apart the output layer carries its gradient down in one operation with
        its weight gradient and the bias gradient of the layer below (Backend.linear_backward): into
        dW and db with weight_grads, else as the SGD step on that W and b themselves, in place (one
        rank: update_fused takes the other layers' steps). dW and db hold the data term only: the
        update adds reg * W. Other weights are not modified.
        """
        bk, m = self.model.backend, self.model
        n = self._x.shape[0]
        top, apart = m.layers - 1, self.output_backward_apart
        for l in reversed(range(m.layers)):
            g = self.deltas[l][:n]
            a_prev = self._x if l == 0 else self.acts[l - 1][:n]
            if l == top and apart:
                grad_in = self.deltas[l - 1][:n]
                if weight_grads:
                    bk.linear_backward(g, m.W[l], a_prev, grad_in, m.activation, self.dW[l], self.db[l - 1])
                else:
                    bk.linear_backward(g, m.W[l], a_prev, grad_in, m.activation, m.W[l], m.b[l - 1],
                                       alpha=-self.lr, beta=1.0 - self.lr * self.reg, accumulate_db=True)
            if weight_grads:
                if not (apart and l == top - 1):        # linear_backward summed G_{top-1}
                    bk.column_sums(g, self.db[l])
                if not (apart and l == top):
                    bk.gemm(g, a_prev, self.dW[l], trans_a=True)
                layer_done(l)
            if 0 < l < top:
                bk.gemm(g, m.W[l], self.deltas[l - 1][:n], epilogue=f"d{m.activation}", aux=a_prev)

    def update_fused(self):
        """One rank: W_l <- (-lr) G_l^T A_{l-1} + (1 - lr reg) W_l as one in-place GEMM, and
        b_l <- b_l + (-lr) * column sums of G_l as one pass: no gradient buffer is written (the
        output layer's W and the bias below it are stepped already with output_backward_apart).

        The first layer's update (the step's biggest GEMM but one) runs on its own; every other
        update goes on the side branch alongside it. They touch disjoint parameters and only read
        what the backward pass finished writing."""
        bk, m = self.model.backend, self.model
        n = self._x.shape[0]
        top, apart = m.layers - 1, self.output_backward_apart

        def update(l):
            a_prev = self._x if l == 0 else self.acts[l - 1][:n]
            bk.gemm(self.deltas[l][:n], a_prev, m.W[l], trans_a=True, alpha=-self.lr,
                    beta=1.0 - self.lr * self.reg, c=m.W[l])

        with bk.side_branch():
            for l in range(1, top if apart else m.layers):
                update(l)
            for l in range(m.layers):
                if not (apart and l == top - 1):
                    bk.column_sums(self.deltas[l][:n], m.b[l], -self.lr, accumulate=True)
        update(0)
        bk.join_branch()

    def update(self):
        """W_l -= lr (dW_l + reg W_l); b_l -= lr db_l, from the (all-reduced) gradient buffers."""
        bk, m = self.model.backend, self.model
        for l in range(m.layers):
            bk.sgd_update(m.W[l], self.dW[l], self.lr, self.reg)
            bk.sgd_update(m.b[l], self.db[l], self.lr, 0.0)

    def train_batch(self, x, labels, allreduce=None, lap=lambda phase: None):
        """forward, backward, [all-reduce], update; lap(phase) after each phase for timing.

        Without `allreduce` (one rank) the weight gradient is never formed: the update is the fused GEMM.
        An all-reduce whose `buckets` is "overlap" takes each bucket of layers' gradients
        (nn.allreduce.merge_buckets) on a side branch as soon as the backward pass has made them,
        beside the layers below; "after", the same buckets once the backward pass is done (the same
        sums, bit for bit); otherwise the whole buffer at once.
        """
        bk = self.model.backend
        self.forward(x, labels)
        lap("forward")
        if allreduce is None:
            self.backward(weight_grads=False)
            lap("backward")
            self.update_fused()
        else:
            buckets = getattr(allreduce, "buckets", None)
            if buckets == "overlap":
                def reduce_aside(l):
                    if l in self.bucket_ready:
                        with bk.side_branch():
                            allreduce(self.buckets[self.bucket_ready[l]])
                self.backward(layer_done=reduce_aside)
                lap("backward")
                bk.join_branch()
            else:
                self.backward()
                lap("backward")
                for bucket in self.buckets if buckets == "after" else [self.grads]:
                    allreduce(bucket)
            lap("comm")
            self.update()
        lap("update")


class Epoch:
    """One pass of `step` over a rank's rows, batch by batch (`spans` of (first, count) rows).

    With `graph` (a capturing backend, and one rank or an all-reduce that a graph can hold, NCCL)
    the pass is captured once as a CUDA graph on the first call and replayed after: one launch per
    epoch, no host work between steps.
    """

    def __init__(self, step: Step, spans, x, labels, allreduce=None, graph=False):
        self.step, self.spans, self.x, self.labels, self.allreduce = step, spans, x, labels, allreduce
        backend = step.model.backend
        graph_safe = allreduce is None or getattr(allreduce, "graph_safe", False)
        self.graphed = graph and graph_safe and getattr(backend, "can_capture", False)
        self._graph = None

    def _steps(self, lap=lambda phase: None, advance=lambda: None, stop=lambda: False) -> bool:
        self.step.reset_loss()
        for first, count in self.spans:
            self.step.train_batch(self.x[first:first + count], self.labels[first:first + count], self.allreduce, lap)
            advance()
            if stop():
                return False
        return True

    def run(self, lap=lambda phase: None, advance=lambda: None, stop=lambda: False) -> bool:
        """Enqueue one epoch (laps, progress and `stop`, asked after each step, only when eager);
        the caller synchronises. False when `stop()` ended the epoch early."""
        if not self.graphed:
            return self._steps(lap, advance, stop)
        backend = self.step.model.backend
        if self._graph is None:
            self._graph = backend.capture(self._steps)
        self._graph.launch(backend.stream)
        return True

    def release(self):
        """Drop the captured graph (it is captured again on the next run)."""
        self._graph = None
