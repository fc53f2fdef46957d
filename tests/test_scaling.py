"""nn.scaling on the CPU: arguments, the plan, speed-up and efficiency, the float64 weight check,
failed and hung runs (an injected runner, and the real one on small Python processes), and one real
run on the NumPy backend under mpirun."""
import itertools
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fake_idx import write_dataset
from nn import checkpoint, scaling
from nn.errors import NNError
from nn.scaling import Outcome, Run, build_parser, f64_verdict, main, plan, resolve, rows, run_process, weight_diffs
from run_train import MPIRUN, ROOT

needs_mpi = pytest.mark.skipif(MPIRUN is None, reason="no mpirun (pip install mpich)")


def fake_mpirun(tmp_path, version="HYDRA build details:") -> str:
    """An executable that answers --version like `version`'s launcher (the injected runners never start it)."""
    path = tmp_path / "mpirun"
    path.write_text(f"#!/bin/sh\necho '{version}'\n")
    path.chmod(0o755)
    return str(path)


def settings(tmp_path, *argv):
    return resolve(build_parser().parse_args(["--mpirun", fake_mpirun(tmp_path), "--out", str(tmp_path / "out"), *argv]))


# ---------------------------------------------------------------- arguments and the plan

@pytest.mark.parametrize("args,message", [
    (["--network", "huge"], "--network: unknown 'huge'; choose from cme213"),
    (["--ranks", "1,0"], "argument --ranks: 0 must be > 0"),
    (["--ranks", "1,two"], "argument --ranks: 'two' is not an integer"),
    (["--ranks", "2,4"], "--ranks must include 1"),
    (["--allreduce", "mpi,gloo"], "argument --allreduce: unknown 'gloo'; choose from mpi, nccl"),
    (["--epochs", "1"], "--epochs must be >= 2"),
    (["--extra-args", "--lr '0.1"], "--extra-args: No closing quotation"),
    (["--mpirun", "/nonexistent/mpirun"], "no MPI launcher '/nonexistent/mpirun'"),
])
def test_bad_arguments_are_one_line_and_exit_2(tmp_path, capsys, args, message):
    assert main(["--out", str(tmp_path), *args], runner=None) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: ") and message in line


def test_bad_argument_from_the_command_line():
    result = subprocess.run([sys.executable, "-m", "nn.scaling", "--network", "huge"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.startswith("error: --network: unknown") and not result.stdout


def test_lists_are_sorted_and_deduplicated(tmp_path):
    s = settings(tmp_path, "--ranks", "4,1,2,2", "--allreduce", "nccl,mpi,nccl")
    assert s.ranks == (1, 2, 4) and s.allreduces == ("nccl", "mpi")
    assert (s.network.hidden, s.network.batch) == (1000, 800)
    large = settings(tmp_path, "--network", "large").network
    assert (large.hidden, large.batch) == (4096, 8192)


def test_plan_times_float32_first_then_checks_float64(tmp_path):
    s = settings(tmp_path, "--ranks", "1,2,4", "--epochs", "5", "--extra-args", "--lr 0.5 --precision tf32")
    runs = plan(s)
    assert [r.name for r in runs] == [f"cme213-f{bits}-{tail}" for bits in ("32", "64")
                                      for tail in ("r1", "r2-mpi", "r2-nccl", "r4-mpi", "r4-nccl")]
    one, four_nccl, check = runs[0], runs[4], runs[9]
    assert one.command[:3] == [s.launch[0], "-n", "1"] and "--allreduce" not in one.command
    assert four_nccl.command[1:3] == ["-n", "4"] and four_nccl.command[four_nccl.command.index("--allreduce") + 1] == "nccl"
    assert ["-m", "nn.train", "--hidden", "1000", "--batch", "800"] == four_nccl.command[4:10]
    assert "--use-tuned" in one.command and one.command[-4:] == ["--lr", "0.5", "--precision", "tf32"]  # extras win
    assert check.command[-2:] == ["--precision", "fp32"]         # but a float64 check's GEMMs stay FP32-accurate
    assert one.command[one.command.index("--epochs") + 1] == "5" and "--checkpoint" not in one.command
    assert check.command[check.command.index("--dtype") + 1] == "float64"
    assert check.command[check.command.index("--epochs") + 1] == "2"
    assert check.command[check.command.index("--checkpoint") + 1] == str(s.out / "cme213-f64-r4-nccl.npz")
    assert check.command[check.command.index("--log") + 1] == str(s.out / "cme213-f64-r4-nccl.json")


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

class FakeRunner:
    """Plays nn.train: writes its JSON log (and float64 checkpoint) as a behaviour per run name says.

    ok, exit (crash before the log is complete), timeout, hang (log complete, no exit), exit-after-log,
    numpy (fell back to the CPU), one-rank (each rank ran alone: mismatched MPIs), bad-weights."""

    def __init__(self, behaviours):
        self.behaviours, self.calls = behaviours, []

    def __call__(self, command, output, timeout, finished, grace) -> Outcome:
        arg = lambda flag: command[command.index(flag) + 1]
        ranks, epochs, log_path = int(arg("-n")), int(arg("--epochs")), Path(arg("--log"))
        name = log_path.stem
        how = next((b for key, b in self.behaviours.items() if name.endswith(key)), "ok")
        self.calls.append((name, timeout))
        assert not finished() and not log_path.exists()  # the driver removed a stale log
        complete = how not in ("exit", "timeout")
        epoch_ms = [1000.0] + [10.0 / ranks] * (epochs - 1)
        log = {"config": {"epochs": epochs, "backend": "numpy" if how == "numpy" else "cupy"},
               "environment": {"ranks": 1 if how == "one-rank" else ranks},
               "epochs": [{"epoch": e + 1, "ms": {"train": t}} for e, t in enumerate(epoch_ms[:epochs if complete else 1])],
               "final": {"val_accuracy": 0.8, "test_accuracy": 0.85} if complete else None}
        log_path.write_text(json.dumps(log))
        assert finished() == complete
        if "--checkpoint" in command:
            w = np.full((3, 784), 0.5) + (1e-3 if how == "bad-weights" else 1e-16 * ranks)  # W1: (3, 784) float64
            checkpoint.save(arg("--checkpoint"), checkpoint.Checkpoint([(w, np.ones(3))], epochs, {}, history(epochs)))
        output.write_text({"exit": "epoch 1\nerror: rank 1 of 2: out of memory\n====\n= BAD TERMINATION\n====\n",
                           "timeout": "epoch 1\n", "exit-after-log": "RuntimeError: NCCL destroy failed\n"}.get(how, "done\n"))
        return {"exit": Outcome(1, "", 3.0), "timeout": Outcome(None, f"timeout after {timeout:g} s", timeout),
                "hang": Outcome(None, f"no exit {grace:g} s after its log was complete", 12.0),
                "exit-after-log": Outcome(134, "", 4.0)}.get(how, Outcome(0, "", 2.0))


def scaling_run(tmp_path, capsys, behaviours, *argv):
    runner = FakeRunner(behaviours)
    code = main(["--mpirun", fake_mpirun(tmp_path), "--out", str(tmp_path / "out"), *argv], runner=runner)
    summary = json.loads((tmp_path / "out" / "scaling-cme213.json").read_text())
    return code, summary, {r["name"]: r for r in summary["runs"]}, capsys.readouterr().out, runner


def test_every_run_ok_passes(tmp_path, capsys):
    code, summary, runs, out, _ = scaling_run(tmp_path, capsys, {})
    assert code == 0 and summary["f64_check"] == "pass" and summary["f64_worst_rel_diff"] < 1e-15
    assert [(r["ranks"], r["allreduce"], r["speedup"], r["efficiency"]) for r in summary["rows"]] == [
        (1, "none", 1, 1), (2, "mpi", 2, 1), (2, "nccl", 2, 1), (4, "mpi", 4, 1), (4, "nccl", 4, 1)]
    assert summary["rows"][0]["ms_per_epoch"] == 10 and summary["rows"][0]["test_accuracy"] == 0.85
    assert summary["command"].startswith("python -m nn.scaling --mpirun ") and "commit" in summary["git"]
    table = out.rstrip().splitlines()[-6:]  # the table is printed last
    assert table[0].split()[:5] == ["ranks", "split", "allreduce", "sent/step", "ms/epoch"]
    assert table[1].split() == ["1", "data", "none", "-", "10.00", "1.00", "1.00", "85.00%", "reference", "ok"]
    assert table[5].split()[:7] == ["4", "data", "nccl", "-", "2.50", "4.00", "1.00"] and table[5].endswith("ok")


def test_failures_and_hangs_are_recorded_and_the_others_run(tmp_path, capsys):
    code, summary, runs, out, runner = scaling_run(tmp_path, capsys, {
        "f32-r2-mpi": "exit", "f32-r2-nccl": "hang", "f32-r4-mpi": "timeout", "f32-r4-nccl": "exit-after-log",
        "f64-r2-nccl": "bad-weights", "f64-r4-nccl": "one-rank"}, "--timeout", "77", "--exit-grace", "9")
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
    assert summary["rows"][0]["ms_per_epoch"] is None and summary["f64_check"] == "incomplete"


def test_time_limit_skips_what_would_not_fit(tmp_path, capsys, monkeypatch):
    clock = itertools.count(0, 40)  # every look at the clock: 40 s later
    monkeypatch.setattr(scaling.time, "monotonic", lambda: next(clock))
    code, _, runs, _, runner = scaling_run(tmp_path, capsys, {}, "--time-limit", "100", "--ranks", "1,2")
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
                 "--parallel", "data,model", "--data-dir", str(data), "--extra-args", "--dataset mnist --train-size 100 --batch 30 --hidden 8",
                 "--out", str(tmp_path / "out"), "--mpirun", MPIRUN, "--timeout", "60"])
    summary = json.loads((tmp_path / "out" / "scaling-grading.json").read_text())
    runs = {r["name"]: r for r in summary["runs"]}
    assert runs["grading-f32-r2-mpi"]["status"] == "ok" and runs["grading-f64-r2-mpi"]["status"] == "ok"
    assert summary["f64_check"] == "incomplete" and summary["f64_worst_rel_diff"] <= 1e-12  # nccl's check failed
    assert list(runs["grading-f64-r2-mpi"]["weight_diff"]) == ["W1", "b1", "W2", "b2"]
    model = runs["grading-f64-r2-mpi-model"]     # the hidden units split: one all-reduce of 30 x 10 logits
    assert model["status"] == "ok" and max(model["weight_diff"].values()) <= 1e-12
    assert model["sent_bytes"] == 30 * 10 * 8 and runs["grading-f64-r2-mpi"]["sent_bytes"] == (785 * 8 + 9 * 10) * 8   # --hidden 8
    nccl = runs["grading-f32-r2-nccl"]  # the NumPy backend has no NCCL: a real failure, recorded
    assert nccl["status"] == "failed" and "--allreduce nccl needs a GPU backend" in nccl["reason"]
    assert code == 1 and (tmp_path / "out" / "grading-f32-r2-nccl.log").exists()
    assert capsys.readouterr().out.rstrip().splitlines()[-1].split()[:3] == ["2", "model", "nccl"]


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
    assert main(["--mpirun", fake_mpirun(tmp_path), "--out", str(out)], runner=runner) == 2
    err = capsys.readouterr().err
    assert err == f"error: --out {out / 'cme213-f32-r1.log'}: cannot be written: exists\n" and not runner.calls
    assert (out / "cme213-f32-r1.log").read_text() == "my notes"
    (out / "cme213-f32-r1.log").unlink()
    assert scaling_run(tmp_path, capsys, {})[0] == 0
    assert scaling_run(tmp_path, capsys, {})[0] == 0           # an earlier run's files: replaced
    (out / "cme213-f64-r2-mpi.log").unlink()
    os.mkfifo(out / "cme213-f64-r2-mpi.log")
    assert main(["--mpirun", fake_mpirun(tmp_path), "--out", str(out)], runner=FakeRunner({})) == 2
    assert "cme213-f64-r2-mpi.log: cannot be written: exists and cannot be read back (a FIFO" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--ranks", "1,100000"], "--ranks: 100000 ranks; at most 1024"),
])
def test_more_bad_arguments(tmp_path, capsys, argv, message):
    assert main(["--mpirun", fake_mpirun(tmp_path), "--out", str(tmp_path / "out"), *argv], runner=FakeRunner({})) == 2
    assert capsys.readouterr().err == f"error: {message}\n"
