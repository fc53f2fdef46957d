"""The forward convolution computed directly (conv2d_direct.cu.j2): another implementation of
conv2d's call, for few channels and filters, where an implicit GEMM's tiles are mostly gather.

A thread computes whole output pixels for a group of FPT filters: it reads each pixel's C x K x K
receptive field once (neighbouring threads share it through L1) and multiplies it with the group's
filters, held in shared memory and read by every thread at once (broadcast). With a fused 2 x 2
max-pool a thread's pixel is a window of four, whose (K+1) x (K+1) field it reads once.
"""
from kernels import conv2d
from kernels.contract import DTYPES, ITEMSIZE, SHORT, Geometry, ceil_div

NAME = "conv2d_direct"
TEMPLATE = "conv2d_direct/conv2d_direct.cu.j2"
CALL = "conv2d"   # another implementation of conv2d's call (few channels)

KEY_SIZES = conv2d.KEY_SIZES
KEY_OPS = conv2d.KEY_OPS
KEY_DTYPES, served_by = conv2d.KEY_DTYPES, conv2d.served_by   # FP32 FMAs: serve every precision
Problem = conv2d.Problem

PARAMS = {
    "threads": (64, 128, 256, 512),   # threads per block, one output pixel each at a time
    "fpt": (1, 2, 4, 6, 8, 10, 12, 16, 32),   # filters per thread (and per block: grid y covers F)
    "ppt": (1, 2, 4),                 # pixels per thread, THREADS apart
}


def weights_bytes(c, p) -> int:
    return c.fpt * (p.depth + 1) * ITEMSIZE[p.dtype]


def pixels(p) -> int:
    """A thread's pixels in all: the output's, or with a fused pool the pooled output's."""
    return p.n * p.pooled[0] * p.pooled[1] if p.pool else p.m


def window(p) -> int:
    """Pixels a thread computes at once: a 2 x 2 window with a fused pool, else one."""
    return 4 if p.pool else 1


CONSTRAINTS = (
    ("threads per block must fit the device", lambda c, p, d: c.threads <= d.max_threads_per_block),
    ("the group's filters must fit shared memory", lambda c, p, d: weights_bytes(c, p) <= d.smem_per_block),
    ("a thread's accumulators must fit its registers (FPT at most 32)", lambda c, p, d: c.fpt <= 32),
    ("FPT must not exceed the filters rounded up to a choice", lambda c, p, d: c.fpt < 2 * p.f or c.fpt == 1),
    ("grid rows ceil(F/FPT) at most 65535", lambda c, p, d: ceil_div(p.f, c.fpt) <= 65535),
    ("one channel, several pixels a thread: the group's FPT x K x K taps, which the pixels share, must fit "
     "in registers beside the accumulators (ptxas 13 holds them there, and spilled 1-3 KB past: 16 filters "
     "of 5 x 5 ran 8.4x cuDNN's time)",
     lambda c, p, d: p.c > 1 or c.ppt == 1 or ITEMSIZE[p.dtype] // 4 * c.fpt * (p.k * p.k + c.ppt * window(p)) + 32
     <= min(255, d.regs_per_block // c.threads)),
    ("a fused pool's 4 x FPT accumulators must fit a thread's registers: FPT at most 16, 8 in float64",
     lambda c, p, d: not p.pool or c.fpt <= (16 if ITEMSIZE[p.dtype] == 4 else 8)),
    ("float64: at most 8 filters a thread and 256 threads (ptxas 13 capped such threads at 128 registers and spilled)",
     lambda c, p, d: ITEMSIZE[p.dtype] == 4 or (c.fpt <= 8 and c.threads <= 256)),
)


def groups_first(choices, size: int, widest: int) -> list[int]:
    """Group sizes, best guess first: those that hold min(size, widest) in one group, closest first,
    then the smaller ones, closest first."""
    want = min(size, widest)
    return sorted(choices, key=lambda v: (v < want, abs(v - want)))


def default_candidates(p, d):
    """Every filter in one group where it fits in 16, else groups of 16 or fewer; 256 threads, 2 pixels each."""
    for fpt in groups_first(PARAMS["fpt"], p.f, 16):
        for threads, ppt in ((256, 2), (128, 1)):
            yield dict(threads=threads, fpt=fpt, ppt=ppt)


def template_args(c, p) -> dict:
    epilogue = "bias" if p.activation is None else f"bias_{p.activation}"
    return dict(c, ctype=DTYPES[p.dtype], channels=p.c, height=p.h, width=p.w, filters=p.f, kernel=p.k,
                epilogue=epilogue, pool=p.pool)


def instance_name(c, p) -> str:
    return (f"{NAME}_{SHORT[p.dtype]}_c{p.c}_h{p.h}_w{p.w}_f{p.f}_k{p.k}_{p.activation or 'linear'}"
            f"{'_pool' if p.pool else ''}_t{c.threads}_f{c.fpt}_p{c.ppt}")


def geometry(c, p) -> Geometry:
    return Geometry(grid=(ceil_div(pixels(p), c.threads * c.ppt), ceil_div(p.f, c.fpt), 1), block=(c.threads, 1, 1),
                    smem_bytes=weights_bytes(c, p))


flops = conv2d.flops
key_of = conv2d.key_of
problem_of = conv2d.problem_of
reference = conv2d.reference
