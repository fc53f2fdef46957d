"""The stop signals (autogemm.signals): Ctrl-C, SIGTERM and SIGHUP end every command with one line,
128 + the signal's number, what was kept and how to resume, and no temporary file (issue 38 #11-#13).
Real signals, sent to real processes; `autogemm tune`'s, nn.bench's and nn.scaling's are tested
beside their other tests."""
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from autogemm import signals
from fake_idx import write_dataset
from nn import checkpoint
from run_train import MPIRUN, env

needs_mpi = pytest.mark.skipif(MPIRUN is None, reason="needs mpirun")


@pytest.fixture(scope="module")
def fake_dir(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("data"), n_train=6_100, n_test=40)  # 100 train rows


def train_args(fake_dir, *args) -> list[str]:
    return ["-m", "nn.train", "--data-dir", str(fake_dir), "--dataset", "mnist", "--hidden", "16", "--batch", "8",
            "--no-log", *map(str, args)]


def caught(pid: int) -> int:
    """The signals a process has a handler for (/proc's SigCgt mask), 0 once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return int(re.search(r"^SigCgt:\s*(\w+)", status, re.M)[1], 16)


def wait_for_handlers(pids_of, count: int = 1, timeout: float = 30):
    """Until `count` of the processes that pids_of() lists handle SIGHUP: Python alone handles
    SIGINT only, so autogemm.signals.starting() has run in each (their modules still loading)."""
    deadline = time.monotonic() + timeout
    while sum(bool(caught(pid) & 1 << signal.SIGHUP - 1) for pid in pids_of()) < count:
        assert time.monotonic() < deadline, "no process took the stop signals"
        time.sleep(0.001)


def python_descendants(pid: int) -> list[int]:
    """The Python processes under `pid` (mpirun's ranks, under Hydra's proxy)."""
    children = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "comm").read_text().strip()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append((int(entry.name), command))
    found, todo = [], [pid]
    while todo:
        for child, command in children.get(todo.pop(), []):
            todo.append(child)
            found += [child] if command.startswith("python") else []
    return found


def ended(proc, timeout: float = 30) -> tuple[str, str]:
    """The process's stdout and stderr once it ends."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("hung after the signal")


def _default_dispositions():
    for sig in signals.SIGNALS:             # the suite may run under nohup, or as a job in the background
        signal.signal(sig, signal.SIG_DFL)


def start(tmp_path, command) -> subprocess.Popen:
    """`command` in a session of its own, the stop signals' dispositions the defaults."""
    return subprocess.Popen(command, cwd=tmp_path, env=env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, preexec_fn=_default_dispositions)


# ---------------------------------------------------------------- the mechanism

@pytest.mark.usefixtures("default_handlers")
def test_a_stop_signal_raises_stop_with_its_status_and_the_handlers_come_back():
    before = signal.getsignal(signal.SIGTERM)
    for sig, status, words in ((signal.SIGTERM, 143, "interrupted by SIGTERM"), (signal.SIGHUP, 129,
                                                                                  "interrupted by SIGHUP"),
                               (signal.SIGINT, 130, "interrupted")):
        with pytest.raises(KeyboardInterrupt) as stop, signals.stoppable():
            os.kill(os.getpid(), sig)
            time.sleep(1)
        assert signals.status(stop.value) == status and signals.interrupted(signals.signum_of(stop.value)) == words
    assert signal.getsignal(signal.SIGTERM) is before
    assert signals.status(KeyboardInterrupt()) == 130       # Python's own handler's


@pytest.mark.usefixtures("default_handlers")
def test_a_deferred_block_ends_before_the_stop_is_raised():
    """A SIGTERM in a deferred() block (an Optuna journal write) waits for its end; one after it is
    raised at once."""
    done = []
    with pytest.raises(KeyboardInterrupt) as stop, signals.stoppable():
        with signals.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)
            done.append("whole")
        done.append("after")
    assert done == ["whole"] and signals.status(stop.value) == 143
    with pytest.raises(KeyboardInterrupt), signals.stoppable():
        with signals.deferred():
            pass
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)


@pytest.mark.usefixtures("default_handlers")
def test_stoppable_gives_back_the_handlers_from_before_starting():
    before = {sig: signal.getsignal(sig) for sig in signals.SIGNALS}
    signals.starting()
    with signals.stoppable():
        pass
    assert {sig: signal.getsignal(sig) for sig in signals.SIGNALS} == before


@pytest.mark.parametrize("size, ranks", [("2", True), ("1", False), ("9" * 5000, False), ("\u0663", False),
                                         ("x", False)])
def test_a_launchers_size_that_is_not_a_count_is_one_process(monkeypatch, size, ranks):
    """Read in a signal handler: int() of 5,000 digits raised there."""
    monkeypatch.setenv("PMI_SIZE", size)
    assert signals._one_of_ranks() is ranks


def test_a_command_run_in_another_thread_leaves_the_signals_alone():
    """signal.signal raises ValueError outside the main thread: nn.data.main() there failed so."""
    from nn import data

    statuses = []
    thread = threading.Thread(target=lambda: statuses.append(data.main(["--dataset", "nosuch"])))
    thread.start()
    thread.join()
    assert statuses == [2]


def test_a_signal_ignored_by_whoever_started_the_process_stays_ignored(tmp_path, fake_dir):
    """nohup ignores SIGHUP for its command: a closed terminal must not stop the run."""
    command = ["nohup", sys.executable, *train_args(fake_dir, "--epochs", 1000, "--checkpoint", "ck.npz")]
    proc, _, err = interrupt_at_epoch_2(tmp_path, command, signal.SIGHUP, signal.SIGTERM, gap=0.3)
    assert proc.returncode == 143 and err.splitlines()[-1].startswith("interrupted by SIGTERM "), err


# ---------------------------------------------------------------- while the modules load (#11)

CONSOLE_SCRIPT = Path(sys.executable).parent / "autogemm"


@pytest.mark.parametrize("command, sig", [
    ([sys.executable, "-m", "nn.train"], signal.SIGINT),
    ([sys.executable, "-m", "nn.bench"], signal.SIGINT),
    ([sys.executable, "-m", "nn.scaling"], signal.SIGINT),
    ([sys.executable, "-m", "nn.profile"], signal.SIGINT),
    ([sys.executable, "-m", "nn.data"], signal.SIGINT),
    ([sys.executable, "-m", "nn.cost_model"], signal.SIGINT),
    ([sys.executable, "-m", "autogemm.cli", "show"], signal.SIGINT),
    ([str(CONSOLE_SCRIPT), "show"], signal.SIGINT),
    ([sys.executable, "-m", "nn.train"], signal.SIGTERM),
    ([str(CONSOLE_SCRIPT), "tune"], signal.SIGHUP),
], ids=lambda v: v[-1] if isinstance(v, list) else signal.Signals(v).name)
def test_a_signal_while_the_modules_load_is_one_line(tmp_path, command, sig):
    """Ctrl-C in the first half second printed a 12-31 line KeyboardInterrupt traceback."""
    if not Path(command[0]).exists():
        pytest.skip("the console script is not installed")
    proc = start(tmp_path, command)
    wait_for_handlers(lambda: [proc.pid])
    proc.send_signal(sig)
    _, err = ended(proc)
    assert (proc.returncode, err) == (128 + sig, f"{signals.interrupted(sig)} while starting; nothing was done\n"), err


@needs_mpi
def test_a_signal_while_the_ranks_load_stops_them_together_under_mpirun(tmp_path, fake_dir):
    """Both ranks printed tracebacks and one died of a segmentation fault (status 11); then a rank
    that ended alone while starting left the other waiting in MPI's start-up for ever. A rank of
    several keeps the signal until its run is set up, where the ranks agree to stop; rank 1 here
    spends 1.5 s more in its start-up, so that the signal finds the two apart."""
    args = train_args(fake_dir, "--epochs", 1)
    late = ("import runpy, time; from autogemm import signals; signals.starting(); time.sleep(1.5); "
            "runpy.run_module('nn.train', run_name='__main__', alter_sys=True)")
    proc = start(tmp_path, [MPIRUN, "-n", "1", sys.executable, *args, ":", "-n", "1", sys.executable, "-c", late,
                            *args[2:]])
    wait_for_handlers(lambda: python_descendants(proc.pid), count=2)
    proc.send_signal(signal.SIGINT)                         # mpirun forwards it to every rank
    _, err = ended(proc)
    assert (proc.returncode, err) == (130, "interrupted in epoch 1; nothing was saved (no --checkpoint)\n"), err


# ---------------------------------------------------------------- while it trains (#12, #13)

def interrupt_at_epoch_2(tmp_path, command, *sigs, gap: float = 0.05) -> tuple[subprocess.Popen, str, str]:
    """Start `command` (nn.train), send `sigs` `gap` s apart once epoch 2 is reported; the process,
    its stdout and stderr."""
    proc = start(tmp_path, command)
    while not proc.stdout.readline().startswith("epoch   2/"):
        assert proc.poll() is None, proc.stderr.read()
    for i, sig in enumerate(sigs):
        time.sleep(gap if i else 0)
        proc.send_signal(sig)
    return proc, *ended(proc)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_stop_training_as_ctrl_c_does(tmp_path, fake_dir, sig):
    """Status 143/129 with no line and no resume hint before."""
    proc, _, err = interrupt_at_epoch_2(tmp_path, [sys.executable, *train_args(fake_dir, "--epochs", 400,
                                                                              "--checkpoint", "ck.npz")], sig)
    done = checkpoint.load(tmp_path / "ck.npz").epoch
    name = signal.Signals(sig).name
    assert proc.returncode == 128 + sig and err.count("\n") == 1, err
    assert re.fullmatch(rf"interrupted by {name} (in epoch {done + 1}|after epoch {done}); epochs 1\.\.{done} are "
                        r"in ck\.npz; resume with: python -m nn\.train .* --resume\n", err), err
    assert not list(tmp_path.glob(".*.tmp"))


@needs_mpi
def test_a_double_ctrl_c_to_mpirun_ends_with_the_ranks_status_or_hydras_abort(tmp_path, fake_dir):
    """Two Ctrl-C 50 ms apart exited 0 in 2 of 3 tries. The second never reaches the ranks: mpirun
    (Hydra) takes it as a forced abort, kills them and exits with a status of its own (255 here).
    The ranks now end within some 60 ms of the first (MPI finalised, then C's exit(), no interpreter
    teardown), so that the 130 they agreed on comes back where mpirun saw them end first, and the
    one line is theirs (docs/GUIDE.md). A 0 is left only where Hydra's proxy fails in the abort and
    never reports the ranks' statuses (its "demux engine error" notice; once in a CI run on 2 busy
    cores): an MPICH defect no rank can undo."""
    command = [MPIRUN, "-n", "2", sys.executable, *train_args(fake_dir, "--epochs", 1000, "--checkpoint", "ck.npz")]
    for attempt in range(3):
        proc, _, err = interrupt_at_epoch_2(tmp_path, command, signal.SIGINT, signal.SIGINT)
        ours = [line for line in err.splitlines() if not line.startswith("[")]    # Hydra's own notices
        hydra_failed = proc.returncode == 0 and "demux engine error" in err
        assert proc.returncode in (130, 255) or hydra_failed, (attempt, err)
        assert len(ours) == 1 and ours[0].startswith("interrupted "), (attempt, err)
        assert "resume with: mpirun -n 2 python -m nn.train" in ours[0]
        (tmp_path / "ck.npz").unlink()


@needs_mpi
def test_ranks_that_leave_at_once_end_with_their_status(tmp_path):
    """Dist.leave: MPI finalised, then C's exit(). os._exit skipped MPICH's exit hook, which ends its
    link to the launcher, and the launcher killed the ranks still finalising (status 9, "BAD
    TERMINATION") in most runs of 4 ranks leaving together."""
    script = "from nn.dist import maybe_init_dist; d = maybe_init_dist(); d.barrier(); d.leave(130)"
    for _ in range(3):
        done = subprocess.run([MPIRUN, "-n", "4", sys.executable, "-c", script], cwd=tmp_path, env=env(tmp_path),
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 130 and "BAD TERMINATION" not in done.stdout, done.stdout + done.stderr


@needs_mpi
def test_sigterm_to_mpirun_stops_every_rank_with_143(tmp_path, fake_dir):
    command = [MPIRUN, "-n", "2", sys.executable, *train_args(fake_dir, "--epochs", 1000, "--checkpoint", "ck.npz")]
    proc, _, err = interrupt_at_epoch_2(tmp_path, command, signal.SIGTERM)
    assert proc.returncode == 143 and err.count("\n") == 1 and err.startswith("interrupted by SIGTERM "), err


# ---------------------------------------------------------------- during a checkpoint write (#13)

@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.usefixtures("default_handlers")
def test_a_sigterm_during_a_checkpoint_write_leaves_no_temporary_file(tmp_path, fake_dir, monkeypatch, capsys, count):
    """SIGTERM as epoch 2's checkpoint is flushed to disk: one signal lets the write finish and stops
    after it; a second stops at once, the temporary file removed, epoch 1's checkpoint kept and
    named in the one line with the command that resumes it."""
    from nn import train

    fsync = os.fsync

    def signalled_fsync(fd):
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".tmp") and len(writes := sent.setdefault("ck", [])) < 2:
            writes.append(fd)
            if len(writes) == 2:        # epoch 2's write
                for _ in range(count):
                    os.kill(os.getpid(), signal.SIGTERM)
        fsync(fd)

    sent = {}
    monkeypatch.setattr(os, "fsync", signalled_fsync)
    monkeypatch.chdir(tmp_path)
    status = train.main(train_args(fake_dir, "--epochs", 5, "--checkpoint", "ck.npz", "--quiet")[2:])
    err = capsys.readouterr().err
    kept = 2 if count == 1 else 1
    assert status == 143 and checkpoint.load(tmp_path / "ck.npz").epoch == kept, err
    where = "" if count == 2 else " after epoch 2"
    assert err == (f"interrupted by SIGTERM{where}; epochs 1..{kept} are in ck.npz; resume with: python -m nn.train "
                   f"--data-dir {fake_dir} --dataset mnist --hidden 16 --batch 8 --no-log --epochs 5 --checkpoint "
                   f"ck.npz --quiet --resume\n")
    assert [p.name for p in tmp_path.iterdir()] == ["ck.npz"]
