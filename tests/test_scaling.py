"""nn.scaling on the CPU: arguments, the plan (MLPs and CNNs, strong and weak scaling), speed-up,
efficiency and images/s, the float64 weight check and its references, auto's choices read from the
logs, failed and hung runs (an injected runner, and the real one on small Python processes), and two
real runs on the NumPy backend under mpirun."""
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fake_idx import write_dataset
from nn import checkpoint, scaling
from nn.errors import NNError
from nn.bench import ConvNetwork
from nn.layers import LENET
from nn.scaling import (Outcome, Run, build_parser, f64_verdict, main, plan, reference_of, resolve, rows, run_process,
                        table, weight_diffs)
from run_train import MPIRUN, ROOT

needs_mpi = pytest.mark.skipif(MPIRUN is None, reason="no mpirun (pip install mpich)")


def fake_mpirun(tmp_path, version="HYDRA build details:") -> str:
    """An executable that answers --version like `version`'s launcher (the injected runners never start it)."""
    path = tmp_path / "mpirun"
    path.write_text(f"#!/bin/sh\necho '{version}'\n")
    path.chmod(0o755)
    return str(path)


EXPLICIT = ("--parallel", "data", "--allreduce", "mpi,nccl")   # nn.scaling's defaults are auto, auto


@pytest.fixture(autouse=True)
def a_gpu(monkeypatch):
    """The injected runners start nothing: every test but the one about it sees a GPU."""
    monkeypatch.setattr(scaling, "cuda_available", lambda: True)


def settings(tmp_path, *argv):
    return resolve(build_parser().parse_args(["--mpirun", fake_mpirun(tmp_path), "--out", str(tmp_path / "out"), *argv]))


# ---------------------------------------------------------------- arguments and the plan

@pytest.mark.parametrize("args,message", [
    (["--network", "huge"], "--network: unknown 'huge'; choose from cme213"),
    (["--ranks", "1,0"], "argument --ranks: 0 must be > 0"),
    (["--ranks", "1,two"], "argument --ranks: 'two' is not an integer"),
    (["--ranks", "2,4"], "--ranks must include 1"),
    (["--allreduce", "mpi,gloo"], "argument --allreduce: unknown 'gloo'; choose from auto, mpi, nccl"),
    (["--parallel", "rows"], "argument --parallel: unknown 'rows'; choose from auto, data, model, none"),
    (["--batch", "0"], "argument --batch: 0 must be > 0"),
    (["--network", "lenet", "--parallel", "data,model"],
     "--parallel model splits an MLP's hidden units; lenet is a CNN: give auto, data or none"),
    (["--layers", "conv4x5", "--parallel", "model"], "cnn-conv4x5 is a CNN"),
    (["--network", "cme213", "--layers", "conv4x5"], "--network and --layers both name the network; give one"),
    (["--layers", "conv6x3,pool9"], "--layers: layer 2 ('pool9'): only 2x2 max-pooling"),
    (["--layers", ""], "--layers '': empty layer"),
    (["--weak", "--parallel", "data,none"], "--parallel none with --weak: every rank would train the whole batch x R"),
    (["--epochs", "1", "--network", "lenet"], "--epochs must be >= 2"),
    (["--epochs", "1"], "--epochs must be >= 2"),
    (["--extra-args", "--lr '0.1"], "--extra-args: No closing quotation"),
    (["--extra-args", "--lr zero"], "--extra-args: argument --lr: 'zero' is not a number"),
    (["--extra-args", "--dtype float32"], "--extra-args: --dtype is nn.scaling's to set for each run"),
    (["--extra-args", "--par model --batch 10"], "--extra-args: --batch, --parallel are nn.scaling's"),   # abbreviated
    (["--extra-args", "--allreduce auto"], "--extra-args: --allreduce is nn.scaling's"),
    (["--extra-args=--help"], "--extra-args: -h/--help shows nn.train's flags"),
    (["--extra-args=--he"], "--extra-args: -h/--help"),
    (["--extra-args", "--no-graph"],     # argparse's own words, and how to give such a value
     "argument --extra-args: expected one argument (a value that starts with '-' goes after '=': --extra-args="),
    (["--mpirun", "/nonexistent/mpirun"], "no MPI launcher '/nonexistent/mpirun'"),
])
def test_bad_arguments_are_one_line_and_exit_2(tmp_path, capsys, args, message):
    assert main(["--out", str(tmp_path), *args], runner=None) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("error: ") and message in line and not captured.out


@pytest.mark.parametrize("backend", ["tuned", "cupy"])
def test_no_gpu_is_refused_before_any_run(tmp_path, capsys, monkeypatch, backend):
    """Issue 38 #5: without a GPU every run trained on the CPU for minutes, then failed."""
    monkeypatch.setattr(scaling, "cuda_available", lambda: False)
    assert main(["--mpirun", fake_mpirun(tmp_path), "--out", str(tmp_path / "out"), "--backend", backend],
                runner=FakeRunner({})) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: --backend {backend} needs a CUDA GPU and CuPy sees none; --backend numpy measures the CPU\n"
    assert not captured.out and not (tmp_path / "out").exists()
    assert settings(tmp_path, "--backend", "numpy").backend == "numpy"      # the CPU needs no GPU


def test_bad_argument_from_the_command_line():
    result = subprocess.run([sys.executable, "-m", "nn.scaling", "--network", "huge"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.startswith("error: --network: unknown") and not result.stdout


def test_lists_are_sorted_and_deduplicated_and_auto_is_the_default(tmp_path):
    s = settings(tmp_path, "--ranks", "4,1,2,2", "--allreduce", "nccl,mpi,nccl")
    assert s.ranks == (1, 2, 4) and s.allreduces == ("nccl", "mpi") and s.parallels == ("auto",)
    assert settings(tmp_path).allreduces == ("auto",) and not settings(tmp_path).weak
    assert (s.network.hidden, s.network.batch) == (1000, 800)
    large = settings(tmp_path, "--network", "large").network
    assert (large.hidden, large.batch) == (4096, 8192)


def test_plan_times_float32_first_then_checks_float64(tmp_path):
    s = settings(tmp_path, "--ranks", "1,2,4", "--epochs", "5", "--extra-args", "--lr 0.5 --precision tf32",
                 *EXPLICIT)
    runs = plan(s)
    assert [r.name for r in runs] == [f"cme213-f{bits}-{tail}" for bits in ("32", "64")
                                      for tail in ("r1", "r2-mpi", "r2-nccl", "r4-mpi", "r4-nccl")]
    one, four_nccl, check = runs[0], runs[4], runs[9]
    assert one.command[:3] == [s.launch[0], "-n", "1"] and "--allreduce" not in one.command
    assert four_nccl.command[1:3] == ["-n", "4"] and four_nccl.command[four_nccl.command.index("--allreduce") + 1] == "nccl"
    assert ["-m", "nn.train", "--hidden", "1000", "--batch", "800"] == four_nccl.command[4:10]
    assert four_nccl.command[four_nccl.command.index("--parallel") + 1] == "data"   # nn.train's default is auto
    assert "--parallel" not in one.command and four_nccl.batch == one.batch == 800
    assert "--use-tuned" in one.command and one.command[-4:] == ["--lr", "0.5", "--precision", "tf32"]  # extras win
    assert check.command[-2:] == ["--precision", "fp32"]         # but a float64 check's GEMMs stay FP32-accurate
    assert one.command[one.command.index("--epochs") + 1] == "5" and "--checkpoint" not in one.command
    assert check.command[check.command.index("--dtype") + 1] == "float64"
    assert check.command[check.command.index("--epochs") + 1] == "2"
    assert check.command[check.command.index("--checkpoint") + 1] == str(s.out / "cme213-f64-r4-nccl.npz")
    assert check.command[check.command.index("--log") + 1] == str(s.out / "cme213-f64-r4-nccl.json")


def test_lenet_runs_nn_trains_cnn_at_batch_1000(tmp_path):
    s = settings(tmp_path, "--network", "lenet", "--ranks", "1,2")
    assert isinstance(s.network, ConvNetwork) and (s.network.layers, s.network.batch) == (LENET, 1000)
    assert s.epochs == 20                                        # nn.train's CNN default
    runs = plan(s)
    assert [r.name for r in runs] == ["lenet-f32-r1", "lenet-f32-r2-auto-auto", "lenet-f64-r1", "lenet-f64-r2-auto-auto"]
    two = runs[1].command
    assert two[4:10] == ["-m", "nn.train", "--model", "lenet", "--batch", "1000"]
    assert not {"--hidden", "--activation", "--parallel", "--allreduce"} & set(two)   # auto: nn.train's own choice
    assert two[two.index("--train-size") + 1] == "54000" and runs[3].command[-2:] == ["--precision", "fp32"]


@pytest.mark.parametrize("argv,name,layers,batch", [
    (["--layers", " conv4x5, pool2,dense32"], "cnn-conv4x5-pool2-dense32", "conv4x5,pool2,dense32", 1000),
    (["--layers", "conv4x5,pool2,dense32", "--batch", "250"], "cnn-conv4x5-pool2-dense32-b250",
     "conv4x5,pool2,dense32", 250),
    (["--layers", LENET], "lenet", LENET, 1000),
    (["--network", "lenet", "--batch", "500"], "lenet-b500", LENET, 500),
    (["--layers", ",".join(["dense8"] * 20)], "cnn-", ",".join(["dense8"] * 20), 1000),   # too long: a hash
])
def test_layers_name_a_cnn_of_that_spec(tmp_path, argv, name, layers, batch):
    s = settings(tmp_path, "--ranks", "1,2", "--parallel", "data,none", *argv)
    net = s.network
    assert net.name.startswith(name) and len(net.name) <= scaling.MAX_NAME and (net.layers, net.batch) == (layers, batch)
    assert re.fullmatch(r"[\w.-]+", net.name)                    # a file name
    runs = plan(s)
    assert [r.name.removeprefix(net.name) for r in runs] == ["-f32-r1", "-f32-r2-auto", "-f32-r2-auto-none", "-f64-r1",
                                                             "-f64-r2-auto", "-f64-r2-auto-none"]
    command = runs[1].command
    spec = ["--model", "lenet"] if layers == LENET else ["--layers", layers]
    assert command[6:10] == [*spec, "--batch", str(batch)] and command[command.index("--parallel") + 1] == "data"


def test_weak_plan_grows_the_batch_and_checks_each_against_one_rank_at_it(tmp_path):
    s = settings(tmp_path, "--weak", "--ranks", "1,2,4", "--parallel", "data", "--allreduce", "nccl")
    runs = plan(s)
    names = [r.name for r in runs]
    assert names == ["cme213-weak-f32-r1", "cme213-weak-f32-r2-nccl", "cme213-weak-f32-r4-nccl",
                     "cme213-weak-f64-r1", "cme213-weak-f64-r1-b1600", "cme213-weak-f64-r1-b3200",
                     "cme213-weak-f64-r2-nccl", "cme213-weak-f64-r4-nccl"]
    batch = {r.name: int(r.command[r.command.index("--batch") + 1]) for r in runs}
    assert [batch[n] for n in names] == [800, 1600, 3200, 800, 1600, 3200, 1600, 3200] == [r.batch for r in runs]
    assert [r.command[r.command.index("-n") + 1] for r in runs] == ["1", "2", "4", "1", "1", "1", "2", "4"]
    assert {r.name: reference_of(r, runs).name for r in runs if r.dtype == "float64" and r.ranks > 1} == {
        "cme213-weak-f64-r2-nccl": "cme213-weak-f64-r1-b1600", "cme213-weak-f64-r4-nccl": "cme213-weak-f64-r1-b3200"}
    strong = plan(settings(tmp_path, "--ranks", "1,2,4", "--parallel", "data", "--allreduce", "nccl"))
    assert {reference_of(r, strong).name for r in strong if r.dtype == "float64"} == {"cme213-f64-r1"}
    assert {r.batch for r in strong} == {800}
    small = plan(settings(tmp_path, "--weak", "--batch", "100", "--ranks", "1,2", "--parallel", "model"))
    assert [(r.name, r.batch) for r in small] == [
        ("cme213-b100-weak-f32-r1", 100), ("cme213-b100-weak-f32-r2-auto-model", 200), ("cme213-b100-weak-f64-r1", 100),
        ("cme213-b100-weak-f64-r1-b200", 200), ("cme213-b100-weak-f64-r2-auto-model", 200)]


@pytest.mark.parametrize("version,uid,flags", [
    ("HYDRA build details:", 0, []),
    ("mpirun (Open MPI) 4.1.5", 0, ["--allow-run-as-root"]),
    ("mpirun (Open MPI) 4.1.5", 1000, []),
])
def test_open_mpi_as_root_is_allowed(tmp_path, monkeypatch, version, uid, flags):
    monkeypatch.setattr(os, "geteuid", lambda: uid)
    path = fake_mpirun(tmp_path, version)
    assert scaling.launcher(path) == [path, *flags]


# ---------------------------------------------------------------- the numbers

def run(ranks, allreduce, epoch_ms, dtype="float32", status="ok", diff=None):
    r = Run(f"r{ranks}-{allreduce}-{dtype}", ranks, allreduce, dtype, [], status, epoch_ms=epoch_ms, test_accuracy=0.8)
    r.weight_diff = diff or {}
    return r


def test_speedup_and_efficiency_use_the_median_after_the_first_epoch():
    runs = [run(1, "none", [900, 10, 11, 10]), run(2, "nccl", [500, 6, 5, 5]), run(4, "nccl", [300, 2.5, 9, 2.5]),
            run(4, "mpi", [300, 40], status="hung at exit"), run(2, "mpi", [1, 2, 3], status="failed")]
    one, two, four, four_mpi, two_mpi = rows(runs)
    assert one["ms_per_epoch"] == 10 and one["speedup"] == one["efficiency"] == 1
    assert two["ms_per_epoch"] == 5 and two["speedup"] == 2 and two["efficiency"] == 1
    assert four["ms_per_epoch"] == 2.5 and four["speedup"] == 4 and four["efficiency"] == 1
    assert four_mpi["speedup"] == 0.25 and four_mpi["efficiency"] == 10 / (4 * 40)
    assert four_mpi["status"] == "hung at exit" and four_mpi["test_accuracy"] == 0.8  # its timings count
    assert two_mpi["ms_per_epoch"] is None and two_mpi["speedup"] is None and two_mpi["test_accuracy"] is None


def test_images_per_s_and_weak_scaling_efficiency():
    one, two, four = run(1, "none", [900, 1e4, 1e4]), run(2, "nccl", [500, 6250]), run(4, "nccl", [500, 5000])
    for r, batch in ((one, 100), (two, 200), (four, 400)):     # weak: batch x R; every run an epoch of 54,000
        r.batch, r.images = batch, 54000
    rows_ = rows([one, two, four])
    assert [r["images_per_s"] for r in rows_] == [5400, 8640, 10800]
    assert [r["batch"] for r in rows_] == [100, 200, 400]
    assert [r["speedup"] for r in rows_] == [1, 1.6, 2]                     # images/s over one rank's
    assert [r["efficiency"] for r in rows_] == [1, 8640 / (2 * 5400), 10800 / (4 * 5400)]   # 1, 0.8, 0.5
    assert rows([run(1, "none", [9, 10])])[0]["images_per_s"] is None      # a log without the data set's size


def test_a_float64_check_that_ran_another_split_or_all_reduce_is_flagged():
    f32, check = run(2, "auto", [9, 9]), run(2, "auto", [9], "float64", diff={"W1": 1e-16})
    f32.parallel = check.parallel = "auto"
    f32.parallel_used, f32.allreduce_used = "model", "NCCL, overlapped with the backward pass"
    check.parallel_used, check.allreduce_used = "data", "NCCL, after the backward pass"
    (row,) = rows([f32, check])
    assert (row["parallel"], row["parallel_used"], row["allreduce_used"]) == ("auto", "model", f32.allreduce_used)
    assert row["status"] == "f64 ran split data"                         # both NCCL: the same in one word
    check.allreduce_used = "MPI staged through pinned host memory on the stream"
    assert rows([f32, check])[0]["status"] == "f64 ran split data; f64 ran all-reduce mpi-staged"


@pytest.mark.parametrize("described,word", [
    ("NCCL, overlapped with the backward pass", "nccl"), ("CUDA-aware MPI on device buffers", "mpi-cuda"),
    ("MPI staged through pinned host memory on the stream, after the backward pass", "mpi-staged"),
    ("MPI through host memory", "mpi-host"), ("none", "none"), ("gloo \x1b[2J over TCP, later", "gloo-2J-over-TCP"),
    (None, None)])
def test_a_logs_all_reduce_in_one_word(described, word):
    assert scaling.short_allreduce(described) == word


def test_no_one_rank_time_leaves_speedups_empty():
    (_, two) = rows([run(1, "none", [1, 2], status="failed"), run(2, "mpi", [5, 6])])
    assert two["ms_per_epoch"] == 6 and two["speedup"] is None and two["efficiency"] is None


def test_float64_rows_and_verdict():
    f32 = [run(1, "none", [9, 9]), run(2, "mpi", [9, 9]), run(2, "nccl", [9, 9])]
    good = [run(1, "none", [9], "float64"), run(2, "mpi", [9], "float64", diff={"W1": 1e-15, "b1": 3e-15}),
            run(2, "nccl", [9], "float64", diff={"W1": 2e-15, "b1": 0.0})]
    assert f64_verdict(f32 + good) == ("pass", 3e-15)
    table = rows(f32 + good)
    assert (table[1]["f64_max_rel_diff"], table[1]["f64_worst_parameter"]) == (3e-15, "b1")
    bad = good[:2] + [run(2, "nccl", [9], "float64", diff={"W1": 2e-7, "b1": 0.0})]
    assert f64_verdict(f32 + bad) == ("fail", 2e-7) and rows(f32 + bad)[2]["status"] == "f64 diff > 1e-07"
    missing = good[:2] + [run(2, "nccl", [], "float64", status="failed")]
    assert f64_verdict(f32 + missing)[0] == "incomplete" and rows(f32 + missing)[2]["status"] == "f64 failed"


def history(epochs: int) -> list:
    return [{"epoch": e, "loss": 0.5, "val_accuracy": 0.9} for e in range(1, epochs + 1)]


def save(path, params, epoch=2):
    checkpoint.save(path, checkpoint.Checkpoint([(np.array(w, float), np.array(b, float)) for w, b in params],
                                                epoch, {"sizes": [2, 2, 1]}, history(epoch)))
    return path


def test_weight_diffs_are_max_norm_relative_per_parameter(tmp_path):
    one = save(tmp_path / "one.npz", [([[1, -4], [2, 0]], [0.5, 0]), ([[8, 1]], [0])])
    two = save(tmp_path / "two.npz", [([[1, -4], [2, 1e-6]], [0.5, 0]), ([[8, 1]], [1e-9])])
    diffs = weight_diffs(one, two)
    assert list(diffs) == ["W1", "b1", "W2", "b2"]
    assert diffs["W1"] == pytest.approx(1e-6 / 4) and diffs["b1"] == 0 and diffs["W2"] == 0
    assert diffs["b2"] == float("inf")  # a zero reference that the other run moved
    assert weight_diffs(one, one) == dict.fromkeys(diffs, 0.0)


def test_weight_diffs_refuse_checkpoints_that_do_not_match(tmp_path):
    params = [([[1, -4], [2, 0]], [0.5, 0]), ([[8, 1]], [0])]
    one = save(tmp_path / "one.npz", params)
    with pytest.raises(NNError, match="holds epoch 1"):
        weight_diffs(one, save(tmp_path / "early.npz", params, epoch=1))
    with pytest.raises(NNError, match=re.escape("W1 is (1, 2)")):
        weight_diffs(one, save(tmp_path / "other.npz", [([[1, 2]], [0]), ([[1]], [0])]))


# ---------------------------------------------------------------- failures, with an injected runner

# nn.allreduce.describe's words, as the run log's "allreduce" holds them
ALLREDUCE_WORDS = {"mpi": "MPI through host memory", "nccl": "NCCL, overlapped with the backward pass"}


class FakeRunner:
    """Plays nn.train: writes its JSON log (and float64 checkpoint) as a behaviour per run name says.

    ok, exit (crash before the log is complete), timeout, hang (log complete, no exit), exit-after-log,
    numpy (fell back to the CPU), one-rank (each rank ran alone: mismatched MPIs), bad-weights,
    wrong-batch (trained another batch). Without --parallel or --allreduce, a run of several ranks
    takes `auto` = {dtype: (split, all-reduce)}. Its float64 weights depend on the global batch."""

    def __init__(self, behaviours, auto=None):
        self.behaviours, self.calls, self.commands = behaviours, [], {}
        self.auto = auto or {"float32": ("data", "nccl"), "float64": ("data", "nccl")}

    def __call__(self, command, output, timeout, finished, grace) -> Outcome:
        arg = lambda flag: command[command.index(flag) + 1]
        last = lambda flag: command[len(command) - 1 - command[::-1].index(flag) + 1] if flag in command else None
        ranks, epochs, log_path = int(arg("-n")), int(arg("--epochs")), Path(arg("--log"))
        batch, dtype = int(arg("--batch")), arg("--dtype")
        name = log_path.stem
        how = next((b for key, b in self.behaviours.items() if name.endswith(key)), "ok")
        self.calls.append((name, timeout))
        self.commands[name] = command
        assert not finished() and not log_path.exists()  # the driver removed a stale log
        complete = how not in ("exit", "timeout")
        epoch_ms = [1000.0] + [10.0 / ranks] * (epochs - 1)
        split, reduce = (last("--parallel") or self.auto[dtype][0], last("--allreduce") or self.auto[dtype][1])
        split, reduce = ("data", "none") if ranks == 1 else (split, "none" if split == "none" else reduce)
        log = {"config": {"epochs": epochs, "backend": "numpy" if how == "numpy" else "cupy",
                          "batch": batch + (how == "wrong-batch")},
               "data": {"train": 54000, "val": 6000, "test": 10000},
               "environment": {"ranks": 1 if how == "one-rank" else ranks, "parallel": split,
                               "allreduce": ALLREDUCE_WORDS.get(reduce, reduce)},
               "epochs": [{"epoch": e + 1, "ms": {"train": t}} for e, t in enumerate(epoch_ms[:epochs if complete else 1])],
               "final": {"val_accuracy": 0.8, "test_accuracy": 0.85} if complete else None}
        log_path.write_text(json.dumps(log))
        assert finished() == complete
        if "--checkpoint" in command:
            w = np.full((3, 784), 0.5 + 1e-6 * (batch - 800)) + (1e-3 if how == "bad-weights" else 1e-16 * ranks)  # W1
            checkpoint.save(arg("--checkpoint"), checkpoint.Checkpoint([(w, np.ones(3))], epochs, {}, history(epochs)))
        output.write_text({"exit": "epoch 1\nerror: rank 1 of 2: out of memory\n====\n= BAD TERMINATION\n====\n",
                           "timeout": "epoch 1\n", "exit-after-log": "RuntimeError: NCCL destroy failed\n"}.get(how, "done\n"))
        return {"exit": Outcome(1, "", 3.0), "timeout": Outcome(None, f"timeout after {timeout:g} s", timeout),
                "hang": Outcome(None, f"no exit {grace:g} s after its log was complete", 12.0),
                "exit-after-log": Outcome(134, "", 4.0)}.get(how, Outcome(0, "", 2.0))


def scaling_run(tmp_path, capsys, behaviours, *argv, auto=None, summary="scaling-cme213.json"):
    runner = FakeRunner(behaviours, auto)
    code = main(["--mpirun", fake_mpirun(tmp_path), "--out", str(tmp_path / "out"), *argv], runner=runner)
    found = json.loads((tmp_path / "out" / summary).read_text())
    return code, found, {r["name"]: r for r in found["runs"]}, capsys.readouterr().out, runner


def test_every_run_ok_passes(tmp_path, capsys):
    code, summary, runs, out, _ = scaling_run(tmp_path, capsys, {}, *EXPLICIT)
    assert code == 0 and summary["f64_check"] == "pass" and summary["f64_worst_rel_diff"] < 1e-15
    assert [(r["ranks"], r["allreduce"], r["speedup"], r["efficiency"]) for r in summary["rows"]] == [
        (1, "none", 1, 1), (2, "mpi", 2, 1), (2, "nccl", 2, 1), (4, "mpi", 4, 1), (4, "nccl", 4, 1)]
    assert summary["rows"][0]["ms_per_epoch"] == 10 and summary["rows"][0]["test_accuracy"] == 0.85
    assert summary["command"].startswith("python -m nn.scaling --mpirun ") and "commit" in summary["git"]
    assert [r["images_per_s"] for r in summary["rows"]] == [5.4e6, 1.08e7, 1.08e7, 2.16e7, 2.16e7]  # 54,000 images
    assert summary["scaling"] == "strong" and summary["network"]["model"] == "mlp"
    table = out.rstrip().splitlines()[-6:]  # the table is printed last
    assert table[0].split()[:6] == ["ranks", "split", "allreduce", "sent/step", "ms/epoch", "images/s"]
    assert table[1].split() == ["1", "data", "none", "-", "10.00", "5400000", "1.00", "1.00", "85.00%", "reference", "ok"]
    assert table[3].split()[:3] == ["2", "data", "nccl"]    # what the log says ran
    assert table[5].split()[:8] == ["4", "data", "nccl", "-", "2.50", "21600000", "4.00", "1.00"] and table[5].endswith("ok")
    assert out.rstrip().splitlines()[-8].startswith("strong scaling, cme213: 784-1000-10 sigmoid, batch 800; cupy backend")


def test_auto_passes_nothing_and_records_what_the_log_says_ran(tmp_path, capsys):
    auto = {"float32": ("model", "nccl"), "float64": ("data", "mpi")}    # auto's choice depends on the dtype
    code, summary, runs, out, runner = scaling_run(tmp_path, capsys, {}, "--ranks", "1,2", auto=auto)
    assert code == 0 and list(runs) == ["cme213-f32-r1", "cme213-f32-r2-auto-auto", "cme213-f64-r1",
                                        "cme213-f64-r2-auto-auto"]
    f32 = runner.commands["cme213-f32-r2-auto-auto"]
    assert "--parallel" not in f32 and "--allreduce" not in f32          # nn.train's defaults
    f64 = runner.commands["cme213-f64-r2-auto-auto"]
    assert f64[-2:] == ["--parallel", "model"] and "--allreduce" not in f64   # the float32 run's split, checked
    one, two = summary["rows"]
    assert (one["parallel_used"], one["allreduce_used"]) == ("data", "none")
    assert (two["parallel"], two["parallel_used"]) == ("auto", "model")
    assert (two["allreduce"], two["allreduce_used"]) == ("auto", "NCCL, overlapped with the backward pass")
    assert two["status"] == "f64 ran all-reduce mpi-host"                 # the split was pinned, the all-reduce not
    assert runs["cme213-f64-r2-auto-auto"]["parallel_used"] == "model"
    assert "[2/4] cme213-f32-r2-auto-auto: ok (auto: model, nccl), 5.00 ms/epoch, 10800000 images/s" in out
    assert out.rstrip().splitlines()[-1].split()[:3] == ["2", "auto:model", "auto:nccl"]


def test_auto_float64_check_is_not_pinned_when_its_float32_run_failed(tmp_path, capsys):
    auto = {"float32": ("model", "nccl"), "float64": ("data", "nccl")}
    code, summary, runs, _, runner = scaling_run(tmp_path, capsys, {"f32-r2-auto-auto": "exit"}, "--ranks", "1,2",
                                                 auto=auto)
    assert code == 1 and "--parallel" not in runner.commands["cme213-f64-r2-auto-auto"]
    assert runs["cme213-f64-r2-auto-auto"]["parallel_used"] == "data" and summary["f64_check"] == "pass"
    assert summary["rows"][1]["status"] == "failed" and summary["rows"][1]["parallel_used"] is None


def test_weak_scaling_with_a_fake_runner(tmp_path, capsys):
    # the fake's float64 weights depend on the global batch: a check against one rank at 800 would fail
    code, summary, runs, out, runner = scaling_run(tmp_path, capsys, {}, "--weak", "--ranks", "1,2,4",
                                                   "--parallel", "data", "--allreduce", "nccl",
                                                   summary="scaling-cme213-weak.json")
    assert code == 0 and summary["scaling"] == "weak" and summary["settings"]["weak"] is True
    assert summary["f64_check"] == "pass" and summary["f64_worst_rel_diff"] < 1e-15
    assert [(r["ranks"], r["batch"], r["f64_reference"]) for r in summary["rows"]] == [
        (1, 800, None), (2, 1600, "cme213-weak-f64-r1-b1600"), (4, 3200, "cme213-weak-f64-r1-b3200")]
    assert [r["efficiency"] for r in summary["rows"]] == [1, 1, 1] and "weak scaling" in summary["metrics"]["efficiency"]
    lines = out.rstrip().splitlines()
    assert lines[-6].startswith("weak scaling, cme213: 784-1000-10 sigmoid, batch 800 a rank (R x 800 in all);")
    assert "float64 check against one rank at the same global batch" in lines[-5]
    assert lines[-4].split()[:9] == ["ranks", "batch", "split", "allreduce", "sent/step", "ms/epoch", "images/s",
                                    "speed-up", "weak"]
    assert lines[-1].split()[:9] == ["4", "3200", "data", "nccl", "-", "2.50", "21600000", "4.00", "1.00"]
    assert f"logs {tmp_path / 'out'}/cme213-weak-*.log" in out
    # a reference of its own that fails leaves its row's check incomplete, and says so
    code, summary, _, _, _ = scaling_run(tmp_path, capsys, {"f64-r1-b1600": "exit"}, "--weak", "--ranks", "1,2",
                                         "--parallel", "data", "--allreduce", "nccl", summary="scaling-cme213-weak.json")
    assert code == 1 and summary["f64_check"] == "incomplete"
    assert summary["rows"][1]["status"] == "f64 reference failed" and summary["rows"][1]["f64_max_rel_diff"] is None


def test_lenet_with_a_fake_runner(tmp_path, capsys):
    code, summary, runs, out, runner = scaling_run(tmp_path, capsys, {}, "--network", "lenet", "--ranks", "1,2",
                                                   "--epochs", "3", summary="scaling-lenet.json")
    assert code == 0 and summary["f64_check"] == "pass"
    assert summary["network"] == {"name": "lenet", "layers": LENET, "batch": 1000, "images": 54000, "model": "cnn"}
    assert runner.commands["lenet-f32-r2-auto-auto"][6:8] == ["--model", "lenet"]
    head = out.rstrip().splitlines()[-5]
    assert head.startswith(f"strong scaling, lenet: CNN {LENET} + dense10, relu, Adam, batch 1000;") and "784-" not in head


def test_a_run_that_trained_another_batch_fails(tmp_path, capsys):
    code, _, runs, _, _ = scaling_run(tmp_path, capsys, {"f32-r2-mpi": "wrong-batch"}, "--ranks", "1,2", *EXPLICIT)
    assert code == 1 and runs["cme213-f32-r2-mpi"]["status"] == "failed"
    assert runs["cme213-f32-r2-mpi"]["reason"] == "trained batch 801, not 800"


def test_failures_and_hangs_are_recorded_and_the_others_run(tmp_path, capsys):
    code, summary, runs, out, runner = scaling_run(tmp_path, capsys, {
        "f32-r2-mpi": "exit", "f32-r2-nccl": "hang", "f32-r4-mpi": "timeout", "f32-r4-nccl": "exit-after-log",
        "f64-r2-nccl": "bad-weights", "f64-r4-nccl": "one-rank"}, "--timeout", "77", "--exit-grace", "9", *EXPLICIT)
    assert code == 1 and len(runner.calls) == 10 and {t for _, t in runner.calls} == {77}
    assert runs["cme213-f32-r2-mpi"]["status"] == "failed"
    assert runs["cme213-f32-r2-mpi"]["reason"] == "exit 1: error: rank 1 of 2: out of memory"  # not Hydra's banner
    assert runs["cme213-f32-r2-nccl"]["status"] == "hung at exit"
    assert runs["cme213-f32-r2-nccl"]["reason"] == "no exit 9 s after its log was complete"
    assert runs["cme213-f32-r2-nccl"]["ms_per_epoch"] == 5  # the timings of a run hung at exit count
    assert runs["cme213-f32-r4-mpi"]["status"] == "failed"
    assert runs["cme213-f32-r4-mpi"]["reason"] == "timeout after 77 s: epoch 1"
    assert runs["cme213-f32-r4-nccl"]["status"] == "exit error"
    assert runs["cme213-f32-r4-nccl"]["reason"] == "exit 134 after a complete log: RuntimeError: NCCL destroy failed"
    assert runs["cme213-f64-r4-nccl"]["status"] == "failed" and "ran as 1 rank(s), not 4" in runs["cme213-f64-r4-nccl"]["reason"]
    assert summary["f64_check"] == "fail" and summary["f64_worst_rel_diff"] == pytest.approx(1e-3 / 0.5, rel=1e-6)
    status = {(r["ranks"], r["allreduce"]): r["status"] for r in summary["rows"]}
    assert status == {(1, "none"): "ok", (2, "mpi"): "failed", (2, "nccl"): "hung at exit; f64 diff > 1e-07",
                      (4, "mpi"): "failed", (4, "nccl"): "exit error; f64 failed"}
    assert "  cme213-f32-r2-mpi: failed: exit 1: error: rank 1 of 2: out of memory" in out


def test_a_cpu_fallback_counts_as_failed(tmp_path, capsys):
    code, summary, runs, _, _ = scaling_run(tmp_path, capsys, {"f32-r1": "numpy"}, "--ranks", "1")
    assert code == 1 and runs["cme213-f32-r1"]["status"] == "failed"
    assert runs["cme213-f32-r1"]["reason"].startswith("ran on the numpy backend, not cupy")
    assert summary["rows"][0]["ms_per_epoch"] is None and summary["f64_check"] == "none"


def test_time_limit_skips_what_would_not_fit(tmp_path, capsys, monkeypatch):
    clock = itertools.count(0, 40)  # every look at the clock: 40 s later
    monkeypatch.setattr(scaling.time, "monotonic", lambda: next(clock))
    code, _, runs, _, runner = scaling_run(tmp_path, capsys, {}, "--time-limit", "100", "--ranks", "1,2", *EXPLICIT)
    assert [t for _, t in runner.calls] == [100 - 40, 100 - 80]
    assert [r["status"] for r in runs.values()] == ["ok", "ok", "skipped", "skipped", "skipped", "skipped"]
    assert code == 1


# ---------------------------------------------------------------- the real runner, on small processes

def python(code) -> list[str]:
    return [sys.executable, "-c", code]


def test_run_process_records_exit_code_and_output(tmp_path):
    out = tmp_path / "out.log"
    outcome = run_process(python("import sys; print('hi'); sys.stderr.write('bad\\n'); sys.exit(3)"), out, 30,
                          lambda: False, 5)
    assert (outcome.returncode, outcome.killed) == (3, "") and out.read_text().split() == ["hi", "bad"]


# A parent that starts a child in a session of its own ignoring SIGTERM, as Hydra's proxy and ranks do.
STUBBORN = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                  "open({pid!r}, 'w').write(str(os.getpid())); time.sleep(60)"], start_new_session=True)
{finish}
time.sleep(60)
"""


@pytest.mark.parametrize("finish,killed", [
    ("", "timeout after 2 s"),
    ("open({done!r}, 'w').close()", "no exit 0.5 s after its log was complete"),
])
def test_run_process_ends_a_hung_run_and_everything_under_it(tmp_path, monkeypatch, finish, killed):
    monkeypatch.setattr(scaling, "KILL_WAIT_S", 0.5)
    pid, done = tmp_path / "pid", tmp_path / "done"
    code = STUBBORN.format(pid=str(pid), finish=finish.format(done=str(done)))
    start = time.monotonic()
    outcome = run_process(python(code), tmp_path / "out.log", 2, done.exists, 0.5)
    assert outcome.returncode is None and outcome.killed == killed
    assert time.monotonic() - start < 5
    assert not scaling._running(int(pid.read_text()))


# ---------------------------------------------------------------- a real run: NumPy, mpirun, fake data

@needs_mpi
def test_numpy_run_under_mpirun(tmp_path, capsys):
    data = write_dataset(tmp_path / "data", n_train=6_100, n_test=40)  # 100 train rows
    code = main(["--network", "grading", "--backend", "numpy", "--ranks", "1,2", "--epochs", "2", "--f64-epochs", "2",
                 "--parallel", "data,model", "--allreduce", "mpi,nccl", "--batch", "30", "--data-dir", str(data),
                 "--extra-args", "--dataset mnist --train-size 100 --hidden 8",
                 "--out", str(tmp_path / "out"), "--mpirun", MPIRUN, "--timeout", "60"])
    summary = json.loads((tmp_path / "out" / "scaling-grading-b30.json").read_text())
    runs = {r["name"]: r for r in summary["runs"]}
    assert runs["grading-b30-f32-r2-mpi"]["status"] == "ok" and runs["grading-b30-f64-r2-mpi"]["status"] == "ok"
    assert summary["f64_check"] == "incomplete" and summary["f64_worst_rel_diff"] <= 1e-12  # nccl's check failed
    assert list(runs["grading-b30-f64-r2-mpi"]["weight_diff"]) == ["W1", "b1", "W2", "b2"]
    model = runs["grading-b30-f64-r2-mpi-model"]     # the hidden units split: one all-reduce of 30 x 10 logits
    assert model["status"] == "ok" and max(model["weight_diff"].values()) <= 1e-12
    assert model["sent_bytes"] == 30 * 10 * 8                                     # --hidden 8
    assert runs["grading-b30-f64-r2-mpi"]["sent_bytes"] == (785 * 8 + 9 * 10) * 8
    nccl = runs["grading-b30-f32-r2-nccl"]  # the NumPy backend has no NCCL: a real failure, recorded
    assert nccl["status"] == "failed" and "--allreduce nccl needs a GPU backend" in nccl["reason"]
    assert model["parallel_used"] == "model"
    assert runs["grading-b30-f32-r2-mpi"]["allreduce_used"] == "MPI through host memory"
    assert runs["grading-b30-f32-r2-mpi"]["images"] == 100 and runs["grading-b30-f32-r2-mpi"]["images_per_s"] > 0
    assert code == 1 and (tmp_path / "out" / "grading-b30-f32-r2-nccl.log").exists()
    assert capsys.readouterr().out.rstrip().splitlines()[-1].split()[:3] == ["2", "model", "nccl"]


@needs_mpi
def test_weak_cnn_run_under_mpirun(tmp_path, capsys):
    data = write_dataset(tmp_path / "data", n_train=6_080, n_test=20)  # 80 train rows
    code = main(["--layers", "conv2x3,pool2,dense8", "--weak", "--batch", "20", "--backend", "numpy", "--ranks", "1,2",
                 "--parallel", "data", "--allreduce", "mpi", "--epochs", "2", "--f64-epochs", "1",
                 "--data-dir", str(data), "--extra-args", "--dataset mnist --train-size 80",
                 "--out", str(tmp_path / "out"), "--mpirun", MPIRUN, "--timeout", "60"])
    out = tmp_path / "out"
    summary = json.loads((out / "scaling-cnn-conv2x3-pool2-dense8-b20-weak.json").read_text())
    runs = {r["name"]: r for r in summary["runs"]}
    stem = "cnn-conv2x3-pool2-dense8-b20-weak"
    assert code == 0 and all(r["status"] == "ok" for r in runs.values()), runs
    assert summary["f64_check"] == "pass" and summary["f64_worst_rel_diff"] <= 1e-12
    assert list(runs[f"{stem}-f64-r2-mpi"]["weight_diff"]) == ["W1", "b1", "W2", "b2", "W3", "b3"]  # conv, dense, output
    assert [(r["batch"], r["images"]) for r in runs.values()] == [(20, 80), (40, 80), (20, 80), (40, 80), (40, 80)]
    assert summary["rows"][1]["images_per_s"] > 0 and summary["rows"][1]["parallel_used"] == "data"
    # the reference matters: one rank at the per-rank batch computes other weights
    assert max(weight_diffs(out / f"{stem}-f64-r1.npz", out / f"{stem}-f64-r2-mpi.npz").values()) > 1e-3


@needs_mpi
def test_run_process_ends_ranks_hung_at_exit_under_mpirun(tmp_path, monkeypatch):
    monkeypatch.setattr(scaling, "KILL_WAIT_S", 0.5)
    code = ("import os, signal, time; from mpi4py import MPI; rank = MPI.COMM_WORLD.Get_rank(); "
            f"open({str(tmp_path)!r} + f'/pid{{rank}}', 'w').write(str(os.getpid())); MPI.COMM_WORLD.Barrier(); "
            f"rank or open({str(tmp_path / 'done')!r}, 'w').close(); "
            "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)")
    outcome = run_process([MPIRUN, "-n", "2", *python(code)], tmp_path / "out.log", 30, (tmp_path / "done").exists, 0.5)
    assert outcome.killed == "no exit 0.5 s after its log was complete" and outcome.wall_s < 10
    assert not any(scaling._running(int((tmp_path / f"pid{rank}").read_text())) for rank in (0, 1))


def test_out_files_of_another_kind_are_refused_before_any_run_and_its_own_are_replaced(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "cme213-f32-r1.log").write_text("my notes")
    runner = FakeRunner({})
    assert main(["--mpirun", fake_mpirun(tmp_path), "--out", str(out), *EXPLICIT], runner=runner) == 2
    err = capsys.readouterr().err
    assert err == f"error: --out {out / 'cme213-f32-r1.log'}: cannot be written: exists\n" and not runner.calls
    assert (out / "cme213-f32-r1.log").read_text() == "my notes"
    (out / "cme213-f32-r1.log").unlink()
    assert scaling_run(tmp_path, capsys, {}, *EXPLICIT)[0] == 0
    assert scaling_run(tmp_path, capsys, {}, *EXPLICIT)[0] == 0           # an earlier run's files: replaced
    (out / "cme213-f64-r2-mpi.log").unlink()
    os.mkfifo(out / "cme213-f64-r2-mpi.log")
    assert main(["--mpirun", fake_mpirun(tmp_path), "--out", str(out), *EXPLICIT], runner=FakeRunner({})) == 2
    assert "cme213-f64-r2-mpi.log: cannot be written: exists and cannot be read back (a FIFO" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--ranks", "1,100000"], "--ranks: 100000 ranks; at most 1024"),
    (["--layers", "conv4x5", "--extra-args", "--hidden 8"],
     "nn.train would refuse cnn-conv4x5-f32-r1: --hidden is for the MLP; a CNN takes --layers, He init"),
    (["--extra-args", "--optimizer adam"], "nn.train would refuse cme213-f32-r1: --optimizer adam is for CNNs"),
    (["--parallel", "data,model", "--allreduce", "mpi", "--extra-args=--no-overlap"],
     "nn.train would refuse cme213-f32-r2-mpi-model: --no-overlap is for --parallel data on a GPU backend"),
    (["--network", "relu-h32-b32", "--ranks", "1,64", "--parallel", "data,model"],     # refused by each rank at once
     "nn.train would refuse relu-h32-b32-f32-r64-auto-model: --parallel model: 64 ranks need at least 64 hidden"),
    (["--ranks", "1,2", "--parallel", "model", "--extra-args", "--hidden 8 8"],
     "nn.train would refuse cme213-f32-r2-auto-model: --parallel model splits one hidden layer; this network has 2"),
])
def test_more_bad_arguments(tmp_path, capsys, argv, message):
    runner = FakeRunner({})
    assert main(["--mpirun", fake_mpirun(tmp_path), "--out", str(tmp_path / "out"), *argv], runner=runner) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {message}") and not runner.calls and not (tmp_path / "out").exists()


def test_one_rank_alone_passes_without_a_float64_check(tmp_path, capsys):
    """--ranks 1 exited 1: its float64 check, with no run of several ranks to check, was "incomplete"."""
    code, summary, runs, _, _ = scaling_run(tmp_path, capsys, {}, "--ranks", "1")
    assert code == 0 and summary["f64_check"] == "none" and list(runs) == ["cme213-f32-r1"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
@pytest.mark.usefixtures("default_handlers")
def test_a_stop_signal_keeps_the_finished_runs_and_names_itself(tmp_path, capsys, sig):
    """SIGTERM and SIGHUP ended nn.scaling with 143/129 and no line, its summary of the finished runs
    unsaid; they stop it as Ctrl-C does (the runner ends the run in progress as it unwinds)."""
    runner = FakeRunner({})

    def stopped_in_the_second_run(command, *args):
        if runner.calls:
            os.kill(os.getpid(), sig)
        return runner(command, *args)

    code = main(["--mpirun", fake_mpirun(tmp_path), "--out", str(tmp_path / "out"), *EXPLICIT],
                runner=stopped_in_the_second_run)
    err = capsys.readouterr().err
    words = "interrupted" if sig == signal.SIGINT else f"interrupted by {signal.Signals(sig).name}"
    summary = tmp_path / "out" / "scaling-cme213.json"
    assert (code, err) == (128 + sig, f"{words}; 1 of 10 runs finished, in {summary}\n")
    assert [r["name"] for r in json.loads(summary.read_text())["runs"] if r["status"] == "ok"] == ["cme213-f32-r1"]


@pytest.mark.usefixtures("default_handlers")
def test_a_stop_signal_in_the_first_run_says_nothing_was_written(tmp_path, capsys):
    """It named the summary as holding the finished runs: there was none, and no summary."""
    code = main(["--mpirun", fake_mpirun(tmp_path), "--out", str(tmp_path / "out"), *EXPLICIT],
                runner=lambda *args: os.kill(os.getpid(), signal.SIGTERM) or time.sleep(5))
    summary = tmp_path / "out" / "scaling-cme213.json"
    assert (code, capsys.readouterr().err) == (143, f"interrupted by SIGTERM; no run had finished, {summary} was not "
                                                    f"written\n") and not summary.exists()
