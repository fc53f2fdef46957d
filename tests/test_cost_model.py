"""nn.cost_model (`--parallel auto`): the split it predicts fastest from the shipped H100 records,
and the trainer's split `none`: every rank trains the whole batch."""
import re

import pytest

from nn import allreduce, cost_model
from nn.cost_model import LINKS, Link, Prediction, bucket_sizes, choose, predict
from nn.layers import LENET
from fake_idx import write_dataset
from run_train import max_rel_diff, run_train, weights
from test_dist import needs_mpi

H100 = "NVIDIA H100 80GB HBM3"      # the shipped tuned file's GPU
CME, LARGE = (784, 1000, 10), (784, 4096, 10)


def test_an_all_reduce_costs_its_latency_and_its_ring_bytes():
    link = Link("test", 10.0, 2.0, 100.0)                  # 100 GB/s: 100 bytes a ns... 1e5 bytes a µs
    assert link.allreduce_us(1 << 20, 1) == 0 and link.allreduce_us(0, 4) == 0
    assert link.allreduce_us(1_000_000, 2) == pytest.approx(10 + 1_000_000 / 1e5)        # ring: (R-1)/R of 2x
    assert link.allreduce_us(1_000_000, 4) == pytest.approx(14 + 1_500_000 / 1e5)
    assert LINKS["nccl"].allreduce_us(3_180_040, 4) < LINKS["staged"].allreduce_us(3_180_040, 4) / 10


def test_the_data_split_waits_for_its_last_bucket(monkeypatch):
    assert bucket_sizes(CME) == [1000 * 785 + 10 * 1001]     # 3.2 MB: one bucket (BUCKET_BYTES 1 MB)
    assert bucket_sizes(LARGE) == [4096 * 785 + 10 * 4097]
    assert bucket_sizes((784, 10), LENET) == [54528]            # 218 KB
    monkeypatch.setattr(allreduce, "BUCKET_BYTES", 0)          # a bucket a layer, the output layer's first
    assert bucket_sizes(CME) == [10 * 1001, 1000 * 785]
    lenet = bucket_sizes((784, 10), LENET)
    assert lenet[-1] == 6 * 9 + 6 and lenet[0] == 10 * 81   # conv6x3 last; dense 80 -> 10 first


@pytest.mark.parametrize("sizes, batch, precision, link, expected", [
    (CME, 800, "fp32", "nccl", "none"),       # 74 µs a step: 4 ranks' 52 µs + a 3.2 MB all-reduce lose
    (CME, 800, "tf32", "nccl", "none"),
    ((784, 100, 10), 800, "fp32", "nccl", "none"),
    (LARGE, 8192, "fp32", "nccl", "data"),    # 13 MB of gradients against 1.5 ms of compute
    (LARGE, 8192, "tf32", "nccl", "data"),
    (LARGE, 8192, "fp32", "staged", "model"),  # through host memory, 328 KB of logits beat 13 MB
    (LARGE, 8192, "tf32", "staged", "none"),
])
def test_auto_picks_what_was_measured_fastest(sizes, batch, precision, link, expected):
    """The choices of the 4-H200 runs (benchmarks/issue37-h200x4/): each split against one GPU."""
    plan = predict(sizes, "sigmoid", batch, 4, LINKS[link], H100, precision=precision)
    assert plan.choice == expected, plan.predictions
    assert set(plan.predictions) == {"none", "data", "model"}
    assert plan.predictions["data"].sent_bytes == 4 * sum(bucket_sizes(sizes))
    assert plan.predictions["model"].sent_bytes == 4 * batch * 10
    if expected == "none":
        assert plan.reason.startswith("auto: no split pays") and "--batch" in plan.reason
    else:
        assert plan.reason.startswith(f"auto: {expected} split predicted") and plan.speedup(expected) >= cost_model.MARGIN
    for split in ("data", "model"):        # asked for by name: a warning where it loses to one GPU
        assert bool(plan.warning(split)) == (plan.speedup(split) < 1)
        assert "--batch" in plan.warning(split) or not plan.warning(split)


def test_a_cnn_is_split_by_data_or_not_at_all():
    plan = predict((784, 10), "relu", 1000, 4, LINKS["nccl"], H100, layers=LENET)
    assert set(plan.predictions) == {"none", "data"} and plan.choice == "data"


def test_without_records_a_roofline_still_ranks_the_splits():
    plan = predict(LARGE, "sigmoid", 8192, 4, LINKS["nccl"], None)
    assert plan.choice == "data" and 0 < plan.predictions["data"].compute_us < plan.predictions["none"].compute_us


def test_a_split_within_the_margin_of_one_gpu_is_not_taken():
    one = Prediction("none", 100.0, 0.0, 0)
    close = Prediction("data", 80.0, 15.0, 4000)                # 1.05x: inside the model's error
    assert choose({"none": one, "data": close}, 4, LINKS["nccl"]).choice == "none"
    far = Prediction("data", 40.0, 15.0, 4000)
    assert choose({"none": one, "data": far}, 4, LINKS["nccl"]).choice == "data"


@pytest.fixture(scope="module")
def fake_dir(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("data"), n_train=6_100, n_test=40)  # 100 train rows


@needs_mpi
def test_no_split_gives_one_process_weights_and_says_why(tmp_path, fake_dir):
    """--parallel none: each rank trains every row (one GPU's speed, nothing sent), and the start-up
    line says so; auto on the NumPy backend takes the data split and says why."""
    common = ["--data-dir", fake_dir, "--dataset", "mnist", "--dtype", "float64", "--scale", "unit", "--epochs", "2",
              "--lr", "0.5", "--no-log", "--batch", "30", "--train-size", "70", "--hidden", "8"]
    one = run_train(tmp_path, *common, "--checkpoint", tmp_path / "one.npz")
    none = run_train(tmp_path, *common, "--parallel", "none", "--checkpoint", tmp_path / "none.npz", ranks=2)
    auto = run_train(tmp_path, *common, "--epochs", "1", ranks=2)
    for result in (one, none, auto):
        assert result.returncode == 0, result.stderr
    assert "2 ranks, no split: every rank trains the whole batch" in none.stdout, none.stdout
    assert max_rel_diff(weights(tmp_path / "none.npz"), weights(tmp_path / "one.npz")) == 0
    losses = lambda out: re.findall(r"loss (\S+)", out)  # noqa: E731
    assert losses(none.stdout) == losses(one.stdout) and len(losses(one.stdout)) == 2   # not summed over ranks
    assert none.stdout.count("test accuracy") == 1
    assert "data parallel" in auto.stdout and "auto: the numpy backend: data split" in auto.stdout, auto.stdout



def test_the_command_predicts_each_split_without_a_gpu(capsys):
    assert cost_model.main(["--network", "large", "--ranks", "1,4", "--weak"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "images a second" in out[0] and out[1].strip().startswith("1 rank: none ")
    assert out[2].strip().startswith("4 ranks: data ") and out[2].endswith("-> auto: data")
    assert cost_model.main(["--network", "lenet", "--link", "infiniband", "--ranks", "8"]) == 0
    assert "model" not in capsys.readouterr().out.splitlines()[1]      # a CNN is split by data alone
    assert cost_model.main(["--network", "lenet", "--precision", "tf32"]) == 0      # its calls at TF32 too
    assert ", tf32, on " in capsys.readouterr().out.splitlines()[0]


@pytest.mark.parametrize("argv", [["--network", "nope"], ["--ranks", "2,x"], ["--ranks", "0"],
                                  ["--gpu", "NVIDIA A100"], ["--link", "carrier-pigeon"],
                                  ["--ranks", "\u0662"], ["--ranks", "1_0"], ["--ranks", ""]])  # int() took '٢', '1_0'
def test_the_commands_bad_inputs_are_one_line(capsys, argv):
    assert cost_model.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") or "invalid choice" in err[-1]


def test_each_rank_count_is_predicted_once(capsys):
    assert cost_model.main(["--ranks", "4,2,2,4"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [row.split(":")[0].strip() for row in rows] == ["4 ranks", "2 ranks"]


def test_the_records_a_launchs_time_comes_from():
    import autogemm

    exact = autogemm.measured("gemm", (800, 1000, 784), "nt", "float32", H100)
    assert exact.source == "exact" and exact.sizes == (800, 1000, 784) and exact.median_us > 0
    near = autogemm.measured("gemm", (800, 900, 784), "nt", "float32", H100)
    assert near.source == "nearest" and near.distance > 0
    assert autogemm.measured("gemm", (8, 9, 7), "nt", "float32", H100) is None       # nothing within 4x
    assert autogemm.has_records(H100) and not autogemm.has_records("NVIDIA A100-SXM4-80GB")
    stack = autogemm.measured("dense_stack", (1000, 250, 128, 100, 80, 10), "relu+dx", "float32", H100)
    assert stack.source == "exact"      # the H200's record (this H100 file has none): the launch lookup runs there


def test_a_dense_stack_below_a_pool_costs_what_its_pooled_inputs_do():
    """A "+pool" key names the pool's input map (C, H, W) for the stack's inputs: its roofline is the
    stack's of C (H // 2) (W // 2) inputs, not of the map's sizes as widths."""
    pooled = cost_model.launch_us(None, "dense_stack", (1000, 10, 11, 11, 128, 100, 80, 10), "relu+pool", "float32")
    flat = cost_model.launch_us(None, "dense_stack", (1000, 250, 128, 100, 80, 10), "relu+dx", "float32")
    assert pooled == flat
