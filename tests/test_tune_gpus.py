"""autogemm tune --gpus (autogemm.tuning.gpus) without a GPU: worker processes spawned for fake GPUs
(tests/fake_tuned.py), each problem's targets on one worker, a worker that dies, and the stop signals."""
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from autogemm import cli
from autogemm.errors import AutogemmError
from autogemm.runtime.device import H100
from autogemm.store.keys import Target
from autogemm.store.records import file_for, load
from autogemm.tuning import gpus
from autogemm.tuning.search import Settings
from fake_tuned import (failing_gpu_context, fake_gpu_context, measure_for_dying_on_gpu_1, slow_measure_for,
                        thread_telling_gpu_context)

FAST = Settings(trials=6, timeout=None, top=2, rounds=2, final_reps=3, quick_reps=3)
ROOT = Path(__file__).resolve().parents[1]
# three GEMM problems, each for both its families, then a column sum
TARGETS = [Target(f, (m, 1000, 784), "nt") for m in (800, 400, 200) for f in ("gemm", "gemm_wgmma")] + [
    Target("colsum", (800, 1000), "-")]


def job(tmp_path, measure_for=slow_measure_for, context=fake_gpu_context, **kw) -> gpus.Job:
    return gpus.Job("float32", tmp_path / "tuned", FAST, "autogemm tune --gpus 0,1", tmp_path / "shipped",
                    studies=tmp_path / "studies", context=context, measure_for=measure_for, **kw)


@pytest.mark.parametrize("text, message", [
    ("0,0", "a device is named twice"), ("4", "this machine has 4 GPU(s), numbered 0..3"),
    ("99999999", "this machine has 4 GPU(s)"), ("x", "give 'all' or device numbers"),
    ("-1", "give 'all' or device numbers"), ("", "give 'all'"), ("0,,1", "give 'all'"), ("\u0663", "give 'all'"),
])
def test_bad_gpu_lists_are_one_line(text, message):
    with pytest.raises(AutogemmError) as error:
        gpus.parse_gpus(text, count=lambda: 4)
    assert str(error.value).startswith("--gpus ") and message in str(error.value)


def test_gpu_lists():
    assert gpus.parse_gpus("all", count=lambda: 3) == (0, 1, 2)
    assert gpus.parse_gpus("2, 0", count=lambda: 4) == gpus.parse_gpus("2 0", count=lambda: 4) == (2, 0)


def test_a_problems_families_are_one_unit_of_work():
    assert [[t.family for t in group] for group in gpus.problems(TARGETS, "float32")] == [
        ["gemm", "gemm_wgmma"]] * 3 + [["colsum"]]


def test_the_largest_problems_are_handed_out_first():
    """By their flops (a problem's families together), ties in the given order: the 4096^3 GEMM
    given last would have started while the other GPUs ran out of work."""
    targets = TARGETS[::-1] + [Target("gemm", (4096, 4096, 4096), "nn"), Target("colsum", (400, 1000), "-")]
    assert [str(group[0]) for group in gpus.problems(targets, "float32")] == [
        "gemm 4096x4096x4096:nn", "gemm_wgmma 800x1000x784:nt", "gemm_wgmma 400x1000x784:nt",
        "gemm_wgmma 200x1000x784:nt", "colsum 800x1000", "colsum 400x1000"]


def test_each_worker_takes_a_share_of_the_cores_for_its_blas_threads(tmp_path, monkeypatch):
    """The variables sizing numeric libraries' thread pools, each worker a 1/GPUs share of the
    cores (at least 1), unless the user sized any of them (OpenBLAS reads its own before OpenMP's:
    setting the rest would undo the user's cap); the parent's environment is left as it was."""
    for name in gpus.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert gpus.worker_environment(4, cpus=64) == dict.fromkeys(gpus.THREAD_VARIABLES, "16")
    assert gpus.worker_environment(4, cpus=2) == dict.fromkeys(gpus.THREAD_VARIABLES, "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "")                      # empty: sizes nothing
    assert gpus.worker_environment(2, cpus=64) == dict.fromkeys(gpus.THREAD_VARIABLES, "32")
    events = list(gpus.tune_on_gpus(TARGETS, (0, 1), job(tmp_path, context=thread_telling_gpu_context)))
    errors = {e.outcome.error for e in events if isinstance(e, gpus.Finished)}
    share = max(1, len(os.sched_getaffinity(0)) // 2)
    assert errors == {f"no GPU was left to tune it (GPU 0: RuntimeError: OPENBLAS_NUM_THREADS={share}; "
                      f"GPU 1: RuntimeError: OPENBLAS_NUM_THREADS={share})"}
    assert "OPENBLAS_NUM_THREADS" not in os.environ and os.environ["OMP_NUM_THREADS"] == ""
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert gpus.worker_environment(2, cpus=64) == {}


def test_the_targets_are_spread_over_the_gpus_and_saved_into_one_file_per_model(tmp_path):
    events = list(gpus.tune_on_gpus(TARGETS, (0, 1), job(tmp_path)))
    finished = [e for e in events if isinstance(e, gpus.Finished)]
    assert sorted(str(e.outcome.target) for e in finished) == sorted(map(str, TARGETS))
    assert all(e.outcome.result is not None for e in finished)
    on = {e.outcome.target: e.gpu for e in finished}
    assert all(on[Target("gemm", s, "nt")] == on[Target("gemm_wgmma", s, "nt")] for s in ((800, 1000, 784),))
    assert set(on.values()) == {0, 1}
    assert len(load(file_for(tmp_path / "tuned", H100)).records) == len(TARGETS)


def test_a_worker_that_dies_fails_the_targets_of_its_problem_and_the_others_go_on(tmp_path):
    """GPU 1's worker dies setting up its first target: both families of that problem fail with why;
    GPU 0 tunes every other problem."""
    events = list(gpus.tune_on_gpus(TARGETS, (0, 1), job(tmp_path, measure_for_dying_on_gpu_1)))
    outcomes = [e.outcome for e in events if isinstance(e, gpus.Finished)]
    died = [o for o in outcomes if o.result is None]
    assert [o.target.family for o in died] == ["gemm", "gemm_wgmma"] and died[0].target.sizes == died[1].target.sizes
    assert {o.error for o in died} == {"the worker of GPU 1 ended (exit status 3)"}
    assert len(outcomes) == len(TARGETS)
    assert len(load(file_for(tmp_path / "tuned", H100)).records) == len(TARGETS) - 2


def test_workers_that_cannot_use_their_gpu_fail_every_target_with_why(tmp_path):
    """No worker gets going (a CUDA error in each): every target fails, with each GPU's reason."""
    events = list(gpus.tune_on_gpus(TARGETS, (0, 1), job(tmp_path, context=failing_gpu_context)))
    outcomes = [e.outcome for e in events if isinstance(e, gpus.Finished)]
    assert len(outcomes) == len(TARGETS) and all(o.result is None for o in outcomes)
    assert {o.error for o in outcomes} == {"no GPU was left to tune it (GPU 0: RuntimeError: cudaErrorDevicesUnavailable: "
                                           "GPU 0 is busy; GPU 1: RuntimeError: cudaErrorDevicesUnavailable: GPU 1 is busy)"}


@pytest.fixture
def fake_gpus(monkeypatch, tmp_path):
    from autogemm.store import locations
    from autogemm.tuning import measures

    monkeypatch.setattr(gpus, "gpu_count", lambda: 2)
    monkeypatch.setattr(gpus, "gpu_info", lambda gpu: H100)
    monkeypatch.setattr(gpus, "gpu_context", fake_gpu_context)
    monkeypatch.setattr(measures, "measure_for", slow_measure_for)
    monkeypatch.setenv("AUTOGEMM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(locations, "shipped_dir", lambda: tmp_path / "shipped")


def test_tune_gpus_all_tunes_on_every_gpu(fake_gpus, tmp_path, capsys):
    out = tmp_path / "tuned"
    status = cli.main(["tune", "--shapes", "800x1000x784:nt,400x1000x784:nt", "--gpus", "all", "--trials", "6",
                       "--out", str(out)])
    printed = capsys.readouterr()
    assert status == 0, printed.err
    assert "4 shapes on 2 GPUs (0,1: NVIDIA H100 80GB HBM3)" in printed.out    # both GEMM families each
    assert len([line for line in printed.out.splitlines() if line.startswith("autogemm tune: [")]) == 4
    assert len(load(file_for(out, H100)).records) == 4


def test_a_worker_that_dies_before_a_problems_second_family_is_one_failed_line(fake_gpus, monkeypatch, tmp_path,
                                                                              capsys):
    """At tf32 each shape is both GEMM families; GPU 1's worker dies setting up its first: the
    family it never began fails too, one line each, and the run says so (status 1)."""
    from autogemm.tuning import measures

    monkeypatch.setattr(measures, "measure_for", measure_for_dying_on_gpu_1)
    status = cli.main(["tune", "--shapes", "800x1000x784:nt,400x1000x784:nt", "--precision", "tf32", "--gpus", "all",
                       "--trials", "6", "--out", str(tmp_path / "tuned")])
    err = capsys.readouterr().err
    assert status == 1 and err.count("\n") == 2 and err.count("the worker of GPU 1 ended (exit status 3)") == 2, err


@pytest.mark.parametrize("flag, message", [("0,0", "a device is named twice"), ("2", "has 2 GPU(s)")])
def test_tune_gpus_errors(fake_gpus, tmp_path, capsys, flag, message):
    assert cli.main(["tune", "--shapes", "64x64x64", "--gpus", flag, "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


DRIVER = f"""
import sys
sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / "tests")!r}]
from autogemm import cli, signals
signals.starting()
from autogemm.store import locations
from autogemm.tuning import gpus, measures
from fake_tuned import fake_gpu_context, slow_measure_for
gpus.gpu_count = lambda: 2
gpus.gpu_info = lambda gpu: fake_gpu_context(gpu)[0]
gpus.gpu_context = fake_gpu_context
measures.measure_for = slow_measure_for
locations.shipped_dir = lambda: {{shipped!r}}
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.parametrize("sig, to_group", [(signal.SIGTERM, False), (signal.SIGINT, True)],
                         ids=["SIGTERM to autogemm", "Ctrl-C to the terminal's process group"])
@pytest.mark.usefixtures("default_handlers")
def test_a_stop_signal_stops_every_worker_and_keeps_what_they_finished(tmp_path, sig, to_group):
    out = tmp_path / "tuned"
    shapes = ",".join(f"{m}x1000x784:nt" for m in range(100, 2100, 100))
    env = dict(os.environ, AUTOGEMM_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", DRIVER.format(shipped=str(tmp_path / "shipped")), "tune",
                             "--shapes", shapes, "--gpus", "all", "--trials", "6", "--out", str(out)],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    while not proc.stdout.readline().startswith("autogemm tune: [2/"):
        assert proc.poll() is None, proc.stderr.read()
    workers = [int(p) for p in subprocess.run(["pgrep", "-P", str(proc.pid), "-f", "spawn_main"], capture_output=True,
                                              text=True).stdout.split()]
    (os.killpg if to_group else os.kill)(proc.pid, sig)
    rest, err = proc.communicate(timeout=60)
    kept = len(load(file_for(out, H100)).records)
    assert proc.returncode == 128 + sig and err.count("\n") == 1, err
    words = "interrupted" if sig == signal.SIGINT else "interrupted by SIGTERM"
    assert err.startswith(f"{words}: {kept} of 40 shapes finished and saved in {file_for(out, H100)}; run the same "
                          "command with --resume"), err
    assert 2 <= kept < 40            # 20 shapes, both GEMM families each
    assert len(workers) == 2 and not [w for w in workers if Path(f"/proc/{w}").exists()]
