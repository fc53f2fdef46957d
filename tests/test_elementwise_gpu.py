"""GPU checks of the elementwise, softmax + cross-entropy, column-sum and output-layer (both ways) families against
NumPy."""
import dataclasses

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

SHAPES = [(1, 1), (3, 7), (800, 10), (800, 1000), (37, 1001)]


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows,cols", SHAPES)
def test_elementwise_ops(rows, cols, dtype):
    import cupy

    import autogemm

    rng = np.random.default_rng(rows * cols)
    x = rng.standard_normal((rows, cols)).astype(dtype)
    y = rng.uniform(-0.5, 1.0, (rows, cols)).astype(dtype)
    bias = rng.standard_normal(cols).astype(dtype)
    want = {
        "bias": x + bias, "bias_sigmoid": sigmoid(x.astype(np.float64) + bias),
        "bias_relu": np.maximum(x + bias, 0), "dsigmoid": x * y * (1 - y), "drelu": x * (y > 0),
    }
    tol = 1e-6 if dtype == np.float32 else 1e-14
    for op, expected in want.items():
        out = cupy.full((rows, cols), np.nan, dtype=dtype)
        second = bias if op.startswith("bias") else y
        autogemm.elementwise(op, out, cupy.asarray(x), cupy.asarray(second))
        np.testing.assert_allclose(cupy.asnumpy(out), expected, rtol=tol, atol=tol, err_msg=op)
    w = cupy.asarray(y)
    autogemm.sgd_update(w, cupy.asarray(x), 0.1, 1e-3)
    np.testing.assert_allclose(cupy.asnumpy(w), y - 0.1 * (x + 1e-3 * y), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows,cols", [(1, 1), (800, 10), (400, 10), (33, 100), (5, 1000)])
def test_softmax_xent(rows, cols, dtype):
    import cupy

    import autogemm

    rng = np.random.default_rng(rows + cols)
    z = (rng.standard_normal((rows, cols)) * 5).astype(dtype)
    labels = rng.integers(0, cols, rows).astype(np.int32)
    scale = 1.0 / rows
    z64 = z.astype(np.float64)
    p = np.exp(z64 - z64.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    onehot = np.eye(cols)[labels]
    loss_acc = cupy.zeros(1, dtype=dtype)
    grad = cupy.full((rows, cols), np.nan, dtype=dtype)
    for config in (None, dict(block=64, tpr=8), dict(block=256, tpr=32)):
        loss_acc[...] = 0
        autogemm.softmax_xent(cupy.asarray(z), cupy.asarray(labels), grad, scale, loss_acc, config=config)
        tol = 1e-5 if dtype == np.float32 else 1e-13
        np.testing.assert_allclose(cupy.asnumpy(grad), (p - onehot) * scale, rtol=tol, atol=tol * scale)
        want_loss = -np.log(p[np.arange(rows), labels]).sum()
        assert abs(float(loss_acc[0]) - want_loss) <= tol * max(1.0, abs(want_loss))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows,cols", [(1, 1), (800, 10), (800, 1000), (1001, 37)])
def test_column_sums(rows, cols, dtype):
    import cupy

    import autogemm

    rng = np.random.default_rng(rows)
    g = rng.standard_normal((rows, cols)).astype(dtype)
    b = rng.standard_normal(cols).astype(dtype)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    out = cupy.full(cols, np.nan, dtype=dtype)
    autogemm.column_sums(cupy.asarray(g), out)
    np.testing.assert_allclose(cupy.asnumpy(out), g.astype(np.float64).sum(0), rtol=tol, atol=tol * np.sqrt(rows))
    db = cupy.asarray(b)
    autogemm.column_sums(cupy.asarray(g), db, alpha=-0.01, beta=1.0, config=dict(tx=16, ty=4))
    np.testing.assert_allclose(cupy.asnumpy(db), b - 0.01 * g.astype(np.float64).sum(0), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape,op", [((800, 10, 1000), "sigmoid"), ((400, 10, 100), "relu"),
                                      ((37, 3, 33), "sigmoid"), ((800, 10, 784), "-"), ((1, 32, 4096), "relu"),
                                      ((800, 10, 1000), "logits"), ((37, 32, 130), "logits")])
def test_linear_xent_every_sampled_config_matches_float64(shape, op, dtype):
    """Logits, G, G_in and the loss (or the logits alone) of the default and 12 random configs, within the float64
    reference's bounds (autogemm.tuning.measure), outputs poisoned before every run."""
    from autogemm.runtime.device import this_device
    from autogemm.runtime.family import family
    from autogemm.store.keys import make_key
    from autogemm.tuning.measures import measure_for

    key = make_key("linear_xent", shape, op, dtype)
    device = this_device()
    measure = measure_for(key, device, seed=sum(shape))
    fam = family("linear_xent")
    configs = fam.candidates(measure.problem, device) + fam.sample(measure.problem, device, 12, seed=shape[2])
    from kernels.linear_xent import STATIC_SMEM, w_bytes

    if w_bytes(measure.problem) + STATIC_SMEM <= device.smem_per_block:
        assert {c.w_smem for c in configs} == {False, True}
    for cfg in configs:
        error = measure.verify(measure.launcher(cfg))
        assert error < (1e-5 if dtype == "float32" else 1e-13), fam.instance_name(cfg, measure.problem)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape,op", [((800, 10, 1000), "sigmoid"), ((400, 10, 100), "relu"), ((37, 3, 34), "sigmoid"),
                                      ((8192, 10, 4096), "sigmoid"), ((1, 32, 4096), "relu"), ((200, 10, 250), "relu"),
                                      ((8192, 10, 4096), "sigmoid_t"), ((37, 3, 34), "relu_t"), ((1, 32, 4096), "sigmoid_t")])
def test_linear_backward_every_sampled_config_matches_float64(shape, op, dtype):
    """G_in (row-major, or column-major for an op ending _t) and the SGD steps on dW and db of the
    default and 12 random configs (row slices or none), within the float64 reference's bounds
    (autogemm.tuning.measure), G_in poisoned before every run."""
    from autogemm.runtime.device import this_device
    from autogemm.runtime.family import family
    from autogemm.store.keys import make_key
    from autogemm.tuning.measures import measure_for

    key = make_key("linear_backward", shape, op, dtype)
    device = this_device()
    measure = measure_for(key, device, seed=sum(shape))
    fam = family("linear_backward")
    configs = fam.candidates(measure.problem, device) + fam.sample(measure.problem, device, 12, seed=shape[2])
    if shape[0] > 64:
        assert {c.split > 1 for c in configs} == {False, True}
    for cfg in configs:
        error = measure.verify(measure.launcher(cfg))
        assert error < (1e-5 if dtype == "float32" else 1e-13), fam.instance_name(cfg, measure.problem)


@pytest.mark.parametrize("op", ["sigmoid", "sigmoid_t"])
def test_linear_backward_adds_the_layers_own_bias_gradient_in_every_sampled_config(op):
    """db_out = alpha * column sums of G + db_beta * db_out beside the rest (autogemm.torch's chain:
    the output bias's gradient without a launch of its own), with row slices and without."""
    import cupy

    import autogemm
    from autogemm.runtime.device import this_device
    from autogemm.runtime.family import family
    from autogemm.store.keys import make_key
    from autogemm.tuning.measures import measure_for
    from autogemm.tuning.verify import compare
    from kernels import linear_backward

    key = make_key("linear_backward", (800, 10, 1000), op, "float32")
    device = this_device()
    measure = measure_for(key, device, seed=5)
    problem = dataclasses.replace(measure.problem, bias_grad=True)
    fam = family("linear_backward")
    configs = fam.candidates(problem, device) + fam.sample(problem, device, 4, seed=5)
    assert {c.split > 1 for c in configs} == {False, True}
    g, w, a = (x.get() for x in (measure.g, measure.w, measure.a))
    db_out0 = np.random.default_rng(6).standard_normal(10).astype(np.float32)
    expected = linear_backward.reference(problem, g, w, a, w, measure.host["db"], **measure.STEP, db_out=db_out0)
    for cfg in configs:
        out = measure.out
        out["dw"].set(w)
        out["db"].set(measure.host["db"])
        db_out = cupy.asarray(db_out0)
        autogemm.linear_backward(measure.g, measure.w, measure.a, out["grad_in"], "sigmoid", out["dw"], out["db"],
                                 **measure.STEP, db_out=db_out, config=cfg)
        for name, got in (("db_out", db_out), ("dw", out["dw"]), ("db", out["db"])):
            verdict = compare(got, *(cupy.asarray(x) for x in expected[name][:2]), expected[name][2], "float32")
            assert verdict.ok, f"{fam.instance_name(cfg, problem)} {name}: {verdict.describe()}"


@pytest.mark.parametrize("shape,activation", [((800, 10, 1000), "sigmoid"), ((8192, 10, 4096), "sigmoid"),
                                              ((37, 3, 34), "relu")])
def test_output_layer_reads_its_input_in_bfloat16(shape, activation):
    """linear_xent and linear_backward on A's bfloat16 bits (the trainer's output layer input at
    precision bf16), tuned configs: every output within float32's bound of the float64 reference on
    A's bfloat16 values; linear_backward's input gradient in bfloat16 alone within half a unit more."""
    import cupy

    import autogemm
    from autogemm.tuning.verify import OPERAND_ROUNDING, compare
    from kernels import linear_backward, linear_xent
    from kernels.bf16 import bf16_bits, bf16_values

    rows, classes, inputs = shape
    rng = np.random.default_rng(rows + inputs)
    a = (rng.uniform(0.01, 0.99, (rows, inputs)) if activation == "sigmoid"
         else np.maximum(rng.standard_normal((rows, inputs)), 0)).astype(np.float32)    # A: (rows, K)
    a16 = bf16_bits(a)                                                                  # its bits, uint16
    w = (rng.standard_normal((classes, inputs)) / np.sqrt(inputs)).astype(np.float32)  # W: (C, K)
    b = rng.standard_normal(classes).astype(np.float32)
    labels = rng.integers(0, classes, rows).astype(np.int32)
    g = (rng.standard_normal((rows, classes)) / rows).astype(np.float32)               # G: (rows, C)
    dev = {name: cupy.asarray(x) for name, x in dict(a16=a16, w=w, b=b, labels=labels, g=g).items()}

    got = {name: cupy.full(s, np.nan, np.float32) for name, s in
           (("logits", (rows, classes)), ("grad", (rows, classes)), ("grad_in", (rows, inputs)))}
    got["loss"] = cupy.zeros(1, np.float32)
    autogemm.linear_xent(dev["a16"], dev["w"], dev["b"], dev["labels"], got["logits"], got["grad"], 1 / rows,
                         got["loss"], got["grad_in"], activation)
    problem = linear_xent.Problem(rows, classes, inputs, "float32", activation, a_bf16=True)
    for name, (value, magnitude, k) in linear_xent.reference(problem, a16, w, b, labels, 1 / rows).items():
        verdict = compare(cupy.asnumpy(got[name]).reshape(np.shape(value)), value, magnitude, k, np.float32)
        assert verdict.ok, f"linear_xent {name}: {verdict.describe()}"

    dw, db = cupy.full((classes, inputs), np.nan, np.float32), cupy.full(inputs, np.nan, np.float32)
    grad_in16 = cupy.full((rows, inputs), 0x7fc0, np.uint16)                            # bfloat16 NaNs
    autogemm.linear_backward(dev["g"], dev["w"], dev["a16"], None, activation, dw, db, grad_in_bf16=grad_in16)
    problem = linear_backward.Problem(rows, classes, inputs, "float32", activation, grad_in_bf16=True,
                                      grad_in_f32=False, a_bf16=True)
    expected = linear_backward.reference(problem, g, w, a16, np.zeros((classes, inputs)), np.zeros(inputs), 1.0, 0.0, 0.0)
    outputs = {"dw": cupy.asnumpy(dw), "db": cupy.asnumpy(db), "grad_in": bf16_values(cupy.asnumpy(grad_in16))}
    for name, (value, magnitude, k) in expected.items():
        rounding = OPERAND_ROUNDING["bf16"] if name == "grad_in" else 0.0
        verdict = compare(outputs[name], value, magnitude, k, np.float32, output_rounding=rounding)
        assert verdict.ok, f"linear_backward {name}: {verdict.describe()}"


@pytest.mark.parametrize("activation", [None, "sigmoid"])
def test_linear_xent_float64_at_the_large_networks_output_layer(activation):
    """nn.train --hidden 4096 --batch 8192 --dtype float64's output layer: 8192 x 10 x 4096, W (320 KiB)
    too large for shared memory, the config lookup gives (what --use-tuned runs): logits, G, the loss
    and G_in within float64's bound of the NumPy reference, outputs poisoned first."""
    import cupy

    import autogemm
    from autogemm.tuning.verify import compare
    from kernels import linear_xent

    rows, classes, inputs = 8192, 10, 4096
    rng = np.random.default_rng(4096)
    a = rng.uniform(0.01, 0.99, (rows, inputs))                        # A: (rows, K) float64, sigmoid outputs
    w = rng.standard_normal((classes, inputs)) / np.sqrt(inputs)       # W: (C, K)
    b = rng.standard_normal(classes)                                   # b: (C,)
    labels = rng.integers(0, classes, rows).astype(np.int32)
    got = {name: cupy.full(s, np.nan) for name, s in
           (("logits", (rows, classes)), ("grad", (rows, classes)), ("grad_in", (rows, inputs)))}
    got["loss"] = cupy.zeros(1)
    autogemm.linear_xent(cupy.asarray(a), cupy.asarray(w), cupy.asarray(b), cupy.asarray(labels), got["logits"],
                         got["grad"], 1 / rows, got["loss"], got["grad_in"] if activation else None, activation)
    problem = linear_xent.Problem(rows, classes, inputs, "float64", activation)
    expected = linear_xent.reference(problem, a, w, b, labels, 1 / rows)
    assert ("grad_in" in expected) == (activation is not None)
    for name, (value, magnitude, k) in expected.items():
        verdict = compare(cupy.asnumpy(got[name]).reshape(np.shape(value)), value, magnitude, k, np.float64)
        assert verdict.ok, f"linear_xent {name}: {verdict.describe()}"
