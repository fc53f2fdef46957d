"""The launches of a training step: the MLP's or the CNN's own step (nn/mlp.py, nn/cnn.py) run on a
backend that does no arithmetic and only notes the kernel each operation launches on the GPU
backend, its arrays laid out by the same storage policy. nn.targets makes autogemm's tuning targets
of them, nn.cost_model its predictions.
"""
import contextlib

import numpy as np

import autogemm
from autogemm import CONV_POOL_OP, NO_OP
from nn.backends.base import Backend
from nn.backends.storage import Storage
from nn.cnn import CNN, CNNStep, init_cnn_params
from nn.errors import NNError
from nn.layers import parse_layers
from nn.mlp import MLP, Step
from nn.model_parallel import ShardedMLP, ShardedStep


class LaunchRecorder(Backend):
    """A backend of shapes: each operation appends the autogemm launch that the GPU backend makes
    for it on float32 operands at `precision` (nothing for an empty one), named by the step's arrays
    (`names`, by start address). Its arrays are laid out by the cupy backend's storage policy
    (`storage`: the same column-major copies and input gradient, allocated, never filled), so a GEMM
    is recorded with the op that backend launches. At precision bf16 the backend reads bfloat16
    copies where it can: the same GEMM shapes, tuned by `autogemm tune --dtype bfloat16`."""

    name = "record"
    xp = np

    def __init__(self, dtype="float32", precision="fp32"):
        super().__init__(dtype)
        self.precision = precision
        self.launches: list[autogemm.Target] = []
        self.on_side: list[bool] = []       # per launch: enqueued on the step's side branch
        self._side = False
        self.names: dict[int, str] = {}
        self.storage = Storage(self.dtype, precision, np, filled=False)

    def name_of(self, a) -> str:
        return self.names.get(a.__array_interface__["data"][0], "?")

    def _record(self, call: str, sizes, op: str, role: str, families=None):
        """The launch of `call`: one target for each family that can compute it (all are tuned,
        the fastest runs), or of `families`."""
        if min(sizes) > 0:
            families = families or autogemm.IMPLEMENTATIONS.get(call, (call,))
            self.launches += [autogemm.Target(family, tuple(int(s) for s in sizes), op, role) for family in families]
            self.on_side += [self._side] * len(families)

    @contextlib.contextmanager
    def side_branch(self, lane: int = 0):
        before, self._side = self._side, True
        try:
            yield
        finally:
            self._side = before

    # ---- storage: host arrays, never filled ---------------------------------------------------
    def asarray(self, a):
        return np.asarray(a, dtype=self.dtype if np.issubdtype(a.dtype, np.floating) else a.dtype)

    def to_numpy(self, a):
        return a

    def empty(self, shape):
        return np.empty(shape, self.dtype)

    def zeros(self, shape):
        return np.zeros(shape, self.dtype)

    def read_only(self, x):
        return self.storage.read_only(x)

    def empty_input_gradient(self, shape, classes):
        return self.storage.empty_input_gradient(shape, classes)

    def empty_output_layer_input(self, shape):
        return self.storage.empty_output_layer_input(shape)

    @staticmethod
    def _row_major(x, what: str):
        """NNError where the GPU backend would be handed a column-major array it cannot take."""
        if autogemm.row_major_operand(x, False)[1]:
            raise NNError(f"internal error: the step hands a column-major {what} {x.shape} to a kernel that "
                          "takes row-major arrays; please report it")

    # ---- the step's operations, as launches -----------------------------------------------------
    def gemm(self, a, b, out, *, alpha=1.0, beta=0.0, trans_a=False, trans_b=False, c=None,
             epilogue=None, bias=None, aux=None, precision=None):
        self._row_major(out, "GEMM output")
        k = a.shape[0] if trans_a else a.shape[1]
        product = f"{self.name_of(a)}{'^T' if trans_a else ''} {self.name_of(b)}{'^T' if trans_b else ''}"
        if epilogue:       # bias_sigmoid(A0 W1^T, b1)
            product = f"{epilogue}({product}, {self.name_of(bias if bias is not None else aux)})"
        role = f"{self.name_of(out)} = {product}"
        _, trans_a, _, trans_b = self.storage.launched_operands(a, trans_a, b, trans_b)
        self._record("gemm", (*out.shape, k), autogemm.gemm_key_op(trans_a, trans_b, epilogue), role)
        return out

    def softmax_xent(self, z, labels, grad_out, scale, loss_acc):
        self._record("softmax_xent", z.shape, NO_OP, f"{self.name_of(grad_out)} = softmax({self.name_of(z)}) - Y")

    def linear_xent(self, a, w, bias, labels, logits, grad_out, scale, loss_acc, grad_in=None, activation=None):
        if w.shape[0] > autogemm.LINEAR_XENT_MAX_CLASSES:     # the GPU backend composes it, as here
            super().linear_xent(a, w, bias, labels, logits, grad_out, scale, loss_acc, grad_in, activation)
            return
        outputs = [self.name_of(grad_out)] + ([self.name_of(grad_in)] if grad_in is not None else [])
        role = f"{self.name_of(logits)}, {', '.join(outputs)} from {self.name_of(a)} {self.name_of(w)}^T"
        self._record("linear_xent", (a.shape[0], w.shape[0], a.shape[1]), activation or NO_OP, role)

    def linear_backward(self, g, w, a, grad_in, activation, dw, db, alpha=1.0, beta=0.0, accumulate_db=False):
        if w.shape[0] > autogemm.LINEAR_BACKWARD_MAX_CLASSES:     # the GPU backend composes it, as here
            super().linear_backward(g, w, a, grad_in, activation, dw, db, alpha, beta, accumulate_db)
            return
        role = (f"{self.name_of(grad_in)}, {self.name_of(dw)}{' step' if beta else ''}, "
                f"{self.name_of(db)}{' step' if accumulate_db else ''} from {self.name_of(g)} {self.name_of(w)}, "
                f"{self.name_of(a)}")
        _, transposed = autogemm.row_major_operand(grad_in, False)      # column-major: stored as G^T
        self._record("linear_backward", (a.shape[0], w.shape[0], a.shape[1]),
                     activation + (autogemm.LINEAR_BACKWARD_TRANSPOSED if transposed else ""), role)

    def fuses_dense_stack(self, widths):
        return autogemm.dense_stack_runs(widths)         # as the cupy backend

    def dense_stack(self, x, weights, biases, labels, outs, grads, scale, loss_acc, activation, grad_in=None,
                    where=None):
        widths = (x.shape[1], *(w.shape[0] for w in weights))
        role = f"{', '.join(self.name_of(o) for o in outs)} and their gradients"
        if where is not None:                   # the gradient below the pool: the pool's input map for the inputs
            self._record("dense_stack", (x.shape[0], *grad_in.shape[1:], *widths[1:]),
                         activation + autogemm.DENSE_STACK_POOLED, role)
            return
        op = activation + (autogemm.DENSE_STACK_INPUT_GRAD if grad_in is not None else "")
        self._record("dense_stack", (x.shape[0], *widths), op, role)

    def column_sums(self, g, out, scale=1.0, accumulate=False):
        self._row_major(g, "column sums' input")
        role = f"{self.name_of(out)} {'+=' if accumulate else '='} column sums of {self.name_of(g)}"
        self._record("colsum", g.shape, NO_OP, role)
        return out

    def sgd_update(self, w, grad, lr, reg):
        rows, cols = (1, w.shape[0]) if w.ndim == 1 else w.shape
        self._record("elementwise", (rows, cols), "sgd", f"{self.name_of(w)} -= lr {self.name_of(grad)}")
        return w

    def conv2d(self, x, w, b, out, activation=None, where=None, unpooled=None):
        z = f"{activation or 'linear'}(conv({self.name_of(x)}, {self.name_of(w)}) + {self.name_of(b)})"
        self._record_pooled("conv2d", (*x.shape, *w.shape[::2]), where is not None,
                            f"{self.name_of(out)} = " + (z if where is None else f"maxpool({z})"))
        return out

    def conv2d_backward_data(self, g, w, out, aux=None, activation=None, where=None, unpooled=None):
        dx = f"conv^T({self.name_of(g)}, {self.name_of(w)})" + (
            f" {activation}'({self.name_of(aux)})" if aux is not None else "")
        self._record_pooled("conv2d_dgrad", (*(out.shape if where is None else where.shape), *w.shape[::2]),
                            where is not None, f"{self.name_of(out)} = " + (dx if where is None else f"maxpool^T({dx})"))
        return out

    def _record_pooled(self, call: str, sizes, pooled: bool, role: str):
        """A convolution's launch; with a pool, both ways autogemm may run the call (one role): fused
        (op CONV_POOL_OP, the direct family's) and the convolution alone, whose records decide between
        them (its pool then runs on the pooling kernel's nearest record)."""
        if pooled:
            self._record(call, sizes, CONV_POOL_OP, role, families=(f"{call}_direct",))
        self._record(call, sizes, NO_OP, role)

    def conv2d_backward_weights(self, g, x, dw, db):
        role = f"{self.name_of(dw)}, {self.name_of(db)} from {self.name_of(g)}, {self.name_of(x)}"
        self._record("conv2d_wgrad", (*x.shape, *dw.shape[::2]), NO_OP, role)

    def maxpool2x2(self, x, out, where):
        self._record("pool2x2", x.shape, "forward", f"{self.name_of(out)} = maxpool({self.name_of(x)})")
        return out

    def maxpool2x2_backward(self, g, where, out, y=None, activation=None):
        self._record("pool2x2", out.shape, "backward", f"{self.name_of(out)} = maxpool^T({self.name_of(g)})")
        return out

    def adam_update(self, w, g, m, v, steps, lr, beta1, beta2, eps):
        self._record("adam", w.shape, NO_OP, f"Adam on every parameter ({w.size})")
        return w

    def mark(self):
        return 0.0

    def elapsed_ms(self, start, end) -> float:
        return 0.0


def _name_arrays(recorder: LaunchRecorder, step: Step, x):
    """Names of the step's arrays as the module docstring of nn/mlp.py writes them: A0 = X, A_l,
    Z (logits), G_l, W_l, b_l, dW_l, db_l (layers from 1)."""
    m = step.model
    arrays = {"A0": x, "Z": step.logits}
    for l in range(m.layers):
        arrays.update({f"W{l + 1}": m.W[l], f"b{l + 1}": m.b[l], f"G{l + 1}": step.deltas[l],
                       f"dW{l + 1}": step.dW[l], f"db{l + 1}": step.db[l]})
    arrays.update({f"A{l + 1}": a for l, a in enumerate(step.acts)})
    recorder.names = {a.__array_interface__["data"][0]: name for name, a in arrays.items()}


def record_step(rows: int, batch: int, sizes, activation: str, ranks: int,
                rank: int | None = None, precision: str = "fp32", recorder: LaunchRecorder | None = None
                ) -> list[autogemm.Target]:
    """The launches of one rank's training step on `rows` rows of a `batch`-row batch at `precision`:
    the fused one-rank step, or with ranks > 1 the step whose gradients are all-reduced before the
    update; with `rank`, that rank's step of the hidden-unit split (nn.model_parallel) instead.
    `recorder`: the LaunchRecorder to record into (its dtype and precision then apply)."""
    recorder = recorder or LaunchRecorder(precision=precision)
    # W_l, b_l: never read, their pages never touched (a wide network costs no memory)
    params = [(np.empty((n_out, n_in), recorder.dtype), np.empty(n_out, recorder.dtype))
              for n_in, n_out in zip(sizes[:-1], sizes[1:])]
    if rank is None:
        step = Step(MLP(recorder, sizes, activation, params), rows, batch, lr=0.1, reg=0.0)
    else:
        model = ShardedMLP(recorder, sizes, activation, params, rank, ranks, reduce=lambda logits: logits)
        step = ShardedStep(model, rows, batch, lr=0.1, reg=0.0)
    x = recorder.read_only(np.empty((rows, sizes[0]), recorder.dtype))     # X: (rows, inputs), never read
    labels = np.zeros(rows, np.int32)
    _name_arrays(recorder, step, x)
    step.train_batch(x, labels, allreduce=None if ranks == 1 or rank is not None else lambda grads: None)
    return recorder.launches


def _name_cnn_arrays(recorder: LaunchRecorder, step: CNNStep, x):
    """Names of the CNN step's arrays, layers counted from 1: A0 = X, A_l, G_l, W_l, b_l, dW_l, db_l."""
    m = step.model
    arrays = {"A0": x}
    for l in range(len(m.layers)):
        arrays.update({f"A{l + 1}": step.acts[l], f"G{l + 1}": step.deltas[l]})
        if m.W[l] is not None:
            arrays.update({f"W{l + 1}": m.W[l], f"b{l + 1}": m.b[l], f"dW{l + 1}": step.dW[l], f"db{l + 1}": step.db[l]})
    recorder.names = {a.__array_interface__["data"][0]: name for name, a in arrays.items()}


def record_cnn_step(rows: int, batch: int, layers: str, ranks: int, optimizer: str = "adam",
                    recorder: LaunchRecorder | None = None) -> list[autogemm.Target]:
    """The launches of one rank's CNN training step (nn.layers spec `layers` on 28 x 28 images, 10
    classes) on `rows` rows of a `batch`-row batch (into `recorder` when given)."""
    recorder = recorder or LaunchRecorder()
    net = parse_layers(layers)
    model = CNN(recorder, net, "relu", init_cnn_params(net))
    step = CNNStep(model, rows, batch, optimizer)
    x = np.empty((rows, 28 * 28), recorder.dtype)     # X: (rows, pixels), never read
    _name_cnn_arrays(recorder, step, model.images(x))
    step.train_batch(x, np.zeros(rows, np.int32), allreduce=None if ranks == 1 else lambda grads: None)
    return recorder.launches
