"""torch tensors as autogemm's calls take them: checked, viewed as CuPy arrays without a copy
(DLPack), and the work put on torch's current stream and device with CuPy's allocations drawn from
torch's allocator, so that it orders with torch's own kernels and a `torch.cuda.graph` captures it
(what autogemm allocates inside a capture comes from the graph's private pool)."""
import contextlib

from autogemm.errors import AutogemmError, BadArguments
from autogemm.runtime.device import require_cupy

FLOATS = ("float32", "float64")


def require_torch():
    """The torch module, or an AutogemmError that says what to install."""
    try:
        import torch
    except ImportError:
        raise AutogemmError("autogemm.torch needs PyTorch, which is not installed: pip install 'autogemm[torch]'") \
            from None
    return torch


def check(call: str, tensors: dict, dtype=None):
    """BadArguments unless each named tensor (None skipped) is a torch.Tensor on one CUDA device,
    in float32 or float64, all of one dtype (`dtype` where given)."""
    torch = require_torch()
    device = None
    for name, t in tensors.items():
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise BadArguments(f"{call}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.device.type != "cuda":
            raise BadArguments(f"{call}: {name} is on {t.device}; autogemm's kernels run on CUDA tensors "
                               f"(move it with .cuda(), or keep torch's own layer for the CPU)")
        dtype = dtype or t.dtype
        if str(t.dtype).removeprefix("torch.") not in FLOATS or t.dtype != dtype:
            raise BadArguments(f"{call}: {name} must be float32 or float64 like the others, got "
                               f"{str(t.dtype).removeprefix('torch.')}")
        if device is not None and t.device != device:
            raise BadArguments(f"{call}: {name} is on {t.device}, the others on {device}; give one device")
        device = t.device


class _Unsynchronized:
    """A tensor exported through DLPack with no stream synchronisation: the caller works on the
    tensor's own stream already (on_current_stream)."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, **kwargs):
        return self.t.__dlpack__(**{**kwargs, "stream": -1})

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def as_cupy(t, contiguous: bool = True):
    """The CuPy view of tensor t (no copy; t made C-contiguous first where asked and it is not: the
    one copy a call makes of an operand whose strides its kernels cannot read)."""
    cupy = require_cupy()
    t = t.detach()
    return cupy.from_dlpack(_Unsynchronized(t.contiguous() if contiguous else t))


@contextlib.contextmanager
def on_current_stream(device):
    """torch's and CuPy's device set to `device`, CuPy's current stream torch's there, and CuPy's
    allocations (autogemm's scratch, temporaries) drawn from torch's allocator."""
    cupy, torch = require_cupy(), require_torch()
    stream = torch.cuda.current_stream(device)

    def from_torch(size: int):
        block = torch.empty(size, dtype=torch.uint8, device=device)     # kept alive by the CuPy memory
        return cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(block.data_ptr(), size, block), 0)

    with torch.cuda.device(device), cupy.cuda.Device(device.index), _cupy_stream(cupy, stream, device.index), \
            cupy.cuda.using_allocator(from_torch):
        yield


class _StreamHandle:
    """A raw stream handle in the CUDA stream protocol (`__cuda_stream__`), which CuPy 14 reads."""

    def __init__(self, handle: int):
        self.handle = handle

    def __cuda_stream__(self):
        return 0, self.handle


def _cupy_stream(cupy, stream, device_index: int):
    """CuPy's stream object for torch's `stream` (made on `device_index`), not owned by CuPy."""
    if hasattr(cupy.cuda.Stream, "from_external"):             # CuPy 14; ExternalStream is deprecated there
        return cupy.cuda.Stream.from_external(_StreamHandle(stream.cuda_stream))
    return cupy.cuda.ExternalStream(stream.cuda_stream, device_index)
