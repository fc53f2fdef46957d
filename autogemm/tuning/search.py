"""The search for one problem's best config: an Optuna study over the family's declared space.

    tune(family, problem, device, measure, settings) -> Result

- Every PARAMS entry is a categorical of TPE (seeded). A proposal that breaks a constraint is
  told PRUNED with its reason before anything is compiled, and does not count as a trial.
- Known-good configs go first: the family's default, the store's current record (and other
  `known` ones), the family's other untuned candidates up to the `seeded` share of the trials (a
  family that lists thousands leaves TPE and the local search theirs), a few valid random
  samples; a space small enough to list whole is measured exhaustively instead.
- Proposals are asked ahead: up to `in_flight` configs are being built (`measure.prepare`, if it
  has one, compiles them in parallel) while the GPU measures the first one built
  (`measure.first_ready`); each measured one's slot is filled by a new proposal at once, so the
  compiler's workers never wait for a batch's slowest. A failure (compile, launch, mismatch:
  anything `measure` raises) is told FAIL with its reason, and the search goes on.
- The last `local` fraction of the trials goes to the untried neighbours of the best configs
  (one parameter one step away, or two where the first step alone breaks a constraint) before
  TPE's proposals: tile spaces are smooth near their best. The local search starts early where
  `patience` proposals in a row after the seeded ones brought no gain of `min_gain`; as many more
  without one end the search.
- The top candidates are re-timed with more repetitions, interleaved round robin over several
  rounds; each one's median across rounds picks the winner, so one lucky quick run cannot.
- With a journal file the study persists: `resume` continues it (trials already measured are not
  measured again, the queue an earlier run left is queued afresh under this run's settings; a
  finished study is reused as is), and Ctrl-C marks the trials in flight
  failed ("interrupted") before it propagates.

`measure(config, reps)` returns an object with median_us, p10_us, p90_us (and optionally
max_rel_error); autogemm.tuning.measure has the GPU ones, tests inject their own.
"""
import json
import logging
import math
import random
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from autogemm import signals
from autogemm.errors import AutogemmError, reason
from autogemm.runtime.device import DeviceInfo
from autogemm.runtime.family import Config, Family
from autogemm.tuning.timing import interleaved, median_of

try:
    from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock
except ImportError:  # optuna < 4
    from optuna.storages import JournalFileStorage as JournalFileBackend
    from optuna.storages import JournalFileSymlinkLock

log = logging.getLogger("autogemm")
EXHAUSTIVE_LIMIT = 10_000     # spaces of at most this many points are listed whole


class SearchError(AutogemmError):
    """No config of the space could be measured (every candidate failed)."""


class TimingLike(Protocol):
    median_us: float
    p10_us: float
    p90_us: float


class Measure(Protocol):
    def __call__(self, config: Config, reps: int) -> TimingLike: ...

    # optional: prepare(configs) starts building them; first_ready(configs) -> the first one built
    # (waiting for one); cancel() drops the builds not started; parallelism: how many build at once


@dataclass(frozen=True)
class Settings:
    trials: int = 40            # configs compiled and measured per shape (rejections, repeats not counted)
    timeout: float | None = 20  # seconds of search per shape (the final re-timing not counted)
    seed: int = 0
    in_flight: int | None = None  # configs asked ahead and built while others are measured (None:
                                  # the measure's parallelism, else 8)
    quick_reps: int = 20        # timed runs per config during the search
    top: int = 5                # candidates re-timed at the end
    rounds: int = 5             # round-robin rounds of the re-timing
    final_reps: int = 50        # timed runs per candidate per round
    samples: int = 3            # random valid configs enqueued after the default
    seeded: float = 0.5         # the most of the trials that the candidates take (default, known configs always)
    max_failures_in_a_row: int = 40   # stop the search after this many failures in a row
    max_idle_asks: int = 400    # stop when this many proposals in a row bring nothing new
    local: float = 0.3          # last fraction of the trials: neighbours of the best configs first
    patience: int | None = 8    # proposals after the seeded ones without a gain: the local search starts;
                                # as many more: the search ends (None: every trial is measured)
    min_gain: float = 0.01      # a new best must be this much faster to count as a gain


@dataclass(frozen=True)
class Progress:
    measured: int
    trials: int
    failed: int
    rejected: int
    best_us: float | None
    phase: str                  # "search" or "final"


@dataclass(frozen=True)
class Result:
    config: Config
    median_us: float
    p10_us: float
    p90_us: float
    max_rel_error: float | None
    trials: int                 # configs measured, failures included (over resumed runs too)
    failed: int
    rejected: int               # proposals turned down by the constraints, never compiled
    finalists: tuple = ()       # ((config, quick median, final median), ...), best first
    reused: bool = False        # taken from a finished study (resume): nothing was measured
    seconds: float = 0.0
    waiting_s: float = 0.0      # of those, waiting for candidates to be built (the GPU idle)
    retiming_s: float = 0.0     # re-timing the finalists

    def to_json(self) -> dict:
        return dict(config=dict(self.config), median_us=self.median_us, p10_us=self.p10_us,
                    p90_us=self.p90_us, max_rel_error=self.max_rel_error, trials=self.trials,
                    failed=self.failed, rejected=self.rejected)


@dataclass
class _Seen:
    """What the study knows: measured configs, failed ones with reasons, counts."""

    timings: dict = field(default_factory=dict)     # Config -> (median, p10, p90, error)
    failures: dict = field(default_factory=dict)    # Config -> reason
    rejected: int = 0
    interrupted: list = field(default_factory=list)  # configs a killed run was measuring

    @property
    def measured(self) -> int:
        return len(self.timings) + len(self.failures)

    def best(self) -> float | None:
        return min((t[0] for t in self.timings.values()), default=None)


class _FixedSpaceTPE(optuna.samplers.TPESampler):
    """Multivariate TPE over a space known in advance: every trial asks every parameter from the
    same distributions, so the space is given, not inferred again from all trials at each ask
    (Optuna's intersection of the trials' spaces took about half of a search's CPU time)."""

    def __init__(self, space: dict, **kwargs):
        super().__init__(multivariate=True, **kwargs)
        self._space = {name: dist for name, dist in sorted(space.items()) if not dist.single()}  # as Optuna orders it

    def infer_relative_search_space(self, study, trial) -> dict:
        return dict(self._space)


def open_study(path: Path | None, name: str, seed: int, resume: bool, space: dict) -> optuna.Study:
    """A TPE study over `space` ({parameter: distribution}, as every trial asks them), in memory or
    persisted in a journal file (a fresh one unless `resume`)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = _FixedSpaceTPE(space, seed=seed, constant_liar=True, n_startup_trials=10)
    storage = None
    if path is not None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if not resume:
            for stale in (path, path.with_name(path.name + ".lock")):
                stale.unlink(missing_ok=True)
        storage = optuna.storages.JournalStorage(_WholeJournal(str(path)))
    return optuna.create_study(study_name=name, storage=storage, sampler=sampler,
                               direction="minimize", load_if_exists=True)


class _WholeJournal(JournalFileBackend):
    """Optuna's journal file, each write whole, its file lock taken and given back (a stop signal
    waits for it: signals.deferred), and not forced to disk: the journal is what --resume reads,
    and a write the kernel has survives the process that made it. Optuna's fsync of every write
    (some 70 a trial) took about a fifth of a search's CPU time."""

    def __init__(self, path: str):
        self._path, self._lock_file = path, JournalFileSymlinkLock(path)
        super().__init__(path, lock_obj=self._lock_file)

    def append_logs(self, logs):
        with signals.deferred():
            self._append(logs)

    def _append(self, logs):
        text = "".join(json.dumps(entry, separators=(",", ":")) + "\n" for entry in logs).encode()
        self._lock_file.acquire()
        try:
            with open(self._path, "ab") as journal:
                journal.write(text)
        finally:
            self._lock_file.release()


def tune(fam: Family, problem, device: DeviceInfo, measure: Measure, settings: Settings = Settings(),
         *, study_path: Path | None = None, resume: bool = False, known: tuple = (),
         progress: Callable[[Progress], None] | None = None) -> Result:
    """Search `fam`'s space for `problem` on `device` and return the re-timed winner."""
    started = time.monotonic()
    dists = {name: CategoricalDistribution(choices) for name, choices in fam.params.items()}
    study = open_study(study_path, f"{fam.name}:{problem}", settings.seed, resume, dists)
    seen = _recall(study, fam)
    finished = study.user_attrs.get("result")
    if finished and finished["goal"] >= settings.trials:     # done before, with as many trials
        return _reused(finished)
    report = progress or (lambda p: None)
    exhaustive = _enqueue(study, fam, problem, device, settings, known, seen)

    # ---- search ------------------------------------------------------------------------------
    state = _Flight(settings.in_flight or getattr(measure, "parallelism", 8), seeded=_queued(study))
    report(Progress(seen.measured, settings.trials, len(seen.failures), seen.rejected, seen.best(), "search"))
    try:
        while _goes_on(state, seen, settings, exhaustive, started, fam):
            if exhaustive is None and (state.local or seen.measured >= settings.trials * (1 - settings.local)):
                _enqueue_neighbours(study, fam, problem, device, seen, state.slots, {c for _, c in state.asked})
            _top_up(study, fam, problem, device, dists, settings, seen, state, measure, exhaustive)
            if not state.asked:
                break                     # nothing new to propose (max_idle_asks)
            waited = time.monotonic()
            trial, cfg = state.next(measure)
            state.waiting_s += time.monotonic() - waited
            ok = _measure_trial(study, trial, cfg, measure, settings.quick_reps, seen)
            state.measured(trial, cfg, ok, seen, settings)
            for repeat in state.repeats.pop(cfg, ()):     # the same config asked again meanwhile
                _tell_known(study, repeat, cfg, seen)
            report(Progress(seen.measured, settings.trials, len(seen.failures), seen.rejected, seen.best(), "search"))
    finally:                              # a stop, or a search that ended early: proposals left unmeasured
        _abandon(study, state, measure)
    if not seen.timings:
        last = next(reversed(seen.failures.values()), "no config could be proposed")
        raise SearchError(f"{fam.name} {problem}: none of {seen.measured} config(s) ran; last: {last}")

    # ---- re-time the top candidates, interleaved ---------------------------------------------------
    ranked = sorted(seen.timings.items(), key=lambda kv: kv[1][0])[:settings.top]
    report(Progress(seen.measured, settings.trials, len(seen.failures), seen.rejected, ranked[0][1][0], "final"))
    retiming = time.monotonic()
    final = retime([cfg for cfg, _ in ranked], measure, settings.rounds, settings.final_reps)
    retiming = time.monotonic() - retiming
    if not final:
        raise SearchError(f"{fam.name} {problem}: every finalist failed when re-timed")
    order = sorted(final, key=lambda cfg: final[cfg][0])
    winner = order[0]
    median, p10, p90, error = final[winner]
    quick = dict(ranked)
    result = Result(winner, median, p10, p90, error if error is not None else quick[winner][3],
                    seen.measured, len(seen.failures), seen.rejected,
                    tuple((cfg, quick[cfg][0], final[cfg][0]) for cfg in order),
                    seconds=time.monotonic() - started, waiting_s=state.waiting_s, retiming_s=retiming)
    study.set_user_attr("result", dict(result.to_json(), goal=settings.trials))
    return result


def retime(configs: list, measure: Measure, rounds: int, reps: int) -> dict:
    """{config: (median, p10, p90, error)} over `rounds` interleaved passes (timing.interleaved);
    a config that fails is dropped."""
    def dropped(cfg, exc):
        log.warning("autogemm: finalist %s failed when re-timed: %s", dict(cfg), reason(exc))

    final = {}
    for cfg, runs in interleaved(configs, lambda cfg: measure(cfg, reps), rounds, on_failure=dropped).items():
        t = median_of(runs)
        final[cfg] = (t.median_us, t.p10_us, t.p90_us, getattr(runs[0], "max_rel_error", None))
    return final


# ---- pieces of the search ---------------------------------------------------------------------
def _recall(study: optuna.Study, fam: Family) -> _Seen:
    """What a resumed study measured already; trials left running by a killed run are failed, and the
    queue it left is dropped (failed without a reason, which nothing reads): `_enqueue` queues afresh
    under this run's settings (a journal from before the seeded share held every candidate)."""
    seen = _Seen()
    for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        study._storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
    for t in study.get_trials(deepcopy=False):
        if t.state == TrialState.RUNNING:
            optuna.Trial(study, t._trial_id).set_user_attr("reason", "interrupted")
            study.tell(t.number, state=TrialState.FAIL)
            t = study.get_trials(deepcopy=False)[t.number]
        if not t.params or set(t.params) != set(fam.params) or t.user_attrs.get("repeat"):
            continue
        cfg = Config({k: t.params[k] for k in fam.params})
        if t.state == TrialState.COMPLETE:
            a = t.user_attrs
            seen.timings[cfg] = (t.value, a.get("p10_us", t.value), a.get("p90_us", t.value), a.get("max_rel_error"))
        elif t.state == TrialState.FAIL and t.user_attrs.get("reason") == "interrupted":
            seen.interrupted.append(cfg)
        elif t.state == TrialState.FAIL and t.user_attrs.get("reason") is not None:
            seen.failures[cfg] = t.user_attrs["reason"]
        elif t.state == TrialState.PRUNED:
            seen.rejected += 1
    return seen


def _reused(finished: dict) -> Result:
    return Result(Config(finished["config"]), finished["median_us"], finished["p10_us"], finished["p90_us"],
                  finished["max_rel_error"], finished["trials"], finished["failed"], finished["rejected"],
                  reused=True)


def _enqueue(study, fam: Family, problem, device, settings: Settings, known, seen: _Seen) -> list | None:
    """Queue the known-good configs (the default and `known` always, candidates up to the seeded
    share of the trials); for a small space, every valid config (returned)."""
    exhaustive = None
    if math.prod(len(v) for v in fam.params.values()) <= EXHAUSTIVE_LIMIT:
        valid = [c for c in fam.all_configs() if fam.fits(c, problem, device)]
        if len(valid) <= settings.trials:
            exhaustive = valid
    candidates = fam.candidates(problem, device)
    first = candidates[:1] + [fam.config(c, "known config") for c in known] + candidates[1:]
    first = list(dict.fromkeys(c for c in first if fam.fits(c, problem, device)))
    first = first[:max(1 + len(known), int(settings.trials * settings.seeded))]
    queue = first + seen.interrupted + (exhaustive if exhaustive is not None
                                        else fam.sample(problem, device, settings.samples, seed=settings.seed))
    for cfg in dict.fromkeys(queue):      # the queue is empty: _recall dropped an earlier run's
        if cfg not in seen.timings and cfg not in seen.failures:
            study.enqueue_trial(dict(cfg))
    return exhaustive


def neighbours(fam: Family, cfg: Config) -> list[Config]:
    """The configs one step away: one parameter moved to the next smaller or larger choice."""
    out = []
    for name, choices in fam.params.items():
        i = choices.index(cfg[name])
        for j in (i - 1, i + 1):
            if 0 <= j < len(choices):
                out.append(Config({**cfg, name: choices[j]}))
    return out


def valid_neighbours(fam: Family, cfg: Config, problem, device) -> list[Config]:
    """The valid configs one step away, and where a step breaks a constraint, the valid ones a
    second step away from it: parameters that depend on each other (a copy mode that needs a
    producer) leave no valid config out of reach."""
    out = []
    for step in neighbours(fam, cfg):
        if fam.fits(step, problem, device):
            out.append(step)
        else:
            out += [c for c in neighbours(fam, step) if c != cfg and fam.fits(c, problem, device)]
    return list(dict.fromkeys(out))


def _enqueue_neighbours(study, fam: Family, problem, device, seen: _Seen, count: int, in_flight: set = frozenset()):
    """Queue up to `count` untried valid neighbours of the best configs so far, none of those
    `in_flight` (local search: tile spaces are smooth near their optimum, where TPE's samples are
    sparse)."""
    waiting = _queued(study)
    if len(waiting) >= count:
        return
    rng = random.Random(len(seen.timings))      # no parameter always first, runs repeatable
    for best in sorted(seen.timings, key=lambda c: seen.timings[c][0])[:3]:
        around = valid_neighbours(fam, best, problem, device)
        rng.shuffle(around)
        for cfg in around:
            if cfg in seen.timings or cfg in seen.failures or cfg in waiting or cfg in in_flight:
                continue
            study.enqueue_trial(dict(cfg))
            waiting.add(cfg)
            if len(waiting) >= count:
                return


@dataclass
class _Flight:
    """The proposals asked and not yet measured, and what decides when the search stops early."""

    slots: int                                      # how many may be in flight
    seeded: set                                     # the configs queued before the search (not counted by patience)
    asked: list = field(default_factory=list)       # [(trial, config)] being built, in asking order
    repeats: dict = field(default_factory=dict)     # config -> [trial]: asked again while in flight
    idle: int = 0                                   # proposals in a row that brought nothing new
    failures_in_a_row: int = 0
    without_gain: int = 0                           # unseeded proposals measured since the last gain
    local: bool = False                             # the local search started early
    local_from: int = 0                             # ... with the trial of this number
    stale: bool = False                             # ... and brought no gain either: stop
    waiting_s: float = 0.0

    def next(self, measure) -> tuple:
        """The (trial, config) to measure now: the first one built (measure.first_ready), else the
        oldest; it stays in flight until `measured`."""
        first_ready = getattr(measure, "first_ready", None)
        cfg = first_ready([c for _, c in self.asked]) if first_ready else self.asked[0][1]
        return next((t, c) for t, c in self.asked if c == cfg)

    def measured(self, trial, cfg, ok: bool, seen: _Seen, settings: Settings):
        self.asked.remove((trial, cfg))
        self.failures_in_a_row = 0 if ok else self.failures_in_a_row + 1
        if cfg in self.seeded or settings.patience is None or trial.number < self.local_from:
            return                                  # (proposals from before the local search started)
        best_before = min((t[0] for c, t in seen.timings.items() if c != cfg), default=math.inf)
        gained = ok and seen.timings[cfg][0] < best_before * (1 - settings.min_gain)
        self.without_gain = 0 if gained else self.without_gain + 1
        if self.without_gain >= settings.patience:
            self.stale, self.local, self.without_gain = self.local, True, 0
            self.local_from = max(t.number for t, _ in self.asked) + 1 if self.asked else trial.number + 1


def _queued(study) -> set:
    """The configs waiting in the study's queue (before the search: the seeded ones)."""
    return {Config(t.system_attrs.get("fixed_params", {}))
            for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,))}


def _goes_on(state: _Flight, seen: _Seen, settings: Settings, exhaustive, started: float, fam: Family) -> bool:
    """Whether the search measures another config (the reason it stops, logged)."""
    if seen.measured >= settings.trials or (state.idle >= settings.max_idle_asks and not state.asked):
        return False
    if exhaustive is not None and all(c in seen.timings or c in seen.failures for c in exhaustive):
        return False
    why = None
    if settings.timeout is not None and time.monotonic() - started > settings.timeout:
        why = f"at its timeout ({settings.timeout}s)"
    elif state.failures_in_a_row >= settings.max_failures_in_a_row:
        why = f"after {state.failures_in_a_row} failures in a row"
    elif state.stale:
        why = f"early: {2 * settings.patience} proposals brought no gain of {settings.min_gain:.0%}"
    if why:
        log.info("autogemm: %s: search stopped %s", fam.name, why)
    return why is None


def _top_up(study, fam: Family, problem, device, dists, settings: Settings, seen: _Seen, state: _Flight, measure,
            exhaustive: list | None):
    """Ask new proposals until `state.slots` are in flight (or the trials, or a listed space's
    configs, are all spoken for), and hand the new ones to measure.prepare to build."""
    new = []
    in_flight = {cfg for _, cfg in state.asked}
    wanted = min(state.slots, settings.trials - seen.measured)
    if exhaustive is not None:
        wanted = min(wanted, sum(c not in seen.timings and c not in seen.failures for c in exhaustive))
    while len(state.asked) < wanted and state.idle < settings.max_idle_asks:
        trial = study.ask(dists)
        cfg = Config({k: trial.params[k] for k in fam.params})
        broken = fam.violations(cfg, problem, device)
        if broken:
            trial.set_user_attr("reason", broken[0])
            study.tell(trial, state=TrialState.PRUNED)
            seen.rejected += 1
            state.idle += 1
        elif cfg in seen.timings or cfg in seen.failures:
            _tell_known(study, trial, cfg, seen)
            state.idle += 1
        elif cfg in in_flight:
            state.repeats.setdefault(cfg, []).append(trial)
            state.idle += 1
        else:
            state.asked.append((trial, cfg))
            in_flight.add(cfg)
            new.append(cfg)
            state.idle = 0
    prepare = getattr(measure, "prepare", None)
    if new and prepare is not None:
        prepare(new)


def _abandon(study, state: _Flight, measure):
    """Tell the proposals still in flight failed as "interrupted" (a resumed run measures them) and
    drop their builds not started. One whose result was being told when a stop came is told
    already (signals.deferred held the stop until its journal entry was written)."""
    told = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL,
                                                                       TrialState.PRUNED))}
    for trial, _ in state.asked:
        if trial.number not in told:
            trial.set_user_attr("reason", "interrupted")
            study.tell(trial, state=TrialState.FAIL)
    for trials in state.repeats.values():
        for trial in trials:
            if trial.number not in told:
                study.tell(trial, state=TrialState.FAIL)
    state.asked.clear()
    state.repeats.clear()
    cancel = getattr(measure, "cancel", None)
    if cancel is not None:
        cancel()


def _tell_known(study, trial, cfg: Config, seen: _Seen):
    """A proposal already measured: the study hears the same result again, nothing is run."""
    trial.set_user_attr("repeat", True)
    if cfg in seen.timings:
        study.tell(trial, seen.timings[cfg][0])
    else:
        trial.set_user_attr("reason", seen.failures.get(cfg, "failed"))
        study.tell(trial, state=TrialState.FAIL)


def _measure_trial(study, trial, cfg: Config, measure: Measure, reps: int, seen: _Seen) -> bool:
    try:
        t = measure(cfg, reps)
    except Exception as exc:  # noqa: BLE001 - any failure of a candidate is recorded, never fatal
        why = reason(exc)
        trial.set_user_attr("reason", why)
        study.tell(trial, state=TrialState.FAIL)
        seen.failures[cfg] = why
        log.debug("autogemm: %s failed: %s", dict(cfg), why)
        return False
    error = getattr(t, "max_rel_error", None)
    trial.set_user_attr("p10_us", t.p10_us)
    trial.set_user_attr("p90_us", t.p90_us)
    trial.set_user_attr("max_rel_error", error)
    study.tell(trial, t.median_us)
    seen.timings[cfg] = (t.median_us, t.p10_us, t.p90_us, error)
    return True
