"""nn.backends.numpy_cnn, the CNN's NumPy reference: each operation against a loop written from its
definition, and each backward pass against central finite differences in float64."""
import numpy as np
import pytest

from nn.backends.numpy_cnn import (adam_update, conv2d, conv2d_backward_data, conv2d_backward_weights,
                                   maxpool2x2, maxpool2x2_backward)

rng = np.random.default_rng(7)


def numeric_grad(f, x, probes=12, h=1e-6):
    """(indices, central differences of the scalar f at `probes` random entries of x)."""
    idx = [tuple(rng.integers(0, s) for s in x.shape) for _ in range(probes)]
    out = []
    for i in idx:
        keep = x[i]
        x[i] = keep + h
        up = f()
        x[i] = keep - h
        down = f()
        x[i] = keep
        out.append((up - down) / (2 * h))
    return idx, np.array(out)


@pytest.mark.parametrize("n, c, f, h, w, k", [(2, 3, 4, 9, 7, 3), (1, 1, 6, 28, 28, 3), (3, 2, 5, 6, 8, 5), (2, 4, 3, 5, 5, 1)])
def test_conv2d_is_its_definition(n, c, f, h, w, k):
    x, wt, b = rng.standard_normal((n, c, h, w)), rng.standard_normal((f, c, k, k)), rng.standard_normal(f)
    z = conv2d(x, wt, b)
    assert z.shape == (n, f, h - k + 1, w - k + 1)
    want = np.empty_like(z)
    for ni, fi, hi, wi in np.ndindex(*z.shape):
        want[ni, fi, hi, wi] = b[fi] + np.sum(x[ni, :, hi:hi + k, wi:wi + k] * wt[fi])
    np.testing.assert_allclose(z, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n, c, f, h, w, k", [(2, 3, 4, 9, 7, 3), (3, 1, 2, 6, 8, 5), (2, 4, 3, 5, 5, 1)])
def test_conv2d_backward_passes_match_finite_differences(n, c, f, h, w, k):
    x, wt, b = rng.standard_normal((n, c, h, w)), rng.standard_normal((f, c, k, k)), rng.standard_normal(f)
    r = rng.standard_normal((n, f, h - k + 1, w - k + 1))              # L = sum(r * conv2d(x, w, b))

    def loss():
        return float(np.sum(r * conv2d(x, wt, b)))

    dx = conv2d_backward_data(r, wt)
    dw, db = conv2d_backward_weights(r, x)
    assert dx.shape == x.shape and dw.shape == wt.shape and db.shape == b.shape
    for array, grad in ((x, dx), (wt, dw), (b, db)):
        idx, numeric = numeric_grad(loss, array)
        np.testing.assert_allclose([grad[i] for i in idx], numeric, rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("h, w", [(4, 6), (5, 7), (26, 26), (11, 11)])
def test_maxpool_is_each_windows_maximum_and_routes_its_gradient(h, w):
    x = rng.standard_normal((2, 3, h, w))
    y, where = maxpool2x2(x)
    assert y.shape == (2, 3, h // 2, w // 2)
    for ni, ci, hi, wi in np.ndindex(*y.shape):
        window = x[ni, ci, 2 * hi:2 * hi + 2, 2 * wi:2 * wi + 2]
        assert y[ni, ci, hi, wi] == window.max() and window.flat[where[ni, ci, hi, wi]] == window.max()
    r = rng.standard_normal(y.shape)
    dx = maxpool2x2_backward(r, where, x.shape)
    idx, numeric = numeric_grad(lambda: float(np.sum(r * maxpool2x2(x)[0])), x, probes=40)
    np.testing.assert_allclose([dx[i] for i in idx], numeric, rtol=1e-7, atol=1e-7)
    assert np.count_nonzero(dx) == y.size                           # one entry per window, none in a dropped edge


def test_maxpool_gives_a_tie_to_the_first_position():
    y, where = maxpool2x2(np.ones((1, 1, 2, 2)))
    assert y[0, 0, 0, 0] == 1 and where[0, 0, 0, 0] == 0


def test_adam_is_keras_update():
    w, g = rng.standard_normal(5), rng.standard_normal(5)
    m, v = np.zeros(5), np.zeros(5)
    w0 = w.copy()
    adam_update(w, g, m, v, step=1)
    # step 1: m = 0.1 g, v = 0.001 g^2, so the step is lr * sqrt(0.001)/0.1 * 0.1 g / (sqrt(0.001) |g| + eps)
    np.testing.assert_allclose(w, w0 - 1e-3 * np.sqrt(1e-3) * g / (np.sqrt(1e-3) * np.abs(g) + 1e-7), rtol=1e-12)
    np.testing.assert_allclose(m, 0.1 * g, rtol=1e-12)
    np.testing.assert_allclose(v, 1e-3 * g * g, rtol=1e-12)
    adam_update(w, g, m, v, step=2)
    np.testing.assert_allclose(m, 0.19 * g, rtol=1e-12)


@pytest.mark.parametrize("activation", [None, "relu", "sigmoid"])
def test_the_kernel_families_references_are_this_reference(activation):
    """kernels.conv2d and conv2d_dgrad check the GPU kernels against references of their own (kernels/
    imports nothing of nn): they must compute what these finite-difference-checked functions do."""
    from kernels import conv2d as conv_family
    from kernels import conv2d_dgrad as dgrad_family

    x, wt, b = rng.standard_normal((2, 3, 9, 7)), rng.standard_normal((4, 3, 3, 3)), rng.standard_normal(4)
    z = conv2d(x, wt, b)
    act = {None: z, "relu": np.maximum(z, 0), "sigmoid": 1 / (1 + np.exp(-z))}[activation]
    value, _, k = conv_family.reference(conv_family.Problem(2, 3, 9, 7, 4, 3, "float64", activation), x, wt, b)["z"]
    np.testing.assert_allclose(value, act, rtol=1e-12, atol=1e-12)
    assert k == 27
    g, aux = rng.standard_normal(z.shape), rng.uniform(0, 1, x.shape)
    slope = {None: 1.0, "relu": aux > 0, "sigmoid": aux * (1 - aux)}[activation]
    p = dgrad_family.Problem(2, 3, 9, 7, 4, 3, "float64", activation)
    value, _, k = dgrad_family.reference(p, g, wt, aux)["dx"]
    np.testing.assert_allclose(value, conv2d_backward_data(g, wt) * slope, rtol=1e-12, atol=1e-12)
    assert k == 36
