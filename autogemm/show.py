"""`autogemm show`: the tuned files of a folder (or one file) as tables, or as JSON for scripts."""
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from autogemm.errors import StoreError
from autogemm.keys import problem_of
from autogemm.store import Record, Store, load


@dataclass
class Shown:
    stores: list        # the files that loaded
    errors: list        # one line per file that did not


def collect(path: Path) -> Shown:
    """Every tuned file at `path` (a folder's *.json, not recursing, or one file), checked."""
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("*.json"))
        if not files:
            raise StoreError(f"{path}: no tuned files (*.json) here")
    elif path.exists():
        files = [path]
    else:
        raise StoreError(f"{path}: no such file or folder")
    shown = Shown([], [])
    for file in files:
        try:
            shown.stores.append(load(file))
        except StoreError as exc:
            shown.errors.append(str(exc))
    return shown


def compact(config) -> str:
    """bm=64 bn=128 ... on one line."""
    return " ".join(f"{k}={v}" for k, v in config.items())


def age(date: str, now: datetime | None = None) -> str:
    """How long ago an ISO date was: 40s, 12m, 5h, 3d."""
    then = datetime.fromisoformat(date)
    if then.tzinfo is None:
        then = then.replace(tzinfo=timezone.utc)
    seconds = max(0, ((now or datetime.now(timezone.utc)) - then).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def kernel_name(record: Record) -> str:
    from autogemm.family import family

    return family(record.key.family).instance_name(record.config, problem_of(record.key))


def ordered(store: Store) -> list[Record]:
    return sorted(store.records.values(), key=lambda r: (r.key.family, r.key.op, r.key.dtype, r.key.sizes))


def to_json(shown: Shown) -> list[dict]:
    return [dict(file=str(s.path), meta=s.meta.to_json(),
                 records=[dict(r.to_json(), kernel=None if r.stale else kernel_name(r), speedup=r.speedup, stale=r.stale,
                               age=age(r.date)) for r in ordered(s)])
            for s in shown.stores]


def tables(shown: Shown) -> list:
    """One rich Table per file."""
    from rich.table import Table

    out = []
    for store in shown.stores:
        m = store.meta
        table = Table(title=f"{m.gpu} ({m.sm_count} SMs, compute {m.compute_capability}; driver {m.driver}, "
                            f"CUDA {m.cuda_runtime}, CuPy {m.cupy}): {store.path}")
        for col in ("family", "shape", "op", "dtype", "config", "µs", "GFLOP/s", "vs cuBLAS", "age", "stale"):
            table.add_column(col, justify="right" if col in ("µs", "GFLOP/s", "vs cuBLAS", "age") else "left")
        for r in ordered(store):
            speedup = r.speedup
            table.add_row(r.key.family, r.key.shape, r.key.op, r.key.dtype, compact(r.config),
                          f"{r.median_us:.1f}", f"{r.gflops:.0f}" if r.gflops >= 10 else f"{r.gflops:.2g}",
                          f"{speedup:.2f}x" if speedup is not None else "", age(r.date),
                          "[red]stale[/red]" if r.stale else "")
        out.append(table)
    return out
