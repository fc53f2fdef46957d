"""The sum over ranks a step needs (the gradients of a data split, the logits of a model split),
in four flavours; `resolve` names the one a backend and a launch get, `choose` makes it.

- `Dist.allreduce_sum` (host arrays, or a GPU buffer copied through the host and back, blocking):
  the NumPy backend, or MPI where mpi4py lacks MPI_THREAD_MULTIPLE.
- `StagedMpiAllreduce`: MPI for a GPU backend, enqueued on the current stream (copy to pinned host
  memory, the MPI all-reduce in a host function the stream calls, copy back), so it runs beside the
  stream's other work and a CUDA graph can hold it.
- `CudaAwareMpiAllreduce`: an MPI library that reads GPU memory itself, handed the device buffer
  after the stream's work (eager steps: MPI cannot run inside a graph).
- `NcclAllreduce`: GPU to GPU on the current stream, one GPU per rank.

`--allreduce auto` takes NCCL where every rank has a GPU of its own, else CUDA-aware MPI where the
library says it is, else MPI staged through the host.

An all-reduce that a step may hand its gradients in buckets says so with `buckets`
(nn.mlp.Step.train_batch, nn.cnn.CNNStep.train_batch): "overlap", each bucket during the backward
pass on a side branch as soon as its layers' gradients are made; "after", the same buckets once the
backward pass is done (the same sums, bit for bit). A bucket holds consecutive layers' gradients,
at least BUCKET_BYTES (`merge_buckets`).
"""
import ctypes
import sys

import numpy as np

from nn.dist import Dist
from nn.errors import NNError

KINDS = ("auto", "mpi", "nccl")
# A bucket's least size: an all-reduce costs the same whatever its size below a few hundred KB
# (benchmarks/issue37-h200x4/diagnose), and LeNet's six layers each in a bucket of its own, all-reduced
# on the side branch, made its 4-rank epoch much slower than one bucket (benchmarks/issue37-h200x4/final).
BUCKET_BYTES = 1 << 20


def merge_buckets(flat, layers) -> tuple[list, dict]:
    """(buckets, ready): `layers`, (layer, first, end) spans of the flat gradient buffer in the order
    the backward pass completes them, each just below the one before, merged into buckets of
    consecutive layers holding at least BUCKET_BYTES (the last takes what is left); `ready` maps
    the layer whose completion makes a bucket complete to that bucket's index."""
    buckets, ready, first, held = [], {}, None, 0
    for i, (layer, lo, hi) in enumerate(layers):
        first = hi if first is None else first
        held += (hi - lo) * flat.itemsize
        if held >= BUCKET_BYTES or i == len(layers) - 1:
            ready[layer] = len(buckets)
            buckets.append(flat[lo:first])
            first, held = None, 0
    return buckets, ready


def resolve(kind: str, dist: Dist, backend) -> str:
    """What `--allreduce kind` runs for `backend`: "nccl", "cuda-aware" (MPI on device buffers),
    "staged" (MPI through pinned host memory on the stream) or "host" (MPI, blocking); "none" for
    one rank. Collective: every rank resolves alike (NNError on every rank when NCCL cannot run)."""
    if dist.size == 1:
        return "none"
    on_gpu = backend.name in ("cupy", "cublas")
    if kind in ("auto", "nccl") and on_gpu and nccl_usable(dist):
        return "nccl"
    if kind == "nccl":
        raise NNError("--allreduce nccl needs a GPU backend, CuPy's NCCL and one GPU per rank; "
                      "--allreduce mpi runs anywhere")
    if on_gpu and kind == "auto" and not dist.any_rank(not cuda_aware_mpi()):
        return "cuda-aware"
    return "staged" if on_gpu and mpi_thread_multiple() else "host"


def choose(kind: str, dist: Dist, backend, overlap: bool = True):
    """None for one rank; else the all-reduce that `resolve` named `kind` for `backend`."""
    if kind == "none":
        return None
    if kind == "nccl":
        return NcclAllreduce(dist, backend, overlap)
    if kind == "cuda-aware":
        return CudaAwareMpiAllreduce(dist, backend)
    if kind == "staged":
        return StagedMpiAllreduce(dist, backend, overlap)
    return lambda buf: dist.allreduce_sum(backend, buf)


def describe(allreduce, parallel: str = "data") -> str:
    """How `allreduce` (a `choose` result) runs, in a few words, for the start-up line and the run log;
    when, too, for a data split (a model split sums its logits inside the forward pass)."""
    if allreduce is None:
        return "none"
    how = {"StagedMpiAllreduce": "MPI staged through pinned host memory on the stream",
           "CudaAwareMpiAllreduce": "CUDA-aware MPI on device buffers",
           "NcclAllreduce": "NCCL"}.get(type(allreduce).__name__, "MPI through host memory")
    when = {"overlap": ", overlapped with the backward pass", "after": ", after the backward pass"}
    return how + (when.get(getattr(allreduce, "buckets", None), "") if parallel == "data" else "")


def mpi_thread_multiple() -> bool:
    """MPI lets any thread call it at any time (mpi4py asks for this by default)."""
    from mpi4py import MPI

    return MPI.Query_thread() == MPI.THREAD_MULTIPLE


def cuda_aware_mpi() -> bool:
    """The MPI library says it reads CUDA device memory: Open MPI's MPIX_Query_cuda_support, or
    MPICH's MPIX_GPU_query_support for CUDA (both asked through the library mpi4py loaded)."""
    try:
        lib = ctypes.CDLL(_libmpi_path(), mode=ctypes.RTLD_GLOBAL)
    except OSError:
        return False
    if hasattr(lib, "MPIX_Query_cuda_support"):
        return bool(lib.MPIX_Query_cuda_support())
    if hasattr(lib, "MPIX_GPU_query_support"):
        supported = ctypes.c_int(0)
        lib.MPIX_GPU_query_support(ctypes.c_int(_MPIX_GPU_SUPPORT_CUDA), ctypes.byref(supported))
        return bool(supported.value)
    return False


_MPIX_GPU_SUPPORT_CUDA = 0      # MPICH's mpi.h


def _libmpi_path() -> str:
    """The libmpi this process loaded (mpi4py's), from the process's mapped files."""
    from mpi4py import MPI  # noqa: F401  (loads libmpi)

    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "/libmpi" in path and ".so" in path:
                return path
    raise OSError("no libmpi mapped")


class CudaAwareMpiAllreduce:
    """Sum a GPU buffer over ranks with an MPI that reads device memory: the stream's work is
    waited for, then MPI all-reduces the buffer in place. Not graph-safe (MPI runs on the host
    thread, between the stream's work): the steps run eagerly."""

    graph_safe = False

    def __init__(self, dist: Dist, backend):
        from mpi4py import MPI

        self.MPI, self.comm, self.stream = MPI, dist.comm, backend.stream

    def __call__(self, buf):
        if not buf.flags.c_contiguous:
            raise ValueError("CudaAwareMpiAllreduce needs a contiguous buffer")
        self.stream.synchronize()
        self.comm.Allreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM)
        return buf


def _buckets(overlap: bool) -> str:
    return "overlap" if overlap else "after"


class StagedMpiAllreduce:
    """Sum a GPU buffer over ranks with MPI, staged through pinned host memory, without blocking the
    host thread or the stream's other branches: on the current stream, an asynchronous copy to the
    host, a host function (CUDA's own thread runs it when the copy has landed) that all-reduces in
    place, and a copy back. The host function is a node in a captured graph, so the epoch's graph
    holds MPI as it holds NCCL.

    The host function calls MPI from CUDA's thread while the main thread may call it too: it needs
    MPI_THREAD_MULTIPLE and a communicator of its own (a duplicate), so that its collectives never
    interleave with the main thread's. Each buffer it sees gets its pinned copy and its host
    function once, kept as long as this object (a graph holds their raw pointers)."""

    graph_safe = True

    def __init__(self, dist: Dist, backend, overlap: bool = True):
        import cupy
        from mpi4py import MPI

        self.cupy, self.MPI, self.stream = cupy, MPI, backend.stream
        self.comm = dist.comm.Dup()
        self.rank, self.size = dist.rank, dist.size
        self.buckets = _buckets(overlap)
        self._staged = {}  # (device pointer, bytes) -> (pinned memory, host view, host function)
        self._launch_host_func = _driver_launch_host_func()

    def __call__(self, buf):
        if not buf.flags.c_contiguous:
            raise ValueError("StagedMpiAllreduce needs a contiguous buffer")
        runtime = self.cupy.cuda.runtime
        stream = self.cupy.cuda.get_current_stream().ptr
        _, host, host_func = self._stage(buf)
        runtime.memcpyAsync(host.ctypes.data, buf.data.ptr, buf.nbytes, runtime.memcpyDeviceToHost, stream)
        status = self._launch_host_func(stream, host_func, None)
        if status != 0:
            raise NNError(f"cuLaunchHostFunc failed with CUDA driver error {status}")
        runtime.memcpyAsync(buf.data.ptr, host.ctypes.data, buf.nbytes, runtime.memcpyHostToDevice, stream)
        return buf

    def _stage(self, buf):
        key = (buf.data.ptr, buf.nbytes)
        if key not in self._staged:
            memory = self.cupy.cuda.alloc_pinned_memory(buf.nbytes)
            host = np.frombuffer(memory, buf.dtype, buf.size)  # (buf.size,) buf.dtype, page-locked

            def reduce_on_host(_):
                try:
                    self.comm.Allreduce(self.MPI.IN_PLACE, host, op=self.MPI.SUM)
                except BaseException as exc:  # nothing can raise through CUDA's thread: end the job
                    print(f"error: rank {self.rank} of {self.size}: the staged all-reduce failed: {exc}",
                          file=sys.stderr, flush=True)
                    self.comm.Abort(1)

            self._staged[key] = (memory, host, _HOST_FN(reduce_on_host))
        return self._staged[key]

    def close(self):
        """Free the duplicate communicator (every rank, after a barrier, with no graph left to run)."""
        self.stream.synchronize()
        self.comm.Free()


# CUhostFn: void (*)(void *userData); ctypes takes the GIL around the Python body.
_HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _driver_launch_host_func():
    """The driver's cuLaunchHostFunc: CuPy's Stream.launch_host_func drops its callback's reference
    after the first call, which a graph replays, so the host function comes through ctypes instead."""
    launch = ctypes.CDLL("libcuda.so.1").cuLaunchHostFunc
    launch.argtypes = [ctypes.c_void_p, _HOST_FN, ctypes.c_void_p]
    launch.restype = ctypes.c_int
    return launch


class NcclAllreduce:
    """Sum a GPU buffer over ranks with NCCL on the current stream (the backend's, or a side branch
    of it): no host staging, and it can be captured into a CUDA graph. Needs one GPU per rank (NCCL
    refuses two ranks on one device)."""

    graph_safe = True

    def __init__(self, dist: Dist, backend, overlap: bool = True):
        import cupy
        from cupy.cuda import nccl

        uid = nccl.get_unique_id() if dist.rank == 0 else None
        uid = dist.comm.bcast(uid, root=0)  # once, at start-up: a small tuple
        self.cupy, self.nccl, self.stream = cupy, nccl, backend.stream
        self.comm = nccl.NcclCommunicator(dist.size, uid, dist.rank)
        self.dtype = nccl.NCCL_FLOAT32 if backend.dtype == np.float32 else nccl.NCCL_FLOAT64
        self.buckets = _buckets(overlap)

    def __call__(self, buf):
        stream = self.cupy.cuda.get_current_stream()
        self.comm.allReduce(buf.data.ptr, buf.data.ptr, buf.size, self.dtype, self.nccl.NCCL_SUM, stream.ptr)
        return buf

    def close(self):
        """Destroy the communicator on every rank together (after a barrier): left to the
        interpreter's exit, ranks hung there on two H200s after training had finished."""
        self.stream.synchronize()
        self.comm.destroy()


def nccl_usable(dist: Dist) -> bool:
    """NCCL is importable through CuPy and every rank has a GPU of its own: no more ranks on each
    host than it has GPUs (checked on all ranks)."""
    try:
        import cupy
        from cupy.cuda import nccl

        ok = bool(nccl.available) and dist.local_size <= cupy.cuda.runtime.getDeviceCount()
    except Exception:  # no CuPy, no NCCL, no device
        ok = False
    return bool(dist.sum([0.0 if ok else 1.0])[0] == 0)
