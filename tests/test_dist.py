"""nn.dist: row splits, and `mpirun -n R` against one process (same weights), aborts on failure."""
import subprocess
import sys

import numpy as np
import pytest

from fake_idx import write_dataset
from nn.dist import maybe_init_dist, rank_rows, split_sizes
from run_train import MPIRUN, env, max_rel_diff, run_train, weights

needs_mpi = pytest.mark.skipif(MPIRUN is None, reason="no mpirun (pip install mpich)")


# ---------------------------------------------------------------- splitting rows

@pytest.mark.parametrize("n,parts", [(30, 4), (10, 4), (3, 4), (0, 3), (800, 8), (7, 1)])
def test_split_sizes_are_array_split(n, parts):
    assert split_sizes(n, parts) == [len(s) for s in np.array_split(np.arange(n), parts)]


@pytest.mark.parametrize("n,batch,size", [(70, 30, 4), (7, 3, 4), (54000, 800, 3), (5, 10, 2)])
def test_rank_rows_cover_every_batch_in_order(n, batch, size):
    per_rank = [rank_rows(n, batch, r, size) for r in range(size)]
    for k, start in enumerate(range(0, n, batch)):
        rows = np.concatenate([index[s:s + c] for index, spans in per_rank for s, c in [spans[k]]])
        assert np.array_equal(rows, np.arange(start, min(start + batch, n)))


def test_one_process_is_rank_0_of_1_without_mpi4py(tmp_path):
    code = "import sys, nn.dist as d; w = d.maybe_init_dist(); print(w.rank, w.size, 'mpi4py' in sys.modules)"
    clean = {k: v for k, v in env(tmp_path).items() if not k.startswith(("PMI", "PMIX", "OMPI", "MPI_"))}
    out = subprocess.run([sys.executable, "-c", code], env=clean, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "1", "False"]
    assert maybe_init_dist().size == 1


# ---------------------------------------------------------------- R ranks = one process

@pytest.fixture(scope="module")
def fake_dir(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("data"), n_train=6_100, n_test=40)  # 100 train rows


@needs_mpi
@pytest.mark.slow
@pytest.mark.parametrize("case", [
    # batch 30 over 4 ranks: 8, 8, 7, 7; 70 rows: the last batch has 10 rows (3, 3, 2, 2); 2 hidden layers
    ["--batch", "30", "--train-size", "70", "--hidden", "16", "8", "--activation", "sigmoid"],
    # batch 3 over 4 ranks: one rank has no rows in every batch; the last batch has 1 row
    ["--batch", "3", "--train-size", "10", "--hidden", "12", "--activation", "relu", "--init", "he"],
], ids=["uneven-split", "more-ranks-than-rows"])
def test_four_ranks_give_the_one_process_weights(tmp_path, fake_dir, case):
    common = ["--data-dir", fake_dir, "--dataset", "mnist", "--dtype", "float64", "--scale", "unit",
              "--epochs", "3", "--lr", "0.5", "--reg", "0.01", "--no-log", "--quiet", *case]
    one = run_train(tmp_path, *common, "--checkpoint", tmp_path / "one.npz")
    four = run_train(tmp_path, *common, "--checkpoint", tmp_path / "four.npz", ranks=4)
    assert one.returncode == 0, one.stderr
    assert four.returncode == 0, four.stderr
    assert four.stdout.count("test accuracy") == 1  # rank 0 alone prints
    diff = max_rel_diff(weights(tmp_path / "four.npz"), weights(tmp_path / "one.npz"))
    assert diff <= 1e-12, diff


# ---------------------------------------------------------------- failures end every rank

FAIL_ON_RANK_1 = """
from nn.dist import maybe_init_dist
world = maybe_init_dist()
try:
    if world.rank == 1:
        {failure}
    world.sum([1.0])  # rank 0 waits here for rank 1: without an abort, it would wait forever
except Exception as e:
    world.{handler}(e)
"""


@needs_mpi
@pytest.mark.parametrize("failure,handler,expected", [
    ("raise __import__('nn.errors').errors.NNError('disk full')", "fail", "error: rank 1 of 2: disk full"),
    ("1 / 0", "crash", "ZeroDivisionError"),
])
def test_failure_on_one_rank_aborts_all(tmp_path, failure, handler, expected):
    script = FAIL_ON_RANK_1.format(failure=failure, handler=handler)
    result = subprocess.run([MPIRUN, "-n", "2", sys.executable, "-c", script], cwd=tmp_path, env=env(tmp_path),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert expected in result.stderr


@needs_mpi
def test_bad_checkpoint_under_mpirun_is_one_error_not_a_hang(tmp_path, fake_dir):
    (tmp_path / "ck.npz").write_bytes(b"not a checkpoint")
    result = run_train(tmp_path, "--data-dir", fake_dir, "--dataset", "mnist", "--hidden", "8", "--no-log",
                       "--checkpoint", "ck.npz", "--resume", ranks=3, timeout=60)
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [errors[0]] and "ck.npz is corrupted" in errors[0] and "rank 0" in errors[0]


@needs_mpi
def test_nccl_without_a_gpu_backend_is_one_error(tmp_path, fake_dir):
    result = run_train(tmp_path, "--data-dir", fake_dir, "--dataset", "mnist", "--hidden", "8", "--no-log",
                       "--allreduce", "nccl", ranks=2, timeout=60)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "--allreduce nccl needs a GPU backend" in result.stderr
