"""The naive GEMM family (gemm_naive.cu.j2): one thread per output, the baseline and second reference.

It takes the same arguments and Problem as the tiled family, so either launches the same way.
"""
from kernels.contract import DTYPES, SHORT, Geometry, ceil_div
from kernels.gemm.call import (EPILOGUES, KEY_DTYPES, KEY_OPS, KEY_SIZES, Problem, flops, key_of,  # noqa: F401  (same problem,
                               problem_of, reference)                                # same work, keys, reference)

NAME = "gemm_naive"
TEMPLATE = "gemm_naive/gemm_naive.cu.j2"
BASELINE = True   # a reference: no call runs it, and a network's tuning leaves it out

PARAMS = {
    "by": (1, 2, 4, 8, 16, 32),   # thread-block shape: BY x BX threads, one per output
    "bx": (8, 16, 32, 64, 128),
}

CONSTRAINTS = (
    ("bfloat16 operands are read by gemm_wgmma alone", lambda c, p, d: not p.bf16_operands),
    ("a bfloat16 D is written by gemm_wgmma alone", lambda c, p, d: not p.bf16_out),
    ("threads per block must be a multiple of 32 and at most 1024",
     lambda c, p, d: (c.by * c.bx) % 32 == 0 and c.by * c.bx <= min(1024, d.max_threads_per_block)),
    ("grid rows ceil(M/BY) must be at most 65535", lambda c, p, d: ceil_div(p.m, c.by) <= 65535),
)


def template_args(c, p: Problem) -> dict:
    return dict(dict(c), ctype=DTYPES[p.dtype], trans_a=p.trans_a, trans_b=p.trans_b,
                epilogue=p.epilogue, use_c=p.use_c)


def instance_name(c, p: Problem) -> str:
    dt = SHORT[p.dtype]
    name = f"gemm_naive_{dt}_{p.op}_by{c.by}_bx{c.bx}"
    if p.epilogue:
        name += f"_{p.epilogue}"
    return name + ("_c" if p.use_c else "")


def geometry(c, p: Problem) -> Geometry:
    return Geometry(grid=(ceil_div(p.n, c.bx), ceil_div(p.m, c.by), 1), block=(c.by * c.bx, 1, 1))


def default_candidates(p: Problem, d):
    yield dict(by=8, bx=32)
