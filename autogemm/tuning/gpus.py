"""`autogemm tune --gpus`: the targets spread over several GPUs of the machine, one worker process a
GPU (spawned: CUDA is never forked), its numeric libraries' threads a share of the cores. The parent
hands each worker one problem's targets at a time (a problem's families together: they share one
measure), the largest first, the next as the worker asks for more;
the worker tunes them with tune_targets on its GPU and saves each result into the file of its GPU's
model (records.save merges under a lock, so workers on GPUs of one model write one file). The
parent reports what the workers tell it:

    for event in tune_on_gpus(targets, gpus, job):
        ...     # Started(gpu, target, key), Advanced(gpu, target, Progress), Finished(gpu, Outcome)

A worker that dies fails the targets of its problem that it had not finished; the others go on.
A stop signal in the parent (a Stop raised where it waits) is passed on to every worker as SIGTERM
(the workers ignore Ctrl-C and SIGHUP themselves: one signal, from the parent): each keeps its
finished targets, fails the trials in flight as interrupted (--resume measures them) and ends; the
parent reports what they finished meanwhile, then raises the Stop again.
"""
import contextlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from autogemm import arguments, files, signals
from autogemm.errors import AutogemmError, brief, reason
from autogemm.runtime.device import DeviceInfo, info, require_cupy, software, this_device
from autogemm.runtime.family import family
from autogemm.store.keys import Key, Target, problem_of, same_problem
from autogemm.store.records import Meta, file_for
from autogemm.tuning.search import Progress, Settings
from autogemm.tuning.tune import Outcome, tune_targets

POLL_S = 0.5            # how long the parent waits for a message before it looks at the clock
STOP_GRACE_S = 60       # how long stopped workers may take to end before they are killed


def gpu_count() -> int:
    """The CUDA devices CuPy sees."""
    cupy = require_cupy()
    try:
        return cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - CUDARuntimeError without a driver or a device
        raise AutogemmError(f"no CUDA device usable by CuPy: {exc}") from None


def gpu_info(gpu: int) -> DeviceInfo:
    """GPU `gpu`'s DeviceInfo, read without making it current (the parent opens no context on it)."""
    require_cupy()
    try:
        return info(gpu)
    except Exception as exc:  # noqa: BLE001 - CUDARuntimeError without a driver or a device
        raise AutogemmError(f"GPU {gpu}: cannot read its properties: {exc}") from None


def gpu_context(gpu: int) -> tuple[DeviceInfo, dict]:
    """Make GPU `gpu` this process's current device (a worker's): its DeviceInfo and software versions."""
    cupy = require_cupy()
    try:
        cupy.cuda.Device(gpu).use()
    except Exception as exc:  # noqa: BLE001 - CUDARuntimeError: the device is gone or taken
        raise AutogemmError(f"cannot use GPU {gpu}: {exc}") from None
    return this_device(), software()


def parse_gpus(text: str, count: Callable[[], int] | None = None) -> tuple[int, ...]:
    """`all`, or device numbers `0,2` or `0 2` (each once, each one the machine has: `count()`, by
    default gpu_count())."""
    count = count or gpu_count
    if text.strip() == "all":
        return tuple(range(count()))
    try:
        parts = arguments.items(text)
    except ValueError:
        parts = []
    if not parts or not all(p.isascii() and p.isdigit() for p in parts):
        raise AutogemmError(f"--gpus {brief(text)}: give 'all' or device numbers, e.g. 0,1")
    gpus = tuple(int(p) if len(p) < 6 else 10 ** 6 for p in parts)
    if len(set(gpus)) != len(gpus):
        raise AutogemmError(f"--gpus {brief(text)}: a device is named twice")
    have = count()
    if max(gpus) >= have:
        raise AutogemmError(f"--gpus {brief(text)}: this machine has {have} GPU(s), numbered 0..{have - 1}")
    return gpus


@dataclass(frozen=True)
class Job:
    """What every worker tunes with (tune_targets' arguments but the device's)."""

    dtype: str
    out: Path
    settings: Settings
    command: str
    shipped: Path                       # the shipped tuned files: read-only starting points
    resume: bool = False
    gemm_space: dict | None = None
    studies: Path | None = None
    context: Callable = gpu_context     # gpu -> (DeviceInfo, software), in the worker
    measure_for: Callable | None = None


@dataclass(frozen=True)
class Started:
    gpu: int
    target: Target
    key: Key


@dataclass(frozen=True)
class Advanced:
    gpu: int
    target: Target
    progress: Progress


@dataclass(frozen=True)
class Finished:
    gpu: int | None                     # None: no worker was left to take it
    outcome: Outcome


# A worker's own messages; the parent knows which worker by the pipe they come on.
@dataclass(frozen=True)
class _Idle:
    """The worker has finished its problem (or just started): it takes the next."""


@dataclass(frozen=True)
class _Ended:
    error: str = ""                     # why the worker could not tune at all


def problems(targets: list[Target], dtype: str) -> list[list[Target]]:
    """`targets` in runs of one problem (a GEMM's families): a worker's unit of work, the most work
    (its family's flops) first, so that no large problem starts while the other GPUs run out of
    work; problems of equal work in the given order."""
    groups: list[list[Target]] = []
    for t in targets:
        key = t.key(dtype)
        if groups and same_problem(groups[-1][-1].key(dtype), key):
            groups[-1].append(t)
        else:
            groups.append([t])
    return sorted(groups, key=lambda group: -_work_of(group, dtype))


def _work_of(group: list[Target], dtype: str) -> int:
    target = group[0]
    return len(group) * family(target.family).flops(problem_of(target.key(dtype)))


# The thread pools of a worker's numeric libraries (the float64 references' BLAS): a share of the
# cores each, so that four workers' BLAS do not each take every core beside their NVRTC threads
# (with the problems largest first, 2.82x -> 3.21x on four H100s: benchmarks/issue40-h100x4).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "MKL_NUM_THREADS")


def worker_environment(workers: int, cpus: int | None = None) -> dict[str, str]:
    """The variables a worker starts with beside the parent's: each thread pool a 1/workers share
    of the cores this process may use; none where the user sized any of them (an empty value
    sizes nothing)."""
    if any(os.environ.get(name) for name in THREAD_VARIABLES):
        return {}
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return dict.fromkeys(THREAD_VARIABLES, str(max(1, cpus // max(1, workers))))


@contextlib.contextmanager
def _environment(variables: dict[str, str]):
    """os.environ with `variables` set (spawned processes started meanwhile inherit them), then as
    it was."""
    before = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@dataclass
class _Workers:
    """The worker processes and what the parent knows of each."""

    waiting: list                                     # the problems no worker has taken yet
    processes: dict = field(default_factory=dict)     # gpu -> Process
    links: dict = field(default_factory=dict)         # gpu -> the parent's end of its pipe
    given: dict = field(default_factory=dict)         # gpu -> [Target]: its problem's targets not finished
    started: set = field(default_factory=set)         # have spoken (their signal handling is set up)
    ended: dict = field(default_factory=dict)         # gpu -> why it ended ("" once its work was done)
    stopped: set = field(default_factory=set)         # sent SIGTERM


def tune_on_gpus(targets: list[Target], gpus: tuple[int, ...], job: Job) -> Iterator:
    """Tune `targets` on `gpus`, one worker each; yield Started, Advanced and Finished events as they
    come (a target no worker could tune: Finished with its error). A stop signal stops every worker,
    yields what finished meanwhile, and is raised again."""
    spawn = multiprocessing.get_context("spawn")
    state = _Workers(problems(targets, job.dtype))
    # inherited: a worker starting takes no Ctrl-C, and its share of the cores
    with _ignoring(signal.SIGINT, signal.SIGHUP), _environment(worker_environment(len(gpus))):
        for gpu in gpus:
            # A pipe a worker (not one queue for all, whose lock a killed worker can keep for ever);
            # each message is sent and read whole (signals.deferred): a Stop in one would leave it out of step
            state.links[gpu], theirs = spawn.Pipe()
            state.processes[gpu] = spawn.Process(target=_work, args=(gpu, job, theirs), daemon=True,
                                                 name=f"autogemm-tune-gpu{gpu}")
            state.processes[gpu].start()
            theirs.close()
    try:
        yield from _events(state, job.dtype)
        yield from _left_over(state, job.dtype)
    except KeyboardInterrupt:
        state.waiting.clear()
        _stop(state)
        yield from _events(state, job.dtype, deadline_s=STOP_GRACE_S)
        raise
    finally:                                        # also where the reader left (GeneratorExit)
        _stop(state)
        deadline = time.monotonic() + STOP_GRACE_S
        for process in state.processes.values():
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()


@contextlib.contextmanager
def _ignoring(*sigs):
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in sigs}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _stop(state: _Workers):
    """Stop every worker still at work: SIGTERM, once; one still starting (it has done nothing, and
    its interpreter would say so) is killed."""
    for gpu, process in state.processes.items():
        if gpu in state.ended or gpu in state.stopped or not process.is_alive():
            continue
        if gpu in state.started:
            os.kill(process.pid, signal.SIGTERM)
        else:
            process.kill()
        state.stopped.add(gpu)


def _events(state: _Workers, dtype: str, deadline_s: float | None = None) -> Iterator:
    """The workers' events until every worker has ended (or `deadline_s` has passed), handing each
    idle worker the next problem."""
    deadline = time.monotonic() + deadline_s if deadline_s is not None else None
    while len(state.ended) < len(state.processes):
        if deadline is not None and time.monotonic() >= deadline:
            return
        open_links = {state.links[gpu]: gpu for gpu in state.processes if gpu not in state.ended}
        for link in multiprocessing.connection.wait(list(open_links), timeout=POLL_S):
            gpu = open_links[link]
            stop = None
            try:
                with signals.deferred():
                    event = link.recv()
            except (EOFError, OSError):            # it ended without a word: killed, crashed
                yield from _ended(state, gpu, dtype, "")
                continue
            except KeyboardInterrupt as exc:       # raised once the message was read whole: handle it first
                stop = exc
            yield from _handle(state, gpu, event, dtype)
            if stop is not None:
                raise stop


def _handle(state: _Workers, gpu: int, event, dtype: str) -> Iterator:
    state.started.add(gpu)
    if isinstance(event, _Idle):
        group = state.waiting.pop(0) if state.waiting else None
        state.given[gpu] = list(group or ())
        with signals.deferred():
            state.links[gpu].send(group)
    elif isinstance(event, _Ended):
        yield from _ended(state, gpu, dtype, event.error)
    else:
        if isinstance(event, Finished):
            state.given[gpu].remove(event.outcome.target)
        yield event


def _ended(state: _Workers, gpu: int, dtype: str, error: str) -> Iterator[Finished]:
    """Worker `gpu` has ended: with `error` (or, "", without a word where it had work: killed,
    crashed), the targets of its problem that it had not finished fail with why."""
    process = state.processes[gpu]
    if not error:
        process.join(5)
        if process.exitcode != 0:
            error = f"the worker of GPU {gpu} ended (exit status {process.exitcode})"
    state.ended[gpu] = error
    for target in state.given.pop(gpu, []):
        yield Finished(gpu, Outcome(target, target.key(dtype), error=error))


def _left_over(state: _Workers, dtype: str) -> Iterator[Finished]:
    """The problems no worker took, every one having ended: failed with the workers' reasons."""
    reasons = "; ".join(f"GPU {gpu}: {why}" for gpu, why in sorted(state.ended.items()) if why) or "no worker took it"
    for group in state.waiting:
        for target in group:
            yield Finished(None, Outcome(target, target.key(dtype), error=f"no GPU was left to tune it ({reasons})"))
    state.waiting.clear()


def _work(gpu: int, job: Job, link):
    """A worker: tune the problems the parent sends over `link` on GPU `gpu`, telling it as it goes."""
    def tell(event):
        with signals.deferred():
            link.send(event)

    for sig in (signal.SIGINT, signal.SIGHUP):   # the parent passes a stop on, as SIGTERM
        signal.signal(sig, signal.SIG_IGN)
    try:
        with signals.stoppable():
            device, versions = job.context(gpu)
            path = file_for(job.out, device)
            shipped = file_for(job.shipped, device)
            also = () if files.same_file(shipped, path) else (shipped,)
            meta = Meta.here(device, versions)
            tell(_Idle())
            while (group := link.recv()) is not None:
                for outcome in tune_targets(group, job.dtype, device, job.out, job.settings, meta=meta,
                                            command=job.command, resume=job.resume, measure_for=job.measure_for,
                                            studies=job.studies, gemm_space=job.gemm_space, also=also,
                                            on_start=lambda t, k: tell(Started(gpu, t, k)),
                                            on_progress=lambda t, p: tell(Advanced(gpu, t, p))):
                    tell(Finished(gpu, outcome))
                tell(_Idle())
    except KeyboardInterrupt:
        pass                                     # finished targets are saved; the parent says so
    except Exception as exc:  # noqa: BLE001 - whatever ends a worker is one line to the parent
        tell(_Ended(" ".join(str(exc).split()) if isinstance(exc, AutogemmError) else reason(exc)))
        return
    tell(_Ended())
