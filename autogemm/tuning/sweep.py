"""`autogemm sweep`: how close does the search get to the best config there is?

    report = sweep(fam.restricted(...), problem, device, measure, settings)

Every valid config of a (restricted) space is measured the way the search measures its trials
(compiled in parallel batches, checked against the float64 reference, quick timing); then the
search runs on the same space with the same measure and trial budget; finally the search's winner
and the sweep's best few are re-timed together, interleaved, so both sides of the comparison come
from one timing. Nothing is written to the store.
"""
import time
from collections.abc import Callable
from dataclasses import dataclass

from autogemm.runtime.device import DeviceInfo
from autogemm.runtime.family import Config, Family
from autogemm.tuning.search import Result, SearchError, Settings, retime, tune

BATCH = 64          # configs compiled at once


@dataclass(frozen=True)
class SweepReport:
    valid: int                   # configs of the space that pass the constraints
    timings: dict                # Config -> quick median µs, every config that ran
    failures: dict               # Config -> reason
    search: Result               # the search on the same space
    top: tuple                   # the sweep's fastest configs by quick timing, re-timed
    final: dict                  # Config -> re-timed median µs (`top` and the search's winner)
    seconds_sweep: float
    seconds_search: float

    @property
    def best(self) -> Config:
        """The sweep's best config after the interleaved re-timing."""
        return min((c for c in self.top if c in self.final), key=self.final.get)

    @property
    def ratio(self) -> float:
        """The search winner's time over the sweep's best (1.0: the search found the best)."""
        return self.final[self.search.config] / self.final[self.best]


def quick_timings(configs: list, measure, reps: int,
                  progress: Callable[[int, int], None] = lambda done, total: None) -> tuple[dict, dict]:
    """({config: quick median µs}, {config: why it failed}) of each of `configs`, compiled BATCH at a
    time where the measure prepares builds."""
    timings, failures = {}, {}
    for i in range(0, len(configs), BATCH):
        batch = configs[i:i + BATCH]
        prepare = getattr(measure, "prepare", None)
        if prepare is not None:
            prepare(batch)
        for cfg in batch:
            try:
                timings[cfg] = measure(cfg, reps).median_us
            except Exception as exc:  # noqa: BLE001 - compile, launch, mismatch: recorded, not fatal
                failures[cfg] = f"{type(exc).__name__}: {exc}"
        progress(len(timings) + len(failures), len(configs))
    return timings, failures


def sweep(fam: Family, problem, device: DeviceInfo, measure, settings: Settings = Settings(),
          progress: Callable[[int, int], None] = lambda done, total: None) -> SweepReport:
    """Measure every valid config of `fam`'s space, run the search on it, re-time both winners."""
    valid = [cfg for cfg in fam.all_configs() if fam.fits(cfg, problem, device)]
    if not valid:
        raise SearchError(f"{fam.name} {problem}: the space holds no valid config")
    started = time.monotonic()
    timings, failures = quick_timings(valid, measure, settings.quick_reps, progress)
    if not timings:
        raise SearchError(f"{fam.name} {problem}: none of the {len(valid)} configs ran")
    swept = time.monotonic() - started

    started = time.monotonic()
    searched = tune(fam, problem, device, measure, settings)
    searching = time.monotonic() - started

    top = sorted(timings, key=timings.get)[:settings.top]
    final = retime(list(dict.fromkeys(top + [searched.config])), measure, settings.rounds, settings.final_reps)
    if searched.config not in final or not set(top) & set(final):
        raise SearchError(f"{fam.name} {problem}: the finalists failed when re-timed")
    return SweepReport(len(valid), timings, failures, searched, tuple(top), {c: t[0] for c, t in final.items()},
                       swept, searching)
