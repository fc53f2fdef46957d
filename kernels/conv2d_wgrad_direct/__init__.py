"""The convolution's backward pass to its weights and bias computed directly
(conv2d_wgrad_direct.cu.j2): another implementation of conv2d_wgrad's call, for few channels and filters.

Block (slice, c, group) sums over one slice of the batch's output pixels the products of a group of
FPT filters' output gradients with input channel c's K x K window: each thread keeps FPT x (K*K + 1)
sums in registers (the last column: the bias), one pixel at a time, then the block adds its threads'
sums and the last slice to finish adds every slice's in slice order (the same sums on every run).
"""
from kernels import conv2d_direct, conv2d_wgrad
from kernels.contract import DTYPES, ITEMSIZE, SHORT, Geometry, ceil_div

NAME = "conv2d_wgrad_direct"
TEMPLATE = "conv2d_wgrad_direct/conv2d_wgrad_direct.cu.j2"
CALL = "conv2d_wgrad"   # another implementation of conv2d_wgrad's call (few channels and filters)

KEY_SIZES = conv2d_wgrad.KEY_SIZES
KEY_OPS = conv2d_wgrad.KEY_OPS
KEY_DTYPES, served_by = conv2d_wgrad.KEY_DTYPES, conv2d_wgrad.served_by   # FP32 FMAs: serve every precision
Problem = conv2d_wgrad.Problem

PARAMS = {
    "threads": (64, 128, 256, 512),       # threads per block
    "fpt": (1, 2, 4, 6, 8, 10, 12, 16),   # filters per block, every thread summing each
    "split_k": (1, 4, 16, 32, 64, 128, 256, 512, 1024),   # slices of the output pixels
}


def sums(c, p) -> int:
    """Sums a thread keeps: FPT filters x (K*K taps + the bias)."""
    return c.fpt * (p.k * p.k + 1)


def registers_estimate(c, p) -> int:
    """32-bit registers a thread needs: its sums and the window in the element type, ~32 for the rest."""
    return ITEMSIZE[p.dtype] // 4 * (sums(c, p) + p.k * p.k) + 32


def slice_pixels(c, p) -> int:
    return ceil_div(p.depth, c.split_k)


CONSTRAINTS = (
    ("threads per block must fit the device", lambda c, p, d: c.threads <= d.max_threads_per_block),
    ("a thread's FPT x (K*K + 1) sums must fit its registers (at most 128)", lambda c, p, d: sums(c, p) <= 128),
    ("the sums, the K x K window and ~32 for addresses must fit a thread's registers (224, and the block's file)",
     lambda c, p, d: registers_estimate(c, p) <= min(224, d.regs_per_block // c.threads)),
    ("FPT must not exceed the filters rounded up to a choice", lambda c, p, d: c.fpt < 2 * p.f or c.fpt == 1),
    ("every slice must hold at least one pixel a thread", lambda c, p, d: slice_pixels(c, p) >= c.threads
     or c.split_k == 1),
    ("grid: C and ceil(F/FPT) at most 65535", lambda c, p, d: max(p.c, ceil_div(p.f, c.fpt)) <= 65535),
)


def default_candidates(p, d):
    """All filters a block where their sums fit, 256 threads, about 2 blocks an SM."""
    fits = [v for v in PARAMS["fpt"] if v * (p.k * p.k + 1) <= 128]
    for fpt in conv2d_direct.groups_first(fits, p.f, fits[-1]):
        tiles = p.c * ceil_div(p.f, fpt)
        for threads in (256, 128):
            for split in sorted(PARAMS["split_k"], key=lambda s: abs(s * tiles - 2 * d.sm_count)):
                if split == 1 or ceil_div(p.depth, split) >= threads:
                    yield dict(threads=threads, fpt=fpt, split_k=split)
                    break


def template_args(c, p) -> dict:
    return dict(c, ctype=DTYPES[p.dtype], channels=p.c, height=p.h, width=p.w, filters=p.f, kernel=p.k)


def instance_name(c, p) -> str:
    return (f"{NAME}_{SHORT[p.dtype]}_c{p.c}_h{p.h}_w{p.w}_f{p.f}_k{p.k}"
            f"_t{c.threads}_f{c.fpt}_sk{c.split_k}")


def geometry(c, p) -> Geometry:
    grid = (c.split_k, p.c, ceil_div(p.f, c.fpt))
    split = c.split_k > 1
    return Geometry(grid=grid, block=(c.threads, 1, 1), smem_bytes=(c.threads // 32) * sums(c, p) * ITEMSIZE[p.dtype],
                    workspace_elems=c.split_k * grid[1] * grid[2] * sums(c, p) if split else 0,
                    counters=grid[1] * grid[2] if split else 0)


flops = conv2d_wgrad.flops
key_of = conv2d_wgrad.key_of
problem_of = conv2d_wgrad.problem_of
reference = conv2d_wgrad.reference
