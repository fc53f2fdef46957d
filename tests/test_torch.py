"""autogemm.torch where no GPU is: the clear error without PyTorch; the custom ops' fake
implementations (shapes through meta tensors, as torch.compile traces them); the calls' one-line
errors; the layers' parameters and state_dict as torch's own, their CPU forward torch's function;
`convert` on a LeNet-like model and on what it must leave alone."""
import importlib.util
import os
import re
import subprocess
import sys

import pytest

from autogemm.errors import AutogemmError, BadArguments
from run_train import ROOT

if importlib.util.find_spec("torch") is not None:
    import torch

    import autogemm.torch as agt
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="PyTorch is not installed")


def test_without_pytorch_the_import_says_what_to_install():
    """Where PyTorch is not installed (as in CI), or hidden from the import."""
    code = ("import sys; sys.modules['torch'] = None\n"
            "try:\n    import autogemm.torch\nexcept Exception as exc:\n    print(type(exc).__name__, exc)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT).stdout
    assert out.strip() == ("AutogemmError autogemm.torch needs PyTorch, which is not installed: "
                           "pip install 'autogemm[torch]'")


@needs_torch
def test_the_ops_fake_implementations_give_the_shapes():
    meta = dict(device="meta")
    x, w = torch.empty(8, 20, **meta), torch.empty(5, 20, **meta)
    assert torch.ops.autogemm.linear(x, w, None, "relu", "fp32").shape == (8, 5)
    dx, dw, db = torch.ops.autogemm.linear_backward(torch.empty(8, 5, **meta), x, w, torch.empty(8, 5, **meta), "relu",
                                                    True, True, "fp32")
    assert (dx.shape, dw.shape, db.shape) == ((8, 20), (5, 20), (5,))
    images, filters = torch.empty(2, 1, 28, 28, **meta), torch.empty(6, 1, 3, 3, **meta)
    y, where = torch.ops.autogemm.conv2d(images, filters, None, "relu", True, "tf32")
    assert y.shape == where.shape == (2, 6, 13, 13) and where.dtype == torch.int8
    y, where = torch.ops.autogemm.conv2d(torch.empty(2, 6, 13, 13, **meta), torch.empty(10, 6, 3, 3, **meta), None,
                                         "none", False, "fp32")
    assert y.shape == (2, 10, 11, 11) and where.numel() == 0
    dx, dw, db = torch.ops.autogemm.conv2d_backward(torch.empty(2, 6, 13, 13, **meta), images, filters,
                                                    torch.empty(2, 6, 13, 13, **meta), where, "relu", True, False,
                                                    True, "fp32")
    assert dx.numel() == 0 and dw.shape == (6, 1, 3, 3) and db.shape == (6,)


@needs_torch
@pytest.mark.parametrize("call, args, message", [
    ("linear", lambda: (torch.ones(4, 3), torch.ones(2, 3)), "x is on cpu; autogemm's kernels run on CUDA tensors"),
    ("linear", lambda: (torch.ones(4, 3, device="meta"), torch.ones(2, 3)), "x is on meta"),
    ("conv2d", lambda: (torch.ones(1, 1, 5, 5, dtype=torch.int32), torch.ones(2, 1, 3, 3)), "x is on cpu"),
])
def test_a_call_on_tensors_it_cannot_take_says_which_in_one_line(call, args, message):
    with pytest.raises(BadArguments, match=message) as caught:
        getattr(agt, call)(*args())
    assert "\n" not in str(caught.value)


@needs_torch
def test_a_bad_activation_or_precision_is_refused_in_one_line():
    with pytest.raises(BadArguments, match="activation 'tanh'"):
        agt.Linear(3, 2, activation="tanh")
    with pytest.raises(BadArguments, match="precision 'fp16'"):
        agt.precision_now(torch.ones(1), "fp16")
    with pytest.raises(BadArguments, match="give one int"):
        agt.Conv2d(1, 2, (3, 5))


@needs_torch
def test_precision_follows_torch_unless_given():
    x, matmul = torch.ones(1), torch.backends.cuda.matmul
    was = matmul.allow_tf32
    try:
        matmul.allow_tf32 = False
        assert agt.precision_now(x) == "fp32"
        matmul.allow_tf32 = True
        assert agt.precision_now(x) == "tf32" and agt.precision_now(x, "bf16") == "bf16"
    finally:
        matmul.allow_tf32 = was
    assert agt.precision_now(x.double(), "bf16") == "fp32"          # float64 keeps its own accuracy


def lenet_like():
    """Seed 001's LeNet-like stack in plain PyTorch."""
    torch.manual_seed(0)
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(1, 6, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 10, 3), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(250, 128), nn.ReLU(), nn.Linear(128, 10))


@needs_torch
def test_convert_swaps_the_layers_keeps_the_parameters_and_computes_the_same_function():
    model = lenet_like()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    params = list(model.parameters())
    x = torch.rand(4, 1, 28, 28)
    want = model(x)
    agt.convert(model)
    kinds = [type(m).__name__ for m in model]
    assert kinds == ["Conv2d", "Identity", "Identity", "Conv2d", "Identity", "Identity", "Flatten", "Linear",
                     "Identity", "Linear"]
    assert all(type(m).__module__ == "autogemm.torch.layers" for m in (model[0], model[3], model[7], model[9]))
    assert (model[0].activation, model[0].pool, model[7].activation, model[9].activation) == ("relu", True, "relu", None)
    assert list(model.parameters()) == params                          # the same Parameter objects
    assert model.state_dict().keys() == before.keys()
    assert torch.equal(model(x), want)                                  # on the CPU: torch's own function


@needs_torch
def test_convert_leaves_what_autogemm_does_not_compute():
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 3, stride=2), nn.MaxPool2d(3),
                          nn.Conv2d(4, 4, (3, 1)), nn.Tanh())
    agt.convert(model)
    assert [type(m) for m in model] == [nn.Conv2d, nn.ReLU, nn.Conv2d, nn.MaxPool2d, nn.Conv2d, nn.Tanh]


@needs_torch
def test_convert_reaches_nested_modules_and_a_bare_layer():
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(nn.Sequential(nn.Linear(4, 3), nn.Sigmoid()))
            self.head = nn.Linear(3, 2)

    net = agt.convert(Net())
    assert type(net.features[0][0]) is agt.Linear and net.features[0][0].activation == "sigmoid"
    assert type(net.head) is agt.Linear and type(net.features[0][1]) is nn.Identity
    assert type(agt.convert(nn.Linear(2, 2))) is agt.Linear


@needs_torch
def test_the_layers_state_dict_loads_into_torchs_and_back():
    ours, theirs = agt.Conv2d(3, 4, 5, activation="relu", pool=True), torch.nn.Conv2d(3, 4, 5)
    theirs.load_state_dict(ours.state_dict())
    ours.load_state_dict(theirs.state_dict())
    x = torch.rand(2, 3, 12, 12)
    assert torch.equal(ours(x), torch.nn.functional.max_pool2d(torch.relu(theirs(x)), 2))


MODELS = ROOT / "examples" / "torch_models.py"


@needs_torch
def test_a_models_launches_are_one_forward_and_backward_pass_converted():
    from autogemm.torch.targets import launches, model_of

    found = [(t.family, t.sizes, t.op) for t in launches(model_of(f"{MODELS}:lenet"), (1, 28, 28), 1000)]
    assert found[:3] == [("conv2d_direct", (1000, 1, 28, 28, 6, 3), "pool"),      # fused with its pool,
                         ("conv2d_direct", (1000, 1, 28, 28, 6, 3), "-"),         # or not: both tuned
                         ("conv2d", (1000, 1, 28, 28, 6, 3), "-")]
    assert ("pool2x2", (1000, 6, 26, 26), "backward") in found
    assert not any(f.startswith("conv2d_dgrad") and s[1] == 1 for f, s, _ in found)   # no gradient to the images
    assert ("conv2d_dgrad_direct", (1000, 6, 13, 13, 10, 3), "-") in found
    # the dense layers, one run: each act' in the GEMM above, the output layer's forward and backward
    # each in one pass
    assert {("gemm", (1000, 128, 250), "nt+bias_relu"), ("gemm", (1000, 128, 100), "nn+drelu"),
            ("gemm", (1000, 250, 128), "nn"), ("gemm", (128, 250, 1000), "tn"), ("colsum", (1000, 128), "-"),
            ("linear_xent", (1000, 10, 80), "logits"), ("linear_backward", (1000, 10, 80), "relu")} <= set(found)
    assert not any(f == "elementwise" for f, _, _ in found) and ("colsum", (1000, 80), "-") not in found
    # the MLP: the output layer's bias gradient in its linear_backward pass; at tf32 that pass stores
    # the input gradient transposed, which the first layer's weight GEMM reads K-major
    mlp = [(t.family, t.sizes, t.op) for t in launches(model_of(f"{MODELS}:mlp"), (784,), 800)]
    assert [t for t in mlp if t[0] != "gemm_wgmma"] == [
        ("gemm", (800, 1000, 784), "nt+bias_sigmoid"), ("linear_xent", (800, 10, 1000), "logits"),
        ("linear_backward", (800, 10, 1000), "sigmoid"), ("gemm", (1000, 784, 800), "tn")]
    mlp = [(t.family, t.sizes, t.op) for t in launches(model_of(f"{MODELS}:mlp"), (784,), 800, ("tf32",))]
    assert [t[1:] for t in mlp if t[0] == "linear_backward" or t[1] == (1000, 784, 800)] == [
        ((800, 10, 1000), "sigmoid_t"), ((1000, 784, 800), "nn"), ((1000, 784, 800), "nn")]   # gemm, gemm_wgmma
    every = launches(model_of(f"{MODELS}:mlp"), (784,), 800, ("fp32", "tf32", "bf16"))
    assert {(t.family, t.op) for t in every if t.sizes == (800, 10, 1000)} >= {("linear_backward", "sigmoid"),
                                                                               ("linear_backward", "sigmoid_t")}


@needs_torch
@pytest.mark.parametrize("spec, message", [
    ("examples/torch_models.py", "give MODULE:FACTORY"),
    ("examples/nowhere.py:lenet", "no file examples/nowhere.py"),
    ("examples/torch_models.py:nope", "has no function nope"),
    ("no_such_module_here:f", "importing no_such_module_here failed: ModuleNotFoundError"),
    ("torch:ones", "ones() failed: TypeError"),
    ("math:pi", "math has no function pi"),
    ("builtins:dict", "dict() returned a dict, not a torch.nn.Module"),
])
def test_a_model_that_cannot_be_had_is_one_line(spec, message):
    from autogemm.torch.targets import model_of

    with pytest.raises(AutogemmError, match=re.escape(message)) as caught:
        model_of(spec)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("argv, message", [
    (["--epochs", "0"], "error: --epochs must be at least 1 (timed after one warm-up epoch), not 0"),
    (["--model", "resnet"], "error: argument --model: invalid choice: 'resnet'"),
    (["--precision", "fp16"], "error: argument --precision: invalid choice: 'fp16'"),
])
def test_the_training_examples_bad_flags_are_one_line(argv, message):
    done = subprocess.run([sys.executable, "examples/torch_train.py", *argv], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(message) and done.stderr.count("\n") == 1


def test_the_training_example_says_what_it_lacks_in_one_line():
    """Without PyTorch (as in CI): what to install; with it but no GPU: that it needs one."""
    if importlib.util.find_spec("torch") is None:
        lacking = "error: autogemm.torch needs PyTorch, which is not installed: pip install 'autogemm[torch]'"
    elif torch.cuda.is_available():
        pytest.skip("PyTorch sees a GPU here: the example would train")
    else:
        lacking = "error: this example trains on a CUDA GPU; PyTorch sees none"
    done = subprocess.run([sys.executable, "examples/torch_train.py"], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert (done.returncode, done.stderr.strip()) == (2, lacking)


@pytest.mark.parametrize("argv, message", [
    (["--torch", "examples/torch_models.py:lenet", "--batch", "8"], "--torch and --input go together"),
    (["--torch", "examples/torch_models.py:lenet", "--input", "1x28x28"], "--torch needs --batch"),
    (["--torch", "m:f", "--input", "4", "--shapes", "nn"], "it takes no --shapes"),
    (["--input", "0x3", "--shapes", "nn"], "give positive sizes joined by x"),
])
def test_tune_torchs_flags_are_checked_in_one_line(argv, message, capsys):
    from autogemm.cli import main

    assert main(["tune", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


@needs_torch
def test_tune_torch_on_a_model_of_nothing_autogemm_computes_says_so(capsys):
    from autogemm.cli import main

    assert main(["tune", "--torch", "torch.nn:Identity", "--input", "4", "--batch", "10"]) == 2
    assert "none of its layers is one autogemm computes" in capsys.readouterr().err


@needs_torch
def test_the_layers_forward_passes_trace_on_fake_cuda_tensors():
    """As torch.compile traces them: the checks and shapes of the calls, the custom ops' fake
    implementations, no kernel run (fake CUDA tensors need no GPU)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        layer = agt.Linear(20, 5, activation="relu", device="cuda")
        assert layer(torch.empty(8, 20, device="cuda")).shape == (8, 5)
        assert agt.linear(torch.empty(3, 4, 20, device="cuda"), layer.weight).shape == (3, 4, 5)
        conv = agt.Conv2d(1, 6, 3, activation="relu", pool=True, device="cuda")
        assert conv(torch.empty(4, 1, 28, 28, device="cuda")).shape == (4, 6, 13, 13)
        with pytest.raises(BadArguments, match="must agree"):
            agt.linear(torch.empty(3, 7, device="cuda"), layer.weight)


@needs_torch
def test_a_converted_sequential_runs_its_linear_layers_as_one_op_on_fake_cuda_tensors():
    """What convert makes of an MLP, and what a run of layers refuses or leaves to torch."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    nn = torch.nn
    with FakeTensorMode():
        mlp = agt.convert(nn.Sequential(nn.Flatten(), nn.Linear(784, 100, device="cuda"), nn.Sigmoid(),
                                        nn.Linear(100, 10, device="cuda")))
        assert type(mlp) is agt.Sequential and [type(m) for m in mlp] == [nn.Flatten, agt.Linear, nn.Identity,
                                                                          agt.Linear]
        y = mlp(torch.empty(8, 1, 28, 28, device="cuda", requires_grad=True))
        assert y.shape == (8, 10) and "linear_chain" in type(y.grad_fn).__name__
        assert mlp(torch.empty(0, 784, device="cuda")).shape == (0, 10)              # an empty batch: torch's
        ws = [torch.empty(5, 4, device="cuda"), torch.empty(3, 5, device="cuda")]
        for biases, acts, message in (([None], [None, None], "a weight, a bias .or None. and an activation"),
                                      ([None, None], ["relu", "tanh"], "activation 'tanh'"),
                                      ([torch.empty(4, device="cuda"), None], [None, None], "must agree")):
            with pytest.raises(BadArguments, match=message):
                agt.functional.linear_chain(torch.empty(2, 4, device="cuda"), ws, biases, acts)
        with pytest.raises(BadArguments, match="must agree"):
            agt.functional.linear_chain(torch.empty(2, 4, device="cuda"), ws[::-1], [None, None], [None, None])
        with pytest.raises(BadArguments, match="every layer needs a weight"):
            agt.functional.linear_chain(torch.empty(2, 4, device="cuda"), (w for w in [ws[0], None]),
                                        [None, None], [None, None])
    kept = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2))           # no run: torch's class stays
    assert type(agt.convert(kept)) is nn.Sequential


@needs_torch
def test_gemm_on_fake_cuda_tensors_gives_its_shape_and_checks_k():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a, b = torch.empty(6, 4, device="cuda"), torch.empty(5, 4, device="cuda")
        assert agt.gemm(a, b, trans_b=True, epilogue="bias", bias=torch.empty(5, device="cuda")).shape == (6, 5)
        assert agt.gemm(a.t(), b.t(), trans_a=True).shape == (6, 5)      # column-major operands as they are
        with pytest.raises(BadArguments, match="do not share K"):
            agt.gemm(a, b)


@needs_torch
@pytest.mark.parametrize("kwargs, message", [
    (dict(precision="fp16"), "precision 'fp16': give one of fp32, tf32, bf16"),
    (dict(example_input=lambda: torch.empty(784)), "give a batch of inputs"),
])
def test_tune_from_python_refuses_what_it_cannot_tune_in_one_line(kwargs, message):
    from autogemm.torch.targets import model_of

    example = kwargs.pop("example_input", lambda: torch.empty(800, 784))()
    with pytest.raises(AutogemmError, match=re.escape(message)):
        agt.tune(model_of(f"{MODELS}:mlp"), example, **kwargs)


@needs_torch
def test_what_a_call_cannot_take_is_refused_before_any_kernel():
    """On fake CUDA tensors, as torch.compile traces: the gemm's epilogue arguments, a gradient it
    does not carry, an x that is no tensor; an empty batch and a half-precision layer go to torch."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with pytest.raises(BadArguments, match="x must be a torch.Tensor, got list"):
        agt.linear([[1.0, 2.0]], torch.ones(2, 2))
    with FakeTensorMode():
        a, b = torch.empty(6, 4, device="cuda"), torch.empty(4, 5, device="cuda")
        for kwargs, message in ((dict(epilogue="tanh"), "epilogue 'tanh': give one of"),
                                (dict(bias=torch.empty(5, device="cuda")), "epilogue None takes no bias"),
                                (dict(epilogue="bias", bias=torch.empty(6, device="cuda")), r"bias of shape \(5,\)"),
                                (dict(epilogue="drelu"), r"aux of shape \(6, 5\)")):
            with pytest.raises(BadArguments, match=message):
                agt.gemm(a, b, **kwargs)
        with pytest.raises(BadArguments, match="no gradient flows through it"):
            agt.gemm(a.requires_grad_(), b)
        assert agt.Linear(4, 3, device="cuda")(torch.empty(0, 4, device="cuda")).shape == (0, 3)
        half = agt.Linear(4, 3, device="cuda", dtype=torch.float16)
        assert half(torch.empty(2, 4, device="cuda", dtype=torch.float16)).dtype == torch.float16


@needs_torch
def test_convert_leaves_layers_with_hooks_or_computed_weights():
    from torch.nn.utils import prune

    nn = torch.nn
    hooked = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2), nn.ReLU())
    hooked[0].register_forward_hook(lambda *args: None)
    hooked[3].register_forward_hook(lambda *args: None)
    prune.l1_unstructured(pruned := nn.Linear(4, 4), "weight", amount=0.5)
    agt.convert(hooked)
    assert [type(m) for m in hooked] == [nn.Linear, nn.ReLU, agt.Linear, nn.ReLU]   # the hooked ReLU stays apart
    assert hooked[2].activation is None and type(agt.convert(pruned)) is nn.Linear


@needs_torch
def test_precision_follows_torchs_newer_tf32_setting_too():
    code = ("import torch, autogemm.torch as agt\n"
            "torch.backends.cuda.matmul.fp32_precision = 'tf32'\n"
            "print(agt.precision_now(torch.ones(1)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "tf32", out.stderr


AUTOGRAD_CHECK = """
import copy

import torch
import torch_reference_kernels  # noqa: F401  (CPU kernels for the custom ops)
import autogemm.torch as agt
from torch.library import opcheck

torch.manual_seed(0)
for act in (None, "relu", "sigmoid"):
    x = (torch.rand(6, 7, dtype=torch.float64) + 0.05).requires_grad_()
    w = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    b = torch.randn(5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w, b: agt.linear(x, w, b, act), (x, w, b)), ("linear", act)
    assert torch.autograd.gradcheck(lambda x, w: agt.linear(x, w, None, act), (x, w)), ("linear, no bias", act)
    opcheck(torch.ops.autogemm.linear.default, (x, w, b, act or "none", "fp32"))
    for pool in (False, True):
        x = (torch.rand(2, 3, 9, 8, dtype=torch.float64) + 0.05).requires_grad_()
        w = torch.randn(4, 3, 3, 3, dtype=torch.float64, requires_grad=True)
        b = torch.randn(4, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda x, w, b: agt.conv2d(x, w, b, act, pool), (x, w, b)), ("conv", act, pool)
        opcheck(torch.ops.autogemm.conv2d.default, (x, w, b, act or "none", pool, "fp32"))
x = torch.rand(9, 6, dtype=torch.float64, requires_grad=True)
w = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
b = torch.randn(4, dtype=torch.float64, requires_grad=True)
labels = torch.randint(0, 4, (9,))
assert torch.autograd.gradcheck(lambda x, w, b: agt.linear_cross_entropy(x, w, b, labels)[0], (x, w, b))
opcheck(torch.ops.autogemm.linear_xent.default, (x, w, b, labels, "fp32"))
for acts in ((None, None), ("sigmoid", None), ("relu", "sigmoid", "relu"), (None, "relu", None)):
    widths = (7, 6, 5, 4)[:len(acts) + 1]
    x = (torch.rand(5, 7, dtype=torch.float64) + 0.05).requires_grad_()
    ws = [torch.randn(n, k, dtype=torch.float64, requires_grad=True) for k, n in zip(widths, widths[1:])]
    bs = [torch.randn(n, dtype=torch.float64, requires_grad=True) for n in widths[1:-1]] + [None]
    chain = lambda x, *wb: agt.functional.linear_chain(x, wb[:len(acts)], list(wb[len(acts):]) + [None], acts)
    assert torch.autograd.gradcheck(chain, (x, *ws, *bs[:-1])), ("linear_chain", acts)
    opcheck(torch.ops.autogemm.linear_chain.default, (x, ws, bs[:-1], [True] * (len(acts) - 1) + [False],
                                                      ",".join(a or "none" for a in acts), "fp32"))
model = agt.convert(torch.nn.Sequential(torch.nn.Linear(7, 6), torch.nn.Sigmoid(), torch.nn.Linear(6, 3))).double()
x = torch.rand(4, 7, dtype=torch.float64, requires_grad=True)
assert "linear_chain" in type(model(x).grad_fn).__name__                   # the run as one op
seen = []
model[0].register_forward_hook(lambda m, i, out: seen.append(out))        # a hook added after convert
model(x).sum().backward()
assert seen and seen[0].grad_fn is not None and model[0].weight.grad is not None   # layer by layer: it saw y_1
mlp = agt.convert(torch.nn.Sequential(torch.nn.Linear(7, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3))).double()
y = mlp(x)
assert "linear_chain" in type(y.grad_fn).__name__
y.add_(1).sum().backward()                     # y_L is not saved without an activation: in place is fine
ws = [mlp[0].weight, mlp[2].weight]
ys = torch.ops.autogemm.linear_chain(x, ws, [mlp[0].bias, mlp[2].bias], [True, True], "relu,none", "fp32")
assert not ys[0].requires_grad and ys[1].requires_grad  # the chain is differentiable through y_L alone
tracked = []
handle = torch.nn.modules.module.register_module_forward_hook(lambda m, i, out: tracked.append(type(m).__name__))
mlp(x)
handle.remove()
assert tracked.count("Linear") == 2            # a global hook sees each layer: run layer by layer
mlp[2].forward = lambda t: torch.zeros(t.shape[0], 3, dtype=t.dtype)
assert torch.equal(mlp(x), torch.zeros(4, 3, dtype=torch.float64))   # an instance's own forward is kept
plain = torch.nn.Sequential(torch.nn.Linear(7, 6), torch.nn.Sigmoid(), torch.nn.Linear(6, 5), torch.nn.ReLU(),
                            torch.nn.Linear(5, 3)).double()
frozen = agt.convert(copy.deepcopy(plain))
x = torch.rand(3, 7, dtype=torch.float64)
for model in (plain, frozen):                                  # the first layer frozen, the second's weight
    model[0].requires_grad_(False)
    model[2].weight.requires_grad_(False)
    model(x).sum().backward()
assert "linear_chain" in type(frozen(x).grad_fn).__name__
for ours, theirs in zip(frozen.parameters(), plain.parameters()):
    assert (ours.grad is None) == (theirs.grad is None) and (ours.grad is None or torch.allclose(ours.grad, theirs.grad))
assert frozen[0].weight.grad is None and frozen[2].weight.grad is None and frozen[2].bias.grad is not None
frozen = agt.Linear(7, 5).double().requires_grad_(False)               # no weight gradient asked for
x = torch.rand(3, 7, dtype=torch.float64, requires_grad=True)
frozen(x).sum().backward()
assert x.grad is not None and frozen.weight.grad is None
nn = torch.nn
model = agt.convert(nn.Sequential(nn.Conv2d(1, 6, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(6 * 13 * 13, 10),
                                  nn.ReLU(), nn.Linear(10, 10)))
assert type(model) is agt.Sequential
explained = torch._dynamo.explain(model)(torch.rand(4, 1, 28, 28))
assert explained.graph_break_count == 0, explained.break_reasons
print("ok")
"""


@needs_torch
def test_the_autograd_formulas_pass_gradcheck_and_opcheck_and_compile_without_breaks():
    """On CPU kernels of torch's own math (tests/torch_reference_kernels.py), in a process of its
    own: gradcheck in float64 through every layer and activation, with and without a pool, and the
    output layer with its loss (linear_cross_entropy), torch's
    opcheck of the ops (schema, fake implementation, autograd registration), no weight gradient for a
    frozen layer, and torch.compile's tracing of a converted model without a graph break."""
    out = subprocess.run([sys.executable, "-c", AUTOGRAD_CHECK], capture_output=True, text=True, cwd=ROOT / "tests",
                         env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"}, timeout=300)
    assert out.stdout.strip().endswith("ok"), out.stderr[-3000:]


@needs_torch
def test_linear_cross_entropy_refuses_what_its_kernel_cannot_take():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x, labels = torch.empty(8, 20, device="cuda"), torch.empty(8, dtype=torch.int64, device="cuda")
        loss, logits = agt.linear_cross_entropy(x, torch.empty(10, 20, device="cuda"), None, labels)
        assert loss.shape == () and logits.shape == (8, 10)
        for w, y, message in ((torch.empty(33, 20, device="cuda"), labels, "33 classes; the kernel takes at most 32"),
                              (torch.empty(10, 20, device="cuda"), labels.float(), "labels must be integers"),
                              (torch.empty(10, 20, device="cuda"), labels[:3], r"of shape \(8,\)"),
                              (torch.empty(10, 21, device="cuda"), labels, "must agree")):
            with pytest.raises(BadArguments, match=message):
                agt.linear_cross_entropy(x, w, None, y)
