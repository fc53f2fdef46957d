"""Model parallelism for the MLP (CME 213's bonus): rank r of R owns hidden units [h_r, h_{r+1}).

Rank r keeps W1's rows and b1's entries of its units and W2's columns for them (b2 whole); every
rank sees the whole batch. It computes Z1_r = X W1_r^T + b1_r, A1_r = act(Z1_r) and its partial
logits A1_r W2_r^T (rank 0's with b2 added); one all-reduce of those (n x C) gives every rank the
logits. From there each computes the same softmax and G2 = (P - Y) / batch, then locally
G1_r = (G2 W2_r) * act'(A1_r), and updates its own slices with the fused in-place GEMMs of the
one-rank step: nothing but the logits is communicated.

Only one hidden layer is split this way (the pairwise split of deeper MLPs is not built).
"""
from collections.abc import Callable

import numpy as np

from nn.dist import split_sizes
from nn.errors import NNError
from nn.mlp import MLP, Step


def hidden_share(hidden: int, rank: int, size: int) -> slice:
    """The hidden units of `rank`: consecutive, as even as possible (larger shares first)."""
    shares = split_sizes(hidden, size)
    start = sum(shares[:rank])
    return slice(start, start + shares[rank])


def check_split(sizes, size: int):
    """One line when `sizes` = [inputs, *hidden, classes] cannot be split over `size` ranks."""
    if len(sizes) != 3:
        raise NNError(f"--parallel model splits one hidden layer; this network has {len(sizes) - 2} "
                      "(use --parallel data)")
    if sizes[1] < size:
        raise NNError(f"--parallel model: {size} ranks need at least {size} hidden units, one each; "
                      f"the network has {sizes[1]}")


def shard(params, share: slice):
    """This rank's [(W1 rows, b1 entries), (W2 columns, b2)] of full host params."""
    (w1, b1), (w2, b2) = params
    return [(w1[share], b1[share]), (np.ascontiguousarray(w2[:, share]), b2)]


def unshard(shards):
    """Full host params [(W1, b1), (W2, b2)] from every rank's shard, in rank order."""
    return [(np.concatenate([s[0][0] for s in shards]), np.concatenate([s[0][1] for s in shards])),
            (np.concatenate([s[1][0] for s in shards], axis=1), shards[0][1][1])]


class ShardedMLP(MLP):
    """One rank's slices of an MLP [inputs, hidden, classes]; `reduce(logits)` sums a backend
    array over the ranks in place (every rank calls it, in the same order)."""

    def __init__(self, backend, sizes, activation, params, rank: int, size: int,
                 reduce: Callable[[object], object]):
        check_split(sizes, size)
        self.full_sizes, self.share = tuple(sizes), hidden_share(sizes[1], rank, size)
        self.rank, self.reduce = rank, reduce
        local = (sizes[0], self.share.stop - self.share.start, sizes[2])
        super().__init__(backend, local, activation, shard(params, self.share))

    def forward(self, x, acts, logits):
        """Fill this rank's A1 and the whole logits Z2 (n, C), summed over the ranks."""
        a = self.hidden(x, acts)
        first = self.rank == 0
        self.backend.gemm(a, self.W[-1], logits, trans_b=True, epilogue="bias" if first else None,
                          bias=self.b[-1] if first else None)
        self.reduce(logits)
        return logits


class ShardedStep(Step):
    """One rank's step of the hidden-unit split on the whole batch: the forward pass with the
    logits' all-reduce, then the one-rank step's local backward pass and fused update (G1 comes
    with the forward pass, whatever its size: never apart)."""

    may_go_apart = False

    def forward(self, x, labels):
        """Z2 (all-reduced), the loss into loss_sum, G2 and this rank's G1."""
        n, m = x.shape[0], self.model
        self._x = x
        logits = m.forward(x, [a[:n] for a in self.acts], self.logits[:n])
        m.backend.softmax_xent(logits, labels, self.deltas[-1][:n], 1.0 / self.batch, self.loss_sum)
        m.backend.gemm(self.deltas[-1][:n], m.W[-1], self.deltas[-2][:n], epilogue=f"d{m.activation}",
                       aux=self.acts[-1][:n])

    def train_batch(self, x, labels, allreduce=None, lap=lambda phase: None):
        """forward (with its all-reduce), backward and the fused update; nothing to all-reduce after."""
        if allreduce is not None:
            raise ValueError("a model-parallel step reduces its logits, not its gradients")
        super().train_batch(x, labels, None, lap)


def step_elements(sizes, rows: int, parallel: str) -> int:
    """Values all-reduced in one step of an MLP of `sizes` on `rows` rows: every parameter's gradient
    for the data split, the rows x classes logits for the model split."""
    if parallel == "model":
        return rows * sizes[-1]
    return sum((n_in + 1) * n_out for n_in, n_out in zip(sizes[:-1], sizes[1:]))


def ring_bytes(elements: int, itemsize: int, ranks: int) -> int:
    """What each rank sends in a ring all-reduce of `elements` values: 2 (R-1)/R of the buffer."""
    return 2 * (ranks - 1) * elements * itemsize // ranks
