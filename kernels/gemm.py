"""The register-blocked GEMM family (gemm.cu.j2): its parameter space, constraints and launch shape.

D = epi(alpha * op(A) @ op(B) + beta * C), row-major, op in {N, T} on each side, any M, N, K >= 1.
"""
from dataclasses import dataclass

import numpy as np

from kernels import gemm_seeds
from kernels.contract import DTYPES, ITEMSIZE, SHORT, Geometry, ceil_div, check_problem

NAME = "gemm"
TEMPLATE = "gemm.cu.j2"

EPILOGUES = (None, "bias", "bias_sigmoid", "bias_relu", "dsigmoid", "drelu")
KEY_SIZES = ("m", "n", "k")
# A key's op: op(A), op(B) (N or T), then "+" and the fused epilogue where the call has one
# ("nt+bias_sigmoid"): an epilogue's work changes which config is fastest (a persistent kernel hides
# it under the next tile's products), so the records of a layer's GEMM are tuned with it.
LAYOUTS = ("nn", "nt", "tn", "tt")
KEY_OPS = LAYOUTS + tuple(f"{layout}+{epilogue}" for layout in LAYOUTS for epilogue in EPILOGUES[1:])


def key_op(trans_a: bool, trans_b: bool, epilogue: str | None = None) -> str:
    """The op of a GEMM key: "nt" for A op(B^T), "nt+bias_sigmoid" with that epilogue."""
    layout = ("t" if trans_a else "n") + ("t" if trans_b else "n")
    return f"{layout}+{epilogue}" if epilogue else layout


def split_op(op: str) -> tuple[bool, bool, str | None]:
    """(trans_a, trans_b, epilogue) of a key op (KEY_OPS)."""
    layout, _, epilogue = op.partition("+")
    return layout[0] == "t", layout[1] == "t", epilogue or None


def served_by_ops(op: str) -> tuple[str, ...]:
    """The key ops whose records may serve a call of `op`: its own, then, for a call with an
    epilogue, its layout's records tuned without one (the same kernel, timed without the epilogue)."""
    layout = op.partition("+")[0]
    return (op, layout) if op != layout else (op,)


# What the caller accepts, most accurate first: "fp32", the dtype's own accuracy (FP32-accurate for
# float32); "tf32", float32 operands rounded to TF32 (10-bit mantissas) in each product, float32
# sums; "bf16", float32 operands rounded to bfloat16 (7-bit mantissas), float32 sums. A kernel at
# least as accurate serves a call: FP32-accurate kernels serve tf32 and bf16 calls too.
PRECISIONS = ("fp32", "tf32", "bf16")
# The arithmetic a tuned key names (its dtype field): a dtype, a reduced precision of float32 data,
# or "bfloat16": A and B held in bfloat16 (their bits, as uint16: CuPy has no bfloat16), float32
# sums and outputs.
KEY_DTYPES = ("float32", "float64", "tf32", "bf16", "bfloat16")


def serves(precision: str, call_precision: str) -> bool:
    """Whether products at `precision` may compute a call at `call_precision`: as or more accurate."""
    return PRECISIONS.index(precision) <= PRECISIONS.index(call_precision)


def served_by(arithmetic: str) -> tuple[str, ...]:
    """The key arithmetics whose records may serve a call of `arithmetic`: its own, then the more
    accurate ones (bf16: bf16, tf32, float32); a kernel reading bfloat16 operands serves those alone."""
    if arithmetic not in PRECISIONS[1:]:
        return (arithmetic,)
    return PRECISIONS[PRECISIONS.index(arithmetic):0:-1] + ("float32",)

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
    "math": ("fma", "3xtf32"),         # FP32/FP64 FMAs, or float32 on tensor cores as three TF32 MMAs
}
# math="3xtf32" splits each float32 x into a TF32 part hi = tf32(x) and the exact rest lo = x - hi
# (the MMA reads lo's top 19 bits), and accumulates lo*hi + hi*lo + hi*hi with mma.sync m16n8k8 in
# float32: each product is kept to about 2^-21 (float32 FMAs: 2^-24); the tensor cores' float32
# sums truncate, so the error is several times FMAs' (measured: docs/GUIDE.md).
# A warp is then an 8 x 4 patch of the TY x TX threads (the mma's lane grid) and owns a
# (8*RM) x (4*RN) tile of MMA tiles 16 x 8; each thread's accumulators are the MMA fragment's,
# 1 x 2 micro-tiles (TM = 1, TN = 2) in rows g, g+8 of each MMA tile.


@dataclass(frozen=True)
class Problem:
    """One GEMM call as the compiler sees it. vec_* are the widest vectors (elements) that the
    pointers and leading dimensions allow for A, B, and the outputs (C, D, aux). With bf16_operands,
    A and B hold bfloat16 bits (2 bytes; precision bf16); with bf16_out, D is written as bfloat16
    bits (precision bf16); dtype is the arithmetic's and C's, the epilogue's and (else) D's. A key
    leaves bf16_out out: a config tuned writing float32 serves it."""

    m: int
    n: int
    k: int
    dtype: str = "float32"
    trans_a: bool = False
    trans_b: bool = False
    epilogue: str | None = None
    use_c: bool = False
    vec_a: int = 4
    vec_b: int = 4
    vec_out: int = 4
    precision: str = "fp32"
    bf16_operands: bool = False
    bf16_out: bool = False

    @classmethod
    def contiguous(cls, m: int, n: int, k: int, dtype: str = "float32", trans_a: bool = False,
                   trans_b: bool = False, **kw) -> "Problem":
        """The problem of freshly allocated (contiguous, 256-byte aligned) operands."""
        operand_bytes = 2 if kw.get("bf16_operands") else ITEMSIZE[dtype]

        def widest(ld: int, itemsize: int = operand_bytes) -> int:
            return next(v for v in (8, 4, 2, 1) if ld % v == 0 and v * itemsize <= 16)

        return cls(m, n, k, dtype, trans_a, trans_b, vec_a=widest(m if trans_a else k),
                   vec_b=widest(k if trans_b else n), vec_out=widest(n, ITEMSIZE[dtype]), **kw)

    def __post_init__(self):
        check_problem(self, ("m", "n", "k"), "GEMM size")
        if self.epilogue not in EPILOGUES:
            raise ValueError(f"epilogue {self.epilogue!r} is not one of {', '.join(map(str, EPILOGUES[1:]))}")
        for flag in ("trans_a", "trans_b", "use_c", "bf16_operands", "bf16_out"):
            if type(getattr(self, flag)) is not bool:
                raise ValueError(f"{flag} must be a bool")
        for vec in ("vec_a", "vec_b", "vec_out"):
            if getattr(self, vec) not in (1, 2, 4, 8):
                raise ValueError(f"{vec} must be 1, 2, 4 or 8")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision {self.precision!r} is not one of {', '.join(PRECISIONS)}")
        if self.precision != "fp32" and self.dtype != "float32":
            raise ValueError(f"precision {self.precision} multiplies float32 data; this GEMM is {self.dtype}")
        if self.bf16_operands and self.precision != "bf16":
            raise ValueError(f"bfloat16 operands are multiplied at precision bf16, not {self.precision}")
        if self.bf16_out and self.precision != "bf16":
            raise ValueError(f"a bfloat16 D is written at precision bf16, not {self.precision}")

    @property
    def op(self) -> str:
        return key_op(self.trans_a, self.trans_b)

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self.dtype]

    @property
    def operand_itemsize(self) -> int:
        """Bytes of an element of A and B: 2 for bfloat16 operands, else dtype's."""
        return 2 if self.bf16_operands else self.itemsize

    @property
    def arithmetic(self) -> str:
        """The dtype field of its tuned key: "bfloat16" for bfloat16 operands, the precision of a
        tf32 or bf16 call, else the dtype."""
        if self.bf16_operands:
            return "bfloat16"
        return self.dtype if self.precision == "fp32" else self.precision


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
    4 (a multiple of every vector width, so vector reads stay aligned); under 3xtf32 what makes its fragment
    reads conflict-free (see gemm_3xtf32.cuh): rows 16 (mod 32) words long where both operands are
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
    3xtf32 the raw values of two k steps of MMA fragments and the hi and lo parts of one),
    register-staged loads and the addresses of every load (about two each), ~64 for the rest
    (loop state, epilogue); with split-K about RM*RN more (nvcc 13.0 spilled 64 accumulators split
    in two at 255 registers). Checked against ptxas by tests/test_kernels_compile.py."""
    words = p.itemsize // 4
    rm, rn = c.bm // c.ty, c.bn // c.tx
    loads = ceil_div(c.bm * c.bk // c.vec, threads(c)) + ceil_div(c.bn * c.bk // c.vec, threads(c))
    staged = loads * c.vec if c.copy == "regs" else 0
    fragments = k_chunk(c, p) * (rm + rn) if c.math == "fma" else 6 * rm + 3 * rn
    reduction = rm * rn if c.split_k > 1 else 0
    return words * (rm * rn + fragments + staged + reduction) + 2 * loads + 64


def k_slice(c, k: int) -> int:
    """Elements of K per split-K slice: a whole number of BK tiles."""
    return ceil_div(k, c.split_k * c.bk) * c.bk


def _tf32x3(check):
    """A constraint on 3xtf32 configs only (FMA configs pass it)."""
    return lambda c, p, d: c.math == "fma" or check(c, p, d)


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
    # math="3xtf32": mma.sync m16n8k8 on float32 data in cp.async tiles
    ("3xtf32 is float32 math on tensor cores of compute capability 8.0 or newer",
     _tf32x3(lambda c, p, d: p.dtype == "float32" and float(d.compute_capability) >= 8.0)),
    ("3xtf32 reads its fragments from cp.async tiles (copy=async)", _tf32x3(lambda c, p, d: c.copy == "async")),
    ("3xtf32 needs TM=1, TN=2 (each thread owns the MMA fragment's 1 x 2 micro-tiles)",
     _tf32x3(lambda c, p, d: (c.tm, c.tn) == (1, 2))),
    ("3xtf32 makes warps of 8 x 4 threads: TY must be a multiple of 8 and TX of 4",
     _tf32x3(lambda c, p, d: c.ty % 8 == 0 and c.tx % 4 == 0)),
    ("3xtf32 warp tiles need a whole number of 16-row MMA tiles: BM/TY must be even",
     _tf32x3(lambda c, p, d: (c.bm // c.ty) % 2 == 0)),
    ("3xtf32 reads K 16 at a time from padded tiles: BK must be 16 or 32, and pad true",
     _tf32x3(lambda c, p, d: c.bk % 16 == 0 and c.pad)),
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


def flops(p: Problem) -> int:
    return 2 * p.m * p.n * p.k


def key_of(p: Problem) -> tuple[tuple[int, ...], str]:
    return (p.m, p.n, p.k), key_op(p.trans_a, p.trans_b, p.epilogue)


def problem_of(sizes: tuple[int, ...], op: str, dtype: str) -> Problem:
    """`op` is a key's (KEY_OPS: layout and epilogue); `dtype` its arithmetic (KEY_DTYPES): "tf32"
    and "bf16" are float32 data at that precision, "bfloat16" bfloat16 operands."""
    trans_a, trans_b, epilogue = split_op(op)
    if dtype == "bfloat16":
        return Problem.contiguous(*sizes, "float32", trans_a, trans_b, epilogue=epilogue, precision="bf16",
                                  bf16_operands=True)
    if dtype in PRECISIONS[1:]:
        return Problem.contiguous(*sizes, "float32", trans_a, trans_b, epilogue=epilogue, precision=dtype)
    return Problem.contiguous(*sizes, dtype, trans_a, trans_b, epilogue=epilogue)


def default_candidates(p: Problem, d):
    """Sound untuned configs, best first, then more places for the search to start from: the
    heuristics of kernels/gemm_seeds.py, over this space and these constraints."""
    return gemm_seeds.candidates(p, d, PARAMS, CONSTRAINTS)


ACTIVATION_SLOPE = {None: 1.0, "bias": 1.0, "bias_sigmoid": 0.25, "bias_relu": 1.0}   # max |epi'|


def reference(p: Problem, a, b, alpha=1.0, beta=0.0, c=None, bias=None, aux=None) -> dict:
    """{"d": (value, magnitude, K)}: D in float64, and the bound's term |alpha| |op(A)| |op(B)| +
    |beta C| + |bias| times the epilogue's slope. bfloat16 operands arrive as their bits (uint16)."""
    a64, b64 = (bf16_values(x) if p.bf16_operands else np.asarray(x, np.float64) for x in (a, b))
    opa, opb = (a64.T if p.trans_a else a64), (b64.T if p.trans_b else b64)
    value = alpha * (opa @ opb)                                     # D: (M, N)
    magnitude = abs(alpha) * (np.abs(opa) @ np.abs(opb))
    if beta != 0:
        c64 = np.asarray(c, np.float64)
        value += beta * c64
        magnitude += abs(beta * c64)
    return {"d": apply_epilogue(p.epilogue, value, magnitude, bias, aux) + (p.k,)}


def bf16_bits(x) -> np.ndarray:
    """float32 values rounded to bfloat16 (to nearest even; NaN stays NaN), as the uint16 of their bits."""
    x = np.asarray(x, np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    return np.where(np.isnan(x), (u >> 16) | 0x40, (u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_values(bits) -> np.ndarray:
    """The float64 values of bfloat16 bits (uint16)."""
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def apply_epilogue(name: str | None, value, magnitude, bias, aux) -> tuple:
    """(value, magnitude) through the epilogue `name` (bias + activation, or an activation's
    derivative at the saved outputs aux)."""
    if name in ("bias", "bias_sigmoid", "bias_relu"):
        bias64 = np.asarray(bias, np.float64)
        value += bias64
        magnitude += np.abs(bias64)
        magnitude *= ACTIVATION_SLOPE[name]
        if name == "bias_sigmoid":
            value = 1.0 / (1.0 + np.exp(-value))
        elif name == "bias_relu":
            value = np.maximum(value, 0.0)
    elif name == "dsigmoid":
        s = np.asarray(aux, np.float64)
        value *= s * (1 - s)
        magnitude *= np.abs(s * (1 - s))
    elif name == "drelu":
        mask = np.asarray(aux) > 0
        value *= mask
        magnitude *= mask
    return value, magnitude
