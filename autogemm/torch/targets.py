"""What a PyTorch model launches: every autogemm launch of one forward and backward pass of it,
converted (layers.convert), as tuning targets (autogemm.Target), the way nn.targets records the
trainer's step. The model runs once on meta tensors: nothing is computed or allocated."""
import copy
import importlib
import importlib.util
import sys
from pathlib import Path

import torch

from autogemm.errors import AutogemmError, first_line
from autogemm.store.keys import Target
from autogemm.torch import ops
from autogemm.torch.functional import Call, recording
from autogemm.torch.layers import convert
from kernels import IMPLEMENTATIONS
from kernels import linear_backward as lb_family
from kernels import linear_xent as lx_family
from kernels.conv2d import POOL
from kernels.contract import NO_OP
from kernels.gemm.call import key_op


def launches(model: torch.nn.Module, input_shape: tuple[int, ...], batch: int,
             precisions: tuple[str, ...] | None = None) -> list[Target]:
    """The targets of `model` (not changed: a copy is converted) on `batch` inputs of `input_shape`
    each, as its calls launch at each of `precisions` (None: the precision torch's settings give
    now), the first of each (family, sizes, op) kept; AutogemmError when none of its layers is one
    autogemm computes. (A launch's layout may depend on the precision: fp32 tuning, whose records
    serve every precision's calls, records each precision's.)"""
    meta = convert(copy.deepcopy(model)).to("meta")
    with recording() as calls:
        try:
            meta(torch.empty((batch, *input_shape), device="meta"))
        except Exception as exc:      # the user's model: its forward pass on inputs of this shape
            shape = "x".join(map(str, input_shape))
            raise AutogemmError(f"{type(model).__name__} on inputs of {shape}: {type(exc).__name__}: "
                                f"{first_line(exc)}") from None
    if not calls:
        raise AutogemmError(f"{type(model).__name__}: none of its layers is one autogemm computes (torch.nn.Linear, "
                            f"torch.nn.Conv2d of square kernels, stride 1, no padding)")
    first = {}
    for i, call in enumerate(calls):
        for precision in precisions or (call.precision,):
            for target in _targets(call, f"layer {i + 1}", precision):
                first.setdefault((target.family, target.sizes, target.op), target)
    return list(first.values())


def model_of(spec: str) -> torch.nn.Module:
    """The model FACTORY() builds, from "MODULE:FACTORY" (MODULE importable, or a .py file);
    AutogemmError, one line, where it cannot be had."""
    module_name, _, factory_name = spec.rpartition(":")
    if not module_name or not factory_name:
        raise AutogemmError(f"--torch {spec!r}: give MODULE:FACTORY, e.g. examples/torch_models.py:lenet")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            if not path.is_file():
                raise AutogemmError(f"--torch {spec!r}: no file {path}")
            found = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(found)
            sys.modules.setdefault(path.stem, module)
            found.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except AutogemmError:
        raise
    except Exception as exc:   # the user's module: any error it raises while loading
        raise AutogemmError(f"--torch {spec!r}: importing {module_name} failed: "
                            f"{type(exc).__name__}: {first_line(exc)}") from None
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise AutogemmError(f"--torch {spec!r}: {module_name} has no function {factory_name}")
    try:
        model = factory()
    except Exception as exc:
        raise AutogemmError(f"--torch {spec!r}: {factory_name}() failed: {type(exc).__name__}: "
                            f"{first_line(exc)}") from None
    if not isinstance(model, torch.nn.Module):
        raise AutogemmError(f"--torch {spec!r}: {factory_name}() returned a {type(model).__name__}, not a torch.nn.Module")
    return model


def _of(call: str, sizes, op: str, role: str, families=None) -> list[Target]:
    """One target for each family that computes `call` (or of `families`)."""
    return [Target(f, tuple(int(s) for s in sizes), op, role) for f in families or IMPLEMENTATIONS.get(call, (call,))]


def _targets(c: Call, layer: str, precision: str) -> list[Target]:
    """The launches of one layer's forward and backward passes (autogemm.torch.ops) at `precision`."""
    grad = {"relu": "drelu", "sigmoid": "dsigmoid"}.get(c.activation)
    if c.kind == "linear":
        (m, k), n = c.x, c.weight[0]
        out = _forward(m, n, k, c.activation, f"{layer}: y")
        out += _of("elementwise", (m, n), grad, f"{layer}: dz = dy {grad}(y)") if grad else []
        out += _of("gemm", (m, k, n), key_op(False, False), f"{layer}: dx = dz w") if c.input_grad else []
        out += _of("gemm", (n, k, m), key_op(True, False), f"{layer}: dw = dz^T x")
        return out + _of("colsum", (m, n), NO_OP, f"{layer}: db = column sums of dz")
    if c.kind == "linear_chain":
        return _chain_targets(c, layer, precision)
    n, _, h, w = c.x
    f, k = c.weight[0], c.weight[2]
    sizes, z = (*c.x, f, k), (n, f, h - k + 1, w - k + 1)
    role = f"{layer}: y = {'maxpool(' if c.pool else ''}{c.activation}(conv(x, w) + b){')' if c.pool else ''}"
    out = _of("conv2d", sizes, POOL, role, ("conv2d_direct",)) if c.pool else []
    out += _of("conv2d", sizes, NO_OP, role)        # alone: its records decide whether the pool is fused
    if c.pool:
        out += _of("pool2x2", z, "backward", f"{layer}: dz = maxpool^T(dy)")
    elif grad:
        out += _of("elementwise", (n, f * z[2] * z[3]), grad, f"{layer}: dz = dy {grad}(y)")
    out += _of("conv2d_dgrad", sizes, NO_OP, f"{layer}: dx = conv^T(dz, w)") if c.input_grad else []
    return out + _of("conv2d_wgrad", sizes, NO_OP, f"{layer}: dw, db from dz, x")


def _forward(m: int, n: int, k: int, activation: str, role: str) -> list[Target]:
    """A linear layer's forward launch: a GEMM with its epilogue, or the logits of few outputs."""
    if ops.few_outputs(n, activation):
        return _of("linear_xent", (m, n, k), lx_family.LOGITS, f"{role} = x w^T + b (few outputs)")
    epilogue = "bias" if activation == "none" else f"bias_{activation}"
    return _of("gemm", (m, n, k), key_op(False, True, epilogue), f"{role} = {epilogue}(x w^T)")


def _chain_targets(c: Call, first: str, precision: str) -> list[Target]:
    """The launches of a run of linear layers (autogemm.torch.ops.linear_chain and its backward) at
    `precision`."""
    m = c.x[0]
    widths = [c.x[1]] + [w[0] for w in c.weight]
    layer = lambda i: f"{first}.{i + 1}"  # noqa: E731
    out = []
    for i, activation in enumerate(c.activation):
        out += _forward(m, widths[i + 1], widths[i], activation, f"{layer(i)}: y")
    if c.activation[-1] != "none":
        grad = "d" + c.activation[-1]
        out += _of("elementwise", (m, widths[-1]), grad, f"{layer(len(widths) - 2)}: dz = dy {grad}(y)")
    summed = transposed = False
    for i in reversed(range(len(c.weight))):
        n, k = widths[i + 1], widths[i]
        below = c.activation[i - 1] if i else "none"
        fused = ops.fused_backward(i, n, below)
        out += [] if summed or fused else _of("colsum", (m, n), NO_OP, f"{layer(i)}: db = column sums of dz")
        if fused:
            transposed = ops.input_gradient_transposed(i, precision, c.input_grad)
            out += _of("linear_backward", (m, n, k), below + (lb_family.TRANSPOSED if transposed else ""),
                       f"{layer(i)}: dz below, dw, db and db below in one pass")
            summed = True
            continue
        summed = False
        out += _of("gemm", (n, k, m), key_op(not transposed, False), f"{layer(i)}: dw = dz^T x")
        if i:
            epilogue = None if below == "none" else "d" + below
            out += _of("gemm", (m, k, n), key_op(False, False, epilogue),
                       f"{layer(i)}: dz below = {epilogue or ''}(dz w)")
        elif c.input_grad:
            out += _of("gemm", (m, k, n), key_op(False, False), f"{layer(i)}: dx = dz w")
    return out
