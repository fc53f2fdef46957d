"""Tensor maps for the bulk tensor copies (TMA) of Hopper's kernels, encoded by the CUDA driver's
cuTensorMapEncodeTiled (through ctypes: CuPy does not wrap it) and passed by value.

A kernel's geometry names the maps it takes (kernels.contract.TileMap); the launch binds each to its
array as a TensorMap, and `kernel_args` turns those into the 128 opaque bytes a launch copies.
autogemm/testing/emulator.py passes the same TensorMap to the CPU emulator, which encodes it its own way.
"""
import ctypes
import functools
from dataclasses import dataclass

import numpy as np

from autogemm.errors import AutogemmError

MAP_BYTES, MAP_ALIGN = 128, 64        # a CUtensorMap: 128 opaque bytes, 64-byte aligned
# CUtensorMapDataType of each dtype (the copies move bytes; the type only names their size).
_DATA_TYPE = {np.dtype(np.uint16): 1, np.dtype(np.float32): 7}
_SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}   # CUtensorMapSwizzle by bytes
_L2_PROMOTION_128B = 2


@dataclass(frozen=True)
class TensorMap:
    """A 2-D tiled map of a row-major `array` (its rows `ld` elements apart), copied `box` (inner,
    outer) elements at a time into shared memory in the `swizzle` of that many bytes, zeros past
    its edges."""

    array: object     # a CuPy array (a NumPy one in the emulator)
    ld: int
    box: tuple[int, int]
    swizzle: int

    @property
    def dims(self) -> tuple[int, int]:
        """(elements along a row, rows)."""
        return self.array.shape[1], self.array.shape[0]


def kernel_args(args: tuple) -> tuple:
    """`args` with each TensorMap encoded into the argument that passes its bytes by value."""
    return tuple(_encoded(a.array.data.ptr, a.array.dtype, a.dims, a.ld, a.box, a.swizzle)
                 if isinstance(a, TensorMap) else a for a in args)


@functools.cache
def _driver():
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise AutogemmError(f"tensor maps need the CUDA driver (libcuda.so.1): {exc}") from None
    encode = lib.cuTensorMapEncodeTiled
    u32, u64 = ctypes.c_uint32, ctypes.c_uint64
    encode.argtypes = [ctypes.c_void_p, ctypes.c_int, u32, ctypes.c_void_p, ctypes.POINTER(u64),
                       ctypes.POINTER(u64), ctypes.POINTER(u32), ctypes.POINTER(u32),
                       ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    encode.restype = ctypes.c_int
    return encode


@functools.cache
def map_argument_type():
    """A CuPy CPointer (what a launch copies a parameter from) that keeps its bytes alive."""
    from cupy.cuda.function import CPointer

    class MapArgument(CPointer):
        def __init__(self, storage: np.ndarray, at: int):
            super().__init__(storage.ctypes.data + at)
            self.storage = storage
            self.address = storage.ctypes.data + at     # for a launch by ctypes (runtime/dependent_launch.py)

    return MapArgument


@functools.lru_cache(maxsize=1024)
def _encoded(ptr: int, dtype: np.dtype, dims, ld: int, box, swizzle: int):
    """The launch argument of one map. A map holds only an address and a geometry, so one encoding
    serves every call on the same memory."""
    storage = np.zeros(MAP_BYTES + MAP_ALIGN, np.uint8)
    at = -storage.ctypes.data % MAP_ALIGN
    u32, u64 = ctypes.c_uint32, ctypes.c_uint64
    status = _driver()(storage.ctypes.data + at, _DATA_TYPE[dtype], 2, ptr,
                       (u64 * 2)(*dims), (u64 * 1)(ld * dtype.itemsize), (u32 * 2)(*box),
                       (u32 * 2)(1, 1), 0, _SWIZZLE[swizzle], _L2_PROMOTION_128B, 0)
    if status:
        raise AutogemmError(f"cuTensorMapEncodeTiled failed (CUresult {status}) for a {dims[1]}x{dims[0]} {dtype} "
                          f"array, rows {ld} elements apart, box {box[1]}x{box[0]}, swizzle {swizzle}")
    return map_argument_type()(storage, at)
