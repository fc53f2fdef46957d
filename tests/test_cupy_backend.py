"""The GPU backends' CPU-side logic: rank-to-GPU mapping, and a clear error without a GPU."""
import subprocess
import sys

import pytest
from conftest import cuda_available

import nn.dist
from nn.backends import get_backend
from nn.backends.gpu import _LOCAL_RANK_ENV, gpu_for_rank, local_rank, this_ranks_gpu
from nn.errors import NNError
from run_train import ROOT


def test_ranks_take_gpus_round_robin():
    assert [gpu_for_rank(r, 2) for r in range(5)] == [0, 1, 0, 1, 0]
    assert [gpu_for_rank(r, 1) for r in range(4)] == [0, 0, 0, 0]   # four ranks may share one GPU


@pytest.mark.parametrize("var", ["MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "PMIX_LOCAL_RANK", "SLURM_LOCALID"])
def test_without_mpis_count_the_local_rank_is_each_launchers(monkeypatch, var):
    """One process (no node-local rank from MPI): the launcher's variable, else 0."""
    monkeypatch.setattr(nn.dist, "_local_rank", None)
    for other in _LOCAL_RANK_ENV:
        monkeypatch.delenv(other, raising=False)
    assert local_rank() == 0 and this_ranks_gpu(4) == 0
    monkeypatch.setenv(var, "3")
    assert local_rank() == 3 and this_ranks_gpu(4) == 3 and this_ranks_gpu(2) == 1


def test_mpis_node_local_rank_chooses_the_gpu_over_the_launchers_variable(monkeypatch):
    """Several ranks: the node-local rank nn.dist computed with MPI (tests/test_dist.py checks it
    under mpirun) picks the GPU, whatever a launcher's variable says."""
    monkeypatch.setenv("MPI_LOCALRANKID", "3")
    monkeypatch.setattr(nn.dist, "_local_rank", 0)
    assert local_rank() == 0 and this_ranks_gpu(4) == 0
    monkeypatch.setattr(nn.dist, "_local_rank", 5)
    assert local_rank() == 5 and [this_ranks_gpu(g) for g in (1, 2, 4, 8)] == [0, 1, 1, 5]


@pytest.mark.skipif(cuda_available(), reason="a GPU is present")
@pytest.mark.parametrize("name", ["cupy", "cublas"])
def test_without_a_gpu_the_backend_says_so(name):
    with pytest.raises(NNError, match=f"the {name} backend needs CuPy and a CUDA device"):
        get_backend(name, "float32")


@pytest.mark.skipif(cuda_available(), reason="a GPU is present")
def test_train_on_cupy_without_a_gpu_is_one_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "nn.train", "--backend", "cupy", "--no-log"],
                            cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: the cupy backend needs CuPy and a CUDA device")
