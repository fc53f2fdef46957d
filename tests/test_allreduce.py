"""nn.allreduce: which all-reduce a backend and a launch get, and how each describes itself."""
import numpy as np
import pytest

from nn.allreduce import NcclAllreduce, StagedMpiAllreduce, choose, describe
from nn.backends import get_backend
from nn.dist import Dist
from nn.errors import NNError


def test_one_rank_has_no_all_reduce():
    assert choose("mpi", Dist(), get_backend("numpy", np.float64)) is None
    assert describe(None) == "none"


def test_the_numpy_backend_sums_through_the_host_after_the_backward_pass():
    reduce = choose("mpi", Dist(0, 2, comm=object()), get_backend("numpy", np.float64))
    assert callable(reduce) and getattr(reduce, "buckets", None) is None
    assert describe(reduce) == "MPI through host memory"


def test_nccl_on_the_numpy_backend_is_one_error():
    with pytest.raises(NNError, match="--allreduce nccl needs a GPU backend"):
        choose("nccl", Dist(0, 2, comm=object()), get_backend("numpy", np.float64))


@pytest.mark.parametrize("kind, words", [(StagedMpiAllreduce, "MPI staged through pinned host memory on the stream"),
                                         (NcclAllreduce, "NCCL")])
@pytest.mark.parametrize("buckets, when", [("overlap", ", overlapped with the backward pass"),
                                           ("after", ", after the backward pass")])
def test_a_gpu_all_reduce_says_how_and_when(kind, words, buckets, when):
    reduce = kind.__new__(kind)  # no communicator: describe reads the type and the buckets alone
    reduce.buckets = buckets
    assert describe(reduce) == words + when
    assert describe(reduce, "model") == words  # the logits' sum sits in the forward pass
