"""Drop-in torch.nn layers on autogemm's kernels, and `convert`, which swaps them into a model.

Each is a subclass of its torch.nn layer: the same parameters, initialisation and state_dict, so a
checkpoint loads either way. On CUDA tensors its forward and backward passes run autogemm's tuned
kernels with the activation (and a convolution's 2 x 2 max-pool) fused; elsewhere (the CPU) torch's
own layer computes the same function.
"""
import torch

from autogemm.errors import BadArguments
from autogemm.torch import functional

ACTIVATION_MODULES = {torch.nn.ReLU: "relu", torch.nn.Sigmoid: "sigmoid"}


def _on_kernels(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether autogemm's kernels take x and the layer's weight: x a CUDA tensor of floats (or a meta
    one, being recorded), the weight float32 or float64 (a half-precision layer stays torch's)."""
    return ((x.is_cuda or (x.is_meta and functional.recording_now()))
            and x.dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16)
            and weight.dtype in (torch.float32, torch.float64))


class Linear(torch.nn.Linear):
    """torch.nn.Linear, then `activation` (None, "relu" or "sigmoid"), on autogemm's GEMMs: the bias
    and activation fused into the forward GEMM; the backward pass the activation's derivative,
    then the input's and the weight's GEMMs and the bias's column sums. `precision` None follows
    torch (autocast bf16, else allow_tf32), or give "fp32", "tf32" or "bf16"."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, activation: str | None = None,
                 precision: str | None = None, device=None, dtype=None):
        super().__init__(in_features, out_features, bias, device, dtype)
        functional._activation(activation)
        self.activation, self.precision = activation, precision

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _on_kernels(x, self.weight):
            return functional.torch_linear(x, self.weight, self.bias, self.activation)
        return functional.linear(x, self.weight, self.bias, self.activation, self.precision)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", activation={self.activation}"


class Conv2d(torch.nn.Conv2d):
    """torch.nn.Conv2d of square kernels, stride 1, no padding (what autogemm's convolutions
    compute), then `activation` and, with `pool`, a 2 x 2 max-pool (stride 2), fused into its
    kernels where they can; the backward pass on autogemm's backward data and weight kernels."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, bias: bool = True,
                 activation: str | None = None, pool: bool = False, precision: str | None = None, device=None,
                 dtype=None):
        if not isinstance(kernel_size, int):
            raise BadArguments(f"autogemm.torch.Conv2d: kernel_size {kernel_size!r}: give one int (square kernels)")
        super().__init__(in_channels, out_channels, kernel_size, bias=bias, device=device, dtype=dtype)
        functional._activation(activation)
        self.activation, self.pool, self.precision = activation, bool(pool), precision

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _on_kernels(x, self.weight):
            return functional.torch_conv2d(x, self.weight, self.bias, self.activation, self.pool)
        return functional.conv2d(x, self.weight, self.bias, self.activation, self.pool, self.precision)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", activation={self.activation}, pool={self.pool}"


class Sequential(torch.nn.Sequential):
    """torch.nn.Sequential whose runs of two or more autogemm Linear layers (with only Identity
    between them, as `convert` leaves a fused activation) run as one op, linear_chain: its backward
    pass fuses each layer's activation derivative into a kernel of the layer above, as nn's trainer
    does. The same modules, parameters and state_dict; `convert` makes a torch.nn.Sequential one.
    A run whose layers gained hooks, or whose input is not a 2-D float tensor on the kernels, runs
    layer by layer."""

    def forward(self, x):
        modules = list(self._modules.values())
        i = 0
        while i < len(modules):
            run = _linear_run(modules, i)
            layers = [m for m in modules[i:run] if type(m) is Linear]
            if len(layers) >= 2 and _chainable(x, layers):
                x = functional.linear_chain(x, [m.weight for m in layers], [m.bias for m in layers],
                                            [m.activation for m in layers], layers[0].precision)
                i = run
            else:
                x = modules[i](x)
                i += 1
        return x


def _linear_run(modules: list, i: int) -> int:
    """The end of the run of autogemm Linear layers from modules[i] (Identity between them, none
    after the last), each unhooked with Parameters; i where modules[i] is none."""
    end, j = i, i
    while j < len(modules) and type(modules[j]) in (Linear, torch.nn.Identity) and _plain(modules[j]):
        j += 1
        if type(modules[j - 1]) is Linear:
            end = j
    return end


def _chainable(x, layers: list[Linear]) -> bool:
    """x is a 2-D tensor the kernels take, of every layer's weight dtype, the layers agree on their
    precision, and no global module hook expects to see each layer."""
    w = layers[0].weight
    return (isinstance(x, torch.Tensor) and x.ndim == 2 and _on_kernels(x, w) and not _global_hooks()
            and all(m.weight.dtype == w.dtype and m.precision == layers[0].precision for m in layers)
            and (x.dtype == w.dtype or x.dtype in (torch.bfloat16, torch.float16)))


def _global_hooks() -> bool:
    """Whether hooks are registered for every module (torch.nn.modules.module.register_module_*_hook:
    module trackers, FLOP counters), which must see each layer run."""
    module = torch.nn.modules.module
    return any(getattr(module, name, None) for name in (
        "_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks", "_global_backward_pre_hooks"))


def _plain(m: torch.nn.Module) -> bool:
    """No hooks on it (a swap or a fusion would drop them), no forward of its own set on the
    instance, its weights Parameters (not pruning's or an old weight_norm's computed tensors)."""
    hooked = (m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks
              or "forward" in m.__dict__)
    weights = [getattr(m, name, None) for name in ("weight", "bias")]
    return not hooked and all(w is None or isinstance(w, torch.nn.Parameter) for w in weights)


def _convertible(m: torch.nn.Module) -> bool:
    """A torch.nn.Linear, or a torch.nn.Conv2d that autogemm's convolutions compute (square kernel,
    stride 1, no padding, no dilation, one group), with no hooks and Parameters for weights."""
    if type(m) is torch.nn.Linear:
        return _plain(m)
    return (type(m) is torch.nn.Conv2d and m.kernel_size[0] == m.kernel_size[1] and m.stride == (1, 1)
            and m.dilation == (1, 1) and m.groups == 1 and m.padding in ((0, 0), "valid") and _plain(m))


def _pool2(m) -> bool:
    """A 2 x 2 max-pool of stride 2 that drops an odd side's last row or column."""
    def pair(v):
        return (v, v) if isinstance(v, int) else tuple(v)
    return (type(m) is torch.nn.MaxPool2d and pair(m.kernel_size) == (2, 2) and pair(m.stride) == (2, 2)
            and pair(m.padding) == (0, 0) and pair(m.dilation) == (1, 1) and not m.ceil_mode
            and not m.return_indices and _plain(m))


def _swap(m: torch.nn.Module, activation: str | None, pool: bool) -> torch.nn.Module:
    """autogemm's layer for m, sharing its Parameter objects (an optimizer made before keeps working)."""
    has_bias = m.bias is not None
    if isinstance(m, torch.nn.Linear):
        new = Linear(m.in_features, m.out_features, has_bias, activation, device="meta")
    else:
        new = Conv2d(m.in_channels, m.out_channels, m.kernel_size[0], has_bias, activation, pool, device="meta")
    new.weight = m.weight
    new.bias = m.bias if has_bias else None
    new.train(m.training)
    return new


def convert(model: torch.nn.Module) -> torch.nn.Module:
    """Swap, in place, each torch.nn.Linear, and each torch.nn.Conv2d that autogemm computes (square
    kernel, stride 1, no padding, no dilation, one group), for autogemm's, sharing its parameters
    (layers with hooks, or whose weights are computed tensors, stay).
    Inside a torch.nn.Sequential a ReLU or Sigmoid right after one goes into it, and a 2 x 2
    MaxPool2d right after a convolution (and its activation) too; each is replaced by nn.Identity,
    so the state_dict keeps its keys; a torch.nn.Sequential with two or more Linear layers in a row
    becomes autogemm.torch.Sequential (its class swapped), which runs them as one op with their
    backward passes fused. Returns the model (a bare layer: its replacement)."""
    if _convertible(model):
        return _swap(model, None, False)
    if isinstance(model, torch.nn.Sequential):
        _convert_sequence(model)
        modules = list(model._modules.values())
        if type(model) is torch.nn.Sequential and any(
                sum(type(m) is Linear for m in modules[i:_linear_run(modules, i)]) >= 2 for i in range(len(modules))):
            model.__class__ = Sequential          # as torch.nn.utils.parametrize swaps a module's class
        return model
    for name, child in list(model.named_children()):
        setattr(model, name, convert(child))
    return model


def _convert_sequence(seq: torch.nn.Sequential):
    names = list(seq._modules)
    i = 0
    while i < len(names):
        m = seq._modules[names[i]]
        if not _convertible(m):
            seq._modules[names[i]] = convert(m)
            i += 1
            continue
        fused, activation, pool = [], None, False
        nxt = seq._modules[names[i + 1]] if i + 1 < len(names) else None
        if type(nxt) in ACTIVATION_MODULES and _plain(nxt):
            activation = ACTIVATION_MODULES[type(nxt)]
            fused.append(names[i + 1])
        after = names[i + 1 + len(fused)] if i + 1 + len(fused) < len(names) else None
        if isinstance(m, torch.nn.Conv2d) and after is not None and _pool2(seq._modules[after]):
            pool = True
            fused.append(after)
        seq._modules[names[i]] = _swap(m, activation, pool)
        for name in fused:
            seq._modules[name] = torch.nn.Identity()
        i += 1 + len(fused)
