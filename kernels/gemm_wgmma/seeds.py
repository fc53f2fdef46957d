"""Hopper GEMM's untuned configs: the default, and the search's first trials (the family's module
declares the space and the constraints; the heuristics that pick points of it live here, apart).
"""
import dataclasses
import itertools

from kernels.contract import ceil_div, keeps, split_for
from kernels.gemm.call import serves


def candidates(p, d, params: dict, constraints: tuple, math_precision: dict, mn_major: tuple[bool, bool]):
    """Tiles by the work of the busiest SM (busiest_sm_cost: its whole waves of blocks, each
    costing its products and its loads, over its slice of K), larger tiles first among equals; for each math and
    pretranspose in turn, every tile's first config that fits before any tile's second (the search
    seeds itself with the first few: tiles, not stage counts, matter most).
    A tile's configs: the most stages that fit first, two warpgroups before one, a producer copying
    by TMA before the one loop before a producer copying by cp.async, wgmmas in flight before not,
    K unsplit unless its tiles leave most SMs idle (split_for), M/N-major float32 operands read into
    registers first (reg_a, swap), then pretransposed or not as the math prefers; bfloat16 operands
    take bf16 products, float32 ones the maths their precision allows, fastest first as measured (bf16's rounding pass costs more than its k16 products save:
    benchmarks/issue18-h100/ops-bf16). Where 128 x 128 tiles outnumber the SMs, persistent blocks
    of them follow the first few (alone, in 1 x 2 and 2 x 1 clusters), which won with a fused
    epilogue (benchmarks/issue18-h100/persistent). Whole waves: on 4096 x 784 the default is
    128 x 224 and the second 256 x 112, both one wave, faster than 128 x 128 tiles in 1.7 waves
    (benchmarks/issue18-h100/widths). `params`, `constraints`, `math_precision` are the family's,
    `mn_major` whether op(A), op(B) have M, N contiguous."""
    first = []          # the first four that run
    for c in _one_tile_a_block(p, d, params, constraints, math_precision, mn_major):
        yield c
        if len(first) < 4 and keeps(constraints, c, p, d):
            first.append(c)
            if len(first) == 4 and ceil_div(p.m, 128) * ceil_div(p.n, 128) > d.sm_count:
                yield from _persistent_seeds(first[0], p, d, params, constraints)


def _persistent_seeds(like: dict, p, d, params: dict, constraints: tuple):
    """Persistent 128 x 128 blocks with `like`'s math and copies of operands, each with the most
    stages that fit; no operand in registers (their fragments do not fit beside 128 x 128 tiles'
    accumulators in two warpgroups)."""
    like = dict(like, reg_a=0, swap=0)
    for (cluster_m, cluster_n), inflight in itertools.product(((1, 2), (1, 1), (2, 1)), (1, 0)):
        seed = _first_fitting((dict(like, bm=128, bn=128, warpgroups=2, stages=stages, inflight=inflight, producer=1,
                                    tma=1, cluster_m=cluster_m, cluster_n=cluster_n, persistent=1)
                               for stages in reversed(params["stages"])), p, d, constraints)
        if seed is not None:
            yield seed


def _first_fitting(configs, p, d, constraints: tuple) -> dict | None:
    """The first of `configs` that keeps every constraint, or None."""
    return next((c for c in configs if keeps(constraints, c, p, d)), None)


# Per k-step a block costs its BM x BN products and about this many more per row and column of the
# operands it loads: fitted to 128 x 256 against 128 x 128 tiles' rates on 8192x4096x784
# (benchmarks/issue18-h100/persistent). The tiled family's seeds weigh waves alike, without
# the loads (kernels/gemm/seeds.py, wave_tiles).
LOAD_COST = 35


def busiest_sm_cost(bm: int, bn: int, p, d, split: int = 1) -> float:
    """The busiest SM's work, one BM x BN block an SM at a time: its whole waves of blocks (of each
    slice of K) times a block's cost per k-step (products and LOAD_COST) times the steps of a slice."""
    waves = ceil_div(ceil_div(p.m, bm) * ceil_div(p.n, bn) * split, d.sm_count)
    return waves * (bm * bn + LOAD_COST * (bm + bn)) * p.k / split


def _one_tile_a_block(p, d, params: dict, constraints: tuple, math_precision: dict, mn_major: tuple[bool, bool]):
    """candidates' configs of blocks that take one tile each, in its order."""
    def tiles_of(q):   # the block tiles of problem q, cheapest first, and each one's split of K
        splits = {(bm, bn): split_for(bm, bn, q, d, params["split_k"])
                  for bm, bn in itertools.product(params["bm"], params["bn"])}
        return sorted(splits, key=lambda t: (busiest_sm_cost(*t, q, d, splits[t]), -t[0] * t[1])), splits
    # a swapped kernel's tiles cover its M, the call's N
    tiles_splits = {0: tiles_of(p), 1: tiles_of(dataclasses.replace(p, m=p.n, n=p.m))}
    maths = ["bf16"] if p.bf16_operands else [m for m in ("tf32", "bf16", "3xtf32")
                                              if serves(math_precision[m], p.precision)]
    # (producer, tma): a producer copying by TMA first, faster than both other pipelines on 13 of the
    # 15 records of the networks' GEMMs (benchmarks/issue18-h100/tma); then the one loop.
    pipelines = ((1, 1), (0, 0), (1, 0))
    # M/N-major operands pretransposed first under TF32 products, last under 3xTF32, whose
    # producer has the split to prepare anyway (benchmarks/issue18-h100/pretranspose). Before both,
    # an M-major float32 op(A) read into registers (reg_a), beside a producer only: on 11 such
    # shapes its first candidates took 0.49x-1.22x cuBLAS FP32's time against the default's
    # 0.63x-1.61x under 3xTF32, under TF32 0.64x-1.68x against 0.84x-2.06x (slower on 4096^3 alone,
    # whose 128 x 256 tiles cannot hold the fragments beside their accumulators), and the one loop
    # 1.2x-2.2x slower than a producer (benchmarks/issue40-h200/reg-a).
    # An N-major op(B) likewise, the kernel computing D^T (swap): first where op(A) is K-major,
    # and where both are M/N-major whichever leaves the smaller operand to transpose; but last under
    # TF32 products on outputs of more than 2^22 elements, where writing D transposed and the smaller
    # tiles that hold the fragments cost more than the copy saves (4096^3 and 8192x8192x256 nn:
    # 1.43x cuBLAS TF32's time against 1.28x and 1.23x; 1024^3 nn 1.02x against 1.29x; 3xTF32 faster
    # on every nn shape measured: benchmarks/issue40-h100/swap).
    pretransposes = {"tf32": (1, 0), "3xtf32": (0, 1), "bf16": (0,)} if any(mn_major) else {}
    for math in maths:
        operand_paths = [(pretranspose, 0, 0) for pretranspose in pretransposes.get(math, (0,))]
        if not p.bf16_operands and math != "bf16":
            swaps = [swap for swap, mn in enumerate(mn_major) if mn]   # 0: op(A) in registers, 1: op(B)
            if p.m < p.n:
                swaps.reverse()
            late = math == "tf32" and p.m * p.n > 2**22                 # swap after the copies
            registers = [(pretranspose, 1, swap) for swap in swaps for pretranspose in pretransposes[math]]
            operand_paths = ([path for path in registers if not (late and path[2])] + operand_paths
                             + [path for path in registers if late and path[2]])
        for pretranspose, reg_a, swap in operand_paths:
            tiles, splits = tiles_splits[swap]
            configs = [[{"bm": bm, "bn": bn, "warpgroups": warpgroups, "stages": stages, "math": math,
                         "inflight": inflight, "split_k": splits[bm, bn], "producer": producer, "tma": tma,
                         "pretranspose": pretranspose, "reg_a": reg_a, "swap": swap, "cluster_m": 1,
                         "cluster_n": 1, "persistent": 0}
                        for warpgroups, (producer, tma), stages, inflight in itertools.product(
                            (2, 1), pipelines[:1] + pipelines[2:] if reg_a else pipelines, reversed(params["stages"]),
                            (1, 0))]
                       for bm, bn in tiles]
            firsts = [_first_fitting(tile, p, d, constraints) for tile in configs]
            yield from (c for c in firsts if c is not None)
            yield from (c for tile, first in zip(configs, firsts) for c in tile if c is not first)
