"""autogemm's layers as functions of torch tensors, differentiable: the arguments checked, the
leading dimensions of a linear layer's input folded into rows, the precision taken from torch's
settings where not given, then one of the custom ops (autogemm.torch.ops)."""
import contextlib
import contextvars
from dataclasses import dataclass

import torch

from autogemm.errors import BadArguments
from autogemm.ops.gemm import EPILOGUES as GEMM_EPILOGUES
from kernels.linear_xent import MAX_CLASSES as LINEAR_XENT_MAX_CLASSES
from autogemm.torch import ops
from autogemm.torch.tensors import check

PRECISIONS = ("fp32", "tf32", "bf16")


@dataclass(frozen=True)
class Call:
    """One layer's call as `recording` keeps it: what its launches are made of."""
    kind: str                       # "linear", "linear_chain" or "conv2d"
    x: tuple[int, ...]              # the input's shape (a linear layer's as rows: (M, K))
    weight: tuple                   # its shape (a chain's: each layer's)
    activation: str | tuple         # "none", "relu" or "sigmoid" (a chain's: each layer's)
    pool: bool
    input_grad: bool                # whether the backward pass carries a gradient to x
    precision: str


_recording: contextvars.ContextVar = contextvars.ContextVar("autogemm_torch_recording", default=None)


@contextlib.contextmanager
def recording():
    """Within it, the calls on meta tensors compute nothing (their fake implementations give the
    shapes) and are kept, in order, in the list it yields."""
    calls = []
    token = _recording.set(calls)
    try:
        yield calls
    finally:
        _recording.reset(token)


def recording_now() -> bool:
    return _recording.get() is not None


def _checked(call: str, x, tensors: dict) -> bool:
    """Check the tensors (meta ones while recording); whether this call is being recorded."""
    recorded = x.is_meta and recording_now()       # a CUDA tensor's call never reads the context variable
    if not recorded:
        check(call, tensors)
    return recorded


def precision_now(x: torch.Tensor, given: str | None = None) -> str:
    """What a call on x may round float32 operands to: `given`, else bf16 under a bfloat16 autocast,
    tf32 where torch.backends.cuda.matmul.allow_tf32 allows it, else fp32; always fp32 for float64."""
    if given is not None and given not in PRECISIONS:
        raise BadArguments(f"precision {given!r}: give one of {', '.join(PRECISIONS)}")
    if x.dtype == torch.float64:
        return "fp32"
    if given is not None:
        return given
    if torch.is_autocast_enabled("cuda") and torch.get_autocast_dtype("cuda") == torch.bfloat16:
        return "bf16"
    return "tf32" if _tf32_allowed() else "fp32"


def _tf32_allowed() -> bool:
    """torch's TF32 setting for matrix products, set through allow_tf32 or the newer fp32_precision
    (reading allow_tf32 then raises)."""
    matmul = torch.backends.cuda.matmul
    try:
        return bool(matmul.allow_tf32)
    except RuntimeError:
        precision = getattr(matmul, "fp32_precision", "none")
        return (precision if precision != "none" else torch.backends.fp32_precision) == "tf32"


def _torch_activation(y: torch.Tensor, activation: str | None) -> torch.Tensor:
    """torch's own act(y), activation None (or "none"), "relu" or "sigmoid"."""
    return torch.relu(y) if activation == "relu" else torch.sigmoid(y) if activation == "sigmoid" else y


def torch_linear(x, weight, bias, activation: str | None) -> torch.Tensor:
    """The function of `linear` computed by torch's own operations (where the kernels take no part)."""
    return _torch_activation(torch.nn.functional.linear(x, weight, bias), activation)


def torch_conv2d(x, weight, bias, activation: str | None, pool: bool) -> torch.Tensor:
    """The function of `conv2d` computed by torch's own operations (where the kernels take no part)."""
    y = _torch_activation(torch.nn.functional.conv2d(x, weight, bias), activation)
    return torch.nn.functional.max_pool2d(y, 2) if pool else y


def _activation(activation: str | None) -> str:
    if activation not in (None, "relu", "sigmoid"):
        raise BadArguments(f"activation {activation!r}: give None, 'relu' or 'sigmoid'")
    return activation or "none"


def _float(call: str, x) -> torch.Tensor:
    """x as the kernels take it: a bfloat16 or float16 activation of an autocast region in float32;
    BadArguments where x is no tensor."""
    if not isinstance(x, torch.Tensor):
        raise BadArguments(f"{call}: x must be a torch.Tensor, got {type(x).__name__}")
    return x.float() if x.dtype in (torch.bfloat16, torch.float16) and x.is_cuda else x


def gemm(a: torch.Tensor, b: torch.Tensor, trans_a: bool = False, trans_b: bool = False, epilogue: str | None = None,
         bias: torch.Tensor | None = None, aux: torch.Tensor | None = None, precision: str | None = None) -> torch.Tensor:
    """epi(op(a) op(b)) on autogemm's tuned GEMM (op(x) = x.T where trans_x), a new (M, N) tensor: a
    and b 2-D, row-major or column-major as they are (other strides copied once); epilogue None,
    "bias", "bias_relu", "bias_sigmoid" (bias (N,)), "drelu" or "dsigmoid" (aux (M, N): the saved
    activation). No gradient flows through it: `linear` is the differentiable layer."""
    call = "autogemm.torch.gemm"
    check(call, {"a": a, "b": b, "bias": bias, "aux": aux})
    if a.ndim != 2 or b.ndim != 2:
        raise BadArguments(f"{call}: a and b must be 2-D, got {tuple(a.shape)} and {tuple(b.shape)}")
    k_a, k_b = a.shape[0 if trans_a else 1], b.shape[1 if trans_b else 0]
    if k_a != k_b:
        raise BadArguments(f"{call}: op(a) {tuple(a.shape)} (trans_a={trans_a}) and op(b) "
                           f"{tuple(b.shape)} (trans_b={trans_b}) do not share K")
    m, n = a.shape[1 if trans_a else 0], b.shape[0 if trans_b else 1]
    if epilogue not in GEMM_EPILOGUES:
        raise BadArguments(f"{call}: epilogue {epilogue!r}: give one of {', '.join(map(str, GEMM_EPILOGUES))}")
    wants = {"bias": (n,)} if epilogue and epilogue.startswith("bias") else {"aux": (m, n)} if epilogue else {}
    for name, given in (("bias", bias), ("aux", aux)):
        if (given is None) != (name not in wants) or (given is not None and tuple(given.shape) != wants[name]):
            need = f"{name} of shape {wants[name]}" if name in wants else f"no {name}"
            raise BadArguments(f"{call}: epilogue {epilogue} takes {need}, got "
                               f"{None if given is None else tuple(given.shape)}")
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (a, b, bias, aux)):
        raise BadArguments(f"{call}: no gradient flows through it; use autogemm.torch.linear for a layer, or "
                           f"call it under torch.no_grad()")
    return ops.gemm(a, b, bool(trans_a), bool(trans_b), epilogue, bias, aux, precision_now(a, precision))


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, activation: str | None = None,
           precision: str | None = None) -> torch.Tensor:
    """act(x weight^T + bias) on autogemm's tuned GEMM, the bias and activation fused: x (..., K),
    weight (N, K), bias (N,) or None; activation None, "relu" or "sigmoid"."""
    x = _float("autogemm.torch.linear", x)
    recorded = _checked("autogemm.torch.linear", x, {"x": x, "weight": weight, "bias": bias})
    if x.ndim < 1 or weight.ndim != 2 or x.shape[-1] != weight.shape[1] or (bias is not None and
                                                                         bias.shape != weight.shape[:1]):
        raise BadArguments(f"autogemm.torch.linear: x (..., K), weight (N, K) and bias (N,) must agree, got "
                           f"{tuple(x.shape)}, {tuple(weight.shape)} and {None if bias is None else tuple(bias.shape)}")
    rows = x.reshape(-1, x.shape[-1])                                   # X: (M, K)
    activation, precision = _activation(activation), precision_now(x, precision)
    if rows.shape[0] == 0 or weight.shape[0] == 0:                      # nothing to launch: torch's own
        return torch_linear(x, weight, bias, activation)
    if recorded:
        _recording.get().append(Call("linear", tuple(rows.shape), tuple(weight.shape), activation, False,
                                     x.requires_grad, precision))
    y = ops.linear(rows, weight, bias, activation, precision)
    return y.reshape(*x.shape[:-1], weight.shape[0])


def linear_chain(x: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor | None],
                 activations: list[str | None], precision: str | None = None) -> torch.Tensor:
    """Consecutive linear layers, y_i = act_i(y_{i-1} weights[i]^T + biases[i]) from y_0 = x (M, K),
    as one op: y_L. Its backward pass fuses each act' into a kernel of the layer above (the GEMM's
    epilogue, or a whole linear_backward pass for a layer of few outputs). Every weight float32 or
    float64 like x and shaped to follow the one before; autogemm.torch.Sequential calls it."""
    x = _float("autogemm.torch.linear_chain", x)
    weights, biases, activations = list(weights), list(biases), list(activations)
    if not len(weights) == len(biases) == len(activations) or not weights:
        raise BadArguments(f"autogemm.torch.linear_chain: give a weight, a bias (or None) and an activation (or "
                           f"None) for each layer, got {len(weights)}, {len(biases)} and {len(activations)}")
    tensors = {"x": x} | {f"weight {i}": w for i, w in enumerate(weights)} | \
              {f"bias {i}": b for i, b in enumerate(biases)}
    if any(w is None for w in weights):
        raise BadArguments("autogemm.torch.linear_chain: every layer needs a weight (N_i, N_(i-1)), got None")
    recorded = _checked("autogemm.torch.linear_chain", x, tensors)
    widths = [x.shape[-1]] + [w.shape[0] for w in weights]
    if x.ndim != 2 or any(w.ndim != 2 or w.shape[1] != k or (b is not None and b.shape != w.shape[:1])
                          for w, b, k in zip(weights, biases, widths)):
        raise BadArguments(f"autogemm.torch.linear_chain: x (M, K), each weight (N_i, N_(i-1)) and bias (N_i,) must "
                           f"agree, got {tuple(x.shape)}, " + ", ".join(f"{tuple(w.shape)}" for w in weights))
    activations = [_activation(a) for a in activations]
    precision = precision_now(x, precision)
    if x.shape[0] == 0 or 0 in widths:                                  # nothing to launch: torch's own
        for w, b, activation in zip(weights, biases, activations):
            x = torch_linear(x, w, b, activation)
        return x
    if recorded:
        _recording.get().append(Call("linear_chain", tuple(x.shape), tuple(tuple(w.shape) for w in weights),
                                     tuple(activations), False, x.requires_grad, precision))
    return ops.linear_chain(x, list(weights), [b for b in biases if b is not None], [b is not None for b in biases],
                            ",".join(activations), precision)[-1]


def linear_cross_entropy(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                         labels: torch.Tensor, precision: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(the mean cross-entropy of softmax(x weight^T + bias) against `labels`, the logits): an output
    layer and its loss in one kernel (at most LINEAR_XENT_MAX_CLASSES classes), its gradient to x,
    weight and bias formed there too (the logits carry none); x (M, K), weight (C, K), bias (C,) or
    None, labels (M,) ints."""
    call = "autogemm.torch.linear_cross_entropy"
    x = _float(call, x)
    check(call, {"x": x, "weight": weight, "bias": bias})
    if (x.ndim != 2 or weight.ndim != 2 or x.shape[1] != weight.shape[1] or x.shape[0] == 0
            or (bias is not None and bias.shape != weight.shape[:1])):
        raise BadArguments(f"{call}: x (M, K) of at least one row, weight (C, K) and bias (C,) must agree, got "
                           f"{tuple(x.shape)}, {tuple(weight.shape)} and {None if bias is None else tuple(bias.shape)}")
    if not isinstance(labels, torch.Tensor) or labels.shape != x.shape[:1] or labels.dtype.is_floating_point \
            or labels.device != x.device:
        raise BadArguments(f"{call}: labels must be integers of shape ({x.shape[0]},) on {x.device}")
    if weight.shape[0] > LINEAR_XENT_MAX_CLASSES:
        raise BadArguments(f"{call}: {weight.shape[0]} classes; the kernel takes at most {LINEAR_XENT_MAX_CLASSES} "
                           f"(use linear, then torch.nn.functional.cross_entropy)")
    logits, _, loss = ops.linear_xent(x, weight, bias, labels, precision_now(x, precision))
    return loss[0], logits


def conv2d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, activation: str | None = None,
           pool: bool = False, precision: str | None = None) -> torch.Tensor:
    """act(x correlated with weight, plus bias) on autogemm's tuned convolutions (valid, stride 1),
    then the 2 x 2 max-pool where `pool` (fused into the kernel where it can be): x (N, C, H, W),
    weight (F, C, K, K), bias (F,) or None."""
    x = _float("autogemm.torch.conv2d", x)
    recorded = _checked("autogemm.torch.conv2d", x, {"x": x, "weight": weight, "bias": bias})
    if (x.ndim != 4 or weight.ndim != 4 or weight.shape[1] != x.shape[1] or weight.shape[2] != weight.shape[3]
            or weight.shape[2] > min(x.shape[2:]) or (bias is not None and bias.shape != weight.shape[:1])):
        raise BadArguments(f"autogemm.torch.conv2d: x (N, C, H, W), weight (F, C, K, K) with K at most H and W, "
                           f"and bias (F,) must agree, got {tuple(x.shape)}, {tuple(weight.shape)} and "
                           f"{None if bias is None else tuple(bias.shape)}")
    if pool and min(x.shape[2:]) - weight.shape[2] + 1 < 2:
        raise BadArguments(f"autogemm.torch.conv2d: a 2x2 pool does not fit the output of {tuple(x.shape)} by "
                           f"{tuple(weight.shape)}")
    activation, precision = _activation(activation), precision_now(x, precision)
    if x.shape[0] == 0 or weight.shape[0] == 0:                         # nothing to launch: torch's own
        return torch_conv2d(x, weight, bias, activation, pool)
    if recorded:
        _recording.get().append(Call("conv2d", tuple(x.shape), tuple(weight.shape), activation, bool(pool),
                                     x.requires_grad, precision))
    y, _ = ops.conv2d(x, weight, bias, activation, bool(pool), precision)
    return y
