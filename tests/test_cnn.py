"""nn.cnn on the NumPy backend: the whole network's gradients against float64 finite differences,
steps of Adam and SGD that lower the loss, steps that do not depend on when their side branches
run, and the gradients all-reduced per layer (during or after the backward pass, in-process and
under mpirun) as one process computes them."""
import subprocess
import sys

import numpy as np
import pytest

from nn import allreduce as allreduce_module

import cnn_ranks
from late_branch import LateBranchBackend
from nn.backends import get_backend
from nn.cnn import CNN, CNNStep, init_cnn_params
from nn.dist import Dist
from nn.layers import LENET, parse_layers
from run_train import MPIRUN, ROOT, env, max_rel_diff


def network(spec, activation, image=(1, 8, 8), classes=4, rows=5, seed=3, backend=None):
    layers = parse_layers(spec, classes, image)
    backend = backend or get_backend("numpy", "float64")
    model = CNN(backend, layers, activation, init_cnn_params(layers, seed))
    rng = np.random.default_rng(seed)
    x = rng.random((rows, int(np.prod(image))))                     # X: (rows, C*H*W) pixels in [0, 1)
    labels = rng.integers(0, classes, rows).astype(np.int32)
    return model, x, labels


def loss(step, x, labels) -> float:
    step.reset_loss()
    step.forward(x, labels)
    return float(step.loss_sum[0]) / step.batch


@pytest.mark.parametrize("spec, activation", [
    ("conv3x3,pool2,conv4x2,dense6", "relu"),        # conv after a pool: both of the pool's passes fused
    ("conv2x2,pool2,conv3x2,dense5", "sigmoid"),     # a pool of odd sides: its backward pass alone
    ("conv2x3,conv3x3,pool2,dense5", "sigmoid"),     # conv after conv: act' fused into backward data
    ("conv3x2,pool2,pool2,dense4,dense3", "relu"),   # pool after pool, then dense after dense
    ("dense7", "sigmoid"),                           # no convolution at all: the MLP's path
    ("conv3x3,pool2", "relu"),                       # a pool below the output layer: no act' there
])
def test_the_whole_networks_gradients_match_finite_differences(spec, activation):
    model, x, labels = network(spec, activation)
    step = CNNStep(model, max_rows=len(x), batch=len(x))
    loss(step, x, labels)
    step.backward()
    rng, h = np.random.default_rng(0), 1e-6
    for params, grads in ((model.W, step.dW), (model.b, step.db)):
        for p, g in zip(params, grads):
            if p is None:
                continue
            for _ in range(6):
                i = tuple(rng.integers(0, s) for s in p.shape)
                keep = p[i]
                p[i] = keep + h
                up = loss(step, x, labels)
                p[i] = keep - h
                down = loss(step, x, labels)
                p[i] = keep
                assert g[i] == pytest.approx((up - down) / (2 * h), rel=1e-6, abs=1e-9), (spec, p.shape, i)


def test_a_pool_goes_with_the_convolutions_beside_it():
    """A pool's forward pass is asked of the convolution below it, its backward pass of the
    convolution above it (even sides only; not of a dense layer)."""
    lenet, _, _ = network(LENET, "relu", image=(1, 28, 28))
    assert [lenet.pool_fused_forward(l) for l in range(len(lenet.layers))] == [False, True, False, True] + [False] * 4
    # the second pool's input is 11 x 11 (odd), and a dense layer is above it
    assert [lenet.pool_fused_backward(l) for l in range(len(lenet.layers))] == [False, True] + [False] * 6
    tutorial, _, _ = network("conv32x5,pool2,conv64x5,pool2,dense1024", "relu", image=(1, 28, 28))
    assert [tutorial.pool_fused_backward(l) for l in range(len(tutorial.layers))] == [False, True] + [False] * 4


@pytest.mark.parametrize("optimizer, lr", [("adam", 1e-2), ("sgd", 0.5)])
def test_steps_lower_the_loss_on_a_fixed_batch(optimizer, lr):
    model, x, labels = network(LENET, "relu", image=(1, 28, 28), classes=10, rows=16)
    step = CNNStep(model, max_rows=len(x), batch=len(x), optimizer=optimizer, lr=lr)
    first = loss(step, x, labels)
    for _ in range(15):
        step.reset_loss()
        step.train_batch(x, labels)
    assert loss(step, x, labels) < 0.5 * first


def test_lenets_parameters_are_he_initialised():
    layers = parse_layers(LENET)
    params = init_cnn_params(layers)
    assert [w.shape for w, _ in params] == [(6, 1, 3, 3), (10, 6, 3, 3), (128, 250), (100, 128), (80, 100), (10, 80)]
    assert sum(w.size + b.size for w, b in params) == sum(layer.params for layer in layers)
    assert params[2][0].std() == pytest.approx(np.sqrt(2 / 250), rel=0.05) and not params[2][1].any()


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_steps_do_not_depend_on_when_their_side_branches_run(optimizer):
    results = []
    for backend in (get_backend("numpy", "float64"), LateBranchBackend("float64")):
        model, x, labels = network("conv3x3,pool2,conv4x2,dense6", "relu", rows=6, backend=backend)
        step = CNNStep(model, max_rows=len(x), batch=len(x), optimizer=optimizer, lr=0.05)
        for _ in range(3):
            step.train_batch(x, labels)
        results.append(model.flat.copy())
    assert np.array_equal(*results)


class Stacking:
    """A backend that takes a CNN's top dense layers as one operation (as the cupy backend does with
    autogemm's dense_stack kernel; here Backend's own operations), noting each call's widths."""

    def fuses_dense_stack(self, widths):
        self.stacks = getattr(self, "stacks", []) + [widths]
        return True


class StackingNumpy(Stacking, get_backend("numpy", "float64").__class__):
    pass


class StackingLateBranch(Stacking, LateBranchBackend):
    pass


@pytest.mark.parametrize("spec, stack", [
    ("conv3x3,pool2,dense6,dense5", (27, 6, 5, 4)),             # a pool's output into the stack
    ("conv3x2,pool2,pool2,dense4,dense3", (3, 4, 3, 4)),
    ("dense7,dense5", (64, 7, 5, 4)),                           # the images into the stack: no input gradient
    ("conv2x3,conv3x3,dense5,dense4", None),                    # a convolution's activated output: act' below
    ("conv3x3,pool2,dense6", (27, 6, 4)),                       # one hidden layer
    ("conv3x3,pool2", None),                                    # the output layer alone: its own kernel
])
@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_the_dense_stack_as_one_operation_gives_the_layers_own_steps_bit_for_bit(spec, stack, optimizer):
    """The step with its top dense layers as one operation (forward, loss, gradients carried down;
    their weight gradients each on a lane of its own, run early or late) equals the step on the
    layers' own operations; only stacks of two or more dense layers above the images or a pool go."""
    results = []
    for backend in (get_backend("numpy", "float64"), StackingNumpy("float64"), StackingLateBranch("float64")):
        model, x, labels = network(spec, "relu", rows=6, backend=backend)
        step = CNNStep(model, max_rows=len(x), batch=len(x), optimizer=optimizer, lr=0.05)
        assert (step.stack is not None) == (stack is not None and isinstance(backend, Stacking))
        if isinstance(backend, Stacking) and stack is not None:
            assert backend.stacks == [stack]
        for _ in range(3):
            step.train_batch(x, labels)
        results.append((model.flat.copy(), loss(step, x, labels)))
    for flat, value in results[1:]:
        assert np.array_equal(flat, results[0][0]) and value == results[0][1]


# ---------------------------------------------------------------- bucketed all-reduces

def offset(view, flat) -> int:
    """Where the view `view` of the 1-D array `flat` starts, in elements."""
    return (view.__array_interface__["data"][0] - flat.__array_interface__["data"][0]) // flat.itemsize


def test_each_layers_gradients_are_one_contiguous_slice_of_the_flat_buffer():
    model, x, labels = network("conv3x3,pool2,conv4x2,dense6", "relu")     # + the output layer, dense4
    step = CNNStep(model, max_rows=len(x), batch=len(x))
    step.grads[...] = np.arange(step.grads.size)
    assert [g is None for g in step.layer_grads] == [False, True, False, False, False]
    ours = [g for g in step.layer_grads if g is not None]
    assert all(np.shares_memory(g, step.grads) for g in ours)
    assert np.array_equal(np.concatenate(ours), step.grads)      # in layer order, covering the buffer once
    for g, dw, db in zip(step.layer_grads, step.dW, step.db):
        if g is not None:
            assert np.array_equal(g, np.concatenate([dw.ravel(), db]))


class RecordedSum:
    """A stand-in for an all-reduce over two ranks with the same gradients: each buffer doubled, in
    a side branch when the backend defers it (`buckets` as NcclAllreduce's); each call's buffer, as
    it was when the doubling ran, recorded with its offset in the flat gradient."""

    def __init__(self, backend, grads, buckets):
        self.backend, self.grads, self.buckets, self.calls = backend, grads, buckets, []

    def __call__(self, buf):
        def double():
            self.calls.append((offset(buf, self.grads), buf.copy()))
            buf[...] = 2 * buf
        if getattr(self.backend, "inside", False):
            self.backend.deferred.append(double)
        else:
            double()


@pytest.mark.parametrize("spec", ["conv3x3,pool2,conv4x2,dense6",    # the output layer carries its gradient down
                                  "conv3x3,pool2"])                  # a pool below the output layer
@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_the_overlapped_all_reduce_equals_the_one_after_the_backward_pass_bit_for_bit(monkeypatch, spec, optimizer):
    """Each layer's [dW_l, db_l] (a bucket each: no least size) all-reduced on a side branch as soon as the backward pass has it,
    the branch run late (after the whole backward pass) or at once, against the same buckets after
    the backward pass and the whole buffer: the same calls, top layer first, each on the complete
    gradient of its layer (the gradients start as NaN each step), and the same weights bit for bit."""
    monkeypatch.setattr(allreduce_module, "BUCKET_BYTES", 0)
    results, calls = [], []
    for backend, buckets in ((LateBranchBackend("float64"), "overlap"), (get_backend("numpy", "float64"), "overlap"),
                             (get_backend("numpy", "float64"), "after"), (get_backend("numpy", "float64"), None)):
        model, x, labels = network(spec, "relu", rows=6, backend=backend)
        step = CNNStep(model, max_rows=len(x), batch=2 * len(x), optimizer=optimizer, lr=0.05, reg=0.01)
        allreduce = RecordedSum(backend, step.grads, buckets)
        for _ in range(3):
            step.grads[...] = np.nan
            step.train_batch(x, labels, allreduce=allreduce)
        results.append(model.flat.copy())
        calls.append(allreduce.calls)
    assert not np.isnan(results[0]).any()
    expected = [(offset(g, step.grads), g.size) for g in reversed(step.layer_grads) if g is not None]
    for run in calls[:3]:
        assert [(offset, buf.size) for offset, buf in run] == expected * 3
        assert not any(np.isnan(buf).any() for _, buf in run)
    assert [(offset, buf.size) for offset, buf in calls[3]] == [(0, step.grads.size)] * 3
    for one, other in zip(calls[0], calls[2]):       # every bucket's contents too, bit for bit
        assert np.array_equal(one[1], other[1])
    assert all(np.array_equal(r, results[0]) for r in results[1:])


@pytest.mark.parametrize("spec", ["conv3x3,pool2,conv4x2,dense6", "conv3x3,pool2"])
def test_a_rank_with_no_rows_contributes_zero_gradient(spec):
    model, x, labels = network(spec, "relu")
    step = CNNStep(model, max_rows=0, batch=30)
    step.grads[...] = np.nan
    step.forward(x[:0], labels[:0])
    step.backward()
    assert np.array_equal(step.grads, np.zeros_like(step.grads)) and step.loss_sum[0] == 0


@pytest.mark.skipif(MPIRUN is None, reason="no mpirun (pip install mpich)")
@pytest.mark.parametrize("ranks", [2, 4])
def test_ranks_reducing_per_layer_give_the_one_process_weights(tmp_path, ranks):
    """Under mpirun, the host all-reduce per layer during the backward pass ("overlap") and after it
    ("after") give the same weights bit for bit, within 1e-12 of one process and of the whole
    buffer's all-reduce (4 ranks: a rank with no rows in the last batch)."""
    out = tmp_path / "flat.npz"
    result = subprocess.run([MPIRUN, "-n", str(ranks), sys.executable, str(ROOT / "tests" / "cnn_ranks.py"), str(out)],
                            cwd=tmp_path, env=dict(env(tmp_path), PYTHONPATH=f"{ROOT}:{ROOT / 'tests'}",
                                                   OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1"),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    one = cnn_ranks.train(Dist(), "whole")
    with np.load(out) as flats:
        assert np.array_equal(flats["overlap"], flats["after"])
        for run in cnn_ranks.RUNS:
            assert max_rel_diff([flats[run]], [one]) <= 1e-12, run
