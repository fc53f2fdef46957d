"""The contract of a kernel family, and what every family shares: dtypes, sizes, launch geometry.

A family is one template (`<name>.cu.j2`, with its includes) and one module (`<name>.py`) that keeps
the KernelFamily protocol below, as plain data and functions: this layer imports nothing of autogemm.
Read a module top to bottom and a config's way to source is in order: the space (PARAMS), what can
run (CONSTRAINTS), the untuned seeds (default_candidates), the values rendered (template_args) into
the template, and the launch (instance_name, geometry); last, what a call must compute
(reference), in float64, that tuning checks each candidate against.
"""
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import NamedTuple, Protocol, runtime_checkable

TEMPLATE_DIR = Path(__file__).resolve().parent
DTYPES = {"float32": "float", "float64": "double"}
ITEMSIZE = {"float32": 4, "float64": 8}
SHORT = {"float32": "f32", "float64": "f64"}   # dtype in instance names
MAX_SIZE = 2**31 - 1    # every kernel takes its sizes as 32-bit ints
NO_OP = "-"             # the op of a tuned key whose family has no ops


class TileMap(NamedTuple):
    """A tensor map that a kernel takes by value after its other parameters, for its bulk tensor
    copies (TMA): of the call's 2-D row-major array `operand`, copied `box` (inner, outer) elements
    at a time into shared memory in the swizzle of `swizzle` bytes (0: none), zeros past its edges."""
    operand: str
    box: tuple[int, int]
    swizzle: int


class Geometry(NamedTuple):
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem_bytes: int = 0
    workspace_elems: int = 0   # scratch of the problem's dtype (split-K partial sums)
    counters: int = 0          # int32 counters that must start at zero (split-K tiles)
    tensor_maps: tuple[TileMap, ...] = ()
    transposed: tuple[str, ...] = ()   # operands ("a", "b") a launch first copies transposed into scratch
    cluster: tuple[int, int, int] = (1, 1, 1)   # blocks of a thread-block cluster (the kernel's __cluster_dims__)
    persistent: bool = False   # grid[0] counts tiles, which at most one block an SM takes in turn
    swapped: bool = False      # the kernel computes D^T = op(B)^T op(A)^T: its A, M are the call's B, N

    def launch_grid(self, sm_count: int) -> tuple[int, int, int]:
        """The grid to launch on a GPU of `sm_count` SMs: a persistent kernel's whole clusters, as many
        as fit one block an SM (at least one)."""
        if not self.persistent:
            return self.grid
        size = self.cluster[0]
        return (max(size, min(self.grid[0], sm_count) // size * size), 1, 1)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def block_waves(bm: int, bn: int, problem, device) -> int:
    """Rounds of one BM x BN block an SM that cover `problem`'s M x N output on `device`: what the
    busiest SM runs, whole rounds however few blocks the last one has."""
    return ceil_div(ceil_div(problem.m, bm) * ceil_div(problem.n, bn), device.sm_count)


# Split-K leaves each slice at least this much of K: shorter slices spend more on the reduction and
# the pipeline's fill than the idle SMs they would take.
MIN_SLICE_K = 512


def split_for(bm: int, bn: int, p, d, splits: tuple[int, ...]) -> int:
    """Slices of K for a tensor-core GEMM's BM x BN tiles: the most of `splits` whose blocks (tiles
    times slices) still fit one wave where the tiles alone busy at most a quarter of the SMs, each
    slice keeping MIN_SLICE_K of K; else 1. On an H100: 256x256x8192 in 64 x 32 tiles (32 blocks of
    132 SMs) in 4 slices took 2.2x cuBLAS TF32's time against 4.0x unsplit; split where half the
    SMs idled, 1024^3 and 512x4096x1024 ran 2x slower (gemm_wgmma, benchmarks/issue39-h100/
    first-calls); on an H200, 3072x96x768 in 64 x 64 tiles (96 blocks) took 1.40x cuBLAS FP32's
    time in 2 slices, 0.96x whole (the tiled family, benchmarks/issue40-h200)."""
    tiles = ceil_div(p.m, bm) * ceil_div(p.n, bn)
    if 4 * tiles > d.sm_count:
        return 1
    return max((s for s in splits if tiles * s <= d.sm_count and p.k // s >= MIN_SLICE_K), default=1)


def keeps(constraints: tuple, values: dict, problem, device) -> bool:
    """Whether a config given as a plain dict keeps every one of a family's CONSTRAINTS (a family
    module's own check of the seeds it builds; the runtime checks configs with Family.violations)."""
    c = SimpleNamespace(**values)      # as the constraints read a config
    return all(holds(c, problem, device) for _, holds in constraints)


def key_arity(key_sizes: tuple[str, ...]) -> tuple[int, bool]:
    """(the fewest sizes a key of a family with these KEY_SIZES has, whether it may have more)."""
    return len(key_sizes), key_sizes[-1].endswith("...")


def arity_fits(key_sizes: tuple[str, ...], count: int) -> bool:
    """Whether a key of a family with these KEY_SIZES may have `count` sizes."""
    fewest, more = key_arity(key_sizes)
    return count == fewest or (more and count > fewest)


def check_problem(problem, sizes: tuple[str, ...], what: str):
    """ValueError unless `problem`'s dtype is one of DTYPES and each of its `sizes` an int in
    1..MAX_SIZE."""
    if problem.dtype not in DTYPES:
        raise ValueError(f"dtype {problem.dtype!r} is not one of {', '.join(DTYPES)}")
    for size in sizes:
        value = getattr(problem, size)
        if type(value) is not int or not 1 <= value <= MAX_SIZE:
            raise ValueError(f"{what} {size}={value!r} must be an integer in 1..{MAX_SIZE}")


@dataclass(frozen=True)
class RowsProblem:
    """A kernel over one (rows, cols) matrix (softmax_xent, colsum, transpose)."""

    rows: int
    cols: int
    dtype: str = "float32"

    def __post_init__(self):
        check_problem(self, ("rows", "cols"), "size")


def rows_key_of(p: RowsProblem) -> tuple[tuple[int, ...], str]:
    """The tuned key of a RowsProblem family's call: (rows, cols), no op."""
    return (p.rows, p.cols), NO_OP


def rows_problem_of(sizes: tuple[int, ...], op: str, dtype: str) -> RowsProblem:
    """The RowsProblem that such a key stands for."""
    return RowsProblem(*sizes, dtype)


@runtime_checkable
class KernelFamily(Protocol):
    """What a family module declares (`cfg` arrives as a namespace whose values autogemm has already
    checked against PARAMS; `device` is autogemm's DeviceInfo). A family whose kernels need NVRTC
    options of their own (a target such as sm_90a) also declares COMPILE_OPTIONS, a tuple of them;
    one whose keys name arithmetics beyond DTYPES (the GEMM's "tf32", "bf16") declares KEY_DTYPES
    and served_by(arithmetic) (the arithmetics whose records serve a call, its own first); one whose
    calls may be served by records of other ops declares served_by_ops(op) (the GEMM: a call with an
    epilogue by its layout's records tuned without one, after its own); and one whose own kernels
    compute at precisions beyond fp32 declares KERNEL_PRECISIONS (what tune --precision tunes); one
    whose configs launch other templates' kernels too declares helper_templates(cfg), their files
    (their code is part of a tuned record's hash); another implementation of a call declares CALL,
    that call's name, and may declare untuned_first(problem, device): whether it runs a call that no record
    serves before the implementations listed before it, and at_precision(cfg, precision): a config of
    a more accurate arithmetic's record made fit for a call at `precision` (the GEMMs: 3xTF32's
    tiles with TF32 products), and FP32_ACCURATE = False where its float32
    kernels at precision fp32 do not pass the tuner's bound on FP32-accurate error (then no call runs
    them but one that names the family). One whose constraints exclude whole problems may declare
    may_run(problem, device): a necessary condition for any config to run one, asked before its
    candidates are walked (gemm_wgmma: Hopper, and rows it can read)."""

    NAME: str                   # the family's name: registry key, tuned records' family, instance names
    TEMPLATE: str               # the template file, in this folder
    PARAMS: dict                # {name: (allowed values, ...)}: every value a template may receive
    CONSTRAINTS: tuple          # ((message, predicate(cfg, problem, device) -> bool), ...): what can run
    Problem: type               # the frozen description of one call (shape, dtype, layout, epilogue)
    KEY_SIZES: tuple            # what the sizes of a tuned key stand for, e.g. ("m", "n", "k"); a last
                                # name ending in "..." stands for one or more ("rows", "widths...")
    KEY_OPS: tuple              # the ops a tuned key may carry (NO_OP alone where the family has none)

    def default_candidates(self, problem, device) -> Iterable[dict]:
        """Sound untuned configs, best guess first (the default, and the search's first trials)."""

    def template_args(self, cfg, problem) -> dict:
        """The values rendered: cfg plus what is derived from it and the problem."""

    def instance_name(self, cfg, problem) -> str:
        """The compiled symbol, cache key and log name."""

    def geometry(self, cfg, problem) -> Geometry:
        """Grid, block, shared memory and scratch of a launch."""

    def flops(self, problem) -> int:
        """Floating-point operations of one call (GFLOP/s in tuned records)."""

    def key_of(self, problem) -> tuple[tuple[int, ...], str]:
        """(sizes, op) under which `problem` is tuned and looked up: what a tuned config serves
        (what it leaves out, such as the GEMM's C and alignment, one config serves alike)."""

    def problem_of(self, sizes: tuple[int, ...], op: str, dtype: str):
        """The Problem that a tuned key stands for: freshly allocated (contiguous, aligned) operands."""

    def reference(self, problem, **operands) -> dict:
        """The float64 result of one call on host (NumPy) operands, {output: (value, magnitude, k)}:
        magnitude the term the error bound scales (sum of |products| etc.; autogemm/tuning/verify.py),
        k the length of the longest sum behind an element (the tolerance grows with it)."""
