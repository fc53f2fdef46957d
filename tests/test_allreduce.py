"""nn.allreduce: which all-reduce a backend and a launch get, and how each describes itself."""
import numpy as np
import pytest

from nn import allreduce
from nn.allreduce import CudaAwareMpiAllreduce, NcclAllreduce, StagedMpiAllreduce, choose, describe, resolve
from nn.backends import get_backend
from nn.dist import Dist
from nn.errors import NNError


class _Ranks(Dist):
    """Two ranks whose collectives are this process's answers (every rank alike)."""

    def any_rank(self, flag):
        return flag

    def sum(self, values):
        return np.array(values, dtype=np.float64)


class _Gpu:
    name, stream = "cupy", None


def test_one_rank_has_no_all_reduce():
    for kind in ("auto", "mpi", "nccl"):
        assert resolve(kind, Dist(), get_backend("numpy", np.float64)) == "none"
    assert choose("none", Dist(), get_backend("numpy", np.float64)) is None
    assert describe(None) == "none"


def test_the_numpy_backend_sums_through_the_host_after_the_backward_pass():
    ranks, numpy = _Ranks(0, 2, comm=object()), get_backend("numpy", np.float64)
    assert resolve("auto", ranks, numpy) == resolve("mpi", ranks, numpy) == "host"
    reduce = choose("host", ranks, numpy)
    assert callable(reduce) and getattr(reduce, "buckets", None) is None
    assert describe(reduce) == "MPI through host memory"


def test_nccl_on_the_numpy_backend_is_one_error():
    with pytest.raises(NNError, match="--allreduce nccl needs a GPU backend"):
        resolve("nccl", _Ranks(0, 2, comm=object()), get_backend("numpy", np.float64))


@pytest.mark.parametrize("nccl, cuda_aware, threads, auto, mpi", [
    (True, True, True, "nccl", "staged"),           # every rank a GPU of its own: NCCL
    (False, True, True, "cuda-aware", "staged"),     # no NCCL (or GPUs shared): MPI on device buffers
    (False, False, True, "staged", "staged"),        # neither: MPI through pinned host memory on the stream
    (False, False, False, "host", "host")])          # and without MPI_THREAD_MULTIPLE, blocking
def test_auto_takes_the_fastest_all_reduce_there_is(monkeypatch, nccl, cuda_aware, threads, auto, mpi):
    monkeypatch.setattr(allreduce, "nccl_usable", lambda dist: nccl)
    monkeypatch.setattr(allreduce, "cuda_aware_mpi", lambda: cuda_aware)
    monkeypatch.setattr(allreduce, "mpi_thread_multiple", lambda: threads)
    ranks = _Ranks(0, 2, comm=object())
    assert resolve("auto", ranks, _Gpu()) == auto
    assert resolve("mpi", ranks, _Gpu()) == mpi      # asked for by name: never NCCL, nor CUDA-aware MPI
    if not nccl:
        with pytest.raises(NNError, match="one GPU per rank"):
            resolve("nccl", ranks, _Gpu())


def test_cuda_aware_mpi_is_asked_of_the_library_mpi4py_loaded():
    """MPICH here: MPIX_GPU_query_support says no CUDA (a build without it); the answer is a bool."""
    assert allreduce._libmpi_path().split("/")[-1].startswith("libmpi")
    assert allreduce.cuda_aware_mpi() is False


def test_cuda_aware_mpi_waits_for_the_stream_then_sums_the_buffer_in_place():
    class Stream:
        waited = 0

        def synchronize(self):
            self.waited += 1

    class Comm:
        def Allreduce(self, where, buf, op):
            buf *= 2                                   # two ranks holding the same values

    backend = type("B", (), {"stream": Stream()})()
    reduce = CudaAwareMpiAllreduce.__new__(CudaAwareMpiAllreduce)
    reduce.MPI, reduce.comm, reduce.stream = type("MPI", (), {"IN_PLACE": None, "SUM": None}), Comm(), backend.stream
    buf = np.arange(1.0, 5.0)
    assert reduce(buf) is buf and list(buf) == [2, 4, 6, 8] and backend.stream.waited == 1
    assert not CudaAwareMpiAllreduce.graph_safe and describe(reduce) == "CUDA-aware MPI on device buffers"


@pytest.mark.parametrize("kind, words", [(StagedMpiAllreduce, "MPI staged through pinned host memory on the stream"),
                                         (NcclAllreduce, "NCCL")])
@pytest.mark.parametrize("buckets, when", [("overlap", ", overlapped with the backward pass"),
                                           ("after", ", after the backward pass")])
def test_a_gpu_all_reduce_says_how_and_when(kind, words, buckets, when):
    reduce = kind.__new__(kind)  # no communicator: describe reads the type and the buckets alone
    reduce.buckets = buckets
    assert describe(reduce) == words + when
    assert describe(reduce, "model") == words  # the logits' sum sits in the forward pass


def test_layers_are_merged_into_buckets_of_a_least_size(monkeypatch):
    """Consecutive layers (in the order the backward pass completes them) fill a bucket until it
    holds BUCKET_BYTES; the last layer closes the last bucket; each bucket is one slice of the flat
    buffer, ready when its last layer is."""
    from nn.allreduce import merge_buckets

    flat = np.zeros(100, np.float32)
    layers = [(3, 90, 100), (2, 60, 90), (1, 20, 60), (0, 0, 20)]       # top layer first, each below the last
    monkeypatch.setattr(allreduce, "BUCKET_BYTES", 0)
    buckets, ready = merge_buckets(flat, layers)
    assert [(b.size) for b in buckets] == [10, 30, 40, 20] and ready == {3: 0, 2: 1, 1: 2, 0: 3}
    monkeypatch.setattr(allreduce, "BUCKET_BYTES", 4 * 45)          # 45 floats: layers 3, 2, 1 fill one
    buckets, ready = merge_buckets(flat, layers)
    assert [b.size for b in buckets] == [80, 20] and ready == {1: 0, 0: 1}
    assert np.shares_memory(buckets[0], flat[20:100]) and buckets[1].base is flat
    monkeypatch.setattr(allreduce, "BUCKET_BYTES", 1 << 20)
    buckets, ready = merge_buckets(flat, layers)                         # a small network: one bucket
    assert len(buckets) == 1 and buckets[0].size == 100 and ready == {0: 0}
