"""`autogemm.gemm`: D = epi(alpha * op(A) @ op(B) + beta * C) with a generated kernel.

Arrays are CuPy, row-major, any leading dimension (unit stride along rows); A and B may also be
column-major (their transposes row-major). The config is the one
given, else the best known for this shape on this GPU, else the family's sound default. A and B may
be bfloat16 (at precision bf16, on Hopper): CuPy has no bfloat16, so they travel as uint16 arrays of
the bits, as `to_bf16` makes them; C, D and the epilogue's arrays are then float32. So may D (`out`
a uint16 array: the float32 result rounded to bfloat16 as `to_bf16` rounds). bfloat16 rows that no
family reads (not a multiple of 16 bytes) are widened to float32 first, exactly, and multiplied at
precision bf16; float32 rows of that kind are copied into aligned ones first at precision tf32 or
bf16 where that lets gemm_wgmma read them.
"""
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np

from autogemm.errors import BadArguments
from autogemm.ops.kernels import implementation, kernel, launch, scratch
from autogemm.runtime import compile as compiler
from autogemm.runtime import dependent_launch
from autogemm.runtime.device import DeviceInfo, require_cupy, this_device
from autogemm.runtime.family import Instance, family
from autogemm.runtime.tensor_map import TensorMap, kernel_args
from kernels import IMPLEMENTATIONS
from kernels import to_bf16 as to_bf16_family
from kernels.contract import MAX_SIZE, RowsProblem, ceil_div
from kernels.gemm.call import EPILOGUES, PRECISIONS, Problem

def leading_dim(x, what: str, call: str = "gemm") -> int:
    """Leading dimension (elements) of a row-major 2-D array; BadArguments for other layouts."""
    if x.ndim != 2:
        raise BadArguments(f"{call}: {what} must be 2-D, got shape {x.shape}")
    item = x.itemsize
    if x.shape[1] > 1 and x.strides[1] != item:
        raise BadArguments(f"{call}: {what} must have unit stride along rows (row-major); "
                           f"got strides {x.strides}: pass cupy.ascontiguousarray({what})")
    ld = x.strides[0] // item if x.shape[0] > 1 else x.shape[1]
    if x.strides[0] % item or ld < x.shape[1]:
        raise BadArguments(f"{call}: {what} has strides {x.strides} that are not a row-major layout")
    return max(ld, 1)


def row_major_operand(x, trans: bool):
    """(x, trans) naming the same op(x) by a row-major array: a column-major x (unit stride down its
    columns, not C-contiguous) as x.T with trans flipped. NumPy arrays alike."""
    column_major = x.ndim == 2 and x.strides[0] == x.itemsize and not x.flags.c_contiguous
    return (x.T, not trans) if column_major else (x, trans)


def empty_column_major(shape, dtype, xp=None):
    """An uninitialised column-major (rows, cols) array of the array module `xp` (CuPy by default),
    its columns 16 bytes aligned apart (the leading dimension rows rounded up): as a GEMM operand,
    its transpose is a row-major one that TMA can read."""
    xp = xp or require_cupy()
    rows, cols = shape
    per_16_bytes = 16 // np.dtype(dtype).itemsize
    return xp.empty((cols, ceil_div(rows, per_16_bytes) * per_16_bytes), dtype)[:, :rows].T


def vector_width(x, ld: int) -> int:
    """Widest vector (1, 2, 4, 8 elements, at most 16 bytes) that x's pointer and rows allow."""
    for width in (8, 4, 2):
        if width * x.itemsize <= 16 and x.data.ptr % (width * x.itemsize) == 0 and ld % width == 0:
            return width
    return 1


def _span(x) -> tuple[int, int]:
    """The bytes a C-contiguous or row-major 2-D array spans."""
    if x.flags.c_contiguous:
        return x.data.ptr, x.data.ptr + x.nbytes
    return x.data.ptr, x.data.ptr + ((x.shape[0] - 1) * x.strides[0] + x.shape[1] * x.itemsize)


def overlaps(x, y) -> bool:
    """Whether two arrays (C-contiguous, or row-major 2-D) share any byte."""
    (a0, a1), (b0, b1) = _span(x), _span(y)
    return a0 < b1 and b0 < a1


def gemm(a, b, out=None, alpha=1.0, beta=0.0, trans_a=False, trans_b=False, c=None,
         epilogue=None, bias=None, aux=None, config: Mapping | str | None = None, kernel_family="gemm",
         precision="fp32"):
    """out = epi(alpha * op(a) @ op(b) + beta * c); returns `out` (allocated when None).

    op(x) is x.T when trans_x; a and b row-major or column-major. With beta != 0 and no `c`, `out`
    is C (in place, BLAS style).
    epilogue: None, "bias", "bias_sigmoid", "bias_relu" (need `bias`, shape (N,)), or
    "dsigmoid", "drelu" (need `aux`, shape (M, N): the saved activation output).
    config: None for the tuned config of this shape on this GPU (else the nearest tuned shape's,
    else the default), "default" for the family's untuned default, or a mapping of parameters.
    precision: "fp32" (float32's own accuracy, the default), "tf32" or "bf16" (float32 operands
    rounded to TF32 or bfloat16 in each product, float32 sums, where a faster kernel does so; a
    more accurate one may serve it). Bfloat16 operands (uint16 bits from `to_bf16`) need "bf16", as
    does a uint16 `out`, D written in bfloat16 (`c`, `bias` and `aux` stay float32; beta needs `c`).
    """
    call = plan_gemm(a, b, out, alpha, beta, trans_a, trans_b, c, epilogue, bias, aux, config, kernel_family,
                     precision)
    call()
    return call.out


def to_bf16(x, out=None, config=None):
    """C-contiguous float32 `x` rounded to bfloat16 (to nearest even; NaN stays NaN) as the uint16
    array of its bits that `gemm` takes for bfloat16 operands (kernels/to_bf16/); into `out`
    (C-contiguous uint16 of x's shape) when given."""
    cupy = require_cupy()
    if not isinstance(x, cupy.ndarray) or x.dtype != np.float32:
        raise BadArguments(f"to_bf16: x must be a float32 cupy.ndarray, got {getattr(x, 'dtype', type(x).__name__)}")
    if not x.flags.c_contiguous:
        raise BadArguments(f"to_bf16: x must be C-contiguous, got strides {x.strides}: pass cupy.ascontiguousarray(x)")
    out = cupy.empty(x.shape, np.uint16) if out is None else out
    if not isinstance(out, cupy.ndarray) or out.dtype != np.uint16 or out.shape != x.shape or not out.flags.c_contiguous:
        raise BadArguments(f"to_bf16: out must be a C-contiguous uint16 cupy array of shape {x.shape}")
    if overlaps(x, out):
        raise BadArguments("to_bf16: out overlaps x")
    aligned = next(w for w in (8, 4, 2, 1) if x.data.ptr % min(16, 4 * w) == 0 and out.data.ptr % (2 * w) == 0)
    if x.size:
        launch("to_bf16", to_bf16_family.Problem(x.size, aligned=aligned), config,
               lambda geometry: (x, out, np.int32(x.size)))
    return out


def transpose(x, out=None, config=None):
    """out = x.T for a row-major 2-D float32 or float64 `x` (any leading dimension), into `out`
    (row-major, x.T's shape and dtype, disjoint from x) when given; returns `out`."""
    cupy = require_cupy()
    if not isinstance(x, cupy.ndarray) or x.dtype not in (np.float32, np.float64):
        got = f"a {x.dtype} cupy.ndarray" if isinstance(x, cupy.ndarray) else type(x).__name__
        raise BadArguments(f"transpose: x must be a float32 or float64 cupy.ndarray, got {got}")
    ldx = leading_dim(x, "x", "transpose")
    out = cupy.empty(x.shape[::-1], x.dtype) if out is None else out
    if not isinstance(out, cupy.ndarray) or out.dtype != x.dtype or out.shape != x.shape[::-1]:
        raise BadArguments(f"transpose: out must be a {x.dtype} cupy array of shape {x.shape[::-1]}")
    ldout = leading_dim(out, "out", "transpose")
    if overlaps(x, out):
        raise BadArguments("transpose: out may overlap x (their spans do): pass disjoint arrays")
    if x.size:
        try:
            problem = RowsProblem(*x.shape, str(x.dtype))
        except ValueError as exc:
            raise BadArguments(f"transpose: x's {exc}") from None
        if max(ldx, ldout) > MAX_SIZE:
            raise BadArguments(f"transpose: leading dimensions must be at most {MAX_SIZE}, got {ldx} and {ldout}")
        launch("transpose", problem, config, lambda geometry: (x, out, *map(np.int32, (*x.shape, ldx, ldout))))
    return out


def staged_operands(instance: Instance, a, lda: int, b, ldb: int, device: DeviceInfo):
    """The operands that `instance`'s kernel reads, ((a, lda), (b, ldb)), and the launches that
    stage them first, ((Instance, args), ...): the call's B first where the kernel computes D^T
    (its geometry `swapped`), then each operand its geometry names in `transposed` copied K-major
    into scratch, its rows padded to 16 bytes (gemm_wgmma's pretranspose)."""
    if instance.geometry.swapped:
        (a, lda), (b, ldb) = (b, ldb), (a, lda)
    operands, launches = {"a": (a, lda), "b": (b, ldb)}, []
    for name in instance.geometry.transposed:
        x, ld = operands[name]
        k, mn = x.shape                                                 # M/N-major: (K, M) or (K, N)
        per_16_bytes = 16 // x.itemsize
        ld_t = ceil_div(k, per_16_bytes) * per_16_bytes
        x_t = scratch(f"transposed_{name}", x.dtype, mn * ld_t)[:mn * ld_t].reshape(mn, ld_t)[:, :k]   # (M or N, K)
        t = kernel("transpose", RowsProblem(k, mn, str(x.dtype)), None, device)
        launches.append((t, (x, x_t, *map(np.int32, (k, mn, ld, ld_t)))))
        operands[name] = (x_t, ld_t)
    return operands["a"], operands["b"], tuple(launches)


@dataclass
class GemmCall:
    """A checked GEMM with its kernels and arguments bound: calling it only launches (its operands'
    copies into aligned rows, then their staging where its kernel reads them transposed, first)."""

    instance: Instance
    out: object
    args: tuple
    staging: tuple = ()     # ((Instance, args), ...)
    sm_count: int = 1       # the GPU's SMs, over which a persistent kernel's blocks spread
    widen: Callable | None = None   # operands copied into aligned rows first (aligned_operands)

    def __call__(self):
        if self.widen is not None:
            self.widen()
        for instance, args in (*self.staging, (self.instance, self.args)):
            g = instance.geometry
            dependent_launch.launch(*compiler.compiled(instance), g.launch_grid(self.sm_count), g.block, args,
                                    g.smem_bytes)


def plan_gemm(a, b, out=None, alpha=1.0, beta=0.0, trans_a=False, trans_b=False, c=None,
              epilogue=None, bias=None, aux=None, config: Mapping | str | None = None,
              kernel_family="gemm", precision="fp32") -> GemmCall:
    """Check the arguments of `gemm`, choose and render its kernel, bind the launch arguments.

    Call the plan on the stream current when it was planned: its scratch (split-K partial sums,
    pretransposed operands, aligned copies) is that stream's, shared with the other plans made on it."""
    cupy = require_cupy()

    for name, x in (("a", a), ("b", b)):
        if not isinstance(x, cupy.ndarray):
            raise BadArguments(f"gemm: {name} must be a cupy.ndarray, got {type(x).__name__}")
    if a.dtype != b.dtype or a.dtype not in (np.float32, np.float64, np.uint16):
        raise BadArguments(f"gemm: a and b must both be float32, both float64 or both bfloat16 (uint16 bits, "
                           f"autogemm.to_bf16), got {a.dtype} and {b.dtype}")
    if epilogue not in EPILOGUES:
        raise BadArguments(f"gemm: epilogue {epilogue!r} is not one of {', '.join(map(str, EPILOGUES[1:]))}")
    if precision not in PRECISIONS:
        raise BadArguments(f"gemm: precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    bf16_operands = a.dtype == np.uint16
    if bf16_operands and precision != "bf16":
        raise BadArguments(f"gemm: bfloat16 operands (uint16 bits) multiply at precision 'bf16', not {precision!r}")
    if precision != "fp32" and a.dtype == np.float64:
        raise BadArguments(f"gemm: precision {precision} multiplies float32 arrays; these are {a.dtype}")
    dtype = np.dtype(np.float32) if bf16_operands else a.dtype       # of C, D, bias, aux
    (a, trans_a), (b, trans_b) = row_major_operand(a, trans_a), row_major_operand(b, trans_b)
    lda, ldb = leading_dim(a, "a"), leading_dim(b, "b")
    m, k = (a.shape[1], a.shape[0]) if trans_a else a.shape
    k2, n = (b.shape[1], b.shape[0]) if trans_b else b.shape
    if k != k2:
        raise BadArguments(f"gemm: op(a) is {m}x{k} but op(b) is {k2}x{n}: inner sizes differ")
    if out is None:
        out = cupy.empty((m, n), dtype=dtype)
    bf16_out = getattr(out, "dtype", None) == np.uint16 and dtype == np.float32
    if bf16_out and precision != "bf16":
        raise BadArguments(f"gemm: a bfloat16 out (uint16 bits) is written at precision 'bf16', not {precision!r}")
    use_c = beta != 0
    if use_c and c is None:
        if bf16_out:
            raise BadArguments("gemm: beta != 0 with a bfloat16 out needs c, a float32 array")
        c = out
    operands = {"out": out, "c": c if use_c else None, "aux": aux}
    for name, x in operands.items():
        if x is None:
            continue
        want = np.uint16 if name == "out" and bf16_out else dtype
        if not isinstance(x, cupy.ndarray) or x.shape != (m, n) or x.dtype != want:
            what = "float32 or (precision 'bf16') uint16" if name == "out" and dtype == np.float32 else str(dtype)
            raise BadArguments(f"gemm: {name} must be a {what} cupy array of shape ({m}, {n}), "
                               f"got {getattr(x, 'dtype', type(x).__name__)} {getattr(x, 'shape', '')}")
    for x, name in ((a, "a"), (b, "b")):
        if overlaps(out, x):
            raise BadArguments(f"gemm: out overlaps {name}; only c may be the same array as out")
    if use_c and c is not out and overlaps(out, c):
        raise BadArguments("gemm: out partially overlaps c; pass the same array or disjoint ones")
    needs_bias = epilogue in ("bias", "bias_sigmoid", "bias_relu")
    if needs_bias and (bias is None or bias.shape != (n,) or bias.dtype != dtype
                       or (n > 1 and bias.strides[0] != bias.itemsize)):
        raise BadArguments(f"gemm: epilogue {epilogue} needs a contiguous {dtype} bias of shape ({n},)")
    if epilogue in ("dsigmoid", "drelu") and aux is None:
        raise BadArguments(f"gemm: epilogue {epilogue} needs aux, the saved activation of shape ({m}, {n})")

    ldd = leading_dim(out, "out")
    ldc = leading_dim(c, "c") if use_c else ldd
    ldaux = leading_dim(aux, "aux") if aux is not None else ldd
    vec_out = min(vector_width(x, leading_dim(x, name)) for name, x in operands.items() if x is not None)
    problem = Problem(m, n, k, str(dtype), bool(trans_a), bool(trans_b), epilogue, use_c,
                      vector_width(a, lda), vector_width(b, ldb), vec_out, precision, bf16_operands, bf16_out)
    device = this_device()
    widen = None
    if config is None and operand_copies(problem, device, kernel_family):
        (a, lda), (b, ldb), widen = aligned_operands(a, lda, b, ldb)
        problem = replace(problem, vec_a=vector_width(a, lda), vec_b=vector_width(b, ldb), bf16_operands=False)
    name = implementation("gemm", problem, config, device) if kernel_family == "gemm" else kernel_family
    instance = kernel(name, problem, config, device)
    (a, lda), (b, ldb), staging = staged_operands(instance, a, lda, b, ldb, device)
    args = launch_args(instance, a, b, c if use_c else out, out, bias, aux,
                       (m, n, k, lda, ldb, ldc, ldd, ldaux), alpha, beta)
    return GemmCall(instance, out, kernel_args(args), staging, device.sm_count, widen)


@functools.cache
def operand_copies(problem: Problem, device: DeviceInfo, kernel_family: str = "gemm") -> str | None:
    """How an untold call (`kernel_family` "gemm": whichever family the call picks) copies its
    operands into 16-byte rows before it multiplies them, if it does: "widened" (bfloat16 rows no
    family reads, as their float32 values, then the float32 call at precision bf16), "aligned"
    (float32 rows where that pays: aligned_copies_pay), else None. Decided once a problem: every
    call of autogemm.gemm asks."""
    names = IMPLEMENTATIONS["gemm"] if kernel_family == "gemm" else (kernel_family,)
    if problem.bf16_operands and not any(family(name).can_run(problem, device) for name in names):
        return "widened"
    return "aligned" if kernel_family == "gemm" and aligned_copies_pay(problem, device) else None


def aligned_copies_pay(problem: Problem, device: DeviceInfo) -> bool:
    """Whether an untold call of float32 operands at precision tf32 or bf16, rows not a multiple of
    16 bytes, runs on copies of them in rows that are: where a family of the call (gemm_wgmma) reads
    only those, and the GEMM is large enough that the copies (two more launches, A and B read and
    written once more) cost less than it gains: 2^27 flops or more, and at least 32 flops a byte of
    A and B (M N >= 64 (M + N)). On an H200, 1023x1025x1027 and 777x555x333 (2^31 and 2^28 flops)
    ran on the tiled family's TF32 MMAs at 2.27x and 1.36x cuBLAS TF32's time, its tuned configs at
    1.87x and 0.87x; on copies, gemm_wgmma's defaults at 1.12x and 0.78x (benchmarks/issue40-h200).
    A network's small GEMMs (K = 10 of a 10-class output layer) are left as they are, and fp32
    calls: the tiled family's FP32-accurate defaults run those two at 1.07x and 1.14x cuBLAS
    FP32's time (H100, benchmarks/issue40-h100); copies at fp32 are not measured."""
    m, n, k = problem.m, problem.n, problem.k
    if problem.dtype != "float32" or problem.bf16_operands or problem.precision == "fp32" \
            or min(problem.vec_a, problem.vec_b) == 4 or 2 * m * n * k < 2**27 or m * n < 64 * (m + n):
        return False
    aligned = replace(problem, vec_a=4, vec_b=4)
    return any(family(name).can_run(aligned, device) and not family(name).can_run(problem, device)
               for name in IMPLEMENTATIONS["gemm"])


def aligned_operands(a, lda: int, b, ldb: int):
    """Operands (float32, or bfloat16 as uint16 bits; row-major with their leading dimensions) as
    float32 copies in scratch, rows padded to 16 bytes, and the call that fills them (exactly: a
    bfloat16's float32 value is its bits shifted up 16): ((a, lda), (b, ldb), fill)."""
    cupy = require_cupy()
    copies = []
    for name, x in (("a", a), ("b", b)):
        rows, cols = x.shape
        ld = ceil_div(cols, 4) * 4
        copies.append((scratch(f"aligned_{name}", np.float32, rows * ld)[:rows * ld].reshape(rows, ld)[:, :cols], ld))
    shift = _bf16_to_f32_bits()

    def fill():
        for x, (copy, _) in zip((a, b), copies):
            if x.dtype == np.uint16:
                shift(x, copy.view(np.uint32))
            else:
                cupy.copyto(copy, x)
    return copies[0], copies[1], fill


@functools.cache
def _bf16_to_f32_bits():
    """CuPy's elementwise kernel that writes a bfloat16's float32 bits (its own, shifted up 16)."""
    return require_cupy().ElementwiseKernel("uint16 x", "uint32 y", "y = (unsigned int)x << 16",
                                            "autogemm_bf16_to_f32")


def launch_args(instance: Instance, a, b, c, d, bias, aux, sizes, alpha, beta) -> tuple:
    """The kernel arguments of a GEMM-family instance, scratch for split-K and the tensor maps of A
    and B (where its kernel takes them) included; `a`, `b` and their leading dimensions are the
    kernel's (staged_operands'), M and N the call's (exchanged for a `swapped` kernel)."""
    g = instance.geometry
    if g.swapped:
        sizes = (sizes[1], sizes[0], *sizes[2:])
    scalar = np.float64 if d.dtype == np.float64 else np.float32         # D float32 or bfloat16: float32 sums
    workspace = scratch("workspace", scalar, g.workspace_elems) if g.workspace_elems else None
    counters = scratch("counters", np.int32, g.counters) if g.counters else None
    null = np.uint64(0)
    operands = {"a": (a, sizes[3]), "b": (b, sizes[4])}     # with lda, ldb
    return (a, b, c, d,
            bias if bias is not None else null, aux if aux is not None else null,
            workspace if workspace is not None else null, counters if counters is not None else null,
            *(np.int32(s) for s in sizes), scalar(alpha), scalar(beta),
            *(TensorMap(*operands[m.operand], m.box, m.swizzle) for m in g.tensor_maps))
