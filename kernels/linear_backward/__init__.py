"""Backward family of a layer with few outputs (linear_backward.cu.j2): the input gradient, the weight
gradient and the input's bias gradient in one pass over the layer input.

For an MLP's output layer it replaces three launches, each a pass over the last hidden activations
or their gradient: the GEMM that carries G back (with the activation's derivative), the weight
gradient's GEMM G^T A, and the column sums of the input gradient (the bias gradient of the layer
below). Each takes the SGD step in place where asked (alpha = -lr, beta = 1 - lr reg).
"""
from dataclasses import dataclass

import numpy as np

from kernels.contract import DTYPES, ITEMSIZE, SHORT, Geometry, ceil_div, check_problem
from kernels.bf16 import bf16_values

NAME = "linear_backward"
TEMPLATE = "linear_backward/linear_backward.cu.j2"

ACTIVATIONS = ("sigmoid", "relu")         # the layer input's activation
TRANSPOSED = "_t"                         # an op's suffix: the input gradient stored transposed
KEY_SIZES = ("rows", "classes", "inputs")
KEY_OPS = ACTIVATIONS + tuple(a + TRANSPOSED for a in ACTIVATIONS)
MAX_CLASSES = 32

PARAMS = {
    "cols": (4, 8, 16, 32, 64, 128, 256),   # columns per block
    "vec": (1, 2, 4),                    # columns per thread (one load)
    "threads": (64, 128, 256, 512),      # threads per block: COLS / VEC a row group
    "split": (1, 2, 4, 8, 16, 32, 64),   # slices of the rows (blocks per column tile)
    "unroll": (1, 2, 4),                 # rows a pass per thread
    "prefetch": (0, 1),                  # 1: the next pass's rows loaded during this one
}


@dataclass(frozen=True)
class Problem:
    """rows x classes output gradient G back through W (classes, inputs) to the rows x inputs input A
    of `activation`; `aligned`: the widest vector every pointer allows; the input gradient stored in
    the dtype (`grad_in_f32`), rounded to bfloat16 (`grad_in_bf16`, float32 problems), or both, all
    served by the same tuned record, as is A held in bfloat16 bits (`a_bf16`, float32 problems); or
    stored transposed (`grad_in_transposed`: rows of G_in^T, its dtype alone), which has records of
    its own (op "<activation>_t"); `bias_grad`: the layer's own bias gradient too (G's column sums,
    a launch fewer), served by the records without it."""

    rows: int
    classes: int
    inputs: int
    dtype: str = "float32"
    activation: str = "sigmoid"
    aligned: int = 4
    grad_in_bf16: bool = False
    grad_in_f32: bool = True
    grad_in_transposed: bool = False
    a_bf16: bool = False
    bias_grad: bool = False

    def __post_init__(self):
        check_problem(self, ("rows", "classes", "inputs"), "linear_backward")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation {self.activation!r} is not one of {', '.join(ACTIVATIONS)}")
        if self.aligned not in (1, 2, 4):
            raise ValueError("aligned must be 1, 2 or 4")
        if self.grad_in_bf16 and self.dtype != "float32":
            raise ValueError("a bfloat16 copy of the input gradient needs float32")
        if not (self.grad_in_f32 or self.grad_in_bf16):
            raise ValueError("the input gradient must be stored in float32, bfloat16 or both")
        if self.grad_in_transposed and (self.grad_in_bf16 or not self.grad_in_f32):
            raise ValueError("a transposed input gradient is stored in the dtype alone, with no bfloat16 copy")
        if self.a_bf16 and self.dtype != "float32":
            raise ValueError("A in bfloat16 is a float32 layer's")

    @property
    def op(self) -> str:
        return self.activation + (TRANSPOSED if self.grad_in_transposed else "")


def lanes(c) -> int:
    return c.cols // c.vec


def row_groups(c) -> int:
    return c.threads // lanes(c)


def rows_per_pass(c) -> int:
    return row_groups(c) * c.unroll


def register_words(c, p: Problem) -> int:
    """A thread's arrays: W's columns and the dW sums (classes x VEC each), the db sums, and per row of
    this pass (and the next, prefetched) its G row and A vector."""
    passes = 1 + c.prefetch
    return (2 * p.classes * c.vec + c.vec + passes * c.unroll * (p.classes + c.vec)) * ITEMSIZE[p.dtype] // 4


def smem_bytes(c, p: Problem) -> int:
    """Each row group's dW and db sums of the tile; a transposed input gradient's two turning buffers
    (a pass's rows of the tile each); the layer's own bias gradient's partial sums (one a warp)."""
    turning = 2 * rows_per_pass(c) * c.cols if p.grad_in_transposed else 0
    warp_sums = c.threads // 32 if p.bias_grad else 0
    return (row_groups(c) * (p.classes + 1) * c.cols + turning + warp_sums) * ITEMSIZE[p.dtype]


CONSTRAINTS = (
    (f"at most {MAX_CLASSES} classes", lambda c, p, d: p.classes <= MAX_CLASSES),
    ("vectors must be at most 16 bytes", lambda c, p, d: c.vec * ITEMSIZE[p.dtype] <= 16),
    ("VEC must divide the inputs and suit every pointer's alignment",
     lambda c, p, d: p.inputs % c.vec == 0 and c.vec <= p.aligned),
    ("a block must be whole row groups: COLS / VEC threads each",
     lambda c, p, d: c.threads % lanes(c) == 0),
    ("a pass's rows must be at most the threads (UNROLL at most COLS / VEC): a thread stores whole runs of the "
     "turned tile", lambda c, p, d: c.unroll <= lanes(c)),
    ("threads per block must fit the device", lambda c, p, d: c.threads <= d.max_threads_per_block),
    ("W's columns, the sums and the rows in flight must fit a thread's registers (at most 200 words, and "
     "32 fewer than a block of THREADS may have each)",
     lambda c, p, d: register_words(c, p) <= min(200, d.regs_per_block // c.threads - 32)),
    ("the row groups' sums (and a transposed input gradient's turning buffers) must fit shared memory",
     lambda c, p, d: smem_bytes(c, p) + 16 <= d.smem_per_block),
    ("a tile wider than twice the inputs is pointless (but for 32 columns or fewer)",
     lambda c, p, d: c.cols <= 32 or c.cols < 2 * p.inputs),
    ("more row slices than rows for each row group is pointless",
     lambda c, p, d: row_groups(c) == 0 or c.split <= ceil_div(p.rows, row_groups(c))),   # 0: a rule above
)


def template_args(c, p: Problem) -> dict:
    return dict(c, ctype=DTYPES[p.dtype], classes=p.classes, inputs=p.inputs, activation=p.activation,
                grad_in_bf16=p.grad_in_bf16, grad_in_f32=p.grad_in_f32, grad_in_transposed=p.grad_in_transposed,
                a_bf16=p.a_bf16, bias_grad=p.bias_grad)


def instance_name(c, p: Problem) -> str:
    stored = {(True, False): "", (True, True): "_bf16in", (False, True): "_bf16only"}[p.grad_in_f32, p.grad_in_bf16]
    return (f"linear_backward_{SHORT[p.dtype]}_c{p.classes}_k{p.inputs}_{p.activation}_n{c.cols}_v{c.vec}"
            f"_t{c.threads}_s{c.split}_u{c.unroll}{'_p' if c.prefetch else ''}{stored}"
            f"{'_transposed' if p.grad_in_transposed else ''}{'_a16' if p.a_bf16 else ''}{'_db' if p.bias_grad else ''}")


def geometry(c, p: Problem) -> Geometry:
    tiles = ceil_div(p.inputs, c.cols)
    return Geometry(grid=(tiles, c.split, 1), block=(c.threads, 1, 1), smem_bytes=smem_bytes(c, p),
                    workspace_elems=c.split * ((p.classes + 1) * p.inputs + p.classes) if c.split > 1 else 0,
                    counters=tiles if c.split > 1 else 0)


def flops(p: Problem) -> int:
    return 4 * p.rows * p.classes * p.inputs


def key_of(p: Problem) -> tuple[tuple[int, ...], str]:
    return (p.rows, p.classes, p.inputs), p.op


def problem_of(sizes: tuple[int, ...], op: str, dtype: str) -> Problem:
    activation = op.removesuffix(TRANSPOSED)
    return Problem(*sizes, dtype, activation, aligned=4, grad_in_transposed=op != activation)


def default_candidates(p: Problem, d):
    """16-byte loads (or the widest the problem allows), 32 lanes of them a row group, 256 threads,
    rows split so that the blocks fill the SMs about twice but each thread still sums 16 rows or
    more, two rows a pass; then the same with narrower tiles, more or fewer slices. Each without and
    with the next pass prefetched, with it first where G_in is transposed (a barrier a pass)."""
    vec = max(v for v in (1, 2, 4) if v * ITEMSIZE[p.dtype] <= 16 and p.inputs % v == 0 and v <= p.aligned)
    tiles = ceil_div(p.inputs, 32 * vec)
    filling = min((s for s in PARAMS["split"] if tiles * s >= 2 * d.sm_count), default=PARAMS["split"][-1])
    split = max(s for s in PARAMS["split"] if s <= filling and s * 8 * 16 <= max(p.rows, 128))
    for cols, threads, s, unroll in ((32 * vec, 256, split, 2), (16 * vec, 256, split, 2),
                                     (32 * vec, 256, max(1, split // 2), 4), (32 * vec, 128, split, 2),
                                     (32 * vec, 256, min(64, 2 * split), 1)):
        if cols >= 32:
            for prefetch in (1, 0) if p.grad_in_transposed else (0, 1):
                yield dict(cols=cols, vec=vec, threads=threads, split=s, unroll=unroll, prefetch=prefetch)
    yield dict(cols=32, vec=1, threads=128, split=1, unroll=1, prefetch=0)


def reference(p: Problem, g, w, a, dw, db, alpha, beta, db_beta, db_out=None) -> dict:
    """{"grad_in" | "dw" | "db" | "db_out" (with bias_grad)}: the layer's backward pass in float64
    (the bfloat16 copy of grad_in, where asked for, is checked against "grad_in" at bf16); dw, db
    and db_out are their values before the call. A in bfloat16 arrives as its bits (uint16)."""
    a64 = bf16_values(a) if p.a_bf16 else np.asarray(a, np.float64)
    g64, w64, dw64, db64 = (np.asarray(x, np.float64) for x in (g, w, dw, db))
    slope = a64 * (1 - a64) if p.activation == "sigmoid" else (a64 > 0).astype(np.float64)
    grad_in = g64 @ w64 * slope                                       # G_in: (rows, K)
    grad_in_mag = np.abs(g64) @ np.abs(w64) * np.abs(slope)
    expected = {
        "grad_in": (grad_in, grad_in_mag, p.classes),
        "dw": (alpha * g64.T @ a64 + beta * dw64,                     # dW: (C, K)
               abs(alpha) * np.abs(g64).T @ np.abs(a64) + abs(beta) * np.abs(dw64), p.rows),
        "db": (alpha * grad_in.sum(0) + db_beta * db64,               # db: (K,)
               abs(alpha) * grad_in_mag.sum(0) + abs(db_beta) * np.abs(db64), p.rows + p.classes),
    }
    if p.bias_grad:
        out64 = np.asarray(db_out, np.float64)
        expected["db_out"] = (alpha * g64.sum(0) + db_beta * out64,    # db_out: (C,)
                              abs(alpha) * np.abs(g64).sum(0) + abs(db_beta) * np.abs(out64), p.rows)
    return expected
