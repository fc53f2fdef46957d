"""nn.cnn on the NumPy backend: the whole network's gradients against float64 finite differences,
steps of Adam and SGD that lower the loss, and steps that do not depend on when their side
branches run."""
import numpy as np
import pytest

from nn.backends import get_backend
from nn.cnn import CNN, CNNStep, init_cnn_params
from nn.layers import LENET, parse_layers
from late_branch import LateBranchBackend


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
    ("conv3x3,pool2,conv4x2,dense6", "relu"),        # conv after a pool: no act' between them
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
