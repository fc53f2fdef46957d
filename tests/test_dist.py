"""nn.dist: row splits, and `mpirun -n R` against one process (same weights), aborts on failure."""
import os
import signal
import subprocess
import sys
import time

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
    code = ("import sys, nn.dist as d; w = d.maybe_init_dist(); "
            "print(w.rank, w.size, w.local_rank, w.local_size, d.local_rank(), 'mpi4py' in sys.modules)")
    clean = {k: v for k, v in env(tmp_path).items() if not k.startswith(("PMI", "PMIX", "OMPI", "MPI_"))}
    out = subprocess.run([sys.executable, "-c", code], env=clean, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "1", "0", "1", "None", "False"]    # no node-local rank from MPI
    assert maybe_init_dist().size == 1


NODE_LOCAL = """
import os
import nn.dist as d
world = d.maybe_init_dist()
os.environ["MPI_LOCALRANKID"] = "9"     # a launcher's variable that disagrees: MPI's count wins
from nn.backends.gpu import local_rank
halves = world.comm.Split(world.rank % 2, world.rank)     # two pretend hosts' worth of ranks: 0, 2 and 1, 3
seen = world.gather((world.rank, world.local_rank, world.local_size, d.local_rank(), local_rank(),
                     *d.node_local(halves)))
halves.Free()
if world.rank == 0:
    print(seen)     # one line from one rank: the launcher interleaves the ranks' output
"""


@needs_mpi
def test_the_node_local_rank_is_mpis_shared_memory_split(tmp_path):
    """Four ranks on this one host: local ranks 0..3 of 4, as the cupy backend's GPU choice reads
    them; node_local counts within the communicator it is given, never assuming one host."""
    result = subprocess.run([MPIRUN, "-n", "4", sys.executable, "-c", NODE_LOCAL], cwd=tmp_path, env=env(tmp_path),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{[(r, r, 4, r, r, r // 2, 2) for r in range(4)]}\n"


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
    # the LeNet-like CNN with Adam: its gradients all-reduced in one flat buffer before each update
    ["--batch", "30", "--train-size", "70", "--model", "lenet", "--lr", "0.01"],
], ids=["uneven-split", "more-ranks-than-rows", "lenet-adam"])
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


@needs_mpi
@pytest.mark.slow
@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_the_hidden_unit_split_gives_the_one_process_weights(tmp_path, fake_dir, ranks):
    """--parallel model on R ranks (13 hidden units: uneven shares) equals one process, and its
    checkpoint (the whole network, gathered on rank 0) resumes on one process."""
    common = ["--data-dir", fake_dir, "--dataset", "mnist", "--dtype", "float64", "--scale", "unit",
              "--lr", "0.5", "--reg", "0.01", "--no-log", "--quiet", "--batch", "30", "--train-size", "70",
              "--hidden", "13", "--activation", "sigmoid"]
    one = run_train(tmp_path, *common, "--epochs", "3", "--checkpoint", tmp_path / "one.npz")
    split = run_train(tmp_path, *common, "--epochs", "2", "--checkpoint", tmp_path / "split.npz",
                      "--parallel", "model", ranks=ranks)
    assert one.returncode == 0, one.stderr
    assert split.returncode == 0, split.stderr
    assert split.stdout.count("test accuracy") == 1
    resumed = run_train(tmp_path, *common, "--epochs", "3", "--checkpoint", tmp_path / "split.npz", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    diff = max_rel_diff(weights(tmp_path / "split.npz"), weights(tmp_path / "one.npz"))
    assert diff <= 1e-12, diff


@needs_mpi
@pytest.mark.gpu
def test_mpi_staged_on_the_gpu_stream_equals_one_process(tmp_path, fake_dir):
    """--allreduce mpi on the cupy backend, 2 ranks sharing the GPU: each all-reduce is staged through
    pinned host memory by a host function of the stream, captured into the epoch's graph. Overlapped
    with the backward pass it equals --no-overlap bit for bit (float64), and both equal the one-process
    NumPy weights; so do the model split, captured and eager."""
    common = ["--data-dir", fake_dir, "--dataset", "mnist", "--dtype", "float64", "--scale", "unit",
              "--epochs", "3", "--lr", "0.5", "--reg", "0.01", "--no-log", "--batch", "30", "--train-size", "70",
              "--hidden", "16", "8", "--activation", "sigmoid"]
    one = run_train(tmp_path, *common, "--quiet", "--checkpoint", tmp_path / "one.npz")
    assert one.returncode == 0, one.stderr
    runs = {"overlap": ["--parallel", "data"], "after": ["--parallel", "data", "--no-overlap"],
            "model": ["--parallel", "model", "--hidden", "16"],
            "model-eager": ["--parallel", "model", "--hidden", "16", "--no-graph"]}
    for name, flags in runs.items():
        out = run_train(tmp_path, *common, "--backend", "cupy", *flags, "--checkpoint", tmp_path / f"{name}.npz",
                        ranks=2, timeout=600)
        assert out.returncode == 0, out.stderr
        assert "MPI staged through pinned host memory on the stream" in out.stdout, out.stdout
    assert all(np.array_equal(a, b) for a, b in zip(weights(tmp_path / "overlap.npz"), weights(tmp_path / "after.npz")))
    assert max_rel_diff(weights(tmp_path / "overlap.npz"), weights(tmp_path / "one.npz")) <= 1e-10
    one_model = run_train(tmp_path, *common, "--hidden", "16", "--quiet", "--checkpoint", tmp_path / "one-model.npz")
    assert one_model.returncode == 0, one_model.stderr
    for name in ("model", "model-eager"):
        assert max_rel_diff(weights(tmp_path / f"{name}.npz"), weights(tmp_path / "one-model.npz")) <= 1e-10


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
@pytest.mark.parametrize("failure,handler,expected,status", [
    ("raise __import__('nn.errors').errors.NNError('disk full')", "fail", "error: rank 1 of 2: disk full", 2),
    ("1 / 0", "crash", "ZeroDivisionError", 1),
])
def test_failure_on_one_rank_ends_all(tmp_path, failure, handler, expected, status):
    """A bad input is status 2 as without MPI, a bug status 1; no MPI_Abort line of the launcher's."""
    script = FAIL_ON_RANK_1.format(failure=failure, handler=handler)
    result = subprocess.run([MPIRUN, "-n", "2", sys.executable, "-c", script], cwd=tmp_path, env=env(tmp_path),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == status, result.stderr
    assert expected in result.stderr and "Abort" not in result.stderr


@needs_mpi
def test_bad_checkpoint_under_mpirun_is_one_error_not_a_hang(tmp_path, fake_dir):
    (tmp_path / "ck.npz").write_bytes(b"not a checkpoint")
    result = run_train(tmp_path, "--data-dir", fake_dir, "--dataset", "mnist", "--hidden", "8", "--no-log",
                       "--checkpoint", "ck.npz", "--resume", ranks=3, timeout=60)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: rank 0 of 3: checkpoint ck.npz is corrupted")


@needs_mpi
def test_nccl_without_a_gpu_backend_is_one_error(tmp_path, fake_dir):
    result = run_train(tmp_path, "--data-dir", fake_dir, "--dataset", "mnist", "--hidden", "8", "--no-log",
                       "--allreduce", "nccl", ranks=2, timeout=60)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "--allreduce nccl needs a GPU backend" in result.stderr


@needs_mpi
@pytest.mark.parametrize("flag, ours, theirs, words", [
    ("--hidden", "8", "16", "rank 1 of 2 has hidden [16] where rank 0 has [8]"),       # was MPICH's "Message truncated"
    ("--lr", "0.5", "0.1", "rank 1 of 2 has lr 0.1 where rank 0 has 0.5"),            # was silently out of step
])
def test_ranks_started_with_different_flags_stop_at_once(tmp_path, fake_dir, flag, ours, theirs, words):
    common = [sys.executable, "-m", "nn.train", "--data-dir", str(fake_dir), "--dataset", "mnist", "--epochs", "2",
              "--no-log", "--quiet"]
    result = subprocess.run([MPIRUN, "-n", "1", *common, flag, ours, ":", "-n", "1", *common, flag, theirs],
                            cwd=tmp_path, env=env(tmp_path), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr == f"error: {words}; start every rank with the same flags\n"


@needs_mpi
def test_ranks_that_read_different_data_stop_at_once(tmp_path, fake_dir):
    """Same sizes, other pixels: the ranks would train on different images, silently."""
    other = write_dataset(tmp_path / "other", n_train=6_100, n_test=40, seed=1)
    common = [sys.executable, "-m", "nn.train", "--dataset", "mnist", "--epochs", "1", "--no-log", "--quiet"]
    result = subprocess.run([MPIRUN, "-n", "1", *common, "--data-dir", str(fake_dir), ":",
                             "-n", "1", *common, "--data-dir", str(other)],
                            cwd=tmp_path, env=env(tmp_path), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: rank 1 of 2 has data set (a hash of every image) ")
    assert result.stderr.endswith("; every rank must read the same data set and checkpoint\n")


@needs_mpi
def test_an_error_every_rank_sees_is_said_once_without_a_rank(tmp_path):
    result = run_train(tmp_path, "--batch", "0", ranks=4, timeout=60)
    assert result.returncode == 2 and result.stderr == "error: argument --batch: 0 must be > 0\n"


@needs_mpi
@pytest.mark.slow
@pytest.mark.parametrize("to", ["terminal", "launcher"])
def test_ctrl_c_stops_every_rank_at_one_step_with_one_line(tmp_path, fake_dir, to):
    """As a terminal sends SIGINT (to every process of the job) and as a lone `kill -INT` of
    mpiexec (which forwards it): every rank stops at the same step, status 130, one line, never a
    hang (3 of 14 tries hung before, two ranks spinning in Allreduce)."""
    command = [MPIRUN, "-n", "4", sys.executable, "-m", "nn.train", "--data-dir", str(fake_dir), "--dataset", "mnist",
               "--hidden", "16", "--batch", "8", "--epochs", "1000", "--checkpoint", "ck.npz", "--no-log"]
    for attempt in range(3):
        proc = subprocess.Popen(command, cwd=tmp_path, env=env(tmp_path), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        while not proc.stdout.readline().startswith(f"epoch {2 + attempt:>3}/"):
            pass
        time.sleep(0.01 * attempt)
        os.killpg(proc.pid, signal.SIGINT) if to == "terminal" else proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"attempt {attempt}: the ranks hung after Ctrl-C")
        ours = [line for line in err.splitlines() if not line.startswith("[mpiexec@")]   # Hydra's own notice
        assert proc.returncode == 130 and len(ours) == 1 and "Traceback" not in err, err
        assert ours[0].startswith("interrupted ") and "resume with: mpirun -n 4 python -m nn.train" in ours[0]
        (tmp_path / "ck.npz").unlink()
