"""The GEMM family's untuned configs: the default, and the search's first trials (its module,
__init__.py, declares the space and the constraints; the heuristics that pick points of it live
here, apart).

Each config is a plain dict of gemm parameters; the runtime keeps the first one the constraints
accept as the default, and the search tries all that are valid first.
"""
import itertools

from kernels.contract import block_waves, ceil_div, keeps, split_for

# Block shapes for the default, largest first: (bm, bn, ty, tx, tm, tn, copy, bk, stages).
_DEFAULT_TILES = (
    (128, 128, 16, 16, 4, 4, "regs", 8, 2),
    (128, 64, 16, 16, 4, 2, "regs", 16, 2),
    (64, 64, 8, 16, 4, 2, "async", 16, 3),
    (64, 32, 16, 8, 4, 4, "async", 32, 3),
    (32, 32, 8, 8, 4, 4, "async", 32, 3),
    (16, 16, 4, 8, 4, 2, "async", 32, 4),
)


# Block tiles of the tensor-core seeds: (bm, bn, ty, tx).
_TC_TILES = ((128, 64, 16, 8), (64, 128, 8, 16), (64, 64, 16, 8))


def candidates(p, d, params: dict, constraints: tuple):
    """Sound configs without tuning, best guess first (autogemm takes the first valid one):
    at precision tf32 or bf16, TF32 MMAs on a 128x64 tile (where it cannot run, the tile of the
    fullest waves; 64x64 where 128x64 tiles leave half the SMs idle), K split where the tiles busy
    at most a quarter of the SMs; at fp32, where K is not long against the output, 3xTF32 on the
    same tiles; else FMAs on the largest tile that still gives every SM a block (with K long against
    the output, counting up to 16 slices of K); where its tiles leave SMs idle, split-K up to two
    blocks per SM while each slice keeps at least 64 of K; then smaller and plainer fallbacks. Then
    more places for the search to start from. The tiles, BK and stages are those that won sweeps
    and searches of the MLP's shapes and 4096^3 (benchmarks/)."""
    vec = min(4, 16 // p.itemsize, p.vec_a, p.vec_b)
    # float32 where K is not long against the output: 3xTF32 first, as accurate as FMAs (more: an
    # FMA kernel sums K in one sequence, past the FP32-accurate bound on skinny shapes) and faster
    # where 128x64 tiles give half the SMs a block (benchmarks/issue40-fp32-error); the constraints
    # drop it where it cannot run (float64, GPUs before tensor cores took TF32). At tf32 or bf16,
    # TF32 products, at several times FMAs' rate, on any float32 shape.
    math = "3xtf32" if p.precision == "fp32" else "tf32"   # the tensor-core math of the call's precision
    fill_half = 2 * ceil_div(p.m, _TC_TILES[0][0]) * ceil_div(p.n, _TC_TILES[0][1]) >= d.sm_count   # 128x64
    if p.itemsize == 4 and (math == "tf32" or p.k < 8 * max(p.m, p.n)):
        # Where 128 x 64 tiles fill half the SMs but cannot run (unaligned rows: 4-byte copies take
        # more registers than 128 threads have), the tile that fills the SMs in the fewest, fullest
        # waves (on 1023x1025x1027, 128 x 80 in 256 threads: what the search found, 1.09x cuBLAS
        # FP32's time against 1.49x for 64 x 64 tiles: benchmarks/issue40-h200); else 64 x 64 tiles.
        # K is split as gemm_wgmma splits it (split_for), where the whole tile's registers allow.
        for tile in _tc_tiles(p, d, params, constraints, fill_half):
            split = split_for(tile[0], tile[1], p, d, params["split_k"])
            for s in dict.fromkeys((split, 1)):        # whole where the split's sums take too many registers
                yield _tc_seed(*tile, vec, s, math)
    # Where K is long against the output (8 times its longer side), the tile that fills the SMs in
    # at most 16 slices of K, not in tiles alone: tiny tiles in one slice ran 256x256x8192 at 2.7x
    # cuBLAS's time and 9x its error (benchmarks/issue39-h100/first-calls).
    slices = 16 if p.k >= 8 * max(p.m, p.n) else 1
    chosen = next((t for t in _DEFAULT_TILES
                   if ceil_div(p.m, t[0]) * ceil_div(p.n, t[1]) * slices >= d.sm_count), _DEFAULT_TILES[-1])
    start = _DEFAULT_TILES.index(chosen)
    for bm, bn, ty, tx, tm, tn, copy, bk, stages in _DEFAULT_TILES[start:]:
        tiles = ceil_div(p.m, bm) * ceil_div(p.n, bn)
        split = 1
        while tiles < d.sm_count and tiles * split < 2 * d.sm_count and p.k // (2 * split) >= 64 and split < 16:
            split *= 2
        big = bm * bn >= 128 * 128
        bk = 8 if p.itemsize == 8 else bk
        for s in dict.fromkeys((split, 1)):
            yield dict(bm=bm, bn=bn, bk=max(bk, vec), ty=ty, tx=tx, tm=tm, tn=_tn(tn, copy, p), vec=vec,
                       copy=copy, stages=stages, split_k=s, pad=not big, math="fma")
    # Where the search starts as well: 3-stage cp.async pipelines on the chosen tile and the next
    # larger one, and on cuBLAS's mid-size tiles (128x64 and 64x128, 128 threads of 8x8, H100 ncu),
    # whole or split in two.
    tiles = [t[:6] for t in _DEFAULT_TILES[max(0, start - 1):start + 1]]
    tiles += [(128, 64, 16, 8, 4, 4), (64, 128, 8, 16, 4, 4)]
    for (bm, bn, ty, tx, tm, tn), bk, split in itertools.product(tiles, (16, 32), (1, 2)):
        if split == 1 or bm * bn == 128 * 64:
            yield dict(bm=bm, bn=bn, bk=bk, ty=ty, tx=tx, tm=tm, tn=_tn(tn, "async", p), vec=vec,
                       copy="async", stages=3, split_k=split, pad=True, math="fma")
    # The tensor-core math, where the dtype and GPU allow (the constraints drop them elsewhere):
    # warp tiles of 64x32 and 32x32 on the mid-size block tiles, whole or split in two; then the
    # tiles that fill the SMs in the fewest, fullest waves.
    for tile, split in itertools.product(_TC_TILES, (1, 2)):
        yield _tc_seed(*tile, vec, split, math)
    for tile in wave_tiles(p, d, params, constraints):
        yield _tc_seed(*tile, vec, 1, math)


def _tc_tiles(p, d, params: dict, constraints: tuple, fill_half: bool):
    """The untuned tensor-core block tiles (bm, bn, ty, tx), best first: where 128 x 64 tiles fill
    half the SMs, that tile, then the fullest waves' (wave_tiles, only reached where 128 x 64
    cannot run); then 64 x 64."""
    if fill_half:
        yield _TC_TILES[0]
        yield from wave_tiles(p, d, params, constraints, 1)
    yield _TC_TILES[2]


def _tc_seed(bm: int, bn: int, ty: int, tx: int, vec: int, split: int = 1, math: str = "3xtf32") -> dict:
    """A tensor-core config (3xtf32 or tf32) on a block tile: BK 32, a 3-stage cp.async pipeline."""
    return dict(bm=bm, bn=bn, bk=32, ty=ty, tx=tx, tm=1, tn=2, vec=vec, copy="async", stages=3,
                split_k=split, pad=True, math=math)


# Thread blocks (TY, TX) of the tensor-core seeds: 4 and 8 warps of 8 x 4 threads.
_TC_BLOCKS = ((16, 8), (8, 16), (16, 16), (32, 8), (8, 32))


def wave_tiles(p, d, params: dict, constraints: tuple, count: int = 2) -> list[tuple[int, int, int, int]]:
    """Tensor-core block tiles (bm, bn, ty, tx) that can run `p` and keep the busiest SM's work least,
    one block an SM: fewest waves x tile area (128x64 tiles of 800x1000 are one wave of 8192
    outputs an SM, 64x112 tiles one of 7168). Warp tiles of at least 32 x 32, as large as the other
    seeds' (smaller ones read more shared memory per MMA). Ties go to fewer waves, then to squarer
    warp tiles; `count` tiles, each with its best thread block."""
    vec = min(4, 16 // p.itemsize, p.vec_a, p.vec_b)
    best = {}
    for bm, bn, (ty, tx) in itertools.product(params["bm"], params["bn"], _TC_BLOCKS):
        wm, wn = bm * 8 // ty, bn * 4 // tx              # the warp tile
        if min(wm, wn) < 32 or not keeps(constraints, _tc_seed(bm, bn, ty, tx, vec), p, d):
            continue
        waves = block_waves(bm, bn, p, d)
        rank = (waves * bm * bn, waves, max(wm, wn) / min(wm, wn))
        if (bm, bn) not in best or rank < best[bm, bn][0]:
            best[bm, bn] = (rank, (bm, bn, ty, tx))
    return [tile for _, tile in sorted(best.values())[:count]]


def _tn(tn: int, copy: str, p) -> int:
    """TN 1 where B is K-major in shared memory: its fragment reads then hit distinct banks."""
    return 1 if copy == "async" and p.trans_b else tn
