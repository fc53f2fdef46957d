"""nn.model_parallel on the NumPy backend: R ranks as threads, each with its slice of the hidden
units, give one process's weights (float64); shares, the supported networks, bytes per step."""
import threading

import numpy as np
import pytest

from nn.backends import get_backend
from nn.errors import NNError
from nn.mlp import MLP, Step, init_params
from nn.model_parallel import ShardedMLP, ShardedStep, check_split, hidden_share, ring_bytes, step_elements, unshard


class ThreadSum:
    """reduce(rank) for ranks that are threads: every rank gets the sum of all ranks' buffers,
    added in rank order (the same on each)."""

    def __init__(self, size):
        self.parts, self.barrier = [None] * size, threading.Barrier(size)

    def reduce(self, rank):
        def reduce(buf):
            self.parts[rank] = buf.copy()
            self.barrier.wait()
            total = sum(self.parts[1:], self.parts[0].copy())
            self.barrier.wait()          # every rank has read the parts before the next reduce
            buf[...] = total
        return reduce


def train(sizes, activation, ranks, x, y, steps=3, lr=0.3, reg=0.05):
    """(params after `steps` steps: unsharded when ranks > 0, one process's for ranks == 0, losses)."""
    params = init_params(sizes, "he", seed=4)
    if ranks == 0:
        bk = get_backend("numpy", "float64")
        step = Step(MLP(bk, sizes, activation, params), len(x), len(x), lr, reg)
        for _ in range(steps):
            step.train_batch(x, y)
        return step.model.params_numpy(), [float(step.loss_sum[0])]
    total, shards, losses = ThreadSum(ranks), [None] * ranks, [None] * ranks
    errors = []

    def rank_main(rank):
        try:
            bk = get_backend("numpy", "float64")
            model = ShardedMLP(bk, sizes, activation, params, rank, ranks, total.reduce(rank))
            step = ShardedStep(model, len(x), len(x), lr, reg)
            for _ in range(steps):
                step.train_batch(x, y)
            shards[rank], losses[rank] = model.params_numpy(), float(step.loss_sum[0])
        except Exception as exc:   # noqa: BLE001 - reported by the test
            errors.append(exc)
            total.barrier.abort()

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return unshard(shards), losses


@pytest.mark.parametrize("activation", ["sigmoid", "relu"])
@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_the_hidden_unit_split_gives_one_process_weights(ranks, activation):
    sizes = (12, 10, 4)                                      # 10 units over 3 ranks: 4, 3, 3
    rng = np.random.default_rng(1)
    x, y = rng.random((9, 12)), rng.integers(0, 4, 9).astype(np.int32)   # X: (9, 12)
    want, (loss,) = train(sizes, activation, 0, x, y)
    got, losses = train(sizes, activation, ranks, x, y)
    for (w, b), (w0, b0) in zip(got, want):
        for a, a0 in ((w, w0), (b, b0)):
            assert np.max(np.abs(a - a0)) <= 1e-12 * max(np.max(np.abs(a0)), 1e-300)
    assert all(l == losses[0] for l in losses) and losses[0] == pytest.approx(loss, rel=1e-12)


def test_the_split_keeps_g1_in_its_forward_pass_whatever_its_size(monkeypatch):
    """Past the apart threshold, with a backend that lays G1 out column-major for the one-rank
    step's linear_backward: a sharded step still makes G1 in its forward pass, into a row-major
    buffer, and gives one process's weights."""
    from nn import mlp
    from nn.backends.base import Backend

    monkeypatch.setattr(mlp, "OUTPUT_BACKWARD_APART_BYTES", -1)
    monkeypatch.setattr(Backend, "empty_input_gradient", lambda self, shape, classes: self.empty(shape[::-1]).T)
    sizes = (12, 10, 4)
    bk = get_backend("numpy", "float64")
    one = Step(MLP(bk, sizes, "relu", init_params(sizes, "he")), 9, 9, 0.3, 0.05)
    assert one.output_backward_apart and one.deltas[0].flags.f_contiguous
    model = ShardedMLP(bk, sizes, "relu", init_params(sizes, "he"), 0, 2, lambda logits: logits)
    sharded = ShardedStep(model, 9, 9, 0.3, 0.05)
    assert not sharded.output_backward_apart and sharded.deltas[0].flags.c_contiguous
    rng = np.random.default_rng(2)
    x, y = rng.random((9, 12)), rng.integers(0, 4, 9).astype(np.int32)   # X: (9, 12)
    want, _ = train(sizes, "relu", 0, x, y)
    got, _ = train(sizes, "relu", 2, x, y)
    for (w, b), (w0, b0) in zip(got, want):
        for a, a0 in ((w, w0), (b, b0)):
            assert np.max(np.abs(a - a0)) <= 1e-12 * max(np.max(np.abs(a0)), 1e-300)


def test_shares_are_consecutive_and_as_even_as_possible():
    assert [hidden_share(10, r, 3) for r in range(3)] == [slice(0, 4), slice(4, 7), slice(7, 10)]
    assert [hidden_share(1000, r, 4).stop - hidden_share(1000, r, 4).start for r in range(4)] == [250] * 4


@pytest.mark.parametrize("sizes, ranks, message", [
    ((784, 100, 50, 10), 2, "splits one hidden layer; this network has 2"),
    ((784, 3, 10), 4, "4 ranks need at least 4 hidden units, one each; the network has 3"),
])
def test_what_cannot_be_split_is_one_line(sizes, ranks, message):
    with pytest.raises(NNError, match=message):
        check_split(sizes, ranks)


def test_bytes_each_rank_sends_a_step_for_each_split():
    cme213 = (784, 1000, 10)
    assert step_elements(cme213, 800, "model") == 8000                    # the logits: 32 KB in float32
    assert step_elements(cme213, 800, "data") == 795_010                  # every gradient: 3.2 MB
    assert ring_bytes(8000, 4, 1) == 0 and ring_bytes(8000, 4, 4) == 2 * 3 * 8000 * 4 // 4
