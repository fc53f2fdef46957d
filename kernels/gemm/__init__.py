"""The register-blocked GEMM family (gemm.cu.j2): its parameter space, constraints and launch shape;
the GEMM call it computes (Problem, keys, reference) is call.py's, its untuned configs seeds.py's.
"""
from kernels.contract import DTYPES, SHORT, Geometry, ceil_div
from kernels.gemm import seeds
# The GEMM call's problem, keys, epilogues, work and reference: this family's.
from kernels.gemm.call import (EPILOGUES, KEY_DTYPES, KEY_OPS, KEY_SIZES, Problem, at_precision,  # noqa: F401
                               flops, key_of, problem_of, reference, served_by, served_by_ops)

NAME = "gemm"
TEMPLATE = "gemm/gemm.cu.j2"

PARAMS = {
    # Block tiles: multiples of 16 up to 128, whose grids can fill the SMs in whole waves where powers
    # of two cannot (800x1000 in 128x64 tiles is 112 blocks for 132 SMs; in 64x112, 117), and 256.
    "bm": (16, 32, 48, 64, 80, 96, 112, 128, 256),   # block tile rows (M)
    "bn": (16, 32, 48, 64, 80, 96, 112, 128, 256),   # block tile columns (N)
    "bk": (4, 8, 16, 32),              # K step per shared-memory stage
    "ty": (1, 2, 4, 8, 16, 32),        # thread-block shape: TY x TX threads
    "tx": (1, 2, 4, 8, 16, 32),
    "tm": (1, 2, 4, 8),                # register micro-tile TM x TN, repeated over the block tile
    "tn": (1, 2, 4, 8),
    "vec": (1, 2, 4),                  # elements per global load
    "copy": ("regs", "async"),         # global -> shared: through registers, or by cp.async
    "stages": (1, 2, 3, 4),            # shared-memory buffers (regs: 1 or 2; async: 2 to 4)
    "split_k": (1, 2, 3, 4, 6, 8, 16), # slices of K reduced by the last block of each tile
    "pad": (False, True),              # pad shared-memory rows against bank conflicts (by pads())
    # FP32/FP64 FMAs; float32 on tensor cores as three TF32 MMAs (FP32-accurate); or as one (TF32
    # products: calls at precision tf32 or bf16)
    "math": ("fma", "3xtf32", "tf32"),
}
# The precision each math computes (call.PRECISIONS): what its kernels offer tune --precision.
MATH_PRECISION = {"fma": "fp32", "3xtf32": "fp32", "tf32": "tf32"}
KERNEL_PRECISIONS = tuple(dict.fromkeys(MATH_PRECISION.values()))
# math="3xtf32" splits each float32 x into a TF32 part hi = tf32(x) and the exact rest lo = x - hi
# (the MMA reads lo's top 19 bits), and sums lo*hi + hi*lo + hi*hi with mma.sync m16n8k8, 16 k at
# a time, each part added to the float32 accumulators by a rounding FADD (the tensor cores' own
# sums truncate): as accurate as FP32 FMAs (3xtf32.cuh). math="tf32" rounds each operand to TF32
# and sums one MMA a k step into the accumulators.
# A warp is then an 8 x 4 patch of the TY x TX threads (the mma's lane grid) and owns a
# (8*RM) x (4*RN) tile of MMA tiles 16 x 8; each thread's accumulators are the MMA fragment's,
# 1 x 2 micro-tiles (TM = 1, TN = 2) in rows g, g+8 of each MMA tile.


STATIC_SMEM = 16   # bytes of __shared__ variables in the kernel (the split-K flag, padded)


def threads(c) -> int:
    return c.ty * c.tx


def k_major(c, p: Problem) -> tuple[bool, bool]:
    """Whether op(A), op(B) sit in shared memory as [row][k]: cp.async keeps an operand's global
    layout, and A (not transposed) and B (transposed) have K contiguous. Through registers, every
    operand is stored [k][row]."""
    return c.copy == "async" and not p.trans_a, c.copy == "async" and p.trans_b


def k_chunk(c, p: Problem) -> int:
    """k values per fragment read: a 16-byte vector along k where an operand is K-major, else 1."""
    return 16 // p.itemsize if any(k_major(c, p)) else 1


def pads(c, p: Problem) -> tuple[int, int]:
    """Row padding (elements) of op(A)'s and op(B)'s shared tiles where c.pad asks for it: under fma
    4 (a multiple of every vector width, so vector reads stay aligned); on tensor cores what makes
    their fragment reads conflict-free (see 3xtf32.cuh): rows 16 (mod 32) words long where both operands are
    K-major (16-byte reads along k), 8 or 24 (mod 32) for a [k][row] tile (BM + 8 or BN + 8, the
    tiles being multiples of 16; A's rows are then read in pairs), and BK + 4 for single reads
    along k."""
    if not c.pad:
        return 0, 0
    if c.math == "fma":
        return 4, 4
    a_k, b_k = k_major(c, p)
    if a_k and b_k:
        return (16 - c.bk) % 32, (16 - c.bk) % 32
    return 4 if a_k else 8, 4 if b_k else 8


def smem_bytes(c, p: Problem) -> int:
    (a_k, b_k), (pad_a, pad_b) = k_major(c, p), pads(c, p)
    tile_a = c.bm * (c.bk + pad_a) if a_k else c.bk * (c.bm + pad_a)
    tile_b = c.bn * (c.bk + pad_b) if b_k else c.bk * (c.bn + pad_b)
    return c.stages * (tile_a + tile_b) * p.itemsize


def registers_estimate(c, p: Problem) -> int:
    """32-bit registers a thread needs: accumulators, fragments (k_chunk k values of each; under
    3xtf32 the raw values of two k steps of MMA fragments and the hi and lo parts of one; under tf32
    two k steps, rounded in place),
    register-staged loads and the addresses of every load (about two each), ~64 for the rest
    (loop state, epilogue); with split-K about RM*RN more (nvcc 13.0 spilled 64 accumulators split
    in two at 255 registers). Checked against ptxas by tests/test_kernels_compile.py."""
    words = p.itemsize // 4
    rm, rn = c.bm // c.ty, c.bn // c.tx
    loads = ceil_div(c.bm * c.bk // c.vec, threads(c)) + ceil_div(c.bn * c.bk // c.vec, threads(c))
    staged = loads * c.vec if c.copy == "regs" else 0
    fragments = fragment_registers(c.math, rm, rn, k_chunk(c, p))
    reduction = rm * rn if c.split_k > 1 else 0
    return words * (rm * rn + fragments + staged + reduction) + 2 * loads + 64


def fragment_registers(math: str, rm: int, rn: int, k_values: int = 1) -> int:
    """Registers of a thread's operand fragments (4-byte elements) for its RM x RN accumulators:
    under fma k_values k of each; under 3xtf32 the raw values of two k steps of MMA fragments and
    the hi and lo parts of one; under tf32 two k steps, rounded in place. Any family on these maths."""
    return {"fma": k_values * (rm + rn), "3xtf32": 6 * rm + 3 * rn, "tf32": 4 * rm + 2 * rn}[math]


def k_slice(c, k: int) -> int:
    """Elements of K per split-K slice: a whole number of BK tiles."""
    return ceil_div(k, c.split_k * c.bk) * c.bk


def _mma(check):
    """A constraint on the tensor-core maths (3xtf32, tf32) only (FMA configs pass it)."""
    return lambda c, p, d: c.math == "fma" or check(c, p, d)


# What the tensor-core maths (math="3xtf32" or "tf32": mma.sync m16n8k8, 3xtf32.cuh) ask of any
# family that includes them (its bm, bn, bk, ty, tx, tm, tn, pad and math; its problem's dtype and
# precision): this one's, and the implicit-GEMM convolutions'.
MMA_CONSTRAINTS = (
    ("the tensor-core maths are float32 math on tensor cores of compute capability 8.0 or newer",
     _mma(lambda c, p, d: p.dtype == "float32" and float(d.compute_capability) >= 8.0)),
    ("tf32's products are TF32's: it computes calls at precision tf32 or bf16 only",
     lambda c, p, d: c.math != "tf32" or p.precision != "fp32"),
    ("the tensor-core maths need TM=1, TN=2 (each thread owns the MMA fragment's 1 x 2 micro-tiles)",
     _mma(lambda c, p, d: (c.tm, c.tn) == (1, 2))),
    ("the tensor-core maths make warps of 8 x 4 threads: TY must be a multiple of 8 and TX of 4",
     _mma(lambda c, p, d: c.ty % 8 == 0 and c.tx % 4 == 0)),
    ("the tensor-core maths' warp tiles need a whole number of 16-row MMA tiles: BM/TY must be even",
     _mma(lambda c, p, d: (c.bm // c.ty) % 2 == 0)),
    ("the tensor-core maths read K 16 at a time from padded tiles: BK must be 16 or 32, and pad true",
     _mma(lambda c, p, d: c.bk % 16 == 0 and c.pad)),
)

CONSTRAINTS = (
    ("bfloat16 operands are read by gemm_wgmma alone", lambda c, p, d: not p.bf16_operands),
    ("a bfloat16 D is written by gemm_wgmma alone", lambda c, p, d: not p.bf16_out),
    ("the thread tile TY*TM must divide BM", lambda c, p, d: c.bm % (c.ty * c.tm) == 0),
    ("the thread tile TX*TN must divide BN", lambda c, p, d: c.bn % (c.tx * c.tn) == 0),
    ("threads per block must be a multiple of 32 and at most 1024",
     lambda c, p, d: threads(c) % 32 == 0 and threads(c) <= min(1024, d.max_threads_per_block)),
    ("vector loads must be at most 16 bytes", lambda c, p, d: c.vec * p.itemsize <= 16),
    ("VEC must divide BK", lambda c, p, d: c.bk % c.vec == 0),
    ("register-staged copies use 1 or 2 stages, cp.async 2 to 4",
     lambda c, p, d: c.stages <= 2 if c.copy == "regs" else c.stages >= 2),
    ("shared memory must fit the device's per-block limit",
     lambda c, p, d: smem_bytes(c, p) + STATIC_SMEM <= d.smem_per_block),
    ("the register estimate must fit without spilling (224 per thread, and the block's file)",
     lambda c, p, d: registers_estimate(c, p) <= min(224, d.regs_per_block // threads(c))),
    ("VEC must suit the alignment of A and B (pointers and leading dimensions)",
     lambda c, p, d: c.vec <= min(p.vec_a, p.vec_b)),
    ("every split-K slice must hold at least one BK step of K",
     lambda c, p, d: (c.split_k - 1) * k_slice(c, p.k) < p.k),
    ("grid rows ceil(M/BM) must be at most 65535", lambda c, p, d: ceil_div(p.m, c.bm) <= 65535),
    # math="3xtf32" or "tf32": mma.sync m16n8k8 on float32 data, here in cp.async tiles
    *MMA_CONSTRAINTS,
    ("3xtf32 and tf32 read their fragments from cp.async tiles (copy=async)", _mma(lambda c, p, d: c.copy == "async")),
)


def even(c, p: Problem) -> bool:
    """Whether the tiles divide the problem exactly (the unguarded fast path)."""
    return p.m % c.bm == 0 and p.n % c.bn == 0 and p.k % (c.bk * c.split_k) == 0


def output_vector(c, p: Problem) -> int:
    """Elements per store of D (and load of C): the widest that a thread's TN adjacent columns, 16
    bytes, the outputs' alignment and N allow (a vector is then wholly inside or outside N)."""
    limit = min(c.tn, 16 // p.itemsize, p.vec_out)
    return next(v for v in (4, 2, 1) if v <= limit and p.n % v == 0)


def template_args(c, p: Problem) -> dict:
    widest = 16 // p.itemsize
    is_even = even(c, p)
    a_kmajor, b_kmajor = k_major(c, p)
    pad_a, pad_b = pads(c, p)
    return dict(
        dict(c),
        ctype=DTYPES[p.dtype],
        a_kmajor=a_kmajor,
        b_kmajor=b_kmajor,
        pad_a=pad_a,
        pad_b=pad_b,
        kc=k_chunk(c, p),
        trans_a=p.trans_a,
        trans_b=p.trans_b,
        epilogue=p.epilogue,
        use_c=p.use_c,
        even=is_even,
        smem_vec_a=min(c.tm, widest),
        smem_vec_b=min(c.tn, widest),
        out_vec=output_vector(c, p),
    )


def instance_name(c, p: Problem) -> str:
    dt = SHORT[p.dtype]
    name = (f"gemm_{dt}_{p.op}_bm{c.bm}_bn{c.bn}_bk{c.bk}_ty{c.ty}_tx{c.tx}_tm{c.tm}_tn{c.tn}"
            f"_v{c.vec}_{c.copy}{c.stages}_sk{c.split_k}_p{int(c.pad)}_{c.math}")
    args = template_args(c, p)
    if p.epilogue:
        name += f"_{p.epilogue}"
    if p.use_c:
        name += "_c"
    if args["even"]:
        name += f"_even_o{args['out_vec']}"
    elif args["out_vec"] > 1:
        name += f"_o{args['out_vec']}"
    return name


def geometry(c, p: Problem) -> Geometry:
    grid = (ceil_div(p.n, c.bn), ceil_div(p.m, c.bm), c.split_k)
    split = c.split_k > 1
    return Geometry(
        grid=grid,
        block=(threads(c), 1, 1),
        smem_bytes=smem_bytes(c, p),
        workspace_elems=c.split_k * p.m * p.n if split else 0,
        counters=grid[0] * grid[1] if split else 0,
    )


def default_candidates(p: Problem, d):
    """Sound untuned configs, best first, then more places for the search to start from: the
    heuristics of seeds.py, over this space and these constraints."""
    return seeds.candidates(p, d, PARAMS, CONSTRAINTS)
