"""Trainer backends by name: `get_backend("numpy", "float64")`.

"numpy" is the reference and runs everywhere; "cupy" runs autogemm's kernels on a GPU (CUDA-graph
capturable), "cublas" is the CuPy + cuBLAS baseline. Modules are imported on first use, so asking
for NumPy never imports CuPy.
"""
import importlib

from nn.backends.base import ACTIVATIONS, DTYPES, EPILOGUES, PRECISIONS, Backend
from nn.errors import NNError

__all__ = ["ACTIVATIONS", "BACKENDS", "DTYPES", "EPILOGUES", "PRECISIONS", "Backend", "cuda_available", "get_backend"]

# name -> "module:class"
BACKENDS = {
    "numpy": "nn.backends.numpy_backend:NumpyBackend",
    "cupy": "nn.backends.cupy_backend:CupyBackend",
    "cublas": "nn.backends.cublas_backend:CublasBackend",
}


def get_backend(name: str, dtype, **options) -> Backend:
    """An instance of backend `name` computing in `dtype`; `options` go to its constructor."""
    if name not in BACKENDS:
        raise NNError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    module, cls = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), cls)(dtype, **options)


def cuda_available() -> bool:
    """Whether CuPy imports and sees at least one CUDA device."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no CuPy, no driver, no device: all mean "no"
        return False
