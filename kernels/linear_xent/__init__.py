"""Output-layer family (linear_xent.cu.j2): logits, softmax, cross-entropy and both gradients in one kernel.

For an MLP's last layer with few classes it replaces three launches: the logits GEMM, softmax +
cross-entropy, and the GEMM that carries the gradient back to the last hidden layer (with its
activation derivative). The last hidden activations A are read twice, W once per block. Without the
loss (op "logits") it is a few-outputs layer's forward pass: Z alone, A read once.
"""
import itertools
from dataclasses import dataclass

import numpy as np

from kernels.contract import DTYPES, ITEMSIZE, NO_OP, SHORT, Geometry, ceil_div, check_problem
from kernels.bf16 import bf16_values
from kernels.softmax_xent import softmax, xent_loss

NAME = "linear_xent"
TEMPLATE = "linear_xent/linear_xent.cu.j2"

ACTIVATIONS = (None, "sigmoid", "relu")   # the layer input's activation (None: no input gradient)
KEY_SIZES = ("rows", "classes", "inputs")
LOGITS = "logits"                         # the op of Z alone, with no loss
KEY_OPS = tuple(a or NO_OP for a in ACTIVATIONS) + (LOGITS,)
MAX_CLASSES = 32                          # a lane stores one class of each row

PARAMS = {
    "warps": (1, 2, 4, 8, 16),     # warps per block
    "rows": (1, 2, 4),             # rows per warp (their dot products share W's loads)
    "vec": (1, 2, 4),              # elements per load along K
    "unroll": (1, 2, 4, 8),        # column slices in flight per lane
    "w_smem": (False, True),       # W copied to shared memory once per block, or read through the caches
}


@dataclass(frozen=True)
class Problem:
    """rows x inputs activations A into `classes` logits; `activation` names A's activation when
    the input gradient is wanted; `aligned`: the widest vector every pointer allows; `grad_in_bf16`:
    the input gradient also rounded to bfloat16 (float32 alone); `a_bf16`: A held in bfloat16 bits
    (a float32 layer); each served by the same tuned record. `loss` False: the logits alone (no
    labels, G, input gradient or loss), with records of their own (op "logits")."""

    rows: int
    classes: int
    inputs: int
    dtype: str = "float32"
    activation: str | None = None
    aligned: int = 4
    grad_in_bf16: bool = False
    a_bf16: bool = False
    loss: bool = True

    def __post_init__(self):
        check_problem(self, ("rows", "classes", "inputs"), "linear_xent")
        if not self.loss and (self.activation or self.grad_in_bf16):
            raise ValueError("the logits alone have no input gradient (activation None, no bfloat16 copy)")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation {self.activation!r} is not one of sigmoid, relu or None")
        if self.aligned not in (1, 2, 4):
            raise ValueError("aligned must be 1, 2 or 4")
        if self.grad_in_bf16 and not (self.activation and self.dtype == "float32"):
            raise ValueError("a bfloat16 copy of the input gradient needs one (an activation) of float32")
        if self.a_bf16 and self.dtype != "float32":
            raise ValueError("A in bfloat16 is a float32 layer's")

    @property
    def op(self) -> str:
        """The key's op: the activation whose derivative the input gradient takes, '-' for none,
        'logits' for the logits alone."""
        return LOGITS if not self.loss else self.activation or NO_OP


STATIC_SMEM = 128         # bytes of __shared__ variables in the kernel (a loss per warp)
MAX_CACHED_W_WORDS = 256  # W read through the caches: the most 32-bit words of its values in flight a lane


def w_bytes(p: Problem) -> int:
    return p.classes * p.inputs * ITEMSIZE[p.dtype]


def w_fits_smem(p: Problem, d) -> bool:
    """Whether W fits the device's shared memory beside the kernel's own variables."""
    return w_bytes(p) + STATIC_SMEM <= d.smem_per_block


def cached_w_words(unroll: int, vec: int, p: Problem) -> int:
    """32-bit words of W's values a lane holds in flight when W is read through the caches:
    UNROLL column slices x classes x VEC."""
    return unroll * p.classes * vec * ITEMSIZE[p.dtype] // 4


CONSTRAINTS = (
    (f"at most {MAX_CLASSES} classes (a lane stores one class of a row)", lambda c, p, d: p.classes <= MAX_CLASSES),
    ("the accumulators (rows x classes) must fit registers: at most 64 32-bit words",
     lambda c, p, d: c.rows * p.classes * ITEMSIZE[p.dtype] // 4 <= 64),
    ("vectors must be at most 16 bytes", lambda c, p, d: c.vec * ITEMSIZE[p.dtype] <= 16),
    ("VEC must divide the inputs and suit every pointer's alignment",
     lambda c, p, d: p.inputs % c.vec == 0 and c.vec <= p.aligned),
    ("threads per block must fit the device", lambda c, p, d: 32 * c.warps <= d.max_threads_per_block),
    ("W in shared memory must fit the device's per-block limit",
     lambda c, p, d: not c.w_smem or w_fits_smem(p, d)),
    ("W read through the caches: the values of the unrolled slices (UNROLL x classes x VEC) must fit registers, "
     "at most 256 (more spill)",
     lambda c, p, d: c.w_smem or cached_w_words(c.unroll, c.vec, p) <= MAX_CACHED_W_WORDS),
    ("unrolling past the column slices a lane has is pointless",
     lambda c, p, d: c.unroll <= ceil_div(p.inputs, 32 * c.vec)),
)


def template_args(c, p: Problem) -> dict:
    return dict(c, ctype=DTYPES[p.dtype], classes=p.classes, inputs=p.inputs, activation=p.activation,
                grad_in_bf16=p.grad_in_bf16, a_bf16=p.a_bf16, loss=p.loss)


def instance_name(c, p: Problem) -> str:
    dt = SHORT[p.dtype]
    what = p.activation or ("nograd" if p.loss else LOGITS)
    return (f"linear_xent_{dt}_c{p.classes}_k{p.inputs}_{what}_w{c.warps}_r{c.rows}"
            f"_v{c.vec}_u{c.unroll}_{'smem' if c.w_smem else 'l2'}" + ("_bf16in" if p.grad_in_bf16 else "")
            + ("_a16" if p.a_bf16 else ""))


def geometry(c, p: Problem) -> Geometry:
    return Geometry(grid=(ceil_div(p.rows, c.warps * c.rows), 1, 1), block=(32 * c.warps, 1, 1),
                    smem_bytes=w_bytes(p) if c.w_smem else 0)


def flops(p: Problem) -> int:
    products = 2 if p.activation else 1      # Z, and G W where the input gradient is wanted
    return 2 * products * p.rows * p.classes * p.inputs


def key_of(p: Problem) -> tuple[tuple[int, ...], str]:
    return (p.rows, p.classes, p.inputs), p.op


def problem_of(sizes: tuple[int, ...], op: str, dtype: str) -> Problem:
    return Problem(*sizes, dtype, None if op in (NO_OP, LOGITS) else op, aligned=4, loss=op != LOGITS)


def default_candidates(p: Problem, d):
    """Eight warps of one row each, 16-byte loads where they fit, W in shared memory where it fits,
    loops unrolled as far as the space allows (what the tuner chose on the MLP's output layers;
    benchmarks/). Then where the search starts as well: 1, 2 or 4 rows a
    warp on 8, 4 or 2 warps (W's shared reads, 16 bytes for 4 FMAs a row, serve more rows), each
    with the loops unrolled fully where they can be and twice. Where W does not fit shared memory
    (float64 W of 10 x 4096, 320 KiB), configs that read it through the caches instead
    (`cached_w_candidates`)."""
    vec = max(v for v in (1, 2, 4) if v * ITEMSIZE[p.dtype] <= 16 and p.inputs % v == 0 and v <= p.aligned)
    slices = ceil_div(p.inputs, 32 * vec)
    if not w_fits_smem(p, d):
        yield from cached_w_candidates(p, vec, slices)
        return
    unroll = max(u for u in PARAMS["unroll"] if u <= slices)
    for w_smem in (True, False):
        for rows in (1, 2):
            yield dict(warps=8, rows=rows, vec=vec, unroll=unroll, w_smem=w_smem)
    for warps, rows, u in itertools.product((8, 4, 2), PARAMS["rows"], dict.fromkeys((unroll, min(2, slices)))):
        yield dict(warps=warps, rows=rows, vec=vec, unroll=u, w_smem=True)


def cached_w_candidates(p: Problem, vec: int, slices: int):
    """Configs reading W through the caches, for a W too large for shared memory: eight warps of two
    rows each (W's loads serve both rows; the fastest of these and of sampled configs on the float64
    784-4096-10 output layer, see the commit history), then of one row, the loops unrolled twice,
    then as far as W's values in flight fit registers (MAX_CACHED_W_WORDS: 4 times for float64 W of
    10 classes at VEC 2). Then, as `default_candidates`, 1, 2 or 4 rows a warp on 8, 4 or 2 warps."""
    unroll = max((u for u in PARAMS["unroll"]
                  if u <= slices and cached_w_words(u, vec, p) <= MAX_CACHED_W_WORDS), default=1)
    twice = min(2, unroll)
    for u, rows in itertools.product(dict.fromkeys((twice, unroll)), (2, 1)):
        yield dict(warps=8, rows=rows, vec=vec, unroll=u, w_smem=False)
    for warps, rows, u in itertools.product((8, 4, 2), PARAMS["rows"], dict.fromkeys((unroll, twice))):
        yield dict(warps=warps, rows=rows, vec=vec, unroll=u, w_smem=False)


def reference(p: Problem, a, w, bias, labels=None, scale=None) -> dict:
    """{"logits" | "grad" | "grad_in" (with an activation) | "loss"} (the logits alone without the
    loss: labels and scale unread): the layer in float64 (the bfloat16 copy of grad_in, where asked
    for, is checked against "grad_in" at bf16). An error
    e in a row of Z moves P_c by at most 2 P_c max|e|, so G's and G_in's bounds carry Z's
    (K-scaled) one. A in bfloat16 arrives as its bits (uint16)."""
    a64 = bf16_values(a) if p.a_bf16 else np.asarray(a, np.float64)
    w64, b64 = (np.asarray(x, np.float64) for x in (w, bias))
    z = a64 @ w64.T + b64                                           # Z: (rows, C)
    z_mag = np.abs(a64) @ np.abs(w64).T + np.abs(b64)
    if not p.loss:
        return {"logits": (z, z_mag, p.inputs)}
    probs = softmax(z)
    onehot = np.eye(p.classes)[labels]
    g = (probs - onehot) * scale                                    # G: (rows, C)
    g_mag = (probs + onehot + 2 * probs * z_mag.max(1, keepdims=True)) * abs(scale)
    expected = {"logits": (z, z_mag, p.inputs), "grad": (g, g_mag, p.inputs)}
    if p.activation:
        slope = a64 * (1 - a64) if p.activation == "sigmoid" else (a64 > 0).astype(np.float64)
        expected["grad_in"] = (g @ w64 * slope, g_mag @ np.abs(w64) * slope, p.inputs)   # G_in: (rows, K)
    expected["loss"] = xent_loss(probs, labels)
    return expected
