"""The work of `autogemm tune`: search each target in turn, store each result as soon as it is found.

    for outcome in tune_targets(targets, "float32", device, out_dir, settings, meta=..., command=...):
        ...     # one Outcome per target, its record already merged into out_dir/<gpu>.json

A Ctrl-C between targets or inside one propagates out of the generator; every target finished
before it is already in the store, and its study (in the cache folder) lets `resume` go on.
"""
import hashlib
import os
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from autogemm.errors import AutogemmError
from autogemm.runtime.device import DeviceInfo
from autogemm.runtime.family import family
from autogemm.store import locations
from autogemm.store.keys import Key, distance, problem_of, serving_keys
from autogemm.store.lookup import Index
from autogemm.store.records import Meta, Record, file_for, load, now, printable, save
from autogemm.tuning.search import Progress, Result, SearchError, Settings, tune
from autogemm.store.keys import Target
from kernels import REGISTRY
from kernels.contract import NO_OP


def study_path(device: DeviceInfo, key: Key, root: Path | None = None, space: str = "") -> Path:
    """<cache>/studies/<gpu slug>/<family>-<shape>-<op>-<dtype>[-<space>].log: the shape's Optuna
    journal (`space` tells a search of a restricted space from one of the whole)."""
    op = "all" if key.op == NO_OP else key.op
    name = f"{key.family}-{key.shape}-{op}-{key.dtype}" + (f"-{space}" if space else "")
    return (root or locations.cache_dir()) / "studies" / device.slug / f"{name}.log"


def _space_tag(restrictions: dict) -> str:
    """A short name of a restricted space for its study file ('' for the whole space)."""
    if not restrictions:
        return ""
    text = ";".join(f"{k}={','.join(map(str, v))}" for k, v in sorted(restrictions.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:10]


@dataclass(frozen=True)
class Outcome:
    target: Target
    key: Key
    result: Result | None = None
    record: Record | None = None
    stored: str = ""              # "added", "replaced", "kept" (the store's record was faster)
    cublas_us: float | None = None
    error: str = ""               # why the target has no result


def tune_targets(targets: list[Target], dtype: str, device: DeviceInfo, out_dir: Path, settings: Settings,
                 *, meta: Meta, command: str, resume: bool = False, measure_for: Callable | None = None,
                 studies: Path | None = None, gemm_space: dict | None = None, also: tuple[Path, ...] = (),
                 on_start: Callable[[Target, Key], None] = lambda t, k: None,
                 on_progress: Callable[[Target, Progress], None] = lambda t, p: None) -> Iterator[Outcome]:
    """Tune each target; yield its Outcome once its record is saved (merged) in the store.
    `gemm_space` limits GEMM parameters to some of their choices ({name: (values, ...)}); the records
    of the tuned files `also` (the shipped ones) are starting points, as the store's own are."""
    if measure_for is None:
        from autogemm.tuning.measures import measure_for
    path = file_for(out_dir, device)
    existing = _index([path, *also]).serving()     # a bad file fails now, not at the end
    gemm = family("gemm").restricted(gemm_space or {})
    last = None             # the last target's (measure, cuBLAS µs): the next family of its problem shares them
    for target in targets:
        key = target.key(dtype)
        problem = problem_of(key)
        fam = gemm if key.family == "gemm" else family(key.family)
        on_start(target, key)
        try:
            measure, cublas = _measure_of(key, last, measure_for, device, settings.seed)
        except (AutogemmError, MemoryError) as exc:      # CuPy's OutOfMemoryError is a MemoryError
            yield Outcome(target, key, error=f"cannot set up its operands: {str(exc) or type(exc).__name__}")
            continue
        last = (measure, cublas)
        known = _known(existing, key, device, fam)
        try:
            result = tune(fam, problem, device, measure, settings, resume=resume, known=known,
                          study_path=study_path(device, key, studies, _space_tag(fam.restrictions)),
                          progress=lambda p, t=target: on_progress(t, p))
        except SearchError as exc:
            yield Outcome(target, key, error=str(exc))
            continue
        if cublas is None:
            cublas = _baseline(measure, settings)
            last = (measure, cublas)
        record = Record(key, result.config, round(result.median_us, 3), round(result.p10_us, 3),
                        round(result.p90_us, 3), round(_flops(fam, problem) / (result.median_us * 1e3), 1),
                        round(cublas, 3) if cublas else None, _significant(result.max_rel_error),
                        result.trials, result.failed, now(), fam.code_hash(result.config, problem), printable(command),
                        _significant(getattr(measure, "cublas_error", None)))
        (_, stored), = save(path, [record], meta)
        existing[key] = record if stored != "kept" else existing[key]
        yield Outcome(target, key, result, record, stored, cublas)


def _flops(fam, problem) -> int:
    """The problem's floating-point operations for its record's GFLOP/s; 0 where a plugin's flops
    fails (the result is kept; the error was its)."""
    try:
        return fam.flops(problem)
    except AutogemmError:
        return 0


def _measure_of(key: Key, last: tuple | None, measure_for: Callable, device: DeviceInfo, seed: int) -> tuple:
    """(the measure of `key`, cuBLAS's time on its operands if known): the last target's rebound to
    `key`'s family where the two are families of one problem (gemm, gemm_wgmma: one set of operands,
    one float64 reference, cuBLAS timed once), else a new one."""
    rebound = getattr(last[0], "rebound", None) if last is not None else None
    shared = rebound(key) if rebound is not None else None
    return (shared, last[1]) if shared is not None else (measure_for(key, device, seed), None)


def at_precision(targets: list[Target], precision: str) -> list[Target]:
    """The targets whose families have kernels of `precision` ("fp32": all): what `tune --precision`
    tunes into records of it (the more accurate records serve its calls too)."""
    if precision == "fp32":
        return list(targets)
    return [t for t in targets if precision in getattr(REGISTRY[t.family], "KERNEL_PRECISIONS", ("fp32",))]


def runnable_targets(targets: list[Target], dtype: str, device: DeviceInfo) -> tuple[list[Target], list[Target]]:
    """(those some config of their family can run on `device`, the others): a call's other
    implementations (kernels.IMPLEMENTATIONS) may be for some ops, dtypes or GPUs only, and a family
    that is not FP32-accurate tunes no FP32-accurate call (Family.serves)."""
    def runnable(t: Target) -> bool:
        fam, problem = family(t.family), problem_of(t.key(dtype))
        return fam.serves(problem) and fam.can_run(problem, device)

    can = [runnable(t) for t in targets]
    return [t for t, ok in zip(targets, can) if ok], [t for t, ok in zip(targets, can) if not ok]


def _index(paths) -> Index:
    """The tuned files at `paths` (those that exist), merged as lookup reads them, in that order."""
    return Index([load(p) for p in paths if os.path.lexists(p)])


def stale_targets(paths: list[Path], dtype: str, families: tuple[str, ...]) -> list[Target]:
    """The keys (of `dtype` and `families`) that lookup serves from a stale record of the tuned
    files at `paths` (read in lookup's order), as targets: what a template change has left to
    tune again."""
    return [Target(r.key.family, r.key.sizes, r.key.op, "stale") for r in _index(paths).stale_serving().values()
            if r.key.dtype == dtype and r.key.family in families]


def stale_elsewhere(paths: list[Path], dtype: str, families: tuple[str, ...]) -> dict[str, int]:
    """{arithmetic: how many} of the stale records (of `families`) that stale_targets at `dtype`
    leaves: another run's, with that arithmetic's flags."""
    counts: dict[str, int] = {}
    for r in _index(paths).stale_serving().values():
        if r.key.dtype != dtype and r.key.family in families:
            counts[r.key.dtype] = counts.get(r.key.dtype, 0) + 1
    return counts


def _known(existing: dict, key: Key, device: DeviceInfo, fam, nearby: int = 3) -> tuple:
    """Configs to try first: the store's records of this shape and arithmetic that serve this key
    (its own, then a GEMM's layout's without the epilogue; stale ones too, if their configs are
    still in the space: the winner of an older template is a good start), then the winners of the
    nearest other shapes of the family and dtype (same op first) that can run this problem, all
    within `fam`'s space."""
    problem = problem_of(key)
    serving = [existing[k] for k in serving_keys(key) if k in existing and k.dtype == key.dtype]
    exact = [cfg for r in serving if (cfg := fam.holds(r.config)) is not None
             and fam.fits(cfg, problem, device)]
    records = [r for r in existing.values() if r.key.family == key.family and r.key.dtype == key.dtype
               and not r.stale and fam.within(r.config)]
    others = sorted((r for r in records if r.key != key),
                    key=lambda r: (r.key.op != key.op, distance(r.key, key), r.key.sizes))
    fitting = [r.config for r in others if fam.fits(r.config, problem, device)]
    return tuple(dict.fromkeys(exact + fitting[:nearby]))


def _significant(value: float | None, digits: int = 3) -> float | None:
    return float(f"{value:.{digits}g}") if value is not None else None


def _baseline(measure, settings: Settings) -> float | None:
    """cuBLAS (where the family has a baseline) timed as the finalists were: median of rounds."""
    baseline = getattr(measure, "baseline", None)
    runs = [baseline(settings.final_reps) for _ in range(settings.rounds)] if baseline else []
    runs = [t for t in runs if t is not None]
    return statistics.median(t.median_us for t in runs) if runs else None
