"""Hopper's GEMM (gemm_wgmma.cu.j2): warpgroup MMAs from swizzled shared memory, FP32-accurate
3xTF32 or, for calls at reduced precision, single TF32 or BF16 products.

The same call as the gemm family (its Problem, keys, epilogues and reference): D = epi(alpha * op(A)
@ op(B) + beta * C), every op, float32 or bfloat16 operands, float32 or bfloat16 D, on compute capability 9.0
(sm_90a). wgmma reads TF32 operands K-major from shared memory, so an operand with M or N
contiguous (op(A) = A^T, op(B) = B) is transposed in shared memory as each stage lands, or
(`pretranspose`) copied K-major into scratch by the transpose family before the kernel runs;
such an op(A) may instead (`reg_a`) be read from its landed tile into registers, wgmma's
register operand, with no transpose, and an N-major op(B) becomes one (`swap`: the kernel computes
D^T = op(B)^T op(A)^T and writes D transposed). bfloat16 operands are read as they land,
M/N-major ones by wgmma's transposing form. Stages are copied and prepared either by every
thread, one block-wide synchronization a k-tile, or by a producer warpgroup handing them to the
computing ones through mbarriers (warp specialization), which copies by cp.async or, one thread
for the block, by bulk tensor copies (TMA) through tensor maps of A and B that every launch passes.
Under TMA, blocks may run as clusters that share their A or B tiles: each block copies its part,
multicast to the others, which halves what the cluster reads of the shared operand from L2. With a
producer, blocks may be persistent: at most one an SM, each taking tiles in turn, its computing
warpgroups alternating whole tiles so that one's epilogue runs under the other's wgmmas.
"""
import dataclasses
from types import SimpleNamespace

from kernels.contract import Geometry, TileMap, ceil_div
# The GEMM call's problem, keys, epilogues, work and reference: this family's.
from kernels.gemm.call import (EPILOGUES, KEY_DTYPES, KEY_OPS, KEY_SIZES, Problem, at_precision,  # noqa: F401
                               flops, key_of, problem_of, reference, served_by, served_by_ops, serves)
from kernels.gemm_wgmma import seeds

NAME = "gemm_wgmma"
TEMPLATE = "gemm_wgmma/gemm_wgmma.cu.j2"
CALL = "gemm"   # another implementation of gemm's call (Hopper, float32 or bfloat16 operands with 16-byte rows)
COMPILE_OPTIONS = ("-arch=sm_90a",)   # wgmma exists on sm_90a only
# The precision each math computes (gemm.PRECISIONS): what its own kernels offer tune --precision.
MATH_PRECISION = {"3xtf32": "fp32", "tf32": "tf32", "bf16": "bf16"}
# Its 3xTF32 sums each stage apart and adds it by rounding FADDs (the tensor cores' own adder
# truncates): on an H100, within 0.24x-1.73x cuBLAS FP32's max-norm error on random normal data, K up
# to 16384 (benchmarks/issue40-h100/wgmma-parts), inside the tuner's bound (autogemm.tuning.verify).
FP32_ACCURATE = True
# Untuned fp32 calls of at least this many outputs run here first: on the 12 such shapes measured,
# its 3xTF32 defaults took 0.57x-1.02x cuBLAS FP32's time (10 under 0.8x), the tiled family's
# 0.73x-1.46x; on 256 x 256 outputs, whose K it splits, 1.18x-1.63x against the tiled family's
# 1.02x-1.75x with no clear winner (benchmarks/issue40-h100/wgmma-parts).
UNTUNED_FP32_OUTPUTS = 2**18
KERNEL_PRECISIONS = tuple(MATH_PRECISION.values())


PARAMS = {
    "bm": (64, 128, 192, 256),                       # block tile rows: 64 per wgmma tile
    # block tile columns: wgmma's N (112 and 224 divide 784, MNIST's width: the first layer's weight updates)
    "bn": (32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256),
    "warpgroups": (1, 2),                            # 128-thread warpgroups, stacked along M
    "stages": (2, 3, 4, 5),                          # shared-memory buffers of K (k_step each)
    "math": ("3xtf32", "tf32", "bf16"),              # FP32-accurate, TF32 or BF16 products (MATH_PRECISION)
    "inflight": (0, 1),                              # wgmma groups left running across a k-tile
    "split_k": (1, 2, 3, 4, 6),                      # slices of K, reduced by the last block of each tile
    "producer": (0, 1),                              # 1: a producer warpgroup copies and prepares stages
    "tma": (0, 1),                                   # 1: the producer copies by TMA (bulk tensor copies)
    "pretranspose": (0, 1),                          # 1: M/N-major operands copied K-major first (kernel_problem)
    "reg_a": (0, 1),                                 # 1: an M-major float32 op(A) read into registers, not transposed
    "swap": (0, 1),                                  # 1: D^T = op(B)^T op(A)^T computed, D written transposed
    "cluster_m": (1, 2),                             # blocks of a cluster along M, sharing their B tile (TMA)
    "cluster_n": (1, 2),                             # blocks of a cluster along N, sharing their A tile (TMA)
    "persistent": (0, 1),                            # 1: a block an SM, its warpgroups taking whole tiles in turn
}
STAGE_ROW_BYTES = 128  # a stage's K-major tile row: BK k (k_step) of the operands' type
SWIZZLE_ALIGN = 1024  # the dynamic shared memory is aligned up to this in the kernel


def untuned_first(p: Problem, d) -> bool:
    """A call that no record serves runs here before the tiled family at tf32 or bf16 (products at
    its precision on warpgroup MMAs, against mma.sync's), and at fp32 where its output is large
    (UNTUNED_FP32_OUTPUTS): the tiled family then runs the calls this family cannot read."""
    return p.precision != "fp32" or p.m * p.n >= UNTUNED_FP32_OUTPUTS


def helper_templates(c) -> tuple[str, ...]:
    """A pretransposed config's time includes the transpose kernel's."""
    return ("transpose/transpose.cu.j2",) if c.pretranspose else ()


def threads(c) -> int:
    """The computing warpgroups and the producer's."""
    return 128 * (c.warpgroups + c.producer)


def mn_major(p: Problem) -> tuple[bool, bool]:
    """Whether op(A), op(B) have M, N contiguous in global memory (float32 ones are transposed in
    shared memory or pretransposed, bfloat16 ones read by the transposing wgmma)."""
    return p.trans_a, not p.trans_b


def operands_problem(c, p: Problem) -> Problem:
    """The problem as c's kernel takes its operands: under `swap`, D^T = op(B)^T op(A)^T (M and N,
    A and B exchanged: an N-major op(B) is its M-major op(A))."""
    if not c.swap:
        return p
    return dataclasses.replace(p, m=p.n, n=p.m, trans_a=not p.trans_b, trans_b=not p.trans_a, vec_a=p.vec_b,
                               vec_b=p.vec_a)


def copied_operands(c, p: Problem) -> tuple[bool, bool]:
    """Which of c's kernel's operands `pretranspose` copies K-major (where it is on): the M/N-major
    ones of operands_problem, but an op(A) read into registers (`reg_a`)."""
    a_mn, b_mn = mn_major(operands_problem(c, p))
    return a_mn and not c.reg_a, b_mn


def kernel_problem(c, p: Problem) -> Problem:
    """The problem that c's kernel computes (its operands as operands_problem says): under
    `pretranspose` each operand of copied_operands is first copied K-major into scratch whose rows
    are 16-byte aligned (the transpose family), so the kernel reads it K-major, with nothing to
    transpose in shared memory."""
    a_mn, b_mn = copied_operands(c, p)
    p = operands_problem(c, p)
    if not c.pretranspose:
        return p
    vec = 16 // p.operand_itemsize
    return dataclasses.replace(p, trans_a=p.trans_a and not a_mn, trans_b=True, vec_a=vec if a_mn else p.vec_a,
                               vec_b=vec if b_mn else p.vec_b)


def aligned_copies(p: Problem) -> bool:
    """Whether A and B allow 16-byte copies."""
    return p.vec_a * p.operand_itemsize == 16 and p.vec_b * p.operand_itemsize == 16


def may_run(p: Problem, d) -> bool:
    """Whether any config could run `p` on `d` (the constraints' checks that no config changes):
    Hopper, float32 results, and 16-byte copies of the operands as the kernel reads them, the
    M/N-major float32 ones at best pretransposed (bfloat16 ones are read as they are)."""
    lenient = SimpleNamespace(pretranspose=int(any(mn_major(p)) and not p.bf16_operands), reg_a=0, swap=0)
    return d.compute_capability == "9.0" and p.dtype == "float32" and aligned_copies(kernel_problem(lenient, p))


def k_step(p: Problem) -> int:
    """BK, the K of a stage: a 128-byte row of the operands' type (32 float32, 64 bfloat16)."""
    return STAGE_ROW_BYTES // p.operand_itemsize


def smem_bytes(c, p: Problem) -> int:
    """STAGES stages of the A and B tiles; prepared buffers (one a stage under a producer, else
    2 + INFLIGHT) holding, of each operand, its transposed tile if it is M/N-major and its lo part
    under 3xTF32 (of A, nothing where it is read into registers), or under BF16 its bfloat16 tile
    where it is float32 (bfloat16 operands are read as they land); a producer's three 8-byte
    mbarriers a stage, and a persistent block's one a computing warpgroup; room to align them to
    1024 bytes."""
    a_mn, b_mn = mn_major(p)
    split = c.math == "3xtf32"
    if c.math == "bf16":
        prepared = 0 if p.bf16_operands else (c.bm + c.bn) * k_step(p) * 2
    else:
        a_prepared = 0 if c.reg_a else a_mn + split
        prepared = (a_prepared * c.bm + (b_mn + split) * c.bn) * k_step(p) * p.itemsize
    buffers = c.stages if c.producer else 2 + c.inflight
    barriers = 24 * c.stages + 8 * c.warpgroups * c.persistent if c.producer else 0
    return c.stages * (c.bm + c.bn) * STAGE_ROW_BYTES + buffers * prepared + barriers + SWIZZLE_ALIGN


def m_tiles(c) -> int:
    """64-row wgmma tiles a computing warpgroup holds: its share of the block tile's rows, or under
    `persistent` the whole tile's."""
    return c.bm // (1 if c.persistent else c.warpgroups) // 64


def accumulators(c) -> int:
    """float32 accumulators a thread holds: BN/2 per 64-row wgmma tile of its warpgroup (its share
    of the block tile's rows, or under `persistent` the whole tile's)."""
    return m_tiles(c) * c.bn // 2


CONSTRAINTS = (
    ("wgmma needs sm_90a: a GPU of compute capability 9.0 (Hopper)",
     lambda c, p, d: d.compute_capability == "9.0"),
    ("the wgmma path is float32", lambda c, p, d: p.dtype == "float32"),
    ("math tf32 and bf16 round the operands: for calls at that precision or a lower one",
     lambda c, p, d: serves(MATH_PRECISION[c.math], p.precision)),
    ("bfloat16 operands are multiplied by math bf16", lambda c, p, d: not p.bf16_operands or c.math == "bf16"),
    ("pretranspose copies float32 operands with M or N contiguous for TF32 products: an op with one "
     "(besides an A read into registers), math tf32 or 3xtf32",
     lambda c, p, d: not c.pretranspose or (any(copied_operands(c, p)) and c.math != "bf16")),
    ("reg_a reads an M-major float32 op(A) (A transposed, or B not under swap) into registers for TF32 products: "
     "math tf32 or 3xtf32, wgmmas waited for each stage (inflight 0), one or an even number of 64-row tiles a warpgroup",
     lambda c, p, d: not c.reg_a or (operands_problem(c, p).trans_a and not p.bf16_operands and c.math != "bf16"
                                     and c.inflight == 0 and m_tiles(c) in (1, 2, 4))),
    ("swap makes an N-major op(B) (B not transposed) the register A operand: it needs reg_a",
     lambda c, p, d: not c.swap or c.reg_a),
    ("bfloat16 B with N contiguous (op(B) = B) is read in blocks of 64 columns: BN a multiple of 64",
     lambda c, p, d: not (p.bf16_operands and mn_major(p)[1]) or c.bn % 64 == 0),
    ("a k-tile's wgmmas in flight need a stage beside those loading and computing: stages >= 3",
     lambda c, p, d: c.inflight == 0 or c.stages >= 3),
    ("16-byte copies need A and B 16-byte aligned with leading dimensions a multiple of 16 bytes "
     "(pretranspose makes aligned copies of M/N-major ones)",
     lambda c, p, d: aligned_copies(kernel_problem(c, p))),
    ("each warpgroup's rows BM/warpgroups (BM when persistent) must be a whole number of 64-row wgmma tiles",
     lambda c, p, d: c.bm % (64 * (1 if c.persistent else c.warpgroups)) == 0),
    ("persistent blocks take their tiles' stages from a producer, K unsplit: persistent needs producer 1 and split_k 1",
     lambda c, p, d: not c.persistent or (c.producer and c.split_k == 1)),
    ("at most 128 accumulators per thread (BM/warpgroups/64 * BN/2)", lambda c, p, d: accumulators(c) <= 128),
    ("3xtf32 sums a stage apart and adds it to the accumulators once its wgmmas are done: inflight 0, "
     "at most 64 accumulators per thread (as many sums beside them)",
     lambda c, p, d: c.math != "3xtf32" or (c.inflight == 0 and accumulators(c) <= 64)),
    ("reg_a holds a stage's A fragments beside the accumulators (3xtf32: twice each): at most 128 such registers "
     "a thread in 384 threads, 192 in 256, 160 in 128, 16 fewer in persistent blocks (ptxas spills past them)",
     lambda c, p, d: not c.reg_a or reg_a_registers(c) <= reg_a_budget(c)),
    ("bulk tensor copies (tma) are issued by the producer warpgroup: tma needs producer 1",
     lambda c, p, d: c.producer or not c.tma),
    ("clusters share tiles by multicast bulk tensor copies: cluster_m or cluster_n 2 needs tma 1 and split_k 1",
     lambda c, p, d: clustered(c) <= 1 or (c.tma and c.split_k == 1)),
    ("split-K's reduction beside 128 accumulators a thread spills (nvcc 13.0): at most 96 with split_k > 1",
     lambda c, p, d: c.split_k == 1 or accumulators(c) <= 96),
    ("split-K beside a producer and two computing warpgroups (168 registers a thread): at most 64 accumulators",
     lambda c, p, d: not (c.split_k > 1 and c.producer and c.warpgroups == 2) or accumulators(c) <= 64),
    ("shared memory must fit the device's per-block limit",
     lambda c, p, d: smem_bytes(c, kernel_problem(c, p)) <= d.smem_per_block),
    ("grid rows ceil(M/BM) (N's under swap) must be at most 65535",
     lambda c, p, d: ceil_div(operands_problem(c, p).m, c.bm) <= 65535),
    ("every split-K slice must have some of K", lambda c, p, d: (c.split_k - 1) * k_slice(c, p) < p.k),
)


def reg_a_registers(c) -> int:
    """Registers a thread holds for its accumulators and, under reg_a, a stage's A fragments (4 a
    64-row tile and k8 step; 3xtf32 doubles both: its sums, A's hi and lo)."""
    return (accumulators(c) + 16 * m_tiles(c)) * (2 if c.math == "3xtf32" else 1)


def reg_a_budget(c) -> int:
    """The most registers reg_a_registers may take without ptxas spilling (nvcc 13.0, sm_90a): by the
    block's threads, less in persistent blocks, which keep their tiles' state beside them."""
    return {128: 160, 256: 192}.get(threads(c), 128) - 16 * c.persistent


def clustered(c) -> int:
    """Blocks in a cluster."""
    return c.cluster_m * c.cluster_n


def k_slice(c, p: Problem) -> int:
    """K of each split-K slice: whole stages of K."""
    return ceil_div(p.k, c.split_k * k_step(p)) * k_step(p)


def output_vector(p: Problem) -> int:
    """Elements per store of D: a thread's column pair as one store (8 bytes, 4 in bfloat16) where N
    and the outputs allow."""
    return 2 if p.vec_out >= 2 and p.n % 2 == 0 else 1


def tile_maps(c, p: Problem) -> tuple[TileMap, TileMap]:
    """The tensor maps of A's and B's tiles, as each stage holds them, by the part that one block of
    the `parts` sharing it copies (A's shared along N, B's along M): a K-major operand's tile rows
    of BK k in the 128-byte swizzle, a float32 M/N-major one's BK k-rows of its tile unswizzled; a
    bfloat16 M/N-major one's, or a float32 op(A)'s read into registers, blocks of 128 bytes of rows
    by BK k-rows in the 128-byte swizzle; K-major tiles are parted by rows, M/N-major ones by k-rows."""
    bk = k_step(p)

    def tile(operand: str, rows: int, mn: bool, swizzled: bool, parts: int) -> TileMap:
        if not mn:
            return TileMap(operand, (bk, rows // parts), 128)
        return TileMap(operand, (128 // p.operand_itemsize, bk // parts), 128) if swizzled else \
            TileMap(operand, (rows, bk // parts), 0)
    a_mn, b_mn = mn_major(p)
    return (tile("a", c.bm, a_mn, p.bf16_operands or c.reg_a, c.cluster_n),
            tile("b", c.bn, b_mn, p.bf16_operands, c.cluster_m))


def template_args(c, p: Problem) -> dict:
    """The config and its kernel's problem (kernel_problem); under swap D is written an element at a
    time (a thread's column pairs are D's rows)."""
    p = kernel_problem(c, p)
    return dict(dict(c), trans_a=p.trans_a, trans_b=p.trans_b, bf16_operands=p.bf16_operands, epilogue=p.epilogue,
                use_c=p.use_c, out_vec=1 if c.swap else output_vector(p), bf16_out=p.bf16_out)


def instance_name(c, p: Problem) -> str:
    """Built from the kernel's problem: a pretransposed call runs the K-major call's kernel."""
    p = kernel_problem(c, p)
    name = (f"gemm_wgmma_{'bf16' if p.bf16_operands else 'f32'}_{p.op}_bm{c.bm}_bn{c.bn}_wg{c.warpgroups}_s{c.stages}"
            f"_if{c.inflight}_sk{c.split_k}_p{c.producer}_t{c.tma}_{c.math}")
    if c.reg_a:
        name += "_ra"
    if c.swap:
        name += "_sw"
    if c.persistent:
        name += "_persistent"
    if clustered(c) > 1:
        name += f"_cl{c.cluster_m}x{c.cluster_n}"
    if p.epilogue:
        name += f"_{p.epilogue}"
    if p.use_c:
        name += "_c"
    return name + f"_o{1 if c.swap else output_vector(p)}" + ("_d16" if p.bf16_out else "")


def geometry(c, p: Problem):
    a_mn, b_mn = copied_operands(c, p) if c.pretranspose else (False, False)
    p = kernel_problem(c, p)
    columns, rows = ceil_div(p.n, c.bn), ceil_div(p.m, c.bm)
    split = c.split_k > 1
    # Whole clusters: a block past D's edge still copies its part of the tiles its cluster shares.
    columns, rows = ceil_div(columns, c.cluster_n) * c.cluster_n, ceil_div(rows, c.cluster_m) * c.cluster_m
    if c.persistent:   # the tiles, in clusters along x
        grid, cluster = (columns * rows, 1, 1), (clustered(c), 1, 1)
    else:
        grid, cluster = (columns, rows, c.split_k), (c.cluster_n, c.cluster_m, 1)
    return Geometry(grid=grid, block=(threads(c), 1, 1), cluster=cluster, persistent=c.persistent,
                    smem_bytes=smem_bytes(c, p), workspace_elems=c.split_k * p.m * p.n if split else 0,
                    counters=columns * rows if split else 0, tensor_maps=tile_maps(c, p),
                    transposed=("a",) * a_mn + ("b",) * b_mn, swapped=bool(c.swap))


def default_candidates(p: Problem, d):
    """Sound untuned configs, best first, then more places for the search to start from: the
    heuristics of seeds.py, over this space and these constraints."""
    return seeds.candidates(p, d, PARAMS, CONSTRAINTS, MATH_PRECISION, mn_major(p))
