"""bfloat16 on the host, as kernels/bf16.cuh computes it on the device: rounding float32 values to
bfloat16 bits (uint16: NumPy and CuPy have no bfloat16) and widening them back."""
import numpy as np


def bf16_bits(x) -> np.ndarray:
    """float32 values rounded to bfloat16 (to nearest even; NaN stays NaN), as the uint16 of their bits."""
    x = np.asarray(x, np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    return np.where(np.isnan(x), (u >> 16) | 0x40, (u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_values(bits) -> np.ndarray:
    """The float64 values of bfloat16 bits (uint16)."""
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
