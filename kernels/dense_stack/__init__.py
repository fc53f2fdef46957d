"""Dense-stack family (dense_stack.cu.j2): a network's last dense layers trained in one kernel.

A CNN ends in a few small dense layers (LeNet: 250 -> 128 -> 100 -> 80 -> 10); at a small batch each
of their GEMMs is a few microseconds of launch and latency for a fraction of a microsecond of
arithmetic, one after another on the step's critical path (three forward, the output layer, three
back). Here one block takes R rows of the batch through all of them: the forward pass with bias and
activation, softmax + cross-entropy, and the backward pass down to the stack's input, its rows'
activations and gradients in shared memory between layers; every block reads every weight from L2
(twice), so the stack suits weights of some hundred KB (STACK_MAX_WEIGHTS), not wide layers. It
writes every activation and gradient, for the weight gradients (G_l^T A_{l-1} and the column
sums), which other launches compute beside it. (The fully fused MLPs of tiny-cuda-nn do the same for one block's rows.)
"""
import itertools
import math
import re
import types
from dataclasses import dataclass

import numpy as np

from kernels.contract import DTYPES, ITEMSIZE, SHORT, Geometry, ceil_div, check_problem
from kernels.softmax_xent import softmax, xent_loss


NAME = "dense_stack"
TEMPLATE = "dense_stack/dense_stack.cu.j2"

ACTIVATIONS = ("sigmoid", "relu")
INPUT_GRAD = "+dx"                      # an op's suffix: the stack's input gradient is written too
POOLED = "+pool"                        # ... below the 2 x 2 max-pool whose output is the stack's input
KEY_SIZES = ("rows", "inputs", "hidden", "widths...")   # then the other hidden layers' widths, the classes;
                                                        # "+pool": the pool's input map C, H, W for inputs
KEY_OPS = tuple(a + dx for a in ACTIVATIONS for dx in ("", INPUT_GRAD, POOLED))
MAX_CLASSES = 32                        # a lane holds one class of a row
MAX_LAYERS = 8
MAX_WIDTH = 4096
STACK_MAX_WEIGHTS = 1 << 17             # elements of all W_l: what every block reads from L2 twice

PARAMS = {
    "rows": (1, 2, 4, 8, 16),      # rows of the batch per block
    "warps": (4, 8, 16, 32),       # warps per block
    "cols": (1, 2, 4, 8),          # a forward layer's outputs a warp takes at a time (their loads in flight together)
}


def widest_vec(k: int, dtype: str) -> int:
    """The widest vector (elements, at most 16 bytes) along a row of k elements."""
    return max(v for v in (1, 2, 4) if k % v == 0 and v * ITEMSIZE[dtype] <= 16)


@dataclass(frozen=True)
class Problem:
    """rows of `widths[0]` inputs through dense layers of widths[1:] (the last the classes' logits;
    widths also as text, "250x128x10": `autogemm tune --family dense_stack --problem ...`),
    `activation` after each hidden layer; `grad_in`: the input's gradient wanted (no derivative).
    `vecs`: per layer, the widest vector (1, 2, 4 elements) its W's rows allow (their length, the
    pointer), one tuned record serving each; None: the widest each length allows. `pool` (C, H, W):
    the input is a 2 x 2 max-pool's output of that map, an activation's (X > 0 or in (0, 1)), and
    the input's gradient goes below the pool, times act'(X), at each window's maximum."""

    rows: int
    widths: tuple[int, ...]
    dtype: str = "float32"
    activation: str = "relu"
    grad_in: bool = False
    vecs: tuple[int, ...] | None = None
    pool: tuple[int, int, int] | None = None

    def __post_init__(self):
        check_problem(self, ("rows",), "dense_stack")
        if type(self.widths) is str and re.fullmatch(r"\d+(x\d+)+", self.widths):   # --problem widths=250x128x10
            object.__setattr__(self, "widths", tuple(int(w) for w in self.widths.split("x")))
        if type(self.widths) is not tuple or not 3 <= len(self.widths) <= MAX_LAYERS + 1 \
                or not all(type(w) is int and 1 <= w <= MAX_WIDTH for w in self.widths):
            raise ValueError(f"dense_stack widths must be a tuple of 3 to {MAX_LAYERS + 1} ints in 1..{MAX_WIDTH} "
                             f"(inputs, at least one hidden layer, classes), got {self.widths!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation {self.activation!r} is not one of {', '.join(ACTIVATIONS)}")
        if self.vecs is None:
            object.__setattr__(self, "vecs", tuple(widest_vec(k, self.dtype) for k in self.widths[:-1]))
        if type(self.vecs) is not tuple or len(self.vecs) != self.layers or any(
                v not in (1, 2, 4) or k % v or v * ITEMSIZE[self.dtype] > 16 for v, k in zip(self.vecs, self.widths)):
            raise ValueError(f"dense_stack vecs {self.vecs!r}: one of 1, 2, 4 a layer, dividing its inputs, "
                             "at most 16 bytes")
        if self.pool is not None and (
                type(self.pool) is not tuple or len(self.pool) != 3 or not all(type(x) is int and x >= 1 for x in self.pool)
                or self.pool[0] * (self.pool[1] // 2) * (self.pool[2] // 2) != self.widths[0] or not self.grad_in):
            raise ValueError(f"dense_stack pool {self.pool!r}: the (C, H, W) map whose 2 x 2 pooling is the "
                             f"{self.widths[0]} inputs, with the input's gradient")

    @property
    def layers(self) -> int:
        return len(self.widths) - 1

    @property
    def weights(self) -> int:
        """Elements of every W_l."""
        return sum(a * b for a, b in zip(self.widths, self.widths[1:]))


def offsets(c, p: Problem) -> list[int]:
    """Where each A_l starts in shared memory (elements, 16-byte aligned), then the two gradients
    and the slices' sums."""
    starts = [0]
    widest = max(p.widths if p.pool else p.widths[1:])     # with a pool, G_in too goes through shared memory
    for size in [c.rows * w for w in p.widths] + [c.rows * widest] * 2:
        starts.append(starts[-1] + ceil_div(size, 4) * 4)
    return starts


def smem_bytes(c, p: Problem) -> int:
    return (offsets(c, p)[-1] + c.rows * 32 * c.warps) * ITEMSIZE[p.dtype]


STATIC_SMEM = 32 * 8            # a loss per warp


def forward_loads(c, p: Problem) -> int:
    """32-bit registers of the weights a lane has in flight in a forward layer (the widest)."""
    return max(c.cols * ceil_div(k, 32 * v) * v for k, v in zip(p.widths, p.vecs)) * ITEMSIZE[p.dtype] // 4


def accumulator_words(c, p: Problem) -> int:
    """32-bit registers of a thread's accumulators, forward and back."""
    return (c.rows * c.cols + c.rows) * ITEMSIZE[p.dtype] // 4


def registers(c) -> int:
    """The registers a thread of the block may have."""
    return min(255, 65536 // (32 * c.warps))


CONSTRAINTS = (
    (f"at most {MAX_CLASSES} classes (a lane holds one class of a row)", lambda c, p, d: p.widths[-1] <= MAX_CLASSES),
    ("threads per block must fit the device", lambda c, p, d: 32 * c.warps <= d.max_threads_per_block),
    ("the rows' activations and gradients must fit shared memory",
     lambda c, p, d: smem_bytes(c, p) + STATIC_SMEM <= d.smem_per_block),
    ("a forward layer's weights in flight must fit registers: at most 64 32-bit words a lane",
     lambda c, p, d: forward_loads(c, p) <= 64),
    ("the accumulators (rows x cols) must fit registers: at most 32", lambda c, p, d: c.rows * c.cols <= 32),
    ("1024 threads have 64 registers each: one row a block, at most 4 outputs a warp and 32 words of weights in "
     "flight (more spill)",
     lambda c, p, d: c.warps < 32 or (c.rows == 1 and c.cols <= 4 and forward_loads(c, p) <= 32)),
    ("a thread's accumulators must fit a quarter of its registers, its weights in flight half (more spill)",
     lambda c, p, d: c.warps == 32 or (4 * accumulator_words(c, p) <= registers(c)
                                       and 2 * forward_loads(c, p) <= registers(c))),
    ("a block of more rows than the batch only idles", lambda c, p, d: c.rows == 1 or c.rows // 2 < p.rows),
)


def runs(widths: tuple[int, ...], dtype: str = "float32") -> bool:
    """Whether the family runs a stack of these widths (inputs, hidden layers', classes) on any GPU
    of 48 KB of shared memory a block, and it is one it suits (STACK_MAX_WEIGHTS)."""
    try:
        p = Problem(1, tuple(widths), dtype)
    except ValueError:
        return False
    smallest = types.SimpleNamespace(rows=1, warps=4, cols=1)
    gpu = types.SimpleNamespace(max_threads_per_block=1024, smem_per_block=48 * 1024)
    return p.weights <= STACK_MAX_WEIGHTS and all(fits(smallest, p, gpu) for _, fits in CONSTRAINTS)


def template_args(c, p: Problem) -> dict:
    return dict(c, ctype=DTYPES[p.dtype], widths=p.widths, activation=p.activation, grad_in=p.grad_in,
                vecs=p.vecs, offsets=tuple(offsets(c, p)), pool=p.pool)


def instance_name(c, p: Problem) -> str:
    widths = "x".join(map(str, p.widths))
    vecs = "".join(map(str, p.vecs))
    below = f"_pool{'x'.join(map(str, p.pool))}" if p.pool else "_dx" if p.grad_in else ""
    return (f"dense_stack_{SHORT[p.dtype]}_{widths}_{p.activation}{below}_v{vecs}"
            f"_r{c.rows}_w{c.warps}_c{c.cols}")


def geometry(c, p: Problem) -> Geometry:
    return Geometry(grid=(ceil_div(p.rows, c.rows), 1, 1), block=(32 * c.warps, 1, 1), smem_bytes=smem_bytes(c, p))


def flops(p: Problem) -> int:
    w = p.widths
    back = sum(a * b for a, b in zip(w[1:-1], w[2:])) + (w[0] * w[1] if p.grad_in else 0)
    return 2 * p.rows * (p.weights + back)


def key_of(p: Problem) -> tuple[tuple[int, ...], str]:
    if p.pool:
        return (p.rows, *p.pool, *p.widths[1:]), p.activation + POOLED
    return (p.rows, *p.widths), p.activation + (INPUT_GRAD if p.grad_in else "")


def problem_of(sizes: tuple[int, ...], op: str, dtype: str) -> Problem:
    if op.endswith(POOLED):
        c, h, w = sizes[1:4]
        return Problem(sizes[0], (c * (h // 2) * (w // 2), *sizes[4:]), dtype, op.removesuffix(POOLED), True,
                       pool=(c, h, w))
    return Problem(sizes[0], tuple(sizes[1:]), dtype, op.removesuffix(INPUT_GRAD), op.endswith(INPUT_GRAD))


def default_candidates(p: Problem, d):
    """The fewest rows a block that leave at most two blocks an SM (more blocks read the weights
    more often; fewer rows each finish sooner), 16 warps, four forward outputs a warp at a time;
    then other rows, warps and outputs."""
    rows = next((r for r in PARAMS["rows"] if ceil_div(p.rows, r) <= 2 * d.sm_count), PARAMS["rows"][-1])
    yield dict(rows=rows, warps=16, cols=4)
    for r, warps, cols in itertools.product(sorted(PARAMS["rows"], key=lambda r: abs(r - rows)), (16, 8, 32, 4),
                                            (4, 2, 8, 1)):
        yield dict(rows=r, warps=warps, cols=cols)


def reference(p: Problem, x, weights, biases, labels, scale, where=None) -> dict:
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
        if l == 1 and p.pool:                                          # times act'(X), below the pool
            slope = (a[0] > 0).astype(np.float64) if p.activation == "relu" else a[0] * (1 - a[0])
            g_in, g_in_mag = carried * slope, carried_mag * (np.abs(slope) + mag[0])
            expected["grad_in"] = tuple(unpooled(v, where, p.pool) for v in (g_in, g_in_mag)) + (k,)
            break
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


def unpooled(v, where, pool) -> np.ndarray:
    """v (rows, C * (H // 2) * (W // 2)) at each 2 x 2 window's maximum (`where`, 0..3 row by row) of
    a (rows, C, H, W) map, zero elsewhere."""
    c, h, w = pool
    rows = v.shape[0]
    out = np.zeros((rows, c, h, w))
    v, where = v.reshape(rows, c, h // 2, w // 2), np.asarray(where).reshape(rows, c, h // 2, w // 2)
    for at in range(4):
        out[:, :, at // 2:2 * (h // 2):2, at % 2:2 * (w // 2):2] += np.where(where == at, v, 0)
    return out


def parameters(p: Problem, rng: np.random.Generator):
    """Random (weights, biases) of the stack, He-scaled, of p's dtype: W_l (W_l, W_{l-1}), b_l (W_l,)."""
    t = np.dtype(p.dtype).type
    weights = [(rng.standard_normal((n, k)) * math.sqrt(2 / k)).astype(t) for k, n in zip(p.widths, p.widths[1:])]
    biases = [(0.1 * rng.standard_normal(n)).astype(t) for n in p.widths[1:]]
    return weights, biases
