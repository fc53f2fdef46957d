"""autogemm's calls as torch custom ops (torch.library): a fake implementation each, so that
torch.compile traces a model through them without a graph break, and autograd formulas that run
the backward passes on autogemm's kernels too. Each op works on torch's current stream
(tensors.on_current_stream) and allocates its outputs and temporaries through torch's allocator, so
a torch.cuda.graph captures it (after a warm-up call that compiles its kernels and sizes autogemm's
own scratch, which is never freed). Gradients are first order: the backward ops have no autograd
formula of their own (create_graph=True fails there).

    autogemm::gemm              d = epi(op(a) op(b)), no gradient
    autogemm::linear            y = act(x w^T + b)
    autogemm::linear_backward   dx, dw, db of it, from dy and the saved y
    autogemm::linear_chain      y_1 .. y_L of consecutive layers y_i = act_i(y_{i-1} w_i^T + b_i)
                                (differentiable through y_L only)
    autogemm::linear_chain_backward   dx, the dw_i and db_i of it, each act' fused into a kernel
    autogemm::linear_xent       logits = x w^T + b, the mean cross-entropy and its gradient dlogits
    autogemm::conv2d            y = act(x * w + b), 2 x 2 max-pooled where asked (y, where)
    autogemm::conv2d_backward   dx, dw, db of it, from dy, the saved y and where
"""
from typing import Optional

import torch

from autogemm.ops import conv as conv_ops
from autogemm.ops import elementwise as elementwise_ops
from autogemm.ops import gemm as gemm_ops
from autogemm.torch.tensors import as_cupy, on_current_stream
from kernels import linear_backward as lb_family
from kernels import linear_xent as lx_family

ACTIVATIONS = ("none", "relu", "sigmoid")   # an op's activation: a string, as torch's schemas take


def _act(activation: str) -> Optional[str]:
    return None if activation == "none" else activation


def _bias(b: Optional[torch.Tensor], n: int, like: torch.Tensor) -> torch.Tensor:
    """The bias, or zeros where the layer has none (the kernels' epilogues add one)."""
    return b if b is not None else like.new_zeros(n)


# ---- gemm ----------------------------------------------------------------------------------------
def _matrix(t: torch.Tensor):
    """A GEMM operand's CuPy view: row-major or column-major as it is (the kernels read either),
    else a C-contiguous copy."""
    readable = t.stride(1) == 1 or t.stride(0) == 1
    return as_cupy(t, contiguous=not readable)


def _gemm_shape(a, b, trans_a: bool, trans_b: bool) -> tuple[int, int]:
    return (a.shape[1] if trans_a else a.shape[0]), (b.shape[0] if trans_b else b.shape[1])


@torch.library.custom_op("autogemm::gemm", mutates_args=(), device_types="cuda")
def gemm(a: torch.Tensor, b: torch.Tensor, trans_a: bool, trans_b: bool, epilogue: Optional[str],
         bias: Optional[torch.Tensor], aux: Optional[torch.Tensor], precision: str) -> torch.Tensor:
    d = a.new_empty(_gemm_shape(a, b, trans_a, trans_b))        # D: (M, N)
    with on_current_stream(a.device):
        gemm_ops.gemm(_matrix(a), _matrix(b), as_cupy(d), trans_a=trans_a, trans_b=trans_b, epilogue=epilogue,
                      bias=None if bias is None else as_cupy(bias), aux=None if aux is None else as_cupy(aux),
                      precision=precision)
    return d


@gemm.register_fake
def _(a, b, trans_a, trans_b, epilogue, bias, aux, precision):
    return a.new_empty(_gemm_shape(a, b, trans_a, trans_b))


# ---- linear --------------------------------------------------------------------------------------
@torch.library.custom_op("autogemm::linear", mutates_args=(), device_types="cuda")
def linear(x: torch.Tensor, w: torch.Tensor, b: Optional[torch.Tensor], activation: str,
           precision: str) -> torch.Tensor:
    with on_current_stream(x.device):
        return _linear(x, w, b, activation, precision)


def few_outputs(n: int, activation: str) -> bool:
    """Whether a linear layer of `n` outputs runs as linear_logits (one pass over its input, every
    output of a row in one warp; in FP32 arithmetic at any precision) rather than as a GEMM."""
    return activation == "none" and n <= lx_family.MAX_CLASSES


def _linear(x, w, b, activation: str, precision: str) -> torch.Tensor:
    """act(x w^T + b), on the current stream."""
    y = x.new_empty((x.shape[0], w.shape[0]))                  # Y: (M, N)
    if few_outputs(w.shape[0], activation):
        elementwise_ops.linear_logits(as_cupy(x), as_cupy(w), as_cupy(_bias(b, w.shape[0], x)), as_cupy(y))
        return y
    epilogue = "bias" if activation == "none" else f"bias_{activation}"
    gemm_ops.gemm(_matrix(x), as_cupy(w), as_cupy(y), trans_b=True, epilogue=epilogue,
                  bias=as_cupy(_bias(b, w.shape[0], x)), precision=precision)
    return y


@linear.register_fake
def _(x, w, b, activation, precision):
    return x.new_empty((x.shape[0], w.shape[0]))


@torch.library.custom_op("autogemm::linear_backward", mutates_args=(), device_types="cuda")
def linear_backward(dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, activation: str,
                    input_grad: bool, weight_grad: bool,
                    precision: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dx, dw, db = _grads(x, w, input_grad, weight_grad)         # dX: (M, K), dW: (N, K), db: (N,)
    with on_current_stream(x.device):
        dz = as_cupy(dy)
        if activation != "none":                               # dZ = dY * act'(Y): (M, N)
            dz = elementwise_ops.activation_grad(dz, as_cupy(y), activation, out=as_cupy(torch.empty_like(dy)))
        if input_grad:
            gemm_ops.gemm(dz, as_cupy(w), as_cupy(dx), precision=precision)
        if weight_grad:
            gemm_ops.gemm(dz, _matrix(x), as_cupy(dw), trans_a=True, precision=precision)
            elementwise_ops.column_sums(dz, as_cupy(db))
    return dx, dw, db


@linear_backward.register_fake
def _(dy, x, w, y, activation, input_grad, weight_grad, precision):
    return _grads(x, w, input_grad, weight_grad)


def _grads(x, w, input_grad: bool, weight_grad: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A backward pass's outputs: dx, dw, db, each empty where not asked for."""
    return (x.new_empty(x.shape if input_grad else (0,)), w.new_empty(w.shape if weight_grad else (0,)),
            w.new_empty(w.shape[0] if weight_grad else 0))


def _linear_setup(ctx, inputs, output):
    x, w, b, activation, precision = inputs
    ctx.save_for_backward(x, w, output if activation != "none" else None)   # y only where act' needs it
    ctx.activation, ctx.precision, ctx.has_bias = activation, precision, b is not None


def _linear_grad(ctx, dy):
    x, w, y = ctx.saved_tensors
    y = y if y is not None else dy                             # unread without an activation
    needs = ctx.needs_input_grad
    dx, dw, db = linear_backward(dy.contiguous(), x, w, y, ctx.activation, needs[0], needs[1] or needs[2],
                                 ctx.precision)
    return (dx if needs[0] else None), (dw if needs[1] else None), (db if ctx.has_bias and needs[2] else None), \
        None, None


torch.library.register_autograd("autogemm::linear", _linear_grad, setup_context=_linear_setup)


# ---- linear_chain: consecutive linear layers, their backward passes fused across layers ---------
# As nn's trainer does: a layer's input gradient leaves its GEMM already times the derivative of the
# activation below (dsigmoid / drelu epilogue), and a layer of at most lb_family.MAX_CLASSES outputs
# above an activation takes its whole backward pass (the input gradient times act', its weight
# gradient, its own bias gradient and the one below) in one linear_backward kernel.
def fused_backward(layer: int, n: int, below: str) -> bool:
    """Whether layer `layer` (of `n` outputs, above activation `below`) runs its backward pass in one
    linear_backward kernel."""
    return layer > 0 and below != "none" and n <= lb_family.MAX_CLASSES


def input_gradient_transposed(layer: int, precision: str, input_grad: bool) -> bool:
    """Whether linear_backward stores the input gradient of layer `layer` column-major: where the
    first layer's weight GEMM (dz^T x) alone reads it, at tf32, whose products read dz^T K-major so
    with no transposing copy (nn's trainer does the same: nn/backends/storage.py)."""
    return layer == 1 and precision == "tf32" and not input_grad


def _empty_input_gradient(like: torch.Tensor, transposed: bool) -> torch.Tensor:
    """An uninitialised (M, K) input gradient, column-major (its columns 16 bytes aligned apart) where
    `transposed`."""
    if not transposed:
        return like.new_empty(like.shape)
    rows, cols = like.shape
    ld = -(-rows // 4) * 4
    return like.new_empty((cols, ld))[:, :rows].t()


@torch.library.custom_op("autogemm::linear_chain", mutates_args=(), device_types="cuda")
def linear_chain(x: torch.Tensor, ws: list[torch.Tensor], bs: list[torch.Tensor], has_bias: list[bool],
                 activations: str, precision: str) -> list[torch.Tensor]:
    """bs: the biases of the layers that have one (has_bias), in order (autograd's wrapper reads no
    None in a list); activations: each layer's, comma-separated ("sigmoid,none"): torch's schemas
    take no list of strings."""
    ys = []
    with on_current_stream(x.device):
        for w, b, activation in zip(ws, _biases(bs, has_bias), activations.split(",")):
            ys.append(_linear(ys[-1] if ys else x, w, b, activation, precision))    # Y_i: (M, N_i)
    return ys


def _biases(bs: list[torch.Tensor], has_bias: list[bool]) -> list[Optional[torch.Tensor]]:
    """Each layer's bias or None."""
    given = iter(bs)
    return [next(given) if has else None for has in has_bias]


@linear_chain.register_fake
def _(x, ws, bs, has_bias, activations, precision):
    return [x.new_empty((x.shape[0], w.shape[0])) for w in ws]


@torch.library.custom_op("autogemm::linear_chain_backward", mutates_args=(), device_types="cuda")
def linear_chain_backward(dy: torch.Tensor, x: torch.Tensor, ws: list[torch.Tensor], ys: list[torch.Tensor],
                          activations: str, input_grad: bool, trained: list[bool],
                          precision: str) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    """trained: whether each layer's weight or bias wants a gradient; a frozen layer's dW_i and db_i
    are left unwritten (but where a linear_backward pass computes them with the rest), and below
    the lowest trained layer nothing runs unless dX is wanted."""
    activations = activations.split(",")
    dx = x.new_empty(x.shape if input_grad else (0,))                       # dX: (M, K_1)
    dws = [w.new_empty(w.shape) for w in ws]                               # dW_i: (N_i, K_i), contiguous
    dbs = [w.new_empty(w.shape[0]) for w in ws]                            # db_i: (N_i,)
    summed = [False] * len(ws)                                             # db_i made by the layer above
    stop = 0 if input_grad else next((i for i, t in enumerate(trained) if t), len(ws))   # the lowest layer reached
    with on_current_stream(x.device):
        dz = as_cupy(dy)                                                   # dZ_L: (M, N_L)
        if activations[-1] != "none":
            dz = elementwise_ops.activation_grad(dz, as_cupy(ys[-1]), activations[-1],
                                                 out=as_cupy(torch.empty_like(dy)))
        for i in reversed(range(stop, len(ws))):
            a = as_cupy(ys[i - 1]) if i else _matrix(x)                    # the layer's input: (M, K_i)
            below = activations[i - 1] if i else "none"
            w, dw = as_cupy(ws[i]), as_cupy(dws[i])
            if fused_backward(i, ws[i].shape[0], below):                   # dZ_{i-1}: (M, K_i)
                transposed = input_gradient_transposed(i, precision, input_grad)
                dz = elementwise_ops.linear_backward(
                    dz, w, a, as_cupy(_empty_input_gradient(ys[i - 1], transposed), contiguous=not transposed),
                    below, dw, as_cupy(dbs[i - 1]), db_out=None if summed[i] else as_cupy(dbs[i]))
                summed[i - 1] = True
                continue
            if trained[i]:
                if not summed[i]:
                    elementwise_ops.column_sums(dz, as_cupy(dbs[i]))
                gemm_ops.gemm(dz, a, dw, trans_a=True, precision=precision)
            if i > stop:
                dz_below = as_cupy(ys[i - 1].new_empty(ys[i - 1].shape))
                gemm_ops.gemm(dz, w, dz_below, precision=precision, epilogue=None if below == "none" else
                              f"d{below}", aux=None if below == "none" else a)
                dz = dz_below
            elif input_grad:
                gemm_ops.gemm(dz, w, as_cupy(dx), precision=precision)
    return dx, dws, dbs


@linear_chain_backward.register_fake
def _(dy, x, ws, ys, activations, input_grad, trained, precision):
    return (x.new_empty(x.shape if input_grad else (0,)), [w.new_empty(w.shape) for w in ws],
            [w.new_empty(w.shape[0]) for w in ws])


def _linear_chain_setup(ctx, inputs, output):
    """y_L only where its act' is read (an in-place change of it is then the caller's to make), and
    y_1 .. y_{L-1}, which are not differentiable: the chain's gradient is y_L's alone."""
    x, ws, bs, has_bias, activations, precision = inputs
    last = activations.split(",")[-1] != "none"
    ctx.save_for_backward(x, *ws, *output[:-1], *output[-1:] if last else ())
    ctx.layers, ctx.has_bias, ctx.activations, ctx.precision = len(ws), has_bias, activations, precision
    ctx.mark_non_differentiable(*output[:-1])
    ctx.set_materialize_grads(False)        # the hidden outputs' gradients: None, never a tensor of zeros


def _linear_chain_grad(ctx, dys):
    saved = ctx.saved_tensors
    x, ws, ys = saved[0], saved[1:1 + ctx.layers], list(saved[1 + ctx.layers:])
    needs_x, needs_w, needs_b = ctx.needs_input_grad[:3]
    bias_needs = iter(needs_b)                                 # of the layers that have a bias
    trained = [bool(has and next(bias_needs)) or need for has, need in zip(ctx.has_bias, needs_w)]
    if dys[-1] is None or not (needs_x or any(trained)):
        return None, [None] * len(needs_w), [None] * len(needs_b), None, None, None
    dy = dys[-1].contiguous()
    ys += [dy] * (ctx.layers - len(ys))                        # y_L unread without an activation
    dx, dws, dbs = linear_chain_backward(dy, x, list(ws), ys, ctx.activations, needs_x, trained, ctx.precision)
    dbs = [db for db, has in zip(dbs, ctx.has_bias) if has]
    return ((dx if needs_x else None), [dw if need else None for dw, need in zip(dws, needs_w)],
            [db if need else None for db, need in zip(dbs, needs_b)], None, None, None)


torch.library.register_autograd("autogemm::linear_chain", _linear_chain_grad, setup_context=_linear_chain_setup)


# ---- linear_xent: the output layer and its loss ---------------------------------------------------
@torch.library.custom_op("autogemm::linear_xent", mutates_args=(), device_types="cuda")
def linear_xent(x: torch.Tensor, w: torch.Tensor, b: Optional[torch.Tensor], labels: torch.Tensor,
                precision: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    logits = x.new_empty((x.shape[0], w.shape[0]))             # Z: (M, C)
    dlogits = torch.empty_like(logits)                         # (softmax(Z) - Y) / M
    total = x.new_zeros(1)                                     # the summed cross-entropy
    with on_current_stream(x.device):
        elementwise_ops.linear_xent(as_cupy(x), as_cupy(w), as_cupy(_bias(b, w.shape[0], x)),
                                    as_cupy(labels.to(torch.int32)), as_cupy(logits), as_cupy(dlogits),
                                    1.0 / x.shape[0], as_cupy(total))
    return logits, dlogits, total / x.shape[0]


@linear_xent.register_fake
def _(x, w, b, labels, precision):
    logits = x.new_empty((x.shape[0], w.shape[0]))
    return logits, torch.empty_like(logits), x.new_empty(1)


def _linear_xent_setup(ctx, inputs, output):
    x, w, b, labels, precision = inputs
    _, dlogits, _ = output
    ctx.save_for_backward(x, w, dlogits)
    ctx.precision, ctx.has_bias = precision, b is not None
    ctx.mark_non_differentiable(output[0], dlogits)


def _linear_xent_grad(ctx, _dlogits_out, _ddlogits, dloss):
    """The mean loss's gradients (dZ is the mean's), times dloss: dx = dZ w, dw = dZ^T x, db =
    column sums of dZ."""
    x, w, dlogits = ctx.saved_tensors
    needs = ctx.needs_input_grad
    dx, dw, db = linear_backward(dlogits, x, w, dlogits, "none", needs[0], needs[1] or needs[2], ctx.precision)
    scale = dloss.reshape(())
    return ((dx * scale) if needs[0] else None), ((dw * scale) if needs[1] else None), \
        ((db * scale) if ctx.has_bias and needs[2] else None), None, None


torch.library.register_autograd("autogemm::linear_xent", _linear_xent_grad, setup_context=_linear_xent_setup)


# ---- conv2d --------------------------------------------------------------------------------------
def _conv_out(x, w, pool: bool) -> tuple[int, ...]:
    """The output's shape: (N, F, OH, OW), halved (rounded down) with the pool."""
    n, f = x.shape[0], w.shape[0]
    oh, ow = x.shape[2] - w.shape[2] + 1, x.shape[3] - w.shape[3] + 1
    return (n, f, oh // 2, ow // 2) if pool else (n, f, oh, ow)


@torch.library.custom_op("autogemm::conv2d", mutates_args=(), device_types="cuda")
def conv2d(x: torch.Tensor, w: torch.Tensor, b: Optional[torch.Tensor], activation: str, pool: bool,
           precision: str) -> tuple[torch.Tensor, torch.Tensor]:
    shape = _conv_out(x, w, pool)
    y = x.new_empty(shape)                                     # Y: (N, F, OH, OW), or pooled
    where = x.new_empty(shape if pool else (0,), dtype=torch.int8)
    with on_current_stream(x.device):
        conv_ops.conv2d(as_cupy(x), as_cupy(w), as_cupy(_bias(b, w.shape[0], x)), as_cupy(y), _act(activation),
                        precision=precision, where=as_cupy(where) if pool else None)
    return y, where


@conv2d.register_fake
def _(x, w, b, activation, pool, precision):
    shape = _conv_out(x, w, pool)
    return x.new_empty(shape), x.new_empty(shape if pool else (0,), dtype=torch.int8)


@torch.library.custom_op("autogemm::conv2d_backward", mutates_args=(), device_types="cuda")
def conv2d_backward(dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, where: torch.Tensor,
                    activation: str, pool: bool, input_grad: bool, weight_grad: bool,
                    precision: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dx, dw, db = _grads(x, w, input_grad, weight_grad)         # dX: (N, C, H, W), dW: (F, C, K, K), db: (F,)
    with on_current_stream(x.device):
        dz = as_cupy(dy)
        act = _act(activation)
        if pool:                                               # dZ (N, F, OH, OW): dY at each maximum, times act'
            dz = as_cupy(x.new_empty(_conv_out(x, w, False)))
            conv_ops.maxpool2x2_backward(as_cupy(dy), as_cupy(where), dz, as_cupy(y) if act else None, act)
        elif act:
            flat = (dy.shape[0], dy[0].numel())                # the elementwise kernels' rows
            dz = elementwise_ops.activation_grad(dz.reshape(flat), as_cupy(y).reshape(flat), act,
                                                 out=as_cupy(torch.empty_like(dy)).reshape(flat)).reshape(dy.shape)
        if input_grad:
            conv_ops.conv2d_backward_data(dz, as_cupy(w), as_cupy(dx), precision=precision)
        if weight_grad:
            conv_ops.conv2d_backward_weights(dz, as_cupy(x), as_cupy(dw), as_cupy(db), precision=precision)
    return dx, dw, db


@conv2d_backward.register_fake
def _(dy, x, w, y, where, activation, pool, input_grad, weight_grad, precision):
    return _grads(x, w, input_grad, weight_grad)


def _conv2d_setup(ctx, inputs, output):
    x, w, b, activation, pool, precision = inputs
    y, where = output
    ctx.save_for_backward(x, w, y if activation != "none" else None, where)   # y only where act' needs it
    ctx.activation, ctx.pool, ctx.precision, ctx.has_bias = activation, pool, precision, b is not None
    ctx.mark_non_differentiable(where)


def _conv2d_grad(ctx, dy, _dwhere):
    x, w, y, where = ctx.saved_tensors
    y = y if y is not None else dy                             # unread without an activation
    needs = ctx.needs_input_grad
    dx, dw, db = conv2d_backward(dy.contiguous(), x, w, y, where, ctx.activation, ctx.pool, needs[0],
                                 needs[1] or needs[2], ctx.precision)
    return (dx if needs[0] else None), (dw if needs[1] else None), (db if ctx.has_bias and needs[2] else None), \
        None, None, None


torch.library.register_autograd("autogemm::conv2d", _conv2d_grad, setup_context=_conv2d_setup)
