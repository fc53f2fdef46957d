"""autogemm.torch on a GPU: gradcheck in float64 for every layer, float32 against torch's own,
a converted model captured in a CUDA graph and compiled by torch.compile without graph breaks,
inputs of any strides, and the errors for tensors the kernels cannot take."""
import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device for PyTorch", allow_module_level=True)
agt = pytest.importorskip("autogemm.torch")

from autogemm.errors import BadArguments  # noqa: E402


def away_from_kinks(shape, **kw):
    """Random inputs whose ReLU and max-pool kinks are far from the finite differences' steps."""
    x = torch.rand(shape, dtype=torch.float64, device="cuda", **kw) + 0.05
    return x.requires_grad_()


@pytest.mark.parametrize("activation", [None, "relu", "sigmoid"])
def test_linear_passes_gradcheck_in_float64(activation):
    torch.manual_seed(1)
    layer = agt.Linear(7, 5, activation=activation, device="cuda", dtype=torch.float64)
    x = away_from_kinks((6, 7))
    assert torch.autograd.gradcheck(lambda x, w, b: agt.linear(x, w, b, activation), (x, layer.weight, layer.bias))


@pytest.mark.parametrize("pool", [False, True])
@pytest.mark.parametrize("activation", [None, "relu", "sigmoid"])
def test_conv2d_passes_gradcheck_in_float64(activation, pool):
    torch.manual_seed(2)
    layer = agt.Conv2d(3, 4, 3, activation=activation, pool=pool, device="cuda", dtype=torch.float64)
    x = away_from_kinks((2, 3, 8, 7))
    assert torch.autograd.gradcheck(lambda x, w, b: agt.conv2d(x, w, b, activation, pool),
                                    (x, layer.weight, layer.bias))


@pytest.mark.parametrize("activations, widths", [
    (("sigmoid", None), (7, 40, 5)),              # the output layer's backward in one linear_backward pass
    (("relu", "relu", None), (7, 40, 36, 6)),     # and a wide layer's input gradient through nn+drelu
    ((None, "sigmoid"), (7, 6, 5))])              # no activation below: plain GEMMs
def test_a_run_of_linear_layers_passes_gradcheck_in_float64(activations, widths):
    torch.manual_seed(3)
    x = away_from_kinks((6, widths[0]))
    ws = [torch.randn(n, k, dtype=torch.float64, device="cuda", requires_grad=True) / k ** 0.5
          for k, n in zip(widths, widths[1:])]
    b = torch.randn(widths[1], dtype=torch.float64, device="cuda", requires_grad=True)

    def chain(x, b, *ws):
        return agt.functional.linear_chain(x, ws, [b] + [None] * (len(ws) - 1), activations)

    assert torch.autograd.gradcheck(chain, (x, b, *ws))


def test_a_run_of_linear_layers_takes_weights_of_any_strides():
    """A transposed weight (tied, or ported from (in, out) storage): its gradient contiguous, right."""
    torch.manual_seed(5)
    x = torch.rand(9, 6, dtype=torch.float64, device="cuda")
    w = torch.randn(6, 6, dtype=torch.float64, device="cuda", requires_grad=True)
    agt.functional.linear_chain(x, [w, w.t()], [None, None], ["sigmoid", None]).square().sum().backward()
    ours, w.grad = w.grad, None
    (torch.sigmoid(x @ w.t()) @ w).square().sum().backward()
    torch.testing.assert_close(ours, w.grad)


@pytest.mark.parametrize("precision, rtol, atol", [("fp32", 1e-3, 1e-5), ("tf32", 2e-2, 2e-4)])
def test_a_converted_mlp_runs_as_one_op_with_torchs_gradients(precision, rtol, atol, monkeypatch):
    """In float32 against torch's, at fp32 and at tf32 (where the output layer's pass stores the
    input gradient transposed for the first layer's weight GEMM); the output bias's gradient from
    that same pass."""
    torch.manual_seed(4)
    nn = torch.nn
    theirs = nn.Sequential(nn.Flatten(), nn.Linear(784, 1000), nn.Sigmoid(), nn.Linear(1000, 10)).cuda()
    ours = agt.convert(nn.Sequential(nn.Flatten(), nn.Linear(784, 1000), nn.Sigmoid(), nn.Linear(1000, 10)).cuda())
    ours.load_state_dict(theirs.state_dict())
    x, labels = torch.rand(800, 784, device="cuda"), torch.randint(0, 10, (800,), device="cuda")
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    y_theirs = theirs(x)
    torch.nn.functional.cross_entropy(y_theirs, labels).backward()
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", precision == "tf32")
    y = ours(x)
    assert type(ours) is agt.Sequential and "linear_chain" in type(y.grad_fn).__name__
    torch.nn.functional.cross_entropy(y, labels).backward()
    torch.testing.assert_close(y, y_theirs, rtol=rtol / 10, atol=atol)
    for a, b in zip(ours.parameters(), theirs.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=rtol, atol=atol)


@pytest.mark.parametrize("input_grad", [False, True])
def test_a_runs_frozen_layers_get_no_gradient_and_the_others_torchs(input_grad):
    """The first layer frozen and the second's weight: nothing below the second layer runs unless the
    input's gradient is wanted; every gradient asked for is torch's."""
    import copy

    torch.manual_seed(6)
    nn = torch.nn
    plain = nn.Sequential(nn.Linear(784, 100), nn.Sigmoid(), nn.Linear(100, 50), nn.ReLU(), nn.Linear(50, 10)).cuda()
    ours = agt.convert(copy.deepcopy(plain))
    x = torch.rand(64, 784, device="cuda")
    grads = []
    for model in (plain, ours):
        model[0].requires_grad_(False)
        model[2].weight.requires_grad_(False)
        xs = x.clone().requires_grad_(input_grad)
        model(xs).square().sum().backward()
        grads.append([p.grad for p in model.parameters()] + [xs.grad])
    assert "linear_chain" in type(ours(x).grad_fn).__name__
    for theirs_grad, our_grad in zip(*grads):
        assert (theirs_grad is None) == (our_grad is None)
        if our_grad is not None:
            torch.testing.assert_close(our_grad, theirs_grad, rtol=1e-3, atol=1e-4)


def lenet_like():
    torch.manual_seed(0)
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(1, 6, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 10, 3), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(250, 128), nn.ReLU(), nn.Linear(128, 10)).cuda()


def test_a_converted_model_computes_torchs_outputs_and_gradients_in_float32(monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    theirs = lenet_like()
    ours = agt.convert(lenet_like())
    x = torch.rand(64, 1, 28, 28, device="cuda")
    for model in (theirs, ours):
        model(x).square().sum().backward()
    assert torch.allclose(ours(x), theirs(x), rtol=1e-4, atol=1e-5)
    for a, b in zip(ours.parameters(), theirs.parameters()):
        assert torch.allclose(a.grad, b.grad, rtol=1e-3, atol=1e-4)


def test_a_converted_step_replays_in_a_cuda_graph_as_it_runs_eagerly():
    model = agt.convert(lenet_like())
    x, labels = torch.rand(128, 1, 28, 28, device="cuda"), torch.randint(0, 10, (128,), device="cuda")

    def step():
        model.zero_grad(set_to_none=False)
        torch.nn.functional.cross_entropy(model(x), labels).backward()
        return [p.grad.clone() for p in model.parameters()]

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):                 # warm-up: kernels compiled, scratch sized
        eager = step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        grads = step()
    graph.replay()
    torch.cuda.synchronize()
    assert all(torch.equal(a, b) for a, b in zip(grads, eager))


def test_torch_compile_traces_a_converted_model_without_graph_breaks():
    model = agt.convert(lenet_like())
    x = torch.rand(32, 1, 28, 28, device="cuda")
    explained = torch._dynamo.explain(model)(x)
    assert explained.graph_break_count == 0
    assert torch.allclose(torch.compile(model)(x), model(x))


def test_an_output_changed_in_place_keeps_its_gradient_where_no_activation_needs_it():
    """As torch's own layers allow: y is saved for the backward pass only where act' reads it."""
    torch.manual_seed(5)
    x, w = torch.rand(8, 6, device="cuda"), torch.rand(4, 6, device="cuda", requires_grad=True)
    torch.nn.functional.relu(agt.linear(x, w), inplace=True).sum().backward()
    conv = agt.Conv2d(2, 3, 3, pool=True, device="cuda")
    conv(torch.rand(2, 2, 9, 9, device="cuda")).add_(1).sum().backward()
    assert w.grad is not None and conv.weight.grad is not None


def test_an_input_of_other_strides_gives_the_contiguous_ones_result():
    """A column-major input is read as it is (a transposed GEMM: another kernel, its sums in another
    order, so within float32's rounding); a channels-last image is copied once, so bit for bit."""
    layer = agt.Linear(16, 8, activation="relu", device="cuda")
    x = torch.rand(16, 12, device="cuda").t()                  # (12, 16), column-major
    torch.testing.assert_close(layer(x), layer(x.contiguous()), rtol=1e-6, atol=1e-6)
    conv = agt.Conv2d(2, 3, 3, device="cuda")
    images = torch.rand(4, 9, 9, 2, device="cuda").permute(0, 3, 1, 2)   # channels last
    assert torch.equal(conv(images), conv(images.contiguous()))


def test_tensors_the_kernels_cannot_take_are_refused_in_one_line():
    w = torch.rand(3, 4, device="cuda")
    with pytest.raises(BadArguments, match="weight must be float32 or float64 like the others, got float64"):
        agt.linear(torch.rand(2, 4, device="cuda"), w.double())
    with pytest.raises(BadArguments, match="x is on cpu"):
        agt.linear(torch.rand(2, 4), w)
    with pytest.raises(BadArguments, match="must agree"):
        agt.linear(torch.rand(2, 5, device="cuda"), w)


@pytest.mark.parametrize("column_major", [False, True])
@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (False, True), (True, False), (True, True)])
def test_gemm_on_tensors_of_either_order_equals_torchs_matmul(trans_a, trans_b, column_major):
    torch.manual_seed(4)
    m, n, k = 130, 90, 70
    a = torch.randn((k, m) if trans_a else (m, k), dtype=torch.float64, device="cuda")
    b = torch.randn((n, k) if trans_b else (k, n), dtype=torch.float64, device="cuda")
    if column_major:                                            # the same values, column-major
        a, b = (x.t().contiguous().t() for x in (a, b))
    want = (a.t() if trans_a else a) @ (b.t() if trans_b else b)
    got = agt.gemm(a, b, trans_a=trans_a, trans_b=trans_b)
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)


def test_linear_cross_entropy_equals_torchs_loss_and_gradients():
    torch.manual_seed(6)
    x = torch.rand(50, 30, dtype=torch.float64, device="cuda", requires_grad=True)
    w = torch.randn(10, 30, dtype=torch.float64, device="cuda", requires_grad=True)
    b = torch.randn(10, dtype=torch.float64, device="cuda", requires_grad=True)
    labels = torch.randint(0, 10, (50,), device="cuda")
    loss, logits = agt.linear_cross_entropy(x, w, b, labels)
    (2 * loss).backward()
    got = [t.grad.clone() for t in (x, w, b)]
    for t in (x, w, b):
        t.grad = None
    want_logits = torch.nn.functional.linear(x, w, b)
    want = torch.nn.functional.cross_entropy(want_logits, labels)
    (2 * want).backward()
    assert torch.allclose(loss, want, rtol=1e-12) and torch.allclose(logits, want_logits, rtol=1e-12)
    assert all(torch.allclose(g, t.grad, rtol=1e-10, atol=1e-12) for g, t in zip(got, (x, w, b)))
