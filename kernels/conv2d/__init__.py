"""The forward convolution as an implicit GEMM (conv2d.cu.j2): its space, constraints and launch shape.

z[n, f, oh, ow] = act(b[f] + sum_{c,i,j} x[n, c, oh+i, ow+j] w[f, c, i, j]), NCHW, valid, stride 1:
a GEMM of M = N*OH*OW output pixels by F filters over C*K*K, whose A operand (the im2col matrix)
is never formed: the tile loader gathers it from x. The tiles' product is the GEMM family's math:
FP32 FMAs, or float32 on tensor cores by mma.sync (3xTF32, FP32-accurate; or TF32 products, for
calls at precision tf32 or bf16), which conv2d_dgrad and conv2d_wgrad share.
"""
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from kernels.contract import DTYPES, ITEMSIZE, MAX_SIZE, NO_OP, SHORT, Geometry, ceil_div, check_problem
# The GEMM family's maths: which precision each computes, what its tensor-core paths ask, their registers.
from kernels.gemm import MATH_PRECISION as GEMM_MATH_PRECISION
from kernels.gemm import MMA_CONSTRAINTS, fragment_registers
# Precisions as the GEMM call's: which records serve a call.
from kernels.gemm.call import PRECISIONS, served_by  # noqa: F401
from kernels.gemm.call import at_precision as gemm_at_precision

NAME = "conv2d"
TEMPLATE = "conv2d/conv2d.cu.j2"

ACTIVATIONS = (None, "relu", "sigmoid")
KEY_SIZES = ("n", "c", "h", "w", "f", "k")
POOL = "pool"                       # the op of a key whose 2 x 2 max-pool is fused (the direct kernels')
KEY_OPS = (NO_OP, POOL)             # one config serves every activation; a fused pool is another problem
# A key's arithmetic: a dtype, or float32 data at precision tf32 or bf16 (kernels.gemm.call).
KEY_DTYPES = ("float32", "float64", "tf32", "bf16")

PARAMS = {
    "bm": (16, 32, 64, 128),        # block tile: output pixels (M)
    "bn": (4, 8, 16, 32, 64),       # block tile: filters (N)
    "bk": (4, 8, 16, 32),           # C*K*K step per shared-memory tile
    "ty": (1, 2, 4, 8, 16, 32),     # thread-block shape: TY x TX threads
    "tx": (1, 2, 4, 8, 16, 32),
    "tm": (1, 2, 4, 8),             # register micro-tile TM x TN, repeated over the block tile
    "tn": (1, 2, 4, 8),
    "pad": (False, True),           # pad shared-memory rows against bank conflicts (by pad_elements)
    # the tiles' product, as the GEMM family's (gemm/fma.cuh, gemm/3xtf32.cuh): FP32/FP64 FMAs;
    # float32 on tensor cores as three TF32 MMAs (FP32-accurate); or as one (TF32 products); or
    # BF16 MMAs (bf16_mma.cuh: bfloat16 products, two stages)
    "math": ("fma", "3xtf32", "tf32", "bf16"),
    # shared-memory stages: 1, gather then multiply; 2, the next slice gathered into registers while
    # this one is multiplied (implicit_gemm.cuh)
    "stages": (1, 2),
}

# The precision each math computes (PRECISIONS): what its kernels offer tune --precision.
MATH_PRECISION = {**GEMM_MATH_PRECISION, "bf16": "bf16"}
KERNEL_PRECISIONS = tuple(dict.fromkeys(MATH_PRECISION.values()))
# The tensor-core math of a call at each precision: its seeds', and a more accurate record's config
# made fit for it (at_precision).
MMA_MATH = {"fp32": "3xtf32", "tf32": "tf32", "bf16": "bf16"}


@dataclass(frozen=True)
class Problem:
    """One convolution: n images of c x h x w, f filters of c x k x k, and the activation after it."""

    n: int
    c: int
    h: int
    w: int
    f: int
    k: int
    dtype: str = "float32"
    activation: str | None = None
    precision: str = "fp32"         # what its products may round float32 operands to (kernels.gemm.call)
    # the 2 x 2 max-pool of the activated output fused (stride 2, an odd side's last row or column
    # dropped): the output is pooled, with each window's position of its maximum
    pool: bool = False
    # bytes of shared memory a depth takes in the two-stage gather's tables (implicit_gemm.cuh):
    # x's offset of each tap (c, i, j)
    DEPTH_TABLE_BYTES: ClassVar[int] = 4

    def __post_init__(self):
        check_problem(self, KEY_SIZES, "conv2d")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision {self.precision!r} is not one of {', '.join(PRECISIONS)}")
        if self.precision != "fp32" and self.dtype != "float32":
            raise ValueError(f"precision {self.precision} multiplies float32 data; this convolution is {self.dtype}")
        if self.k > min(self.h, self.w):
            raise ValueError(f"a {self.k}x{self.k} filter does not fit a {self.h}x{self.w} image")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation {self.activation!r} is not one of relu, sigmoid or None")
        if type(self.pool) is not bool:
            raise ValueError(f"pool must be True or False, got {self.pool!r}")
        if self.pool:
            self.check_pool()
        if self.n * self.c * self.h * self.w > MAX_SIZE or self.n * self.f * self.h * self.w > MAX_SIZE:
            raise ValueError(f"conv2d of {self.n} images: more than {MAX_SIZE} elements in x or z")
        if self.f * self.c * self.k * self.k > MAX_SIZE:
            raise ValueError(f"{self.f} filters of {self.c} x {self.k} x {self.k}: more than {MAX_SIZE} elements in w")

    def check_pool(self):
        """ValueError unless a 2 x 2 pool fits the output."""
        if min(self.out_h, self.out_w) < 2:
            raise ValueError(f"a 2x2 pool does not fit the {self.out_h}x{self.out_w} output")

    @property
    def arithmetic(self) -> str:
        """The dtype field of its tuned key: the precision of a tf32 or bf16 call, else the dtype."""
        return self.dtype if self.precision == "fp32" else self.precision

    @property
    def out_h(self) -> int:
        return self.h - self.k + 1

    @property
    def out_w(self) -> int:
        return self.w - self.k + 1

    @property
    def m(self) -> int:
        """The implicit GEMM's rows: output pixels of every image."""
        return self.n * self.out_h * self.out_w

    @property
    def pooled(self) -> tuple[int, int]:
        """The pooled output's sides."""
        return self.out_h // 2, self.out_w // 2

    @property
    def depth(self) -> int:
        """The implicit GEMM's K: C*K*K."""
        return self.c * self.k * self.k


# Where an untuned call runs on tensor cores rather than the direct kernels listed first: float32
# layers of at least this many taps (C*K*K) and 32 filters. On an H100 the two-stage TF32 and 3xTF32
# seeds beat the direct kernels in every direction on 32 -> 64 channels 5 x 5 and 64 -> 128 3 x 3
# (depths 800, 576), and lost to them on 16 and 32 channels 3 x 3 (144, 288): benchmarks/issue41-h100.
UNTUNED_MIN_TAPS = 512


def untuned_first(p: Problem, d) -> bool:
    """A convolution that no record serves runs here, before the direct kernels, where it is wide and
    the GPU has the tensor cores of this family's seeds (an FMA default was not measured against them)."""
    return (p.dtype == "float32" and float(d.compute_capability) >= 8.0 and p.c * p.k * p.k >= UNTUNED_MIN_TAPS
            and p.f >= 32)


def threads(c) -> int:
    return c.ty * c.tx


def pad_elements(c) -> int:
    """Row padding of both [k][row] tiles where c.pad asks for it: under fma 4 (a multiple of every
    vector width); on tensor cores 8, which makes mma.sync's fragment reads conflict-free (as the
    GEMM family's [k][row] tiles, kernels.gemm.pads)."""
    return 0 if not c.pad else 4 if c.math == "fma" else 8


# The two-stage gather's depth tables take at most this much shared memory; past it (a layer of
# thousands of taps) the gather decodes each depth instead (implicit_gemm.cuh: TABULATED).
MAX_TABLE_BYTES = 48 * 1024


def depth_tables(c, p: Problem) -> bool:
    """Whether `c`'s gather reads its depth states from tables in shared memory."""
    return c.stages > 1 and p.DEPTH_TABLE_BYTES * p.depth <= MAX_TABLE_BYTES


def smem_bytes(c, p: Problem) -> int:
    """Each stage's two tiles; then the depth tables, where the gather has them."""
    pad = pad_elements(c)
    tables = p.DEPTH_TABLE_BYTES * p.depth if depth_tables(c, p) else 0
    return c.stages * c.bk * (c.bm + pad + c.bn + pad) * ITEMSIZE[p.dtype] + tables


def registers_estimate(c, p: Problem) -> int:
    """32-bit registers a thread needs: accumulators, fragments (under fma one k; on TF32 tensor
    cores the GEMM family's: two k steps of raw fragments, under 3xtf32 their hi and lo parts too;
    under bf16 one step's bfloat16 pairs), ~48 for addresses and loop state."""
    rm, rn = c.bm // c.ty, c.bn // c.tx
    fragments = 2 * rm + rn if c.math == "bf16" else fragment_registers(c.math, rm, rn)
    staged = ceil_div(c.bm * c.bk, threads(c)) + ceil_div(c.bn * c.bk, threads(c)) if c.stages > 1 else 0
    return ITEMSIZE[p.dtype] // 4 * (rm * rn + fragments + staged) + 48


CONSTRAINTS = (
    ("the 2 x 2 pool is fused by the direct kernels only", lambda c, p, d: not p.pool),
    ("the thread tile TY*TM must divide BM", lambda c, p, d: c.bm % (c.ty * c.tm) == 0),
    ("the thread tile TX*TN must divide BN", lambda c, p, d: c.bn % (c.tx * c.tn) == 0),
    ("threads per block must be a multiple of 32 and at most 1024",
     lambda c, p, d: threads(c) % 32 == 0 and threads(c) <= min(1024, d.max_threads_per_block)),
    ("shared memory must fit the device's per-block limit", lambda c, p, d: smem_bytes(c, p) <= d.smem_per_block),
    ("the register estimate must fit without spilling (224 per thread, and the block's file)",
     lambda c, p, d: registers_estimate(c, p) <= min(224, d.regs_per_block // threads(c))),
    ("a thread gathers at most 16 elements of the two tiles per K step (the loads unroll; more spill)",
     lambda c, p, d: (c.bm + c.bn) * c.bk <= 16 * threads(c)),
    ("grid rows ceil(M/BM) (M: the implicit GEMM's rows) must be at most 65535",
     lambda c, p, d: ceil_div(p.m, c.bm) <= 65535),
    # math="3xtf32", "tf32" or "bf16": the GEMM family's mma.sync m16n8k8 paths (gemm/3xtf32.cuh),
    # whose tiles and warps bf16_mma.cuh's m16n8k16 keeps
    *MMA_CONSTRAINTS,
    ("bf16's products are BF16's: it computes calls at precision bf16 only, its gather in two stages",
     lambda c, p, d: c.math != "bf16" or (p.precision == "bf16" and c.stages == 2)),
)


def default_candidates(p: Problem, d):
    """Sound untuned configs, best guess first: on tensor cores where the GEMM is wide enough for
    their 16 x 8 tiles (float32, at least 16 filters and 32 of depth; the constraints drop them on
    GPUs without), then FMAs: 64 output pixels by the fewest filters that cover F (up to 64) per
    block, then other tiles; register tiles of 4 x 4 down to 2 x 1."""
    widths = PARAMS["bn"]
    covering = next((bn for bn in widths if bn >= p.f), widths[-1])
    if p.dtype == "float32" and p.f >= 16 and p.depth >= 32:
        yield from _mma_candidates(p, max(covering, 16))
    for bm, bn, bk in ((64, covering, 8), (32, covering, 8), (128, covering, 8), (64, 16, 8), (64, 32, 16)):
        for tm, tn in ((4, 4), (4, 2), (2, 2), (2, 1), (1, 1)):
            ty, tx = bm // tm, bn // tn
            if ty in PARAMS["ty"] and tx in PARAMS["tx"] and ty * tx in (32, 64, 128, 256):
                yield dict(bm=bm, bn=bn, bk=bk, ty=ty, tx=tx, tm=tm, tn=tn, pad=True, math="fma", stages=1)


def _mma_candidates(p: Problem, bn: int):
    """Tensor-core configs of BN = bn columns, 3xTF32 for an FP32-accurate call, TF32 or BF16 for
    one at those precisions (MMA_MATH): 128 or 64 rows, 256 or 128 threads, each warp 8 x 4
    threads of 16 x 8 MMA tiles (RM x RN accumulators a thread, both even); the widest BK that the
    gather's bound allows."""
    math = MMA_MATH[p.precision]
    for bm in (128, 64):
        for threads in (256, 128):
            for tx in (bn // 4, bn // 2, bn // 8):
                ty = threads // max(tx, 1)
                if tx not in PARAMS["tx"] or ty not in PARAMS["ty"] or tx % 4 or ty % 8 or bm % ty or (bm // ty) % 2:
                    continue
                for bk in (32, 16):
                    if (bm + bn) * bk <= 16 * threads:
                        yield dict(bm=bm, bn=bn, bk=bk, ty=ty, tx=tx, tm=1, tn=2, pad=True, math=math, stages=2)


def at_precision(cfg: dict, precision: str) -> dict:
    """A config of a more accurate arithmetic's record, for a call at `precision`: 3xTF32's tiles
    with TF32 products at tf32 (as the GEMM's); at bf16 either's with BF16 products where its gather
    has two stages (BF16's only), else TF32's."""
    if precision == "bf16" and cfg["math"] in ("3xtf32", "tf32") and cfg["stages"] > 1:
        return dict(cfg, math="bf16")
    return gemm_at_precision(cfg, precision)


def template_args(c, p: Problem) -> dict:
    widest = 16 // ITEMSIZE[p.dtype]
    epilogue = "bias" if p.activation is None else f"bias_{p.activation}"
    return dict(c, ctype=DTYPES[p.dtype], channels=p.c, height=p.h, width=p.w, filters=p.f, kernel=p.k,
                epilogue=epilogue, pad_elements=pad_elements(c), smem_vec_a=min(c.tm, widest),
                smem_vec_b=min(c.tn, widest), depth_tables=depth_tables(c, p))


def instance_name(c, p: Problem, family: str = NAME) -> str:
    math = ("" if c.math == "fma" else f"_{c.math}") + ("" if c.stages == 1 else f"_s{c.stages}")
    return (f"{family}_{SHORT[p.dtype]}_c{p.c}_h{p.h}_w{p.w}_f{p.f}_k{p.k}_{p.activation or 'linear'}"
            f"_bm{c.bm}_bn{c.bn}_bk{c.bk}_ty{c.ty}_tx{c.tx}_tm{c.tm}_tn{c.tn}_p{int(c.pad)}{math}")


def geometry(c, p: Problem) -> Geometry:
    return Geometry(grid=(ceil_div(p.f, c.bn), ceil_div(p.m, c.bm), 1), block=(threads(c), 1, 1),
                    smem_bytes=smem_bytes(c, p))


def flops(p: Problem) -> int:
    return 2 * p.m * p.f * p.depth


def key_of(p: Problem) -> tuple[tuple[int, ...], str]:
    return (p.n, p.c, p.h, p.w, p.f, p.k), POOL if p.pool else NO_OP


def problem_of(sizes: tuple[int, ...], op: str, dtype: str, problem: type = Problem) -> Problem:
    """`dtype` is a key's arithmetic (KEY_DTYPES): "tf32" and "bf16" are float32 data at that precision.
    `problem`: the Problem class (each direction's)."""
    pool = {"pool": True} if op == POOL else {}
    if dtype in PRECISIONS[1:]:
        return problem(*sizes, "float32", precision=dtype, **pool)
    return problem(*sizes, dtype, **pool)


def reference(p: Problem, x, w, b) -> dict:
    """{"z": act(x correlated with w, plus b)} in float64: x (n, c, h, w), w (f, c, k, k), b (f,);
    with a fused pool, z pooled and "where": the unpooled z, against which a kernel's positions of
    the maxima are checked (a near tie may pick either)."""
    x64, w64, b64 = (np.asarray(a, np.float64) for a in (x, w, b))
    windows = sliding_window_view(x64, (p.k, p.k), axis=(2, 3))          # (N, C, OH, OW, K, K)
    value = np.einsum("nchwij,fcij->nfhw", windows, w64, optimize=True) + b64[None, :, None, None]
    abs_windows = sliding_window_view(np.abs(x64), (p.k, p.k), axis=(2, 3))   # a view: |x|'s, not a copy of 9 |x|
    magnitude = (np.einsum("nchwij,fcij->nfhw", abs_windows, np.abs(w64), optimize=True)
                 + np.abs(b64)[None, :, None, None])                    # Z: (N, F, OH, OW)
    if p.activation == "relu":
        value = np.maximum(value, 0)
    elif p.activation == "sigmoid":
        value, magnitude = 1 / (1 + np.exp(-value)), 0.25 * magnitude
    if not p.pool:
        return {"z": (value, magnitude, p.depth)}
    windows = pool_windows(value)
    at = windows.argmax(axis=-1)[..., None]
    pooled = (np.take_along_axis(a, at, -1)[..., 0] for a in (windows, pool_windows(magnitude)))
    return {"z": (*pooled, p.depth), "where": (value, magnitude, p.depth)}


def pool_windows(z):
    """z (N, F, OH, OW) as (N, F, OH//2, OW//2, 4): each 2 x 2 window's values, row by row (an odd
    side's last row or column dropped)."""
    n, f, h, w = z.shape
    z = z[:, :, :h // 2 * 2, :w // 2 * 2]
    return z.reshape(n, f, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, f, h // 2, w // 2, 4)

