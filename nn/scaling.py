"""`python -m nn.scaling`: scaling of one network over 1..R GPUs, data or model parallel, MPI and NCCL all-reduce.

    python -m nn.scaling --network cme213 --out runs/scaling          # 1, 2, 4 ranks x mpi, nccl
    python -m nn.scaling --network cme213 --parallel data,model --allreduce nccl
    python -m nn.scaling --network large --ranks 1,2 --allreduce nccl --time-limit 540

Every run is `mpirun -n R python -m nn.train --use-tuned ...` in a subprocess with a timeout, its output
in DIR/<run>.log and its JSON log in DIR/<run>.json. Per (ranks, split, all-reduce): the bytes each
rank sends a step (from its log), ms per epoch (median of
the epochs after the first, which compiles and captures), throughput speed-up t1/tR, scaling efficiency
t1/(R tR), float32 test accuracy; then a short float64 run whose final weights must be one rank's within
1e-7 (max-norm relative difference, every parameter). A run that fails or hangs is recorded with its
reason and the others go on; one that completed its log but did not exit (NCCL ranks did, once) keeps
its timings, flagged "hung at exit". The summary goes to DIR/scaling-<network>.json; the table is
printed last.
"""
import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from autogemm import files
from nn import checkpoint
from nn.bench import Network, networks
from nn.errors import ArgumentParser, NNError
from nn.outputs import claim
from nn.train import DEFAULTS, PARALLEL, positive_int

ROOT = Path(__file__).resolve().parents[1]
F64_TOLERANCE = 1e-7
MAX_RANKS = 1024
ALLREDUCES = ("mpi", "nccl")
# --backend: nn.train's flags for it, and the backend its log must then name (--use-tuned falls back
# to NumPy, with a note, where it sees no GPU: such a run measures nothing and counts as failed).
BACKENDS = {"tuned": (["--use-tuned"], "cupy"), "cupy": (["--backend", "cupy"], "cupy"),
            "numpy": (["--backend", "numpy"], "numpy")}
POLL_S = 0.2      # how often a running run's process and log are looked at
KILL_WAIT_S = 5   # after SIGTERM, before SIGKILL


# ---------------------------------------------------------------- settings

@dataclass(frozen=True)
class Settings:
    network: Network
    ranks: tuple          # ascending, 1 first
    parallels: tuple      # of nn.train's PARALLEL: what the ranks split
    allreduces: tuple     # of ALLREDUCES
    epochs: int           # float32 runs
    f64_epochs: int       # float64 weight check
    out: Path
    launch: tuple         # mpirun and its flags
    train_args: tuple     # nn.train flags common to every run: backend, data set folder
    extra: tuple          # --extra-args, after the others (argparse keeps a flag's last value)
    backend: str          # the backend every run's log must name
    timeout: float        # seconds, per run
    exit_grace: float     # seconds a run may take to exit after its log is complete
    time_limit: float     # seconds for all runs (0: none); no run starts or runs past it


def _csv(kind, choices=None):
    def parse(text):
        items = [item.strip() for item in text.split(",")]
        if choices is not None:
            bad = [item for item in items if item not in choices]
            if bad:
                raise argparse.ArgumentTypeError(f"unknown {', '.join(map(repr, bad))}; choose from {', '.join(choices)}")
        return list(dict.fromkeys(map(kind, items)))
    return parse


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="python -m nn.scaling", description=__doc__.split("\n")[0].split(": ", 1)[1],
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--network", default="cme213", help=f"one of nn.bench's networks: {', '.join(networks())} "
                                                       "(default: cme213, 784-1000-10 batch 800; large: 784-4096-10 batch 8192)")
    p.add_argument("--ranks", type=_csv(positive_int), default=[1, 2, 4],
                   help="comma list of rank counts, one GPU each; 1 is the reference and must be there (default: 1,2,4)")
    p.add_argument("--parallel", type=_csv(str, PARALLEL), default=["data"],
                   help="comma list of nn.train's --parallel for the runs of more than one rank: data (rows) "
                        "or model (hidden units) (default: data)")
    p.add_argument("--allreduce", type=_csv(str, ALLREDUCES), default=list(ALLREDUCES),
                   help="comma list of nn.train's all-reduces for the runs of more than one rank (default: mpi,nccl)")
    p.add_argument("--epochs", type=positive_int, default=DEFAULTS["epochs"],
                   help=f"float32 epochs per run, >= 2: the first is not timed (default: {DEFAULTS['epochs']})")
    p.add_argument("--f64-epochs", type=positive_int, default=2, help="epochs of the float64 weight check (default: 2)")
    p.add_argument("--out", default="runs/scaling", help="folder for the logs and the summary (default: runs/scaling)")
    p.add_argument("--backend", choices=tuple(BACKENDS), default="tuned",
                   help="tuned: --use-tuned; cupy: untuned kernels; numpy: the CPU, for testing (default: tuned)")
    p.add_argument("--data-dir", help="nn.train's --data-dir (default: its search, which reads $AUTOGEMM_DATA_DIR)")
    p.add_argument("--mpirun", help="the MPI launcher (default: mpirun on PATH, else beside this python)")
    p.add_argument("--extra-args", default="", help='more nn.train flags for every run, one string: "--lr 0.1"')
    p.add_argument("--timeout", type=positive_int, default=180, help="seconds per run before it is killed (default: 180)")
    p.add_argument("--exit-grace", type=positive_int, default=30,
                   help="seconds a run may take to exit once its log is complete; then it is killed and "
                        "flagged 'hung at exit' (default: 30)")
    p.add_argument("--time-limit", type=positive_int,
                   help="seconds for all runs: none starts or runs past it; the rest are 'skipped' (default: none)")
    return p


def resolve(args) -> Settings:
    """Settings from parsed flags; every bad value is an NNError."""
    known = networks()
    if args.network not in known:
        raise NNError(f"--network: unknown {args.network!r}; choose from {', '.join(known)}")
    if 1 not in args.ranks:
        raise NNError("--ranks must include 1: speed-up, efficiency and the float64 check are relative to one rank")
    if max(args.ranks) > MAX_RANKS:
        raise NNError(f"--ranks: {max(args.ranks)} ranks; at most {MAX_RANKS}")
    if args.epochs < 2:
        raise NNError("--epochs must be >= 2: the first epoch compiles and captures, and is not timed")
    if args.data_dir and not Path(args.data_dir).is_dir():
        raise NNError(f"--data-dir {args.data_dir} is not a directory")
    try:
        extra = shlex.split(args.extra_args)
    except ValueError as e:
        raise NNError(f"--extra-args: {e}") from None
    flags, backend = BACKENDS[args.backend]
    data = ["--data-dir", os.path.realpath(args.data_dir)] if args.data_dir else []
    launch = tuple(launcher(args.mpirun))
    out = Path(os.path.realpath(args.out))
    return Settings(known[args.network], tuple(sorted(args.ranks)), tuple(args.parallel), tuple(args.allreduce),
                    args.epochs,
                    args.f64_epochs, out, launch, (*flags, *data), tuple(extra), backend,
                    args.timeout, args.exit_grace, args.time_limit or 0)


def claim_outputs(s: Settings, runs: list) -> Path:
    """Before any run, every file the runs and the summary will write, in --out (created): each is
    new, or a regular file there from an earlier nn.scaling run (the folder holds its summary).
    Returns the summary's path."""
    path = s.out / f"scaling-{s.network.name}.json"
    earlier = os.path.lexists(path) and files.output_of("python -m nn.scaling")(path)
    for run in runs:
        for suffix in (".log", ".json") + ((".npz",) if run.dtype == "float64" else ()):
            claim("--out", s.out / f"{run.name}{suffix}", (lambda p: True) if earlier else None)
    claim("--out", path, files.output_of("python -m nn.scaling"))
    return path


def launcher(mpirun=None) -> list[str]:
    """mpirun and its flags: MPICH's Hydra needs none; Open MPI refuses root without --allow-run-as-root."""
    path = (shutil.which(mpirun) if mpirun else
            shutil.which("mpirun") or shutil.which("mpirun", path=str(Path(sys.executable).parent)))
    path = path and os.path.abspath(path)       # the runs start in the repository, not here
    if not path:
        raise NNError(f"no MPI launcher {mpirun!r}" if mpirun else
                      "no mpirun on PATH or beside this python: pip install mpich, or pass --mpirun PATH")
    try:
        probe = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NNError(f"cannot run {path} --version: {e}") from None
    text = probe.stdout + probe.stderr
    open_mpi = "Open MPI" in text or "allow-run-as-root" in text
    return [path, "--allow-run-as-root"] if open_mpi and os.geteuid() == 0 else [path]


# ---------------------------------------------------------------- runs

@dataclass
class Run:
    """One `mpirun -n R python -m nn.train` and what came of it."""
    name: str              # <network>-f32-r2-nccl: the stem of its .log, .json (and float64: .npz) in the out folder
    ranks: int
    allreduce: str         # "none" for one rank
    dtype: str
    command: list
    status: str = "not run"  # ok | hung at exit | exit error (after a complete log) | failed | skipped
    reason: str = ""
    returncode: int | None = None
    wall_s: float | None = None
    epoch_ms: list = field(default_factory=list)   # every epoch's training time, the first included
    test_accuracy: float | None = None
    weight_diff: dict = field(default_factory=dict)  # float64, R > 1: parameter -> max rel diff to 1 rank's
    parallel: str = "data"  # what the ranks split (nn.train --parallel)
    sent_bytes: int = 0     # what each rank sends a step (nn.train's log)

    @property
    def usable(self) -> bool:
        """Its log is complete, from the right backend and rank count: its numbers count."""
        return self.status in ("ok", "hung at exit", "exit error")

    @property
    def ms_per_epoch(self) -> float | None:
        return statistics.median(self.epoch_ms[1:]) if self.usable and len(self.epoch_ms) > 1 else None


def plan(s: Settings) -> list[Run]:
    """Every float32 run (1 rank, then each R > 1 with each split and all-reduce), then the same in
    float64 (FP32-accurate GEMMs)."""
    net = s.network
    cases = [(1, "data", "none")] + [(r, p, a) for r in s.ranks if r > 1 for p in s.parallels for a in s.allreduces]
    runs = []
    for dtype, epochs in (("float32", s.epochs), ("float64", s.f64_epochs)):
        for ranks, parallel, allreduce in cases:
            name = (f"{net.name}-f{dtype[-2:]}-r{ranks}" + (f"-{allreduce}" if ranks > 1 else "")
                    + ("-model" if parallel == "model" else ""))
            command = [*s.launch, "-n", str(ranks), sys.executable, "-m", "nn.train",
                       "--hidden", str(net.hidden), "--batch", str(net.batch), "--activation", net.activation,
                       "--train-size", str(net.images), "--dtype", dtype, "--epochs", str(epochs),
                       "--log", str(s.out / f"{name}.json")]
            command += ["--allreduce", allreduce] if ranks > 1 else []
            command += ["--parallel", "model"] if parallel == "model" else []
            command += ["--checkpoint", str(s.out / f"{name}.npz")] if dtype == "float64" else []
            # the float64 check compares weights: its GEMMs FP32-accurate whatever --extra-args asks (last flag wins)
            exact = ["--precision", "fp32"] if dtype == "float64" else []
            runs.append(Run(name, ranks, allreduce, dtype, [*command, *s.train_args, *s.extra, *exact],
                            parallel=parallel))
    return runs


@dataclass(frozen=True)
class Outcome:
    returncode: int | None  # None: it was killed
    killed: str             # why it was killed ("" when it exited)
    wall_s: float


# runner(command, output path, timeout s, finished() -> bool, exit grace s) -> Outcome
Runner = Callable[[list, Path, float, Callable[[], bool], float], Outcome]


def run_process(command, output: Path, timeout, finished, grace) -> Outcome:
    """Run `command` (stdout and stderr into `output`) until it exits, `timeout` s pass, or `grace` s
    pass after `finished()` first holds; a process still running then is ended with all under it."""
    start = time.monotonic()
    with open(output, "wb") as out:
        proc = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"))
        try:
            finished_at = None
            while proc.poll() is None:
                now = time.monotonic()
                if finished_at is None and finished():
                    finished_at = now
                if finished_at is not None and now - finished_at > grace:
                    return Outcome(None, f"no exit {grace:g} s after its log was complete", now - start)
                if now - start > timeout:
                    return Outcome(None, f"timeout after {timeout:g} s", now - start)
                time.sleep(POLL_S)
            return Outcome(proc.returncode, "", time.monotonic() - start)
        finally:
            if proc.poll() is None:
                _end_tree(proc)


def _end_tree(proc: subprocess.Popen):
    """SIGTERM the process and everything under it (Hydra's proxy and ranks each start a session of
    their own, so a process group would miss them), then SIGKILL what is left after KILL_WAIT_S."""
    pids = [proc.pid, *_descendants(proc.pid)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + KILL_WAIT_S
        while time.monotonic() < deadline and (proc.poll() is None or any(map(_running, pids[1:]))):
            time.sleep(POLL_S)


def _proc_stat(pid) -> list[str]:
    """/proc/<pid>/stat's fields after the command name: [state, ppid, ...]; [] when gone (or not Linux)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _running(pid) -> bool:
    return _proc_stat(pid)[:1] not in ([], ["Z"])


def _descendants(pid) -> list[int]:
    children = {}
    for entry in Path("/proc").glob("[0-9]*"):
        stat = _proc_stat(entry.name)
        if stat:
            children.setdefault(int(stat[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def read_log(path: Path) -> dict | None:
    """nn.train's JSON log when it is complete (every epoch and the final accuracies), else None."""
    try:
        log = json.loads(path.read_text())
        return log if log["final"] is not None and len(log["epochs"]) == log["config"]["epochs"] else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


_EXCEPTION = re.compile(r"^[\w.]+(Error|Exception|Interrupt)\b")


def failure_line(text: str) -> str:
    """The line of a run's output most likely to say what went wrong: its last `error:` line, failed
    rank or Python exception, else its last line (Hydra's ==== banners left out)."""
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("=")]
    telling = [line for line in lines if line.startswith("error:") or "failed:" in line or _EXCEPTION.match(line)]
    return (telling or lines or [""])[-1][:300]


def execute(run: Run, s: Settings, runner: Runner, timeout: float):
    """Run it (stale files of an earlier run removed first) and record its status and numbers."""
    output, log_path = s.out / f"{run.name}.log", s.out / f"{run.name}.json"
    for stale in (log_path, s.out / f"{run.name}.npz"):
        stale.unlink(missing_ok=True)  # nn.train never overwrites a checkpoint; a stale log would look finished
    outcome = runner(run.command, output, timeout, lambda: read_log(log_path) is not None, s.exit_grace)
    run.returncode, run.wall_s = outcome.returncode, round(outcome.wall_s, 1)
    log = read_log(log_path)
    if log is not None:
        run.epoch_ms = [epoch["ms"]["train"] for epoch in log["epochs"]]
        run.sent_bytes = log["environment"].get("bytes_sent_per_step", 0)
        run.test_accuracy = log["final"]["test_accuracy"]
    try:
        last = failure_line(output.read_text(errors="replace")[-65536:])
    except OSError:
        last = ""
    if log is None:
        why = outcome.killed or (f"exit {outcome.returncode}" if outcome.returncode else "exit 0 but its log is incomplete")
        run.status, run.reason = "failed", f"{why}: {last}" if last else why
    elif log["config"]["backend"] != s.backend:
        run.status, run.reason = "failed", f"ran on the {log['config']['backend']} backend, not {s.backend} (no GPU seen?)"
    elif log["environment"]["ranks"] != run.ranks:
        run.status, run.reason = "failed", (f"ran as {log['environment']['ranks']} rank(s), not {run.ranks} "
                                            "(mpirun and mpi4py of different MPIs?)")
    elif outcome.killed:
        run.status, run.reason = "hung at exit", outcome.killed
    elif outcome.returncode:
        run.status, run.reason = "exit error", f"exit {outcome.returncode} after a complete log: {last}"
    else:
        run.status = "ok"


# ---------------------------------------------------------------- float64 weights

def weight_diffs(reference_path, path) -> dict[str, float]:
    """max|W_R - W_1| / max|W_1| for every parameter of two checkpoints, named W1, b1, W2, b2, ...
    (layers counted from 1, as in the README's math; the checkpoint's own keys count from 0)."""
    reference, other = checkpoint.load(reference_path), checkpoint.load(path)
    if reference.epoch != other.epoch:
        raise NNError(f"{path} holds epoch {other.epoch}, {reference_path} epoch {reference.epoch}")
    diffs = {}
    for layer, ((w1, b1), (w, b)) in enumerate(zip(reference.params, other.params, strict=True), 1):
        for name, ref, got in (("W", w1, w), ("b", b1, b)):
            if ref.shape != got.shape:
                raise NNError(f"{path}: {name}{layer} is {got.shape}, {reference_path} has {ref.shape}")
            err, scale = float(np.max(np.abs(got - ref))), float(np.max(np.abs(ref)))
            diffs[f"{name}{layer}"] = err / scale if scale else (0.0 if err == 0 else float("inf"))
    return diffs


def compare(run: Run, reference: Run, s: Settings):
    """Fill run.weight_diff against the one-rank float64 run; a checkpoint that cannot be read fails it."""
    if not (run.usable and reference.usable):
        return
    try:
        run.weight_diff = weight_diffs(s.out / f"{reference.name}.npz", s.out / f"{run.name}.npz")
    except NNError as e:
        run.status, run.reason = "failed", str(e)


# ---------------------------------------------------------------- summary

def rows(runs: list[Run]) -> list[dict]:
    """One row per (ranks, split, all-reduce): float32 timing and accuracy, the float64 check, a status."""
    f64 = {(r.ranks, r.parallel, r.allreduce): r for r in runs if r.dtype == "float64"}
    f32 = [r for r in runs if r.dtype == "float32"]
    t1 = next((r.ms_per_epoch for r in f32 if r.ranks == 1), None)
    table = []
    for run in f32:
        check = f64.get((run.ranks, run.parallel, run.allreduce))
        t = run.ms_per_epoch
        worst = max(check.weight_diff.items(), key=lambda kv: kv[1]) if check and check.weight_diff else (None, None)
        notes = [run.status] if run.status != "ok" else []
        notes += [f"f64 {check.status}"] if check and check.status != "ok" else []
        notes += [f"f64 diff > {F64_TOLERANCE:g}"] if worst[1] is not None and worst[1] > F64_TOLERANCE else []
        table.append({"ranks": run.ranks, "parallel": run.parallel, "allreduce": run.allreduce,
                      "bytes_per_step": run.sent_bytes, "ms_per_epoch": t,
                      "speedup": t1 / t if t and t1 else None,
                      "efficiency": t1 / (run.ranks * t) if t and t1 else None,
                      "test_accuracy": run.test_accuracy if run.usable else None,
                      "f64_max_rel_diff": worst[1], "f64_worst_parameter": worst[0],
                      "status": "; ".join(notes) or "ok"})
    return table


def f64_verdict(runs: list[Run]) -> tuple[str, float | None]:
    """('pass' | 'fail' | 'incomplete', worst max rel diff) over the float64 runs of more than one rank."""
    checks = [r for r in runs if r.dtype == "float64" and r.ranks > 1]
    worst = max((d for r in checks for d in r.weight_diff.values()), default=None)
    if worst is not None and worst > F64_TOLERANCE:
        return "fail", worst
    return ("pass" if checks and all(r.weight_diff for r in checks) else "incomplete"), worst


def _fmt(value, spec, missing="-"):
    return missing if value is None else format(value, spec)


def table(s: Settings, runs: list[Run], gpus: list[str]) -> str:
    net = s.network
    verdict, worst = f64_verdict(runs)
    machine = ", ".join(f"{n}x {name}" for name, n in Counter(gpus).items()) or "GPUs unknown (no nvidia-smi)"
    head = [f"{net.name}: 784-{net.hidden}-10 {net.activation}, batch {net.batch}"
            + (f", nn.train {shlex.join(s.extra)}" if s.extra else "") + f"; {s.backend} backend, {machine}",
            f"float32, {s.epochs} epochs, ms/epoch the median after the first; {s.f64_epochs}-epoch float64 check "
            f"(max rel diff <= {F64_TOLERANCE:g}): {verdict}, worst {_fmt(worst, '.2e')}"]
    lines = [["ranks", "split", "allreduce", "sent/step", "ms/epoch", "speed-up", "efficiency", "test acc",
              "f64 max rel diff", "status"]]
    for row in rows(runs):
        f64 = "reference" if row["ranks"] == 1 else _fmt(row["f64_max_rel_diff"], ".2e")
        sent = f"{row['bytes_per_step'] / 1e3:.1f} KB" if row["bytes_per_step"] else "-"
        lines.append([str(row["ranks"]), row["parallel"], row["allreduce"], sent, _fmt(row["ms_per_epoch"], ".2f"),
                      _fmt(row["speedup"], ".2f"), _fmt(row["efficiency"], ".2f"), _fmt(row["test_accuracy"], ".2%"),
                      f64, row["status"]])
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    body = ["  ".join(c.ljust(w) if i in (1, 2, 9) else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))).rstrip()
            for line in lines]
    return "\n".join([*head, *body])


def _capture(*command) -> str | None:
    """A command's stripped stdout, or None when it cannot run or fails."""
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def provenance(argv) -> dict:
    """The command line, the code (git commit, uncommitted changes) and the GPUs (from nvidia-smi)."""
    status = _capture("git", "status", "--porcelain", "--untracked-files=no")
    return {"command": "python -m nn.scaling " + shlex.join(argv), "python": sys.executable,
            "git": {"commit": _capture("git", "rev-parse", "HEAD"), "dirty": None if status is None else bool(status)},
            "gpus": (_capture("nvidia-smi", "--query-gpu=name", "--format=csv,noheader") or "").splitlines()}


def summary(s: Settings, about: dict, runs: list[Run]) -> dict:
    verdict, worst = f64_verdict(runs)
    settings = {k: v for k, v in asdict(s).items() if k != "network"}
    # nn.bench's lr is not passed on: the runs train with nn.train's defaults (lr 1.0) unless --extra-args says.
    network = {k: v for k, v in asdict(s.network).items() if k != "lr"}
    return {"network": network, **about, "settings": json.loads(json.dumps(settings, default=str)),
            "f64_tolerance": F64_TOLERANCE, "f64_check": verdict, "f64_worst_rel_diff": worst,
            "rows": rows(runs), "runs": [dict(asdict(r), ms_per_epoch=r.ms_per_epoch) for r in runs]}


# ---------------------------------------------------------------- entry point

def main(argv=None, runner: Runner = run_process) -> int:
    """0 when every run is ok and the float64 check passes, 1 otherwise, 2 for bad arguments."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        s = resolve(build_parser().parse_args(argv))
    except NNError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    about, runs = provenance(argv), plan(s)
    try:
        path = claim_outputs(s, runs)
    except NNError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    start = time.monotonic()
    try:
        for i, run in enumerate(runs, 1):
            left = s.time_limit - (time.monotonic() - start) if s.time_limit else s.timeout
            if left <= 0:
                run.status, run.reason = "skipped", f"--time-limit {s.time_limit:g} s reached"
            else:
                execute(run, s, runner, min(s.timeout, left))
                if run.dtype == "float64" and run.ranks > 1:
                    compare(run, next(r for r in runs if r.dtype == "float64" and r.ranks == 1), s)
            print(f"[{i}/{len(runs)}] {run.name}: {run.status}"
                  + (f", {run.ms_per_epoch:.2f} ms/epoch" if run.ms_per_epoch and run.dtype == "float32" else "")
                  + (f", max rel diff {max(run.weight_diff.values()):.2e}" if run.weight_diff else "")
                  + (f", {run.wall_s:g} s" if run.wall_s is not None else "") + (f" ({run.reason})" if run.reason else ""),
                  flush=True)
            files.write_atomic(path, json.dumps(summary(s, about, runs), indent=1).encode())  # kept after each run
    except KeyboardInterrupt:      # the runner has ended the run in progress and everything under it
        print(f"interrupted; the finished runs are in {path}", file=sys.stderr)
        return 130
    except files.FileError as e:
        print(f"error: {path}: cannot be written: {e}", file=sys.stderr)
        return 2
    print(f"\nsummary {path}; logs {s.out}/{s.network.name}-*.log")
    for run in runs:
        if run.status != "ok":
            print(f"  {run.name}: {run.status}: {run.reason}")
    print(table(s, runs, about["gpus"]), flush=True)
    ok = all(r.status == "ok" for r in runs) and f64_verdict(runs)[0] == "pass"
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
