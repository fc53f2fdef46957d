"""The convolution's backward pass to its input computed directly (conv2d_dgrad_direct.cu.j2): another
implementation of conv2d_dgrad's call, for few channels and filters.

A thread computes whole input pixels for a group of CPT channels: it reads the output gradients
that the pixel fed (F x K x K, neighbouring threads sharing them through L1) and multiplies them with
the group's filter taps, held in shared memory; the layer below's activation derivative is fused,
and its 2 x 2 max-pool's backward pass where the problem has one (each pixel's gradient written to
its window's maximum in the unpooled maps, zeros beside it).
"""
from kernels import conv2d_dgrad, conv2d_direct
from kernels.contract import DTYPES, ITEMSIZE, SHORT, Geometry, ceil_div

NAME = "conv2d_dgrad_direct"
TEMPLATE = "conv2d_dgrad_direct/conv2d_dgrad_direct.cu.j2"
CALL = "conv2d_dgrad"   # another implementation of conv2d_dgrad's call (few channels)

KEY_SIZES = conv2d_dgrad.KEY_SIZES
KEY_OPS = conv2d_dgrad.KEY_OPS
KEY_DTYPES, served_by = conv2d_dgrad.KEY_DTYPES, conv2d_dgrad.served_by   # FP32 FMAs: serve every precision
Problem = conv2d_dgrad.Problem

PARAMS = {
    "threads": (64, 128, 256, 512),   # threads per block, one input pixel each at a time
    "cpt": (1, 2, 3, 4, 6, 8, 12, 16, 32),   # channels per thread (and per block: grid y covers C)
    "ppt": (1, 2, 4),                 # pixels per thread, THREADS apart
}


def weights_bytes(c, p) -> int:
    return c.cpt * p.depth * ITEMSIZE[p.dtype]


CONSTRAINTS = (
    ("threads per block must fit the device", lambda c, p, d: c.threads <= d.max_threads_per_block),
    ("the group's taps must fit shared memory", lambda c, p, d: weights_bytes(c, p) <= d.smem_per_block),
    ("CPT must not exceed the channels rounded up to a choice", lambda c, p, d: c.cpt < 2 * p.c or c.cpt == 1),
    ("grid rows ceil(C/CPT) at most 65535", lambda c, p, d: ceil_div(p.c, c.cpt) <= 65535),
)


def default_candidates(p, d):
    """Every channel in one group where it fits in 16, else groups of 16 or fewer; 256 threads, 2 pixels each."""
    for cpt in conv2d_direct.groups_first(PARAMS["cpt"], p.c, 16):
        for threads, ppt in ((256, 2), (128, 1)):
            yield dict(threads=threads, cpt=cpt, ppt=ppt)


def template_args(c, p) -> dict:
    grad = {None: "none", "relu": "drelu", "sigmoid": "dsigmoid"}[p.activation]
    return dict(c, ctype=DTYPES[p.dtype], channels=p.c, height=p.h, width=p.w, filters=p.f, kernel=p.k, epilogue=grad,
                pool=p.pool)


def instance_name(c, p) -> str:
    return (f"{NAME}_{SHORT[p.dtype]}_c{p.c}_h{p.h}_w{p.w}_f{p.f}_k{p.k}_{p.activation or 'linear'}"
            f"{'_pool' if p.pool else ''}_t{c.threads}_c{c.cpt}_p{c.ppt}")


def geometry(c, p) -> Geometry:
    return Geometry(grid=(ceil_div(p.m, c.threads * c.ppt), ceil_div(p.c, c.cpt), 1), block=(c.threads, 1, 1),
                    smem_bytes=weights_bytes(c, p))


flops = conv2d_dgrad.flops
key_of = conv2d_dgrad.key_of
problem_of = conv2d_dgrad.problem_of
reference = conv2d_dgrad.reference
