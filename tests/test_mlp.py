"""The NumPy backend against plain NumPy expressions, the MLP's gradients against finite differences,
the fused single-rank update against gradient-then-SGD, and training accuracy on Fashion-MNIST. The
step's tests run with the output layer's backward pass both ways: with its forward pass, and apart
(Backend.linear_backward, which a large output-layer input gets)."""
import itertools
import json
import warnings

import numpy as np
import pytest

from nn import allreduce as allreduce_module

from nn import mlp
from nn.backends import ACTIVATIONS, EPILOGUES, get_backend
from nn.backends.base import Backend
from nn.mlp import MLP, Step, init_params
from late_branch import LateBranchBackend

DTYPES = (np.float32, np.float64)
TOL = {np.float32: 1e-5, np.float64: 1e-13}


def sigmoid(z):
    return 1 / (1 + np.exp(-z))


def act(name, z):
    return sigmoid(z) if name == "sigmoid" else np.maximum(z, 0)


def rel_err(got, want):
    return np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-300)


# ---------------------------------------------------------------- the backend's operations

def reference_gemm(a, b, alpha, beta, trans_a, trans_b, c, epilogue, bias, aux):
    """The same contract as Backend.gemm, written as one plain expression per epilogue, in float64."""
    r = alpha * (a.T if trans_a else a) @ (b.T if trans_b else b) + (beta * c if beta else 0)
    if epilogue == "bias":
        return r + bias
    if epilogue and epilogue.startswith("bias_"):
        return act(epilogue[5:], r + bias)
    if epilogue == "dsigmoid":
        return r * aux * (1 - aux)
    if epilogue == "drelu":
        return r * (aux > 0)
    return r


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("trans_a,trans_b", list(itertools.product([False, True], repeat=2)))
@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("alpha,beta,c_is", [(1.0, 0.0, None), (2.0, 5.0, "out"), (-0.5, 1.0, "other"), (2.0, 0.0, "other")])
def test_gemm_matches_numpy(dtype, trans_a, trans_b, epilogue, alpha, beta, c_is):
    bk = get_backend("numpy", dtype)
    rng = np.random.default_rng(1)
    m, n, k = 7, 5, 6
    a = rng.standard_normal((k, m) if trans_a else (m, k))  # (M, K) or its transpose, float64
    b = rng.standard_normal((n, k) if trans_b else (k, n))
    c = rng.standard_normal((m, n))
    bias = rng.standard_normal(n)
    aux = sigmoid(rng.standard_normal((m, n))) if epilogue == "dsigmoid" else rng.standard_normal((m, n))
    out = bk.asarray(c if c_is == "out" else rng.standard_normal((m, n)))
    other = bk.asarray(c)
    got = bk.gemm(bk.asarray(a), bk.asarray(b), out, alpha=alpha, beta=beta, trans_a=trans_a, trans_b=trans_b,
                  c=other if c_is == "other" else None, epilogue=epilogue, bias=bk.asarray(bias), aux=bk.asarray(aux))
    assert got is out and out.dtype == dtype
    want = reference_gemm(a, b, alpha, beta, trans_a, trans_b, c, epilogue, bias, aux)
    assert rel_err(out, want) < TOL[dtype]


def test_gemm_with_empty_k_is_beta_c():
    bk = get_backend("numpy", np.float64)
    w = bk.asarray(np.arange(6.0).reshape(2, 3))
    bk.gemm(bk.empty((0, 2)), bk.empty((0, 3)), w, trans_a=True, alpha=-1.0, beta=0.5, c=w)
    assert np.array_equal(w, 0.5 * np.arange(6.0).reshape(2, 3))


def test_sigmoid_epilogue_saturates_without_warnings():
    bk = get_backend("numpy", np.float32)
    out = bk.empty((1, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bk.gemm(bk.asarray(np.array([[1.0]])), bk.asarray(np.array([[-1e4], [1e4]])), out, trans_b=True,
                epilogue="bias_sigmoid", bias=bk.zeros(2))
    assert out.tolist() == [[0.0, 1.0]]


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_xent(dtype):
    bk = get_backend("numpy", dtype)
    rng = np.random.default_rng(2)
    z = rng.standard_normal((9, 4)) * 30  # large logits: the max shift must keep exp finite
    y = rng.integers(0, 4, 9)
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    grad, loss = bk.empty((9, 4)), bk.asarray(np.array([1.5]))
    bk.softmax_xent(bk.asarray(z), bk.asarray(y), grad, 0.25, loss)
    onehot = np.eye(4)[y]
    assert rel_err(grad, (p - onehot) * 0.25) < TOL[dtype]
    zs = z - z.max(1, keepdims=True)
    want_loss = 1.5 + np.sum(np.log(np.exp(zs).sum(1)) - zs[np.arange(9), y])
    assert rel_err(loss, np.array([want_loss])) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
def test_column_sums_and_sgd_update(dtype):
    bk = get_backend("numpy", dtype)
    rng = np.random.default_rng(3)
    g, w, d = rng.standard_normal((6, 4)), rng.standard_normal(4), rng.standard_normal(4)
    assert rel_err(bk.column_sums(bk.asarray(g), bk.empty(4), scale=0.5), 0.5 * g.sum(0)) < TOL[dtype]
    assert np.array_equal(bk.column_sums(bk.empty((0, 4)), bk.empty(4)), np.zeros(4))
    b_dev = bk.asarray(w)
    bk.column_sums(bk.asarray(g), b_dev, scale=-0.1, accumulate=True)  # the fused bias step
    assert rel_err(b_dev, w - 0.1 * g.sum(0)) < TOL[dtype]
    w_dev = bk.asarray(w)
    assert bk.sgd_update(w_dev, bk.asarray(d), 0.1, 0.01) is w_dev
    assert rel_err(w_dev, w - 0.1 * (d + 0.01 * w)) < TOL[dtype]


# ---------------------------------------------------------------- the MLP's gradients

def reference_loss(params, x, y, activation, reg):
    """Mean cross-entropy + 0.5 reg sum ||W||^2, in plain float64 NumPy."""
    a = x
    for w, b in params[:-1]:
        a = act(activation, a @ w.T + b)
    z = a @ params[-1][0].T + params[-1][1]
    zmax = z.max(1, keepdims=True)
    logp = z - zmax - np.log(np.exp(z - zmax).sum(1, keepdims=True))
    return -logp[np.arange(len(y)), y].mean() + 0.5 * reg * sum(np.sum(w * w) for w, _ in params)


@pytest.fixture(params=["with-forward", "apart", "apart-column-major"], ids=lambda p: f"output-backward-{p}")
def output_backward_apart(request, monkeypatch):
    """Every Step made in the test carries the output layer's gradient down apart (any size is
    large) or with the forward pass (none is); apart, the input gradient that linear_backward
    writes for the first layer's weight GEMM alone laid out column-major or not (as the GPU
    backend chooses)."""
    apart = request.param != "with-forward"
    monkeypatch.setattr(mlp, "OUTPUT_BACKWARD_APART_BYTES", -1 if apart else 2**62)
    if request.param == "apart-column-major":
        monkeypatch.setattr(Backend, "empty_input_gradient", lambda self, shape, classes: self.empty(shape[::-1]).T)
    return apart


def tiny_problem(hidden, seed=0, rows=6):
    """A 5-input, 3-class net with weights large enough to exercise the nonlinearity, and a batch."""
    rng = np.random.default_rng(seed)
    sizes = (5, *hidden, 3)
    params = [(w * 60, rng.standard_normal(b.shape) * 0.5) for w, b in init_params(sizes, "cme213", seed)]
    x = rng.standard_normal((rows, 5))  # (rows, 5) float64
    y = rng.integers(0, 3, rows)  # (rows,) int64
    return sizes, params, x, y


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("hidden", [(4,), (4, 3)])
def test_gradients_match_finite_differences(activation, hidden, output_backward_apart, request):
    reg, h = 0.1, 1e-5
    sizes, params, x, y = tiny_problem(hidden)
    bk = get_backend("numpy", np.float64)
    model = MLP(bk, sizes, activation, params)
    step = Step(model, len(y), len(y), lr=0.1, reg=reg)
    assert step.output_backward_apart == output_backward_apart
    column_major = step.deltas[0].strides[0] == step.deltas[0].itemsize     # G1: two layers' alone
    assert column_major == (request.node.callspec.params["output_backward_apart"] == "apart-column-major"
                            and len(hidden) == 1)
    step.forward(bk.asarray(x), bk.asarray(y))
    step.backward()
    loss = step.loss_sum[0] / len(y) + model.reg_term(reg)
    assert abs(loss - reference_loss(params, x, y, activation, reg)) < 1e-14 * abs(loss)
    for l, (w, b) in enumerate(params):
        # The step's gradient: dW holds the data term; the update adds reg * W (as sgd_update does).
        for name, param, grad in (("W", w, step.dW[l] + reg * w), ("b", b, step.db[l])):
            numeric = np.zeros_like(param)
            for i in np.ndindex(param.shape):
                saved = param[i]
                param[i] = saved + h
                up = reference_loss(params, x, y, activation, reg)
                param[i] = saved - h
                down = reference_loss(params, x, y, activation, reg)
                param[i] = saved
                numeric[i] = (up - down) / (2 * h)
            err = np.linalg.norm(grad - numeric) / np.linalg.norm(numeric)
            assert err < 1e-6, f"{name}{l}: relative error {err:.2e}"


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("hidden", [(4,), (4, 3)])
def test_fused_update_equals_grad_then_sgd(activation, hidden, output_backward_apart):
    sizes, params, x, y = tiny_problem(hidden, seed=4, rows=8)
    bk = get_backend("numpy", np.float64)
    fused, plain = (MLP(bk, sizes, activation, params) for _ in range(2))
    for model, weight_grads in ((fused, False), (plain, True)):
        step = Step(model, 8, 8, lr=0.3, reg=0.05)
        for _ in range(3):
            step.forward(bk.asarray(x), bk.asarray(y))
            step.backward(weight_grads)
            step.update() if weight_grads else step.update_fused()
    for (wf, bf), (wp, bp) in zip(fused.params_numpy(), plain.params_numpy()):
        assert rel_err(wf, wp) < 1e-15 * 8 and rel_err(bf, bp) == 0


@pytest.mark.parametrize("hidden", [(4,), (4, 3)])
def test_fused_update_does_not_depend_on_when_its_side_branch_runs(hidden, output_backward_apart):
    sizes, params, x, y = tiny_problem(hidden, seed=5, rows=8)
    results = []
    for bk in (get_backend("numpy", np.float64), LateBranchBackend(np.float64)):
        model = MLP(bk, sizes, "sigmoid", params)
        step = Step(model, 8, 8, lr=0.3, reg=0.05)
        for _ in range(3):
            step.train_batch(bk.asarray(x), bk.asarray(y))
        results.append(model.params_numpy())
    for (w0, b0), (w1, b1) in zip(*results):
        assert np.array_equal(w0, w1) and np.array_equal(b0, b1)


class BucketedSum:
    """A stand-in for NCCL's all-reduce over two ranks with the same gradients: each buffer doubled,
    in a side branch when the backend defers it; `buckets` as NcclAllreduce's."""

    def __init__(self, backend, buckets):
        self.backend, self.buckets, self.calls = backend, buckets, []

    def __call__(self, buf):
        def double():
            self.calls.append(buf.size)
            buf[...] = 2 * buf
        if getattr(self.backend, "inside", False):
            self.backend.deferred.append(double)
        else:
            double()


@pytest.mark.parametrize("hidden", [(4,), (5, 3)])
def test_the_overlapped_all_reduce_equals_the_one_after_the_backward_pass_bit_for_bit(monkeypatch, hidden,
                                                                                       output_backward_apart):
    """Each layer's gradients (a bucket each: no least size) all-reduced on a side branch that runs
    late (after the whole backward pass) or at once, against the same buckets after the backward
    pass, and the whole buffer."""
    monkeypatch.setattr(allreduce_module, "BUCKET_BYTES", 0)
    sizes, params, x, y = tiny_problem(hidden, seed=6, rows=8)
    results, calls = [], []
    for bk, buckets in ((LateBranchBackend(np.float64), "overlap"), (get_backend("numpy", np.float64), "overlap"),
                        (get_backend("numpy", np.float64), "after"), (get_backend("numpy", np.float64), None)):
        step = Step(MLP(bk, sizes, "relu", params), 8, 16, lr=0.2, reg=0.01)
        allreduce = BucketedSum(bk, buckets)
        for _ in range(3):
            step.train_batch(bk.asarray(x), bk.asarray(y), allreduce=allreduce)
        results.append(step.model.params_numpy())
        calls.append(allreduce.calls)
    layer_sizes = [(n_in + 1) * n_out for n_in, n_out in zip(sizes[:-1], sizes[1:])][::-1]
    assert calls[0] == calls[1] == calls[2] == layer_sizes * 3 and calls[3] == [sum(layer_sizes)] * 3
    for layer in zip(*results):
        assert all(np.array_equal(w, layer[0][0]) and np.array_equal(b, layer[0][1]) for w, b in layer)


def test_rank_with_no_rows_contributes_zero_gradient(output_backward_apart):
    sizes, params, x, y = tiny_problem((4,))
    bk = get_backend("numpy", np.float64)
    step = Step(MLP(bk, sizes, "relu", params), 0, 30, lr=0.1, reg=0.1)
    step.grads[...] = np.nan
    step.forward(bk.asarray(x[:0]), bk.asarray(y[:0]))
    step.backward()
    assert np.array_equal(step.grads, np.zeros_like(step.grads)) and step.loss_sum[0] == 0


def test_init_params():
    a, b = init_params((784, 100, 10), "cme213", 7), init_params((784, 100, 10), "cme213", 7)
    assert all(np.array_equal(x[0], y[0]) for x, y in zip(a, b))
    assert [w.shape for w, _ in a] == [(100, 784), (10, 100)] and not any(bias.any() for _, bias in a)
    assert abs(a[0][0].std() - 0.01) < 1e-3
    assert abs(init_params((784, 100, 10), "he", 7)[0][0].std() - np.sqrt(2 / 784)) < 2e-3


# ---------------------------------------------------------------- it learns

@pytest.mark.slow
def test_trains_fashion_mnist_to_84_percent(tmp_path):
    from nn.data import FILES, SYSTEM_DIRS
    from nn.train import main

    data_dir = SYSTEM_DIRS["fashion-mnist"]
    if not all((data_dir / f"{stem}.gz").exists() for stem in FILES):
        pytest.skip(f"Fashion-MNIST is not in {data_dir} (apt install dataset-fashion-mnist)")
    log = tmp_path / "log.json"
    argv = ["--data-dir", str(data_dir), "--hidden", "256", "--activation", "relu", "--init", "he", "--batch", "100", "--lr", "0.1",
            "--epochs", "4", "--dtype", "float32", "--scale", "unit", "--quiet", "--log", str(log)]
    assert main(argv) == 0
    final = json.loads(log.read_text())["final"]
    assert final["test_accuracy"] >= 0.84, final
