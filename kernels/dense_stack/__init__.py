"""Dense-stack family (dense_stack.cu.j2): a network's last dense layers trained in one kernel.

A CNN ends in a few small dense layers (LeNet: 250 -> 128 -> 100 -> 80 -> 10); at a small batch each
of their GEMMs is a few microseconds of launch and latency for a fraction of a microsecond of
arithmetic, one after another on the step's critical path (three forward, the output layer, three
back). Here one block takes R rows of the batch through all of them: the forward pass with bias and
activation, softmax + cross-entropy, and the backward pass down to the stack's input, its rows'
activations and gradients in shared memory between layers; every block reads every weight, so the
stack suits weights of some hundred KB (STACK_MAX_WEIGHTS), not wide layers. It writes every
activation and gradient, for the weight gradients (G_l^T A_{l-1} and the column sums), which other
launches compute beside it. (The fully fused MLPs of tiny-cuda-nn do the same for one block's rows.)
"""
import itertools
import math
from dataclasses import dataclass

import numpy as np

from kernels.contract import DTYPES, ITEMSIZE, SHORT, Geometry, ceil_div, check_problem
from kernels.softmax_xent import softmax, xent_loss

NAME = "dense_stack"
TEMPLATE = "dense_stack/dense_stack.cu.j2"

ACTIVATIONS = ("sigmoid", "relu")
INPUT_GRAD = "+dx"                      # an op's suffix: the stack's input gradient is written too
KEY_SIZES = ("rows", "inputs", "hidden", "widths...")   # then the other hidden layers' widths, the classes
KEY_OPS = tuple(a + dx for a in ACTIVATIONS for dx in ("", INPUT_GRAD))
MAX_CLASSES = 32                        # a lane holds one class of a row
MAX_LAYERS = 8
STACK_MAX_WEIGHTS = 1 << 17             # elements of all W_l: what every block streams from L2 twice

PARAMS = {
    "rows": (1, 2, 4, 8, 16, 32),  # rows of the batch per block
    "warps": (2, 4, 8, 16),        # warps per block
    "chunk": (8, 16, 32, 64),      # rows of a product's reduction staged in shared memory at a time
}


@dataclass(frozen=True)
class Problem:
    """rows of `widths[0]` inputs through dense layers of widths[1:] (the last the classes' logits),
    `activation` after each hidden layer; `grad_in`: the input's gradient wanted (no derivative)."""

    rows: int
    widths: tuple[int, ...]
    dtype: str = "float32"
    activation: str = "relu"
    grad_in: bool = False

    def __post_init__(self):
        check_problem(self, ("rows",), "dense_stack")
        if type(self.widths) is not tuple or not 3 <= len(self.widths) <= MAX_LAYERS + 1 \
                or not all(type(w) is int and w >= 1 for w in self.widths):
            raise ValueError(f"dense_stack widths must be a tuple of 3 to {MAX_LAYERS + 1} positive ints (inputs, "
                             f"at least one hidden layer, classes), got {self.widths!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation {self.activation!r} is not one of {', '.join(ACTIVATIONS)}")

    @property
    def layers(self) -> int:
        return len(self.widths) - 1

    @property
    def weights(self) -> int:
        """Elements of every W_l."""
        return sum(a * b for a, b in zip(self.widths, self.widths[1:]))


def lane_cols(n: int, warps: int, rows: int) -> int:
    """Columns of an n-wide product a lane owns (the template's lane_cols)."""
    return ceil_div(n, 32 * (warps // min(warps, rows)))


def chunk_row(n: int, warps: int, rows: int) -> int:
    """Elements of a staged chunk's row for an n-wide product (the template's chunk_row)."""
    return 32 * (warps // min(warps, rows)) * lane_cols(n, warps, rows) + 1


def product_widths(p: Problem) -> list[int]:
    """The output widths of the kernel's products: each layer forward, each gradient carried down
    (to the input where grad_in)."""
    return list(p.widths[1:]) + list(p.widths[1:-1]) + ([p.widths[0]] if p.grad_in else [])


def offsets(p: Problem, rows: int) -> list[int]:
    """Where each A_l starts in shared memory (elements), and where they end."""
    return [rows * s for s in itertools.accumulate(p.widths, initial=0)]


def smem_bytes(c, p: Problem) -> int:
    widest = max(p.widths)
    elems = offsets(p, c.rows)[-1] + 2 * c.rows * widest + c.chunk * chunk_row(widest, c.warps, c.rows)
    return elems * ITEMSIZE[p.dtype]


STATIC_SMEM = 16 * 8            # a loss per warp


def staged_loads(c, p: Problem) -> int:
    """Registers a thread holds the next chunk in, for the widest product."""
    return ceil_div(c.chunk * max(product_widths(p)), 32 * c.warps) * ITEMSIZE[p.dtype] // 4


def accumulators(c, p: Problem) -> int:
    """32-bit registers of a lane's accumulators, for the widest product."""
    rows_a_lane = c.rows // min(c.warps, c.rows)
    return rows_a_lane * lane_cols(max(product_widths(p)), c.warps, c.rows) * ITEMSIZE[p.dtype] // 4


CONSTRAINTS = (
    (f"at most {MAX_CLASSES} classes (a lane holds one class of a row)", lambda c, p, d: p.widths[-1] <= MAX_CLASSES),
    ("threads per block must fit the device", lambda c, p, d: 32 * c.warps <= d.max_threads_per_block),
    ("the rows' activations, gradients and a chunk must fit shared memory",
     lambda c, p, d: smem_bytes(c, p) + STATIC_SMEM <= d.smem_per_block),
    ("the staged chunk must fit registers: at most 64 32-bit words a thread", lambda c, p, d: staged_loads(c, p) <= 64),
    ("the accumulators must fit registers: at most 64 32-bit words a lane", lambda c, p, d: accumulators(c, p) <= 64),
    ("a block of more rows than the batch only idles", lambda c, p, d: c.rows == 1 or c.rows // 2 < p.rows),
)


def template_args(c, p: Problem) -> dict:
    return dict(c, ctype=DTYPES[p.dtype], widths=p.widths, activation=p.activation, grad_in=p.grad_in,
                offsets=tuple(offsets(p, c.rows)))


def instance_name(c, p: Problem) -> str:
    widths = "x".join(map(str, p.widths))
    return (f"dense_stack_{SHORT[p.dtype]}_{widths}_{p.activation}{'_dx' if p.grad_in else ''}"
            f"_r{c.rows}_w{c.warps}_k{c.chunk}")


def geometry(c, p: Problem) -> Geometry:
    return Geometry(grid=(ceil_div(p.rows, c.rows), 1, 1), block=(32 * c.warps, 1, 1), smem_bytes=smem_bytes(c, p))


def flops(p: Problem) -> int:
    w = p.widths
    back = sum(a * b for a, b in zip(w[1:-1], w[2:])) + (w[0] * w[1] if p.grad_in else 0)
    return 2 * p.rows * (p.weights + back)


def key_of(p: Problem) -> tuple[tuple[int, ...], str]:
    return (p.rows, *p.widths), p.activation + (INPUT_GRAD if p.grad_in else "")


def problem_of(sizes: tuple[int, ...], op: str, dtype: str) -> Problem:
    return Problem(sizes[0], tuple(sizes[1:]), dtype, op.removesuffix(INPUT_GRAD), op.endswith(INPUT_GRAD))


def default_candidates(p: Problem, d):
    """Eight rows a block on eight warps, chunks of 32 (the product's rows in a warp's loads); then
    fewer and more rows a block (more blocks read the weights, fewer rows each), other warps and chunks."""
    yield dict(rows=8, warps=8, chunk=32)
    for rows, warps, chunk in itertools.product((4, 16, 2, 32, 1), (8, 4, 16), (32, 16, 64)):
        yield dict(rows=rows, warps=warps, chunk=chunk)


def reference(p: Problem, x, weights, biases, labels, scale) -> dict:
    """{"out{l}", "grad{l}" (l = 1 .. L), "grad_in" where wanted, "loss"}: the stack in float64.
    Magnitudes carry |.| through the chain (activations are 1-Lipschitz); k is the longest chain of
    sums behind an element. An error e in a row of Z moves P_c by at most 2 P_c max|e| (as
    linear_xent); a gradient's magnitude also carries its activation's error through act'."""
    a = [np.asarray(x, np.float64)]
    mag = [np.abs(a[0])]
    ks = [0]
    w64 = [np.asarray(w, np.float64) for w in weights]
    b64 = [np.asarray(b, np.float64) for b in biases]
    L = p.layers
    for l in range(1, L + 1):
        z = a[-1] @ w64[l - 1].T + b64[l - 1]                          # (rows, W_l)
        m = mag[-1] @ np.abs(w64[l - 1]).T + np.abs(b64[l - 1])
        if l < L:
            z = np.maximum(z, 0) if p.activation == "relu" else 1 / (1 + np.exp(-z))
        a.append(z)
        mag.append(m)
        ks.append(ks[-1] + p.widths[l - 1])
    expected = {f"out{l}": (a[l], mag[l], ks[l]) for l in range(1, L + 1)}
    probs = softmax(a[L])
    onehot = np.eye(p.widths[-1])[labels]
    g = (probs - onehot) * scale                                       # G_L: (rows, C)
    g_mag = (probs + onehot + 2 * probs * mag[L].max(1, keepdims=True)) * abs(scale)
    k = ks[L]
    expected[f"grad{L}"] = (g, g_mag, k)
    for l in range(L, 0, -1):                                          # G_{l-1} from G_l
        if l == 1 and not p.grad_in:
            break
        carried, carried_mag = g @ w64[l - 1], g_mag @ np.abs(w64[l - 1])
        k += p.widths[l]
        if l == 1:
            expected["grad_in"] = (carried, carried_mag, k)
            break
        y = a[l - 1]
        slope = (y > 0).astype(np.float64) if p.activation == "relu" else y * (1 - y)
        g, g_mag = carried * slope, carried_mag * (np.abs(slope) + mag[l - 1])
        expected[f"grad{l - 1}"] = (g, g_mag, k)
    loss, loss_mag, _ = xent_loss(probs, labels)   # each row's log-sum-exp also carries Z's error
    expected["loss"] = (loss, loss_mag + 2 * mag[L].max(1).sum(), ks[L] + p.widths[-1])
    return expected


def parameters(p: Problem, rng: np.random.Generator):
    """Random (weights, biases) of the stack, He-scaled, of p's dtype: W_l (W_l, W_{l-1}), b_l (W_l,)."""
    t = np.dtype(p.dtype).type
    weights = [(rng.standard_normal((n, k)) * math.sqrt(2 / k)).astype(t) for k, n in zip(p.widths, p.widths[1:])]
    biases = [(0.1 * rng.standard_normal(n)).astype(t) for n in p.widths[1:]]
    return weights, biases
