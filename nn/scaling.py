"""`python -m nn.scaling`: scaling of one network (an MLP or a CNN) over 1..R GPUs, strong or weak, nn.train's split and all-reduce or the ones given.

    python -m nn.scaling --network cme213 --out runs/scaling          # 1, 2, 4 ranks, nn.train's auto split and all-reduce
    python -m nn.scaling --network cme213 --parallel data,model --allreduce mpi,nccl
    python -m nn.scaling --network lenet --weak                       # batch 1000 a rank: 1000, 2000, 4000 in all
    python -m nn.scaling --layers conv16x5,pool2,dense256 --batch 500
    python -m nn.scaling --network large --ranks 1,2 --allreduce nccl --time-limit 540

Every run is `mpirun -n R python -m nn.train --use-tuned ...` in a subprocess with a timeout, its output
in DIR/<run>.log and its JSON log in DIR/<run>.json. Per (ranks, split, all-reduce): the split and
all-reduce the run used (its log's; `auto`, the default of both, passes nothing and so measures nn.train's
own choice), the bytes each rank sends a step, ms per epoch (median of the epochs after the first, which
compiles and captures), images/s (training images / epoch s), speed-up t1/tR and efficiency t1/(R tR),
float32 test accuracy; then a short float64 run whose final weights must be one rank's within 1e-7
(max-norm relative difference, every parameter).

Strong scaling (the default) keeps the global batch: each of R ranks trains batch/R rows a step.
`--weak` keeps the batch of one rank: R ranks train batch x R a step, so the speed-up is the throughput's
and the efficiency is weak scaling's, images/s of R ranks / (R x one rank's); a run of R ranks computes
other weights than one rank at the per-rank batch, so its float64 check is against one rank at the same
global batch (batch x R), one such run per rank count.

A run that fails or hangs is recorded with its reason and the others go on; one that completed its log
but did not exit (NCCL ranks did, once) keeps its timings, flagged "hung at exit". The summary goes to
DIR/scaling-<network>.json (weak: scaling-<network>-weak.json); the table is printed last.
"""
if __name__ == "__main__":  # first: a stop signal while the modules below load ends in one line, no traceback
    from autogemm import signals

    signals.starting()

import argparse
import contextlib
import hashlib
import io
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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np

from autogemm import arguments, files, signals
from nn import checkpoint
from nn import train
from nn.allreduce import KINDS as ALLREDUCES
from nn.backends import cuda_available
from nn.config import CNN_DEFAULTS, DEFAULTS, PARALLEL
from nn.errors import ArgumentParser, NNError, shown
from nn.layers import LENET, parse_layers
from nn.model_parallel import check_split
from nn.networks import ConvNetwork, Network, cnn_networks, networks
from nn.outputs import claim
from nn.train import positive_int

ROOT = Path(__file__).resolve().parents[1]
F64_TOLERANCE = 1e-7
MAX_RANKS = 1024
MAX_NAME = 64     # a --layers network's name (file names): longer specs are named by a hash
# --backend: nn.train's flags for it, and the backend its log must then name (--use-tuned falls back
# to NumPy, with a note, where it sees no GPU: such a run measures nothing and counts as failed).
BACKENDS = {"tuned": (["--use-tuned"], "cupy"), "cupy": (["--backend", "cupy"], "cupy"),
            "numpy": (["--backend", "numpy"], "numpy")}
# nn.train flags that nn.scaling sets for each run itself: --extra-args may not give them (its last
# value would replace a run's own: a float64 check's --dtype, a weak run's --batch, a run's --parallel).
OWN_FLAGS = {"model": "--model", "layers": "--layers", "batch": "--batch", "epochs": "--epochs", "dtype": "--dtype",
             "backend": "--backend", "use_tuned": "--use-tuned", "data_dir": "--data-dir", "parallel": "--parallel",
             "allreduce": "--allreduce", "checkpoint": "--checkpoint", "resume": "--resume", "log": "--log",
             "no_log": "--no-log"}
POLL_S = 0.2      # how often a running run's process and log are looked at
KILL_WAIT_S = 5   # after SIGTERM, before SIGKILL


# ---------------------------------------------------------------- settings

@dataclass(frozen=True)
class Settings:
    network: Network | ConvNetwork   # its batch: the global batch (strong), or each rank's (weak)
    ranks: tuple          # ascending, 1 first
    parallels: tuple      # of nn.train's PARALLEL: what the ranks split (auto: nn.train's choice)
    allreduces: tuple     # of ALLREDUCES (auto: nn.train's choice)
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
    weak: bool = False    # weak scaling: R ranks train the network's batch x R

    @property
    def stem(self) -> str:
        """The summary's and the runs' file names start with it."""
        return self.network.name + ("-weak" if self.weak else "")

    def batch(self, ranks: int) -> int:
        """The global batch of a run of `ranks` ranks."""
        return self.network.batch * (ranks if self.weak else 1)


def is_cnn(net) -> bool:
    return isinstance(net, ConvNetwork)


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
    p = ArgumentParser(prog="python -m nn.scaling",
                       description="Strong or weak scaling of one network (an MLP or a CNN) over 1..R GPUs, each run "
                                   "`mpirun -n R python -m nn.train`, with nn.train's split and all-reduce or the ones "
                                   "given. Needs R CUDA GPUs (one a rank), CuPy and mpirun (the [mpi] extra); "
                                   "--backend numpy runs on the CPU, for testing.")
    p.add_argument("--network", help=f"one of nn.bench's networks: {', '.join(networks() | cnn_networks())} "
                                     "(default: cme213, 784-1000-10 batch 800; large: 784-4096-10 batch 8192; "
                                     "lenet: the LeNet-like CNN, batch 1000)")
    p.add_argument("--layers", metavar="SPEC",
                   help="instead of --network, a CNN of nn.train's --layers spec (e.g. conv16x5,pool2,dense256), "
                        f"trained with nn.train's CNN defaults (Adam, relu), batch {CNN_DEFAULTS['batch']} unless --batch")
    p.add_argument("--batch", type=positive_int,
                   help="the network's batch instead of its own: the global batch, or with --weak each rank's "
                        "(the runs' files are then named <network>-b<batch>)")
    p.add_argument("--weak", action="store_true",
                   help="weak scaling: R ranks train batch x R a step (each rank the batch of one); reports "
                        "images/s and weak-scaling efficiency; the float64 check of R ranks is against one rank "
                        "at batch x R (default: strong scaling, one global batch)")
    p.add_argument("--ranks", **arguments.size_list(positive_int, "R", unique=True), default=(1, 2, 4),
                   help="rank counts, one GPU each, 1,2,4 or 1 2 4; 1 is the reference and must be there "
                        "(default: 1,2,4)")
    p.add_argument("--parallel", type=_csv(str, PARALLEL), default=["auto"],
                   help="comma list of nn.train's --parallel for the runs of more than one rank: auto (not passed: "
                        "nn.train's choice, recorded from its log), data (rows), model (an MLP's hidden units) or "
                        "none (every rank trains the whole batch; not with --weak) (default: auto)")
    p.add_argument("--allreduce", type=_csv(str, ALLREDUCES), default=["auto"],
                   help="comma list of nn.train's --allreduce for the runs of more than one rank: auto (not passed: "
                        "nn.train's choice, recorded from its log), mpi or nccl (default: auto)")
    p.add_argument("--epochs", type=positive_int,
                   help=f"float32 epochs per run, >= 2: the first is not timed (default: nn.train's, "
                        f"{DEFAULTS['epochs']} for an MLP, {CNN_DEFAULTS['epochs']} for a CNN)")
    p.add_argument("--f64-epochs", type=positive_int, default=2, help="epochs of the float64 weight check (default: 2)")
    p.add_argument("--out", default="runs/scaling", help="folder for the logs and the summary (default: runs/scaling)")
    p.add_argument("--backend", choices=tuple(BACKENDS), default="tuned",
                   help="tuned: --use-tuned; cupy: untuned kernels; numpy: the CPU, for testing (default: tuned)")
    p.add_argument("--data-dir", help="nn.train's --data-dir (default: its search, which reads $AUTOGEMM_DATA_DIR)")
    p.add_argument("--mpirun", help="the MPI launcher (default: mpirun on PATH, else beside this python)")
    p.add_argument("--extra-args", default="",
                   help='more nn.train flags for every run, one string: "--lr 0.1" (not the ones nn.scaling sets: '
                        f"{', '.join(OWN_FLAGS.values())})")
    p.add_argument("--timeout", type=positive_int, default=180, help="seconds per run before it is killed (default: 180)")
    p.add_argument("--exit-grace", type=positive_int, default=30,
                   help="seconds a run may take to exit once its log is complete; then it is killed and "
                        "flagged 'hung at exit' (default: 30)")
    p.add_argument("--time-limit", type=positive_int,
                   help="seconds for all runs: none starts or runs past it; the rest are 'skipped' (default: none)")
    return p


def network_of(args) -> Network | ConvNetwork:
    """The network of --network or --layers, at --batch where given."""
    if args.network is not None and args.layers is not None:
        raise NNError("--network and --layers both name the network; give one")
    if args.layers is not None:
        spec = ",".join(map(str, parse_layers(args.layers)[:-1]))   # canonical, the output layer left out
        name = "lenet" if spec == LENET else "cnn-" + spec.replace(",", "-")
        if len(name) > MAX_NAME:
            name = "cnn-" + hashlib.sha256(spec.encode()).hexdigest()[:12]
        net = ConvNetwork(name, spec, CNN_DEFAULTS["batch"])
    else:
        known = networks() | cnn_networks()
        name = "cme213" if args.network is None else args.network
        if name not in known:
            raise NNError(f"--network: unknown {name!r}; choose from {', '.join(known)}, or give --layers SPEC")
        net = known[name]
    if args.batch is not None and args.batch != net.batch:
        net = replace(net, name=f"{net.name}-b{args.batch}", batch=args.batch)
    return net


def check_extra(extra: list) -> None:
    """NNError unless nn.train takes `extra` and leaves nn.scaling's own flags alone."""
    parser = train.build_parser()
    parser.set_defaults(parallel=None, allreduce=None)   # to tell an explicit --parallel auto from none given
    try:
        with contextlib.redirect_stdout(io.StringIO()):      # --help would print nn.train's and exit
            given = parser.parse_args(extra)
    except NNError as e:
        raise NNError(f"--extra-args: {e}") from None
    except SystemExit:
        raise NNError("--extra-args: -h/--help shows nn.train's flags (python -m nn.train --help) and trains "
                      "nothing") from None
    own = [flag for dest, flag in OWN_FLAGS.items() if getattr(given, dest) not in (None, False)]
    if own:
        raise NNError(f"--extra-args: {', '.join(own)} {'is' if len(own) == 1 else 'are'} nn.scaling's to set for "
                      "each run: give --network or --layers, --batch, --epochs, --backend, --data-dir, --parallel, "
                      "--allreduce to nn.scaling itself")


def resolve(args) -> Settings:
    """Settings from parsed flags; every bad value is an NNError."""
    net = network_of(args)
    if 1 not in args.ranks:
        raise NNError("--ranks must include 1: speed-up, efficiency and the float64 check are relative to one rank")
    if max(args.ranks) > MAX_RANKS:
        raise NNError(f"--ranks: {max(args.ranks)} ranks; at most {MAX_RANKS}")
    if is_cnn(net) and "model" in args.parallel:
        raise NNError(f"--parallel model splits an MLP's hidden units; {net.name} is a CNN: give auto, data or none")
    if args.weak and "none" in args.parallel:
        raise NNError("--parallel none with --weak: every rank would train the whole batch x R, so a rank's "
                      "work grows with R; weak scaling needs a split (auto, data or model)")
    epochs = args.epochs if args.epochs is not None else (CNN_DEFAULTS if is_cnn(net) else DEFAULTS)["epochs"]
    if epochs < 2:
        raise NNError("--epochs must be >= 2: the first epoch compiles and captures, and is not timed")
    if args.data_dir and not Path(args.data_dir).is_dir():
        raise NNError(f"--data-dir {args.data_dir} is not a directory")
    try:
        extra = shlex.split(args.extra_args)
    except ValueError as e:
        raise NNError(f"--extra-args: {e}") from None
    check_extra(extra)
    flags, backend = BACKENDS[args.backend]
    data = ["--data-dir", os.path.realpath(args.data_dir)] if args.data_dir else []
    launch = tuple(launcher(args.mpirun))
    out = Path(os.path.realpath(args.out))
    if backend != "numpy" and not cuda_available():  # else each run would train on the CPU, then fail
        raise NNError(f"--backend {args.backend} needs a CUDA GPU and CuPy sees none; "
                      "--backend numpy measures the CPU")
    return Settings(net, tuple(sorted(args.ranks)), tuple(args.parallel), tuple(args.allreduce), epochs,
                    args.f64_epochs, out, launch, (*flags, *data), tuple(extra), backend,
                    args.timeout, args.exit_grace, args.time_limit or 0, args.weak)


def claim_outputs(s: Settings, runs: list) -> Path:
    """Before any run, every file the runs and the summary will write, in --out (created): each is
    new, or a regular file there from an earlier nn.scaling run (the folder holds its summary).
    Returns the summary's path."""
    path = s.out / f"scaling-{s.stem}.json"
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
    allreduce: str         # as asked: "auto", "mpi" or "nccl"; "none" for one rank
    dtype: str
    command: list
    status: str = "not run"  # ok | hung at exit | exit error (after a complete log) | failed | skipped
    reason: str = ""
    returncode: int | None = None
    wall_s: float | None = None
    epoch_ms: list = field(default_factory=list)   # every epoch's training time, the first included
    test_accuracy: float | None = None
    weight_diff: dict = field(default_factory=dict)  # float64, R > 1: parameter -> max rel diff to 1 rank's
    parallel: str = "data"  # what the ranks split, as asked (nn.train --parallel; auto: its choice)
    sent_bytes: int = 0     # what each rank sends a step (nn.train's log)
    batch: int = 0          # the global batch
    images: int | None = None         # training images an epoch (nn.train's log)
    parallel_used: str | None = None  # the split the run's log says it ran: data, model or none
    allreduce_used: str | None = None  # the log's words on its all-reduce ("NCCL, overlapped ...", "none")

    @property
    def usable(self) -> bool:
        """Its log is complete, from the right backend and rank count: its numbers count."""
        return self.status in ("ok", "hung at exit", "exit error")

    @property
    def ms_per_epoch(self) -> float | None:
        return statistics.median(self.epoch_ms[1:]) if self.usable and len(self.epoch_ms) > 1 else None

    @property
    def images_per_s(self) -> float | None:
        t = self.ms_per_epoch
        return self.images / (t / 1e3) if t and self.images else None

    @property
    def case(self) -> tuple:
        """What a float32 run and its float64 check share."""
        return self.ranks, self.parallel, self.allreduce, self.batch


def plan(s: Settings) -> list[Run]:
    """Every float32 run (1 rank, then each R > 1 with each split and all-reduce), then the float64
    (FP32-accurate GEMMs) references of one rank, one for each global batch (weak: batch x R for each
    R; strong: the batch), then the float64 runs of more than one rank (none, nor references, for
    one rank alone)."""
    cases = [(1, "data", "none")] + [(r, p, a) for r in s.ranks if r > 1 for p in s.parallels for a in s.allreduces]
    references = [(1, "data", "none", s.batch(r)) for r in (s.ranks if s.weak else (1,)) if len(cases) > 1]
    return ([_run(s, "float32", s.epochs, ranks, p, a, s.batch(ranks)) for ranks, p, a in cases]
            + [_run(s, "float64", s.f64_epochs, *case) for case in references]
            + [_run(s, "float64", s.f64_epochs, ranks, p, a, s.batch(ranks)) for ranks, p, a in cases if ranks > 1])


def _run(s: Settings, dtype: str, epochs: int, ranks: int, parallel: str, allreduce: str, batch: int) -> Run:
    net = s.network
    name = (f"{s.stem}-f{dtype[-2:]}-r{ranks}" + (f"-{allreduce}" if ranks > 1 else "")
            + (f"-{parallel}" if parallel != "data" else "") + (f"-b{batch}" if ranks == 1 and batch != net.batch else ""))
    if is_cnn(net):
        model, activation = (["--model", "lenet"] if net.layers == LENET else ["--layers", net.layers]), []
    else:
        model, activation = ["--hidden", str(net.hidden)], ["--activation", net.activation]
    command = [*s.launch, "-n", str(ranks), sys.executable, "-m", "nn.train", *model, "--batch", str(batch),
               *activation, "--train-size", str(net.images), "--dtype", dtype, "--epochs", str(epochs),
               "--log", str(s.out / f"{name}.json")]
    # auto passes nothing: the run does what nn.train does by default, and its log says what that was
    command += ["--allreduce", allreduce] if ranks > 1 and allreduce != "auto" else []
    command += ["--parallel", parallel] if ranks > 1 and parallel != "auto" else []
    command += ["--checkpoint", str(s.out / f"{name}.npz")] if dtype == "float64" else []
    # the float64 check compares weights: its GEMMs FP32-accurate whatever --extra-args asks (last flag wins)
    exact = ["--precision", "fp32"] if dtype == "float64" else []
    return Run(name, ranks, allreduce, dtype, [*command, *s.train_args, *s.extra, *exact], parallel=parallel,
               batch=batch)


def check_commands(runs: list[Run]):
    """NNError naming the first run whose flags nn.train would refuse (a CNN given --hidden or
    --precision tf32 in --extra-args, say, or a model split of more ranks than hidden units), before
    any run starts; --use-tuned is checked as on a GPU."""
    for run in runs:
        argv = run.command[run.command.index("nn.train") + 1:]
        argv = [a for flag in argv for a in (["--backend", "cupy"] if flag == "--use-tuned" else [flag])]
        try:
            cfg = train.resolve(train.build_parser().parse_args(argv))
            if run.parallel == "model" and run.ranks > 1:     # as nn.train checks it once the ranks are known
                check_split((0, *cfg.hidden, 0), run.ranks)
        except NNError as e:
            raise NNError(f"nn.train would refuse {run.name}: {e}") from None


def pin_split(run: Run, runs: list[Run]):
    """A float64 check of an auto split runs the split that its float32 run's log says auto chose
    (auto's choice depends on the dtype, and the check is of the float32 row's split)."""
    if run.dtype != "float64" or run.parallel != "auto" or run.ranks == 1:
        return
    twin = next((r for r in runs if r.dtype == "float32" and r.case == run.case), None)
    if twin is not None and twin.usable and twin.parallel_used in PARALLEL and twin.parallel_used != "auto":
        run.command = [*run.command, "--parallel", twin.parallel_used]   # --extra-args holds no --parallel


def reference_of(run: Run, runs: list[Run]) -> Run | None:
    """The one-rank float64 run a float64 run of more than one rank is compared with: the same global batch."""
    return next((r for r in runs if r.dtype == "float64" and r.ranks == 1 and r.batch == run.batch), None)


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
        environment = log["environment"]
        run.sent_bytes = environment.get("bytes_sent_per_step", 0)
        run.test_accuracy = log["final"]["test_accuracy"]
        data = log.get("data")
        run.images = _of_type(data.get("train"), int) if isinstance(data, dict) else None
        run.parallel_used = _of_type(environment.get("parallel"), str)
        run.allreduce_used = _of_type(environment.get("allreduce"), str)
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
    elif log["config"].get("batch", run.batch) != run.batch:
        run.status, run.reason = "failed", f"trained batch {log['config']['batch']!r}, not {run.batch}"
    elif outcome.killed:
        run.status, run.reason = "hung at exit", outcome.killed
    elif outcome.returncode:
        run.status, run.reason = "exit error", f"exit {outcome.returncode} after a complete log: {last}"
    else:
        run.status = "ok"


def _of_type(value, kind):
    """`value` if it is a `kind` (a str at most 300 characters), else None: a log is data."""
    ok = isinstance(value, kind) and not isinstance(value, bool) and (kind is not str or len(value) <= 300)
    return value if ok else None


# ---------------------------------------------------------------- float64 weights

def weight_diffs(reference_path, path) -> dict[str, float]:
    """max|W_R - W_1| / max|W_1| for every parameter of two checkpoints, named W1, b1, W2, b2, ...
    (layers counted from 1, as docs/GUIDE.md's example names W1 and b1; the checkpoint's own keys count from 0)."""
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


def compare(run: Run, reference: Run | None, s: Settings):
    """Fill run.weight_diff against the one-rank float64 run; a checkpoint that cannot be read fails it."""
    if not (run.usable and reference is not None and reference.usable):
        return
    try:
        run.weight_diff = weight_diffs(s.out / f"{reference.name}.npz", s.out / f"{run.name}.npz")
    except NNError as e:
        run.status, run.reason = "failed", str(e)


# ---------------------------------------------------------------- summary

def rows(runs: list[Run]) -> list[dict]:
    """One row per float32 run (ranks, split, all-reduce): the split and all-reduce it used, timing,
    throughput and accuracy, its float64 check, a status. Every run trains the same images an epoch, so
    the speed-up t1/tR is also the throughput's, and the efficiency t1/(R tR) is weak scaling's
    images/s of R / (R x one rank's) where R ranks trained batch x R."""
    f64 = {r.case: r for r in runs if r.dtype == "float64"}
    f32 = [r for r in runs if r.dtype == "float32"]
    one = next((r for r in f32 if r.ranks == 1), None)
    t1 = one.ms_per_epoch if one else None
    table = []
    for run in f32:
        check = f64.get(run.case)
        reference = reference_of(check, runs) if check and run.ranks > 1 else None
        t = run.ms_per_epoch
        worst = max(check.weight_diff.items(), key=lambda kv: kv[1]) if check and check.weight_diff else (None, None)
        notes = [run.status] if run.status != "ok" else []
        notes += [f"f64 {check.status}"] if check and check.status != "ok" else []
        # a reference of its own (weak: one rank at this global batch), whose failure no other row shows
        notes += ([f"f64 reference {reference.status}"] if reference and not reference.usable and one
                  and reference.case != one.case else [])
        notes += [f"f64 diff > {F64_TOLERANCE:g}"] if worst[1] is not None and worst[1] > F64_TOLERANCE else []
        if check and check.usable and run.usable:     # auto may choose otherwise in float64
            notes += [f"f64 ran {what} {used}" for what, used, mine in (
                ("split", check.parallel_used, run.parallel_used),
                ("all-reduce", short_allreduce(check.allreduce_used), short_allreduce(run.allreduce_used)))
                if used and mine and used != mine]
        table.append({"ranks": run.ranks, "batch": run.batch, "parallel": run.parallel,
                      "parallel_used": run.parallel_used, "allreduce": run.allreduce,
                      "allreduce_used": run.allreduce_used, "bytes_per_step": run.sent_bytes, "ms_per_epoch": t,
                      "images_per_s": run.images_per_s,
                      "speedup": t1 / t if t and t1 else None,
                      "efficiency": t1 / (run.ranks * t) if t and t1 else None,
                      "test_accuracy": run.test_accuracy if run.usable else None,
                      "f64_reference": reference.name if reference else None,
                      "f64_max_rel_diff": worst[1], "f64_worst_parameter": worst[0],
                      "status": "; ".join(notes) or "ok"})
    return table


def f64_verdict(runs: list[Run]) -> tuple[str, float | None]:
    """('pass' | 'fail' | 'incomplete' | 'none', worst max rel diff) over the float64 runs of more
    than one rank ('none': no such run, one rank alone)."""
    checks = [r for r in runs if r.dtype == "float64" and r.ranks > 1]
    if not checks:
        return "none", None
    worst = max((d for r in checks for d in r.weight_diff.values()), default=None)
    if worst is not None and worst > F64_TOLERANCE:
        return "fail", worst
    return ("pass" if checks and all(r.weight_diff for r in checks) else "incomplete"), worst


# nn.allreduce.describe's words (the run log's "allreduce") -> one word for the table
_ALLREDUCE_WORDS = (("NCCL", "nccl"), ("CUDA-aware MPI", "mpi-cuda"), ("MPI staged", "mpi-staged"),
                    ("MPI through host", "mpi-host"), ("none", "none"))


def short_allreduce(described: str | None) -> str | None:
    """A run log's all-reduce in one word: nccl, mpi-cuda (CUDA-aware), mpi-staged, mpi-host, none."""
    if described is None:
        return None
    word = next((w for prefix, w in _ALLREDUCE_WORDS if described.startswith(prefix)), None)
    return word or re.sub(r"[^\w.-]+", "-", described.split(",")[0])[:20]


def _used(asked: str, used: str | None) -> str:
    """A table cell: what ran (auto:<what it chose>), or what was asked where the log does not say."""
    if used is None:
        return asked
    return f"auto:{used}" if asked == "auto" else used


def _fmt(value, spec, missing="-"):
    return missing if value is None else format(value, spec)


def describe_network(s: Settings) -> str:
    net = s.network
    what = (f"CNN {net.layers} + dense10, relu, Adam" if is_cnn(net)
            else f"784-{net.hidden}-10 {net.activation}")
    batch = f"batch {net.batch} a rank (R x {net.batch} in all)" if s.weak else f"batch {net.batch}"
    return f"{net.name}: {what}, {batch}"


def table(s: Settings, runs: list[Run], gpus: list[str]) -> str:
    verdict, worst = f64_verdict(runs)
    machine = ", ".join(f"{n}x {name}" for name, n in Counter(gpus).items()) or "GPUs unknown (no nvidia-smi)"
    against = "one rank at the same global batch" if s.weak else "one rank"
    head = [f"{'weak' if s.weak else 'strong'} scaling, {describe_network(s)}"
            + (f", nn.train {shlex.join(s.extra)}" if s.extra else "") + f"; {s.backend} backend, {machine}",
            f"float32, {s.epochs} epochs, ms/epoch the median after the first, images/s the training images per "
            f"epoch s; {s.f64_epochs}-epoch float64 check against {against} "
            f"(max rel diff <= {F64_TOLERANCE:g}): {verdict}, worst {_fmt(worst, '.2e')}"]
    # (header, cell of a row, left-aligned)
    columns = [("ranks", lambda row: str(row["ranks"]), False)]
    columns += [("batch", lambda row: str(row["batch"]), False)] if s.weak else []
    columns += [
        ("split", lambda row: _used(row["parallel"], row["parallel_used"]), True),
        ("allreduce", lambda row: _used(row["allreduce"], short_allreduce(row["allreduce_used"])), True),
        ("sent/step", lambda row: f"{row['bytes_per_step'] / 1e3:.1f} KB" if row["bytes_per_step"] else "-", False),
        ("ms/epoch", lambda row: _fmt(row["ms_per_epoch"], ".2f"), False),
        ("images/s", lambda row: _fmt(row["images_per_s"], ".0f"), False),
        ("speed-up", lambda row: _fmt(row["speedup"], ".2f"), False),
        ("weak eff" if s.weak else "efficiency", lambda row: _fmt(row["efficiency"], ".2f"), False),
        ("test acc", lambda row: _fmt(row["test_accuracy"], ".2%"), False),
        ("f64 max rel diff", lambda row: "reference" if row["ranks"] == 1 else _fmt(row["f64_max_rel_diff"], ".2e"),
         False),
        ("status", lambda row: row["status"], True)]
    lines = [[header for header, _, _ in columns]] + [[cell(row) for _, cell, _ in columns] for row in rows(runs)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(columns))]
    body = ["  ".join(c.ljust(w) if left else c.rjust(w) for c, w, (_, _, left) in zip(line, widths, columns)).rstrip()
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
    network = dict({k: v for k, v in asdict(s.network).items() if k != "lr"}, model="cnn" if is_cnn(s.network) else "mlp")
    efficiency = "images_per_s / (ranks x one rank's)" + (": weak scaling, one rank at the per-rank batch"
                                                          if s.weak else "")
    return {"network": network, **about, "scaling": "weak" if s.weak else "strong",
            "settings": json.loads(json.dumps(settings, default=str)),
            "metrics": {"images_per_s": "training images an epoch / (ms_per_epoch / 1000)",
                        "speedup": "images_per_s / one rank's (= its ms_per_epoch / this one's)",
                        "efficiency": efficiency,
                        "f64_reference": "the one-rank float64 run at the same global batch"},
            "f64_tolerance": F64_TOLERANCE, "f64_check": verdict, "f64_worst_rel_diff": worst,
            "rows": rows(runs),
            "runs": [dict(asdict(r), ms_per_epoch=r.ms_per_epoch, images_per_s=r.images_per_s) for r in runs]}


# ---------------------------------------------------------------- entry point

def main(argv=None, runner: Runner = run_process) -> int:
    """0 when every run is ok and the float64 check passes (or has nothing to check: one rank), 1
    otherwise, 2 for bad arguments,
    128 + N for a stop signal (Ctrl-C: 130)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        with signals.stoppable():
            return _scale(argv, runner)
    except KeyboardInterrupt as stop:   # before the first run: nothing was written
        print(signals.interrupted(signals.signum_of(stop)), file=sys.stderr)
        return signals.status(stop)


def _scale(argv, runner: Runner) -> int:
    try:
        s = resolve(build_parser().parse_args(argv))
    except NNError as e:
        # argparse takes a value such as --no-graph for a flag, not for --extra-args: say how to give it
        hint = (" (a value that starts with '-' goes after '=': --extra-args=--no-graph)"
                if str(e) == "argument --extra-args: expected one argument" else "")
        print(f"error: {e}{hint}", file=sys.stderr)
        return 2
    about, runs = provenance(argv), plan(s)
    try:
        check_commands(runs)
        path = claim_outputs(s, runs)
    except NNError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    start, saved = time.monotonic(), 0
    try:
        for i, run in enumerate(runs, 1):
            left = s.time_limit - (time.monotonic() - start) if s.time_limit else s.timeout
            if left <= 0:
                run.status, run.reason = "skipped", f"--time-limit {s.time_limit:g} s reached"
            else:
                pin_split(run, runs)
                execute(run, s, runner, min(s.timeout, left))
                if run.dtype == "float64" and run.ranks > 1:
                    compare(run, reference_of(run, runs), s)
            chose = [used for asked, used in ((run.parallel, run.parallel_used),
                                              (run.allreduce, short_allreduce(run.allreduce_used)))
                     if asked == "auto" and used]
            print(f"[{i}/{len(runs)}] {run.name}: {run.status}" + (f" (auto: {', '.join(chose)})" if chose else "")
                  + (f", {run.ms_per_epoch:.2f} ms/epoch" if run.ms_per_epoch and run.dtype == "float32" else "")
                  + (f", {run.images_per_s:.0f} images/s" if run.images_per_s and run.dtype == "float32" else "")
                  + (f", max rel diff {max(run.weight_diff.values()):.2e}" if run.weight_diff else "")
                  + (f", {run.wall_s:g} s" if run.wall_s is not None else "") + (f" ({run.reason})" if run.reason else ""),
                  flush=True)
            files.write_atomic(path, json.dumps(summary(s, about, runs), indent=1).encode())  # kept after each run
            saved = i
    except KeyboardInterrupt as stop:      # the runner has ended the run in progress and everything under it
        kept = (f"{saved} of {len(runs)} runs finished, in {shown(path)}" if saved
                else f"no run had finished, {shown(path)} was not written")
        print(f"{signals.interrupted(signals.signum_of(stop))}; {kept}", file=sys.stderr)
        return signals.status(stop)
    except files.FileError as e:
        print(f"error: {shown(path)}: cannot be written: {e}", file=sys.stderr)
        return 2
    print(f"\nsummary {path}; logs {s.out}/{s.stem}-*.log")
    for run in runs:
        if run.status != "ok":
            print(f"  {run.name}: {run.status}: {run.reason}")
    print(table(s, runs, about["gpus"]), flush=True)
    ok = all(r.status == "ok" for r in runs) and f64_verdict(runs)[0] in ("pass", "none")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
