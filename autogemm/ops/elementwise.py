"""Entry points of the elementwise, softmax + cross-entropy, output-layer (forward and backward), column-sum and
Adam families (CuPy arrays)."""
import itertools

import numpy as np

from autogemm.errors import BadArguments
from autogemm.ops.gemm import leading_dim, overlaps, row_major_operand
from autogemm.ops.kernels import launch, scratch
from autogemm.runtime.device import require_cupy
from kernels import adam as adam_family
from kernels import colsum as colsum_family
from kernels import dense_stack as ds_family
from kernels import elementwise as ew_family
from kernels import linear_backward as lb_family
from kernels import linear_xent as lx_family
from kernels import softmax_xent as sx_family


def _scalar(dtype):
    return np.float32 if dtype == np.float32 else np.float64


def _contiguous(x, what: str):
    cupy = require_cupy()

    if not isinstance(x, cupy.ndarray) or not x.flags.c_contiguous or x.dtype not in (np.float32, np.float64):
        raise BadArguments(f"{what} must be a C-contiguous float32 or float64 cupy array")
    return x


def _layer_input(a, what: str):
    """The dtype of a layer whose input is `a`: a C-contiguous float32 or float64 cupy array, or the
    bfloat16 bits (uint16) of a float32 layer's."""
    cupy = require_cupy()

    if isinstance(a, cupy.ndarray) and a.dtype == np.uint16 and a.flags.c_contiguous:
        return np.dtype(np.float32)
    if not isinstance(a, cupy.ndarray) or not a.flags.c_contiguous or a.dtype not in (np.float32, np.float64):
        raise BadArguments(f"{what} must be a C-contiguous float32, float64 or uint16 (bfloat16 bits) cupy array")
    return a.dtype


def _device_float(x, what: str):
    """x as a float32 or float64 cupy array, whatever its layout; BadArguments otherwise."""
    cupy = require_cupy()

    if not isinstance(x, cupy.ndarray) or x.dtype not in (np.float32, np.float64):
        raise BadArguments(f"{what} must be a float32 or float64 cupy array")
    return x


def _bf16_bits(x, shape, what: str) -> int:
    """Check that x holds bfloat16 bits of `shape` (a C-contiguous uint16 cupy array, as to_bf16 makes);
    the widest vector (1, 2, 4 elements) its pointer allows."""
    cupy = require_cupy()

    if not isinstance(x, cupy.ndarray) or x.dtype != np.uint16 or not x.flags.c_contiguous or x.shape != shape:
        raise BadArguments(f"{what} must be a C-contiguous uint16 cupy array of shape {shape} (autogemm.to_bf16's bits)")
    return max(v for v in (1, 2, 4) if x.data.ptr % (2 * v) == 0)


def _aligned(*arrays) -> int:
    for width in (4, 2):
        if all(x.data.ptr % (width * x.itemsize) == 0 for x in arrays):
            return width
    return 1


def _layer_sizes(call: str, a, w, layout: str, wanted) -> tuple[int, int, int]:
    """(rows, classes, inputs) of an output layer's call on a (rows, K) and w (C, K); BadArguments
    naming each array of wanted(rows, classes, inputs) = {name: (array or None, its shape)} whose
    shape differs (`layout` says them all)."""
    rows, inputs = a.shape if a.ndim == 2 else (0, 0)
    classes = w.shape[0] if w.ndim == 2 else 0
    wrong = [f"{name} {x.shape}" for name, (x, want) in wanted(rows, classes, inputs).items()
             if x is not None and x.shape != want]
    if a.ndim != 2 or w.ndim != 2 or wrong or 0 in (rows, classes, inputs):
        raise BadArguments(f"{call}: a must be (rows, K) and w (C, K) with every size >= 1, {layout}; got a {a.shape}"
                           + "".join(f", {item}" for item in wrong))
    return rows, classes, inputs


def _index(total: int):
    """The `total` argument in the kernel's index type."""
    return np.int32(total) if ew_family.index_is_32bit(total) else np.int64(total)


def _run(name, problem, args, config):
    launch(name, problem, config, lambda geometry: args)


def elementwise(op: str, out, x, y=None, s0=0.0, s1=0.0, config=None):
    """out = op(x, y) over a (rows, cols) array; see kernels/elementwise/ for the ops."""
    _contiguous(out, "out")
    _contiguous(x, "x")
    if x.shape != out.shape or x.dtype != out.dtype or out.ndim != 2:
        raise BadArguments(f"{op}: x and out must be 2-D of one shape and dtype, got {x.shape} and {out.shape}")
    rows, cols = out.shape
    arrays = [out, x]
    if op in ew_family.ROW_OPS:
        if y is None or y.shape != (cols,) or y.dtype != out.dtype:
            raise BadArguments(f"{op}: needs a bias of shape ({cols},) and dtype {out.dtype}")
        _contiguous(y, "bias")
    elif op != "sgd":
        if y is None or y.shape != out.shape or y.dtype != out.dtype:
            raise BadArguments(f"{op}: needs the saved activation of shape {out.shape}")
        arrays.append(_contiguous(y, "activation"))
    problem = ew_family.Problem(op, rows, cols, str(out.dtype), _aligned(*arrays))
    s = _scalar(out.dtype)
    _run("elementwise", problem, (out, x, y if y is not None else np.uint64(0),
                                  _index(rows * cols), np.int32(cols), s(s0), s(s1)), config)
    return out


def bias_activation(z, bias, activation=None, out=None, config=None):
    """out = act(z + bias[None, :]); activation None, "sigmoid" or "relu"."""
    cupy = require_cupy()

    out = cupy.empty_like(z) if out is None else out
    return elementwise("bias" if activation is None else f"bias_{activation}", out, z, bias, config=config)


def activation_grad(g, a, activation, out=None, config=None):
    """out = g * act'(.) expressed through the saved activation output a."""
    cupy = require_cupy()

    out = cupy.empty_like(g) if out is None else out
    return elementwise(f"d{activation}", out, g, a, config=config)


def sgd_update(w, grad, lr, reg=0.0, config=None):
    """w -= lr * (grad + reg * w), in place."""
    return elementwise("sgd", w, grad, None, lr, reg, config=config)


def softmax_xent(z, labels, grad, scale, loss_acc, config=None):
    """grad = (softmax(z) - onehot(labels)) * scale; loss_acc[0] += summed cross-entropy."""
    _contiguous(z, "z")
    _contiguous(grad, "grad")
    rows, cols = z.shape
    if grad.shape != z.shape or labels.shape != (rows,) or labels.dtype != np.int32:
        raise BadArguments(f"softmax_xent: z and grad must be ({rows}, {cols}) and labels ({rows},) int32")
    if loss_acc.dtype != z.dtype or loss_acc.size < 1:
        raise BadArguments(f"softmax_xent: loss_acc must be a {z.dtype} array of at least one element")
    problem = sx_family.Problem(rows, cols, str(z.dtype))
    _run("softmax_xent", problem, (z, labels, grad, loss_acc, np.int32(rows), np.int32(cols),
                                   _scalar(z.dtype)(scale)), config)
    return grad


def linear_xent(a, w, bias, labels, logits, grad, scale, loss_acc, grad_in=None, activation=None, config=None,
                grad_in_bf16=None):
    """An MLP's output layer in one kernel (at most 32 classes): logits = a w^T + bias;
    grad = (softmax(logits) - onehot(labels)) * scale; loss_acc[0] += summed cross-entropy; and with
    `grad_in`, the input's gradient grad_in = (grad w) * act'(.), `a` being the saved output of
    `activation` ("sigmoid" or "relu"); with `grad_in_bf16` (uint16, grad_in's shape; float32), also
    grad_in rounded to bfloat16 (as `to_bf16` rounds), for GEMMs that read it so. `a` may be the
    bfloat16 bits (uint16) of a float32 layer's input."""
    dtype = _layer_input(a, "a")
    for x, what in ((w, "w"), (bias, "bias"), (logits, "logits"), (grad, "grad")):
        _contiguous(x, what)
    arrays = [a, w]
    if grad_in is not None:
        arrays.append(_contiguous(grad_in, "grad_in"))
        if activation not in ("sigmoid", "relu"):
            raise BadArguments(f"linear_xent: grad_in needs activation 'sigmoid' or 'relu', got {activation!r}")
    elif activation is not None:
        raise BadArguments("linear_xent: activation is only used with grad_in")
    rows, classes, inputs = _layer_sizes(
        "linear_xent", a, w, "bias (C,), labels (rows,), logits and grad (rows, C), grad_in (rows, K)",
        lambda rows, classes, inputs: {"w": (w, (classes, inputs)), "bias": (bias, (classes,)),
                                       "labels": (labels, (rows,)), "logits": (logits, (rows, classes)),
                                       "grad": (grad, (rows, classes)), "grad_in": (grad_in, (rows, inputs))})
    if any(x.dtype != dtype for x in arrays[1:] + [bias, logits, grad]) or labels.dtype != np.int32:
        raise BadArguments(f"linear_xent: every array must be {dtype}, labels int32")
    if loss_acc.dtype != dtype or loss_acc.size < 1:
        raise BadArguments(f"linear_xent: loss_acc must be a {dtype} array of at least one element")
    aligned = _aligned(*arrays)
    if grad_in_bf16 is not None:
        if grad_in is None or dtype != np.float32:
            raise BadArguments("linear_xent: grad_in_bf16 is grad_in's bfloat16 copy: it needs grad_in, of float32")
        aligned = min(aligned, _bf16_bits(grad_in_bf16, grad_in.shape, "linear_xent: grad_in_bf16"))
    problem = lx_family.Problem(rows, classes, inputs, str(dtype), activation, aligned,
                                grad_in_bf16=grad_in_bf16 is not None, a_bf16=a.dtype == np.uint16)
    _run("linear_xent", problem, (a, w, bias, labels, logits, grad,
                                  grad_in if grad_in is not None else np.uint64(0),
                                  grad_in_bf16 if grad_in_bf16 is not None else np.uint64(0), loss_acc,
                                  np.int32(rows), _scalar(dtype)(scale)), config)
    return grad


def dense_stack(x, weights, biases, labels, outs, grads, scale, loss_acc, activation="relu", grad_in=None,
                where=None, config=None):
    """A stack of small dense layers and its loss, forward and back, in one kernel: for l = 1 .. L,
    outs[l-1] = act(A_{l-1} weights[l-1]^T + biases[l-1]) (A_0 = x; the last, the logits, without
    act); grads[L-1] = (softmax(logits) - onehot(labels)) * scale, loss_acc[0] += the summed
    cross-entropy (a label outside [0, C) adds no loss and no -1, as in linear_xent);
    grads[l-2] = (grads[l-1] weights[l-1]) * act'(outs[l-2]); with `grad_in` (x's shape),
    grad_in = grads[0] weights[0]; with `where` (int8 (rows, C, H // 2, W // 2): x is a 2 x 2
    max-pool's output, an activation's, and `where` its maxima, as autogemm.maxpool2x2 gives them),
    grad_in (rows, C, H, W) is that gradient times act'(x) below the pool: at each window's maximum,
    zero elsewhere. x (rows, W_0), weights[l-1] (W_l, W_{l-1}), biases (W_l,), outs and grads
    (rows, W_l), labels int32 (rows,); at least one hidden layer, at most 32 classes.
    The weight gradients (grads[l-1]^T A_{l-1}, column sums) are the caller's: GEMMs beside it."""
    cupy = require_cupy()
    dtype = _contiguous(x, "dense_stack: x").dtype
    arrays = {"weights": list(weights), "biases": list(biases), "outs": list(outs), "grads": list(grads)}
    layers = len(arrays["weights"])
    if x.ndim != 2 or not all(len(v) == layers for v in arrays.values()) or not 2 <= layers <= ds_family.MAX_LAYERS:
        raise BadArguments(f"dense_stack: x must be (rows, W_0), and weights, biases, outs and grads lists of one "
                           f"length, 2 to {ds_family.MAX_LAYERS} layers; got x {x.shape} and "
                           + ", ".join(f"{len(v)} {name}" for name, v in arrays.items()))
    rows = x.shape[0]
    widths = (x.shape[1], *(w.shape[0] if w.ndim == 2 else 0 for w in arrays["weights"]))
    wanted = {"weights": lambda l: (widths[l], widths[l - 1]), "biases": lambda l: (widths[l],),
              "outs": lambda l: (rows, widths[l]), "grads": lambda l: (rows, widths[l])}
    wrong = [f"{name}[{l - 1}] {v.shape}" for name, values in arrays.items() for l, v in enumerate(values, 1)
             if _contiguous(v, f"dense_stack: {name}[{l - 1}]").shape != wanted[name](l)]
    pool = None
    if where is not None:
        pool = tuple(grad_in.shape[1:]) if grad_in is not None and grad_in.ndim == 4 else None
        if pool is None or grad_in.shape[0] != rows or pool[0] * (pool[1] // 2) * (pool[2] // 2) != widths[0]:
            raise BadArguments(f"dense_stack: with `where`, grad_in must be the pool's input gradient (rows, C, H, W), "
                               f"C (H // 2) (W // 2) = {widths[0]}; got "
                               + ("none" if grad_in is None else f"{grad_in.shape}"))
        _contiguous(grad_in, "dense_stack: grad_in")
        if not isinstance(where, cupy.ndarray) or where.dtype != np.int8 or not where.flags.c_contiguous or \
                where.shape != (rows, pool[0], pool[1] // 2, pool[2] // 2):
            raise BadArguments(f"dense_stack: where must be a C-contiguous int8 cupy array of shape "
                               f"{(rows, pool[0], pool[1] // 2, pool[2] // 2)} (the pool's maxima)")
    elif grad_in is not None and _contiguous(grad_in, "dense_stack: grad_in").shape != x.shape:
        wrong.append(f"grad_in {grad_in.shape}")
    if wrong or 0 in (rows, *widths):
        raise BadArguments(f"dense_stack: weights[l-1] must be (W_l, W_(l-1)), biases (W_l,), outs and grads "
                           f"(rows, W_l), grad_in x's shape, every size >= 1; got x {x.shape}, " + ", ".join(wrong))
    if any(v.dtype != dtype for values in arrays.values() for v in values) or \
            (grad_in is not None and grad_in.dtype != dtype):
        raise BadArguments(f"dense_stack: every array must be {dtype}")
    if not isinstance(labels, cupy.ndarray) or labels.dtype != np.int32 or labels.shape != (rows,) or \
            not labels.flags.c_contiguous:
        raise BadArguments(f"dense_stack: labels must be a C-contiguous int32 cupy array of shape ({rows},)")
    if not isinstance(loss_acc, cupy.ndarray) or loss_acc.dtype != dtype or loss_acc.size < 1:
        raise BadArguments(f"dense_stack: loss_acc must be a {dtype} cupy array of at least one element")
    if activation not in ds_family.ACTIVATIONS:
        raise BadArguments(f"dense_stack: activation must be one of {', '.join(ds_family.ACTIVATIONS)}, "
                           f"got {activation!r}")
    written = arrays["outs"] + arrays["grads"] + ([grad_in] if grad_in is not None else [])
    read = [x, labels, *arrays["weights"], *arrays["biases"]] + ([where] if where is not None else [])
    if any(overlaps(out, other) for i, out in enumerate(written) for other in read + written[i + 1:]):
        raise BadArguments("dense_stack: outs, grads and grad_in must be arrays of their own, overlapping no "
                           "other argument")
    # each layer's widest vector along W's rows: its length, 16 bytes and the pointer allowing
    vecs = tuple(min(ds_family.widest_vec(k, str(dtype)), _aligned(w)) for k, w in zip(widths, arrays["weights"]))
    try:
        problem = ds_family.Problem(rows, widths, str(dtype), activation, grad_in is not None, vecs, pool)
    except ValueError as exc:
        raise BadArguments(f"dense_stack: {exc}") from None
    if widths[-1] > ds_family.MAX_CLASSES:
        raise BadArguments(f"dense_stack: at most {ds_family.MAX_CLASSES} classes, got {widths[-1]}")
    args = [x]
    for w, b, out, g in zip(*arrays.values()):
        args += [w, b, out, g]
    null = np.uint64(0)
    args += [where] if where is not None else []
    _run("dense_stack", problem, (*args, grad_in if grad_in is not None else null, labels, loss_acc,
                                  np.int32(rows), _scalar(dtype)(scale)), config)
    return grads[-1]


def linear_logits(a, w, bias, logits, config=None):
    """A layer of few outputs (at most 32) in one pass over its input: logits = a w^T + bias, the
    output layer's kernel without its loss (a (rows, K), w (C, K), bias (C,), logits (rows, C)).
    `a` may be the bfloat16 bits (uint16) of a float32 layer's input."""
    dtype = _layer_input(a, "a")
    for x, what in ((w, "w"), (bias, "bias"), (logits, "logits")):
        _contiguous(x, what)
    rows, classes, inputs = _layer_sizes(
        "linear_logits", a, w, "bias (C,), logits (rows, C)",
        lambda rows, classes, inputs: {"w": (w, (classes, inputs)), "bias": (bias, (classes,)),
                                       "logits": (logits, (rows, classes))})
    if any(x.dtype != dtype for x in (w, bias, logits)):
        raise BadArguments(f"linear_logits: every array must be {dtype}")
    if classes > lx_family.MAX_CLASSES:
        raise BadArguments(f"linear_logits: at most {lx_family.MAX_CLASSES} outputs, got {classes}")
    if overlaps(logits, a) or overlaps(logits, w) or overlaps(logits, bias):
        raise BadArguments("linear_logits: logits overlaps an input; pass an array of its own")
    problem = lx_family.Problem(rows, classes, inputs, str(dtype), None, _aligned(a, w), a_bf16=a.dtype == np.uint16,
                                loss=False)
    null = np.uint64(0)
    _run("linear_xent", problem, (a, w, bias, null, logits, null, null, null, null, np.int32(rows), _scalar(dtype)(0)),
         config)
    return logits


def linear_backward(g, w, a, grad_in, activation, dw, db, alpha=1.0, beta=0.0, db_beta=0.0, grad_in_bf16=None,
                    db_out=None, config=None):
    """The backward pass of a layer with few outputs (at most 32) in one kernel, from its output
    gradient g (rows, C), weights w (C, K) and input a (rows, K), the saved output of `activation`
    ("sigmoid" or "relu"): grad_in = (g w) * act'(a); dw = alpha * g^T a + beta * dw (dw may be w:
    the SGD step in place, w read first); db = alpha * column sums of grad_in + db_beta * db (K,);
    with `grad_in_bf16` (uint16, (rows, K); float32), grad_in rounded to bfloat16 too, or (grad_in
    None) instead. grad_in may be column-major (grad_in.T a row-major (K, rows) array, any leading
    dimension): stored so, the layout in which a GEMM reads grad_in^T K-major; it then has no
    bfloat16 copy. `a` may be the bfloat16 bits (uint16) of a float32 layer's input. With `db_out`
    (C,), the layer's own bias gradient too: db_out = alpha * column sums of g + db_beta * db_out."""
    if grad_in is None and grad_in_bf16 is None:
        raise BadArguments("linear_backward: grad_in or grad_in_bf16 (or both) must be given")
    # column-major: stored as rows of grad_in^T (a layout neither way round: _contiguous says so)
    transposed = hasattr(grad_in, "flags") and row_major_operand(grad_in, False)[1]
    if transposed and grad_in_bf16 is not None:
        raise BadArguments("linear_backward: a column-major grad_in has no bfloat16 copy; pass a C-contiguous "
                           "grad_in with grad_in_bf16")
    arrays = [(g, "g"), (w, "w"), (a, "a"), (dw, "dw"), (db, "db")]
    arrays += [(grad_in.T if transposed else grad_in, "grad_in")] if grad_in is not None else []
    arrays += [(db_out, "db_out")] if db_out is not None else []
    for x, what in arrays:
        if what == "grad_in" and transposed:
            _device_float(x, what)
        elif what == "a":
            dtype = _layer_input(x, what)
        else:
            _contiguous(x, what)
    if activation not in lb_family.ACTIVATIONS:
        raise BadArguments(f"linear_backward: activation must be 'sigmoid' or 'relu', got {activation!r}")
    rows, classes, inputs = _layer_sizes(
        "linear_backward", a, w, "g (rows, C), grad_in (rows, K), dw (C, K), db (K,), db_out (C,)",
        lambda rows, classes, inputs: {"g": (g, (rows, classes)), "w": (w, (classes, inputs)),
                                       "dw": (dw, (classes, inputs)), "db": (db, (inputs,)),
                                       "grad_in": (grad_in, (rows, inputs)), "db_out": (db_out, (classes,))})
    if any(x.dtype != dtype for x, what in arrays if what != "a"):
        raise BadArguments(f"linear_backward: every array must be {dtype}" + (" (a: its bfloat16 bits)" if
                                                                              a.dtype == np.uint16 else ""))
    if classes > lb_family.MAX_CLASSES:
        raise BadArguments(f"linear_backward: at most {lb_family.MAX_CLASSES} classes, got {classes}")
    named = arrays + ([(grad_in_bf16, "grad_in_bf16")] if grad_in_bf16 is not None else [])
    for (x, what), (y, other) in itertools.combinations(named, 2):
        in_place = {what, other} == {"w", "dw"} and x.data.ptr == y.data.ptr and x.shape == y.shape
        if {what, other} & {"grad_in", "grad_in_bf16", "dw", "db", "db_out"} and not in_place and overlaps(x, y):
            raise BadArguments(f"linear_backward: {what} and {other} overlap; an output shares no memory with "
                               "another array (but dw may be w itself)")
    aligned = _aligned(*(x for x, what in arrays if what not in ("g", "db_out") and not (what == "grad_in" and transposed)))
    if grad_in_bf16 is not None:
        if dtype != np.float32:
            raise BadArguments("linear_backward: grad_in_bf16 is grad_in in bfloat16: it needs float32 arrays")
        aligned = min(aligned, _bf16_bits(grad_in_bf16, (rows, inputs), "linear_backward: grad_in_bf16"))
    problem = lb_family.Problem(rows, classes, inputs, str(dtype), activation, aligned,
                                grad_in_bf16=grad_in_bf16 is not None, grad_in_f32=grad_in is not None,
                                grad_in_transposed=transposed, a_bf16=a.dtype == np.uint16, bias_grad=db_out is not None)
    ld_t = leading_dim(grad_in.T, "grad_in", "linear_backward") if transposed else 0
    s = _scalar(dtype)
    null = np.uint64(0)

    def args(geo):
        workspace = scratch("workspace", dtype, geo.workspace_elems) if geo.workspace_elems else null
        counters = scratch("counters", np.int32, geo.counters) if geo.counters else null
        return (g, w, a, grad_in if grad_in is not None else null, grad_in_bf16 if grad_in_bf16 is not None else null,
                dw, db, *([db_out] if db_out is not None else []), workspace, counters, np.int32(rows),
                np.int32(ld_t), s(alpha), s(beta), s(db_beta))

    launch("linear_backward", problem, config, args)
    return grad_in if grad_in is not None else grad_in_bf16


def column_sums(g, out=None, alpha=1.0, beta=0.0, config=None):
    """out[j] = alpha * sum_i g[i, j] + beta * out[j] (beta = 1, alpha = -lr: the bias SGD step)."""
    cupy = require_cupy()

    if not isinstance(g, cupy.ndarray) or g.ndim != 2 or (g.shape[1] > 1 and g.strides[1] != g.itemsize):
        raise BadArguments("column_sums: g must be a row-major 2-D cupy array")
    rows, cols = g.shape
    out = cupy.zeros(cols, dtype=g.dtype) if out is None else out
    if out.shape != (cols,) or out.dtype != g.dtype:
        raise BadArguments(f"column_sums: out must have shape ({cols},) and dtype {g.dtype}")
    s = _scalar(g.dtype)
    problem = colsum_family.Problem(rows, cols, str(g.dtype))
    _run("colsum", problem, (g, out, np.int32(rows), np.int32(cols),
                             np.int32(g.strides[0] // g.itemsize), s(alpha), s(beta)), config)
    return out


def adam_update(w, g, m, v, steps, lr, beta1, beta2, eps, config=None):
    """One Adam step in place on the flat parameters w with their moments m, v (kernels/adam/):
    steps, a (1,) int32 cupy array, counts the steps done, and the launch advances it, so a captured
    CUDA graph replays the right bias correction."""
    cupy = require_cupy()

    for x, what in ((w, "w"), (g, "g"), (m, "m"), (v, "v")):
        _contiguous(x, what)
        if x.shape != w.shape or x.dtype != w.dtype or x.ndim != 1:
            raise BadArguments(f"adam_update: w, g, m and v must be 1-D of one shape and dtype, got {what} "
                               f"{x.dtype} {x.shape}")
    if not isinstance(steps, cupy.ndarray) or steps.shape != (1,) or steps.dtype != np.int32:
        raise BadArguments("adam_update: steps must be a (1,) int32 cupy array")
    problem = adam_family.Problem(w.size, str(w.dtype))

    def args(geo):
        arrivals = scratch("counters", np.int32, geo.counters)
        return w, g, m, v, steps, arrivals, np.int32(w.size), *map(np.float64, (lr, beta1, beta2, eps))

    launch("adam", problem, config, args)
    return w
