"""CUDA kernel templates, one family per `<name>.cu.j2` and `<name>.py`: the registry of families.

Every family module keeps the contract of kernels.contract.KernelFamily; a new family is a template,
a module, and a line here.
"""
from kernels import (adam, colsum, conv2d, conv2d_dgrad, conv2d_dgrad_direct, conv2d_direct, conv2d_wgrad,
                     conv2d_wgrad_direct, elementwise, gemm, gemm_naive, gemm_wgmma, linear_backward, linear_xent,
                     pool2x2, softmax_xent, to_bf16, transpose)
from kernels.contract import KernelFamily

REGISTRY: dict[str, KernelFamily] = {
    module.NAME: module for module in (gemm, gemm_naive, gemm_wgmma, elementwise, softmax_xent, colsum, linear_xent,
                                       linear_backward, conv2d,
                                       conv2d_dgrad, conv2d_wgrad, conv2d_direct, conv2d_dgrad_direct,
                                       conv2d_wgrad_direct, pool2x2, adam, to_bf16, transpose)}

# Families that compute the same call with different algorithms (and the same Problem and keys): a
# call runs the one whose tuned record is fastest, the first where none is tuned, among those whose
# constraints let them run it on the device; tuning a network's step tunes each where it can run.
IMPLEMENTATIONS: dict[str, tuple[str, ...]] = {
    "gemm": ("gemm", "gemm_wgmma"),         # gemm_wgmma: Hopper, float32 with 16-byte rows
    "conv2d": ("conv2d_direct", "conv2d"),
    "conv2d_dgrad": ("conv2d_dgrad_direct", "conv2d_dgrad"),
    "conv2d_wgrad": ("conv2d_wgrad_direct", "conv2d_wgrad"),
}


def call_of(family_name: str) -> str:
    """The call that family `family_name` computes: its key in IMPLEMENTATIONS, else its own name."""
    return next((call for call, names in IMPLEMENTATIONS.items() if family_name in names), family_name)
