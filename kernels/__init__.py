"""CUDA kernel templates, one family a folder: `kernels/<name>/` holds its template(s), its module
(`__init__.py`, keeping kernels.contract.KernelFamily), any seeds and includes of its own, and its
measure (`measure.py`, the tuning layer's: operands, reference and launch for timing it).
`kernels/` itself holds what several families share: the contract, the common includes
(common.cuh, bf16.cuh, split_k.cuh) and bf16.py. A new family is its folder and a line in FAMILIES.
"""
from kernels import (adam, colsum, conv2d, conv2d_dgrad, conv2d_dgrad_direct, conv2d_direct, conv2d_wgrad,
                     conv2d_wgrad_direct, dense_stack, elementwise, gemm, gemm_naive, gemm_wgmma, linear_backward,
                     linear_xent, pool2x2, softmax_xent, to_bf16, transpose)
from kernels.contract import KernelFamily

# Every family, in order: where several compute one call, the first listed runs it untuned.
FAMILIES: tuple[KernelFamily, ...] = (
    gemm, gemm_wgmma, gemm_naive, elementwise, softmax_xent, colsum, linear_xent, linear_backward, dense_stack,
    conv2d_direct, conv2d, conv2d_dgrad_direct, conv2d_dgrad, conv2d_wgrad_direct, conv2d_wgrad,
    pool2x2, adam, to_bf16, transpose)

REGISTRY: dict[str, KernelFamily] = {module.NAME: module for module in FAMILIES}


def call_of(family_name: str) -> str:
    """The call that family `family_name` computes: its module's CALL, else its own name."""
    return getattr(REGISTRY[family_name], "CALL", family_name)


# The calls that several families compute with different algorithms (and the same Problem and keys):
# a call runs the one whose tuned record is fastest, the first listed where none is tuned, among
# those whose constraints let them run it on the device; tuning a network's step tunes each where
# it can run.
IMPLEMENTATIONS: dict[str, tuple[str, ...]] = {
    call: names for call in dict.fromkeys(map(call_of, REGISTRY))
    if len(names := tuple(name for name in REGISTRY if call_of(name) == call)) > 1}

