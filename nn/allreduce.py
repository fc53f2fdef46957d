"""The sum over ranks a step needs (the gradients of a data split, the logits of a model split),
in three flavours, and `choose`, which picks one for a backend and a launch.

- `Dist.allreduce_sum` (host arrays, or a GPU buffer copied through the host and back, blocking):
  the NumPy backend, or MPI where mpi4py lacks MPI_THREAD_MULTIPLE.
- `StagedMpiAllreduce`: MPI for a GPU backend, enqueued on the current stream (copy to pinned host
  memory, the MPI all-reduce in a host function the stream calls, copy back), so it runs beside the
  stream's other work and a CUDA graph can hold it.
- `NcclAllreduce`: GPU to GPU on the current stream, one GPU per rank.

An all-reduce that a step may hand its gradients layer by layer says so with `buckets`
(nn.mlp.Step.train_batch): "overlap", each layer's during the backward pass on a side branch;
"after", the same buckets once the backward pass is done (the same sums, bit for bit).
"""
import ctypes
import sys

import numpy as np

from nn.dist import Dist
from nn.errors import NNError

KINDS = ("mpi", "nccl")


def choose(kind: str, dist: Dist, backend, overlap: bool = True):
    """None for one rank; else the all-reduce of `kind` for `backend` (NNError when NCCL cannot run)."""
    if dist.size == 1:
        return None
    on_gpu = backend.name in ("cupy", "cublas")
    if kind == "nccl":
        if not on_gpu or not nccl_usable(dist):
            raise NNError("--allreduce nccl needs a GPU backend, CuPy's NCCL and one GPU per rank")
        return NcclAllreduce(dist, backend, overlap)
    if on_gpu and mpi_thread_multiple():
        return StagedMpiAllreduce(dist, backend, overlap)
    return lambda buf: dist.allreduce_sum(backend, buf)


def describe(allreduce, parallel: str = "data") -> str:
    """How `allreduce` (a `choose` result) runs, in a few words, for the start-up line and the run log;
    when, too, for a data split (a model split sums its logits inside the forward pass)."""
    if allreduce is None:
        return "none"
    how = {"StagedMpiAllreduce": "MPI staged through pinned host memory on the stream",
           "NcclAllreduce": "NCCL"}.get(type(allreduce).__name__, "MPI through host memory")
    when = {"overlap": ", overlapped with the backward pass", "after": ", after the backward pass"}
    return how + (when.get(getattr(allreduce, "buckets", None), "") if parallel == "data" else "")


def mpi_thread_multiple() -> bool:
    """MPI lets any thread call it at any time (mpi4py asks for this by default)."""
    from mpi4py import MPI

    return MPI.Query_thread() == MPI.THREAD_MULTIPLE


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
    """NCCL is importable through CuPy and every rank has a GPU of its own (checked on all ranks)."""
    try:
        import cupy
        from cupy.cuda import nccl

        ok = bool(nccl.available) and dist.size <= cupy.cuda.runtime.getDeviceCount()
    except Exception:  # no CuPy, no NCCL, no device
        ok = False
    return bool(dist.sum([0.0 if ok else 1.0])[0] == 0)
