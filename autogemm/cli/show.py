"""`autogemm show`: tuned files as a summary per GPU, every record (--all), or JSON for scripts.

By default it shows what lookup reads, in its order: the user's store, then the results shipped with
autogemm. The summary counts each GPU's records per kernel family, in the user store and shipped,
stale and overridden; --all lists every record of each file, saying where it comes from. A record
that lookup passes over for another file's (the user's current record of the same key, say) is
"overridden".
"""
import errno
import json
import os
import statistics
import stat as stat_module
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from autogemm import files
from autogemm.errors import StoreError
from autogemm.runtime.device import slug
from autogemm.store.keys import problem_of
from autogemm.store.locations import tune_dir_named
from autogemm.store.lookup import Index
from autogemm.store.records import Record, Store, load, printable

ROLES = {"user": "user store", "shipped": "shipped with autogemm", "given": "file"}


@dataclass
class Shown:
    stores: list        # (role, Store) of the files that loaded, in lookup order
    errors: list        # one line per file that did not
    used: set           # id() of each record that lookup would use for its key

    def status(self, record: Record) -> str:
        if id(record) not in self.used:
            return "overridden"
        return "stale" if record.stale else ""


def collect(places: list[tuple[str, Path]], required: bool = True) -> Shown:
    """Every tuned file of `places` ((role, folder or file), in lookup order; a folder's *.json,
    not recursing), checked. A place that is missing fails if `required` and is skipped if not;
    StoreError when nothing at all is found."""
    shown = Shown([], [], set())
    for role, place in places:
        try:
            found = _files(Path(place), required, role)
        except StoreError as exc:
            if required:
                raise
            shown.errors.append(str(exc))
            continue
        for file in found:
            try:
                shown.stores.append((role, load(file)))
            except StoreError as exc:
                shown.errors.append(str(exc))
    if not shown.stores and not shown.errors:
        where = " or ".join(str(place) for _, place in places)
        raise StoreError(f"{where}: no tuned files (*.json) here" if required
                         else f"no tuned files in {where}: tune with `autogemm tune`")
    _mark_used(shown)
    return shown


def _files(place: Path, required: bool, role: str = "given") -> list[Path]:
    try:
        is_dir = stat_module.S_ISDIR(files.stat(place).st_mode)
    except files.FileError as exc:
        if exc.errno == errno.ENOENT and not required:
            return []
        raise StoreError(f"{place}: {'no such file or folder' if exc.errno == errno.ENOENT else exc}") from None
    if not is_dir:
        if role == "user":         # a folder of tuned files, named by $AUTOGEMM_TUNED
            raise StoreError(f"{tune_dir_named()} {place}: not a folder (tuned files are named after the GPU inside it)")
        return [place]
    try:
        with os.scandir(place) as entries:
            return sorted(Path(e.path) for e in entries if e.name.endswith(".json"))
    except OSError as exc:
        raise StoreError(f"{place}: cannot read the folder: {files.failure(exc)}") from None


def _mark_used(shown: Shown):
    """Mark the records lookup would use: of the files it reads (a folder's <gpu>.json) from the
    user store and the shipped results, per key the first current record, else the first stale
    one. A file shown on its own (role "given") is not read by lookup as such: all of it is shown
    as used."""
    by_gpu = defaultdict(list)
    for role, store in shown.stores:
        if role == "given":
            shown.used |= {id(r) for r in store.records.values()}
        elif store.path.name == f"{slug(store.meta.gpu)}.json":
            by_gpu[store.meta.gpu].append(store)
    for stores in by_gpu.values():
        shown.used |= {id(r) for r in Index(stores).serving().values()}


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
    from autogemm.runtime.family import family

    return family(record.key.family).instance_name(record.config, problem_of(record.key))


def ordered(store: Store) -> list[Record]:
    return sorted(store.records.values(), key=lambda r: (r.key.family, r.key.op, r.key.dtype, r.key.sizes))


def to_json(shown: Shown) -> list[dict]:
    return [dict(file=str(s.path), role=role, meta=s.meta.to_json(),
                 records=[dict(r.to_json(), kernel=None if r.stale else kernel_name(r), speedup=r.speedup,
                               stale=r.stale, used=id(r) in shown.used, age=age(r.date)) for r in ordered(s)])
            for role, s in shown.stores]


PLAIN_OVER = 500        # with --all, a file of more records is printed as plain lines (rich takes ms a row)
COLUMNS = ("family", "shape", "op", "dtype", "config", "µs", "GFLOP/s", "vs cuBLAS", "error", "age", "status")
RIGHT = ("µs", "GFLOP/s", "vs cuBLAS", "error", "age")
COUNTED = {"user": "user", "shipped": "shipped", "given": "records"}    # a summary's column of each role's records


def dumps(docs: list[dict]) -> str:
    """to_json's list as text: each file's fields on its first line, then one record a line
    (json's indent takes its Python encoder, three times slower than the C one on a large file)."""
    parts = []
    for doc in docs:
        head = json.dumps({k: v for k, v in doc.items() if k != "records"})[:-1]
        records = ",\n  ".join(map(json.dumps, doc["records"]))
        parts.append(f'{head}, "records": [\n  {records}\n ]}}' if records else f'{head}, "records": []}}')
    return "[\n " + ",\n ".join(parts) + "\n]" if parts else "[]"


def tables(shown: Shown) -> list:
    """What `autogemm show --all` prints of each file: a rich Table of its records, or of a file of
    more than PLAIN_OVER, plain text lines (rich takes milliseconds a row). Text from the files goes
    in as plain Text: a GPU name or config that looks like rich markup is shown as written."""
    from rich.text import Text

    out = []
    now = datetime.now(timezone.utc)
    for role, store in shown.stores:
        m = store.meta
        title = (f"{ROLES[role]}: {store.path}\n{m.gpu} ({m.sm_count} SMs, compute {m.compute_capability}; "
                 f"driver {m.driver}, CUDA {m.cuda_runtime}, CuPy {m.cupy})")
        rows = [_cells(r, shown, now) for r in ordered(store)]
        out.append(_table(Text(title), rows) if len(rows) <= PLAIN_OVER else _plain(title, rows))
    return out


def summary(shown: Shown, places: list[tuple[str, Path]]) -> list:
    """What `autogemm show` prints by default: per GPU, its files (role, records, last update, path;
    the user store's where it has none) and a table of records per kernel family: in each role of
    `places` (collect's, in lookup order), stale, overridden (lookup passes over them) and the
    median speed-up over cuBLAS of those in use; then what is stale and how to see every record.
    Rich renderables, to fit the console's width (an 80-column terminal shows all), and the paths of
    the files as plain strings, to be printed whole (a path cut in two cannot be copied)."""
    from rich.text import Text

    roles = [role for role, _ in places]
    by_gpu = defaultdict(list)
    for role, store in shown.stores:
        by_gpu[store.meta.gpu].append((role, store))
    now = datetime.now(timezone.utc)
    out, stale = [], 0
    for gpu, stores in by_gpu.items():
        m = stores[0][1].meta
        out.append(Text(("\n" if out else "") + f"{gpu} ({m.sm_count} SMs, compute {m.compute_capability})",
                        style="bold"))
        for place_role, place in places:
            files_of_role = [store for role, store in stores if role == place_role]
            for store in files_of_role:
                out += [Text(f"  {ROLES[place_role]}: {len(store.records)} records, updated "
                             f"{age(store.meta.updated, now)} ago:"), f"    {printable(str(store.path), 4096)}"]
            if place_role == "user" and not files_of_role:
                out += [Text("  user store: none; `autogemm tune` on this GPU writes:"),
                        f"    {printable(str(Path(place) / f'{slug(gpu)}.json'), 4096)}"]
        table, gpu_stale = _family_table(stores, roles, shown)
        out.append(table)
        stale += gpu_stale
    out += _plugin_lines(shown)
    if stale:
        out.append(Text(f"{stale} stale record{'s' * (stale > 1)}: tuned on kernel code that has changed since; each "
                        "whose config is still in the space serves its own shape until `autogemm tune --stale` "
                        "re-tunes it on its GPU"))
    out.append(Text("every record: autogemm show --all; for scripts: autogemm show --json", style="dim"))
    return out


def _plugin_lines(shown: Shown) -> list:
    """The plugin families loaded (and from where), those installed but left out (and why), and the
    records of families not loaded here that the files keep."""
    from rich.text import Text

    from autogemm.runtime import plugins

    out = [Text(f"plugin family {name}: ") + Text(printable(str(folder), 4096), style="dim")
           for name, folder in plugins.plugins().items()]
    out += [Text(f"plugin {name} left out: {why}", style="red") for name, why in plugins.broken.items()]
    foreign = Counter(item["family"] for _, store in shown.stores for item in store.foreign)
    if foreign:
        out.append(Text(f"records of families not loaded here, kept as they are: "
                        f"{', '.join(f'{name} ({n})' for name, n in sorted(foreign.items()))} (install the family's "
                        f"package to use them)"))
    return out


def _family_table(stores: list, roles: list[str], shown: Shown):
    """One GPU's records per family: (rich Table, stale records)."""
    from rich import box
    from rich.table import Table

    counted = list(dict.fromkeys(COUNTED[role] for role in roles))
    counts = defaultdict(lambda: defaultdict(int))        # family -> column -> records
    speedups = defaultdict(list)                          # family -> speed-ups of the records in use
    for role, store in stores:
        for r in store.records.values():
            c = counts[r.key.family]
            status = shown.status(r)
            c[COUNTED[role]] += 1
            c["stale"] += status == "stale"
            c["overridden"] += status == "overridden"
            if status != "overridden" and r.speedup is not None:
                speedups[r.key.family].append(r.speedup)
    total = defaultdict(int)
    for c in counts.values():
        for col, n in c.items():
            total[col] += n
    table = Table(box=box.SIMPLE, show_edge=False, show_footer=len(counts) > 1, padding=(0, 1), collapse_padding=True,
                  pad_edge=False)
    table.add_column("family", footer="all", overflow="fold", min_width=min(15, max(map(len, counts), default=6)))
    for col in (*counted, "stale", "overridden"):
        table.add_column(col, footer=_stale(total[col]) if col == "stale" else str(total[col]), justify="right")
    table.add_column("vs\ncuBLAS", justify="right")
    for name, c in sorted(counts.items()):
        median = f"{statistics.median(speedups[name]):.2f}x" if speedups[name] else ""
        table.add_row(name, *(str(c[col]) for col in counted), _stale(c["stale"]), str(c["overridden"]), median)
    return table, total["stale"]


def _stale(n: int):
    from rich.text import Text

    return Text(str(n), style="red" if n else "")


def _cells(r: Record, shown: Shown, now: datetime) -> list[str]:
    speedup = r.speedup
    return [r.key.family, r.key.shape, r.key.op, r.key.dtype, compact(r.config), f"{r.median_us:.1f}",
            f"{r.gflops:.0f}" if r.gflops >= 10 else f"{r.gflops:.2g}",
            f"{speedup:.2f}x" if speedup is not None else "",
            _error(r), age(r.date, now), shown.status(r)]


def _error(r: Record) -> str:
    """Its max-norm relative error, and that over cuBLAS's on the same operands where measured."""
    if r.max_rel_error is None:
        return ""
    ratio = r.error_ratio
    return f"{r.max_rel_error:.1e}" + (f" ({ratio:.2f}x)" if ratio is not None else "")


def _table(title, rows: list[list[str]]):
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title)
    for col in COLUMNS:
        table.add_column(col, justify="right" if col in RIGHT else "left")
    for cells in rows:
        status = cells[-1]
        table.add_row(*cells[:4], Text(cells[4]), *cells[5:-1], Text(status, style="red" if status == "stale" else "dim"))
    return table


def _plain(title: str, rows: list[list[str]]) -> str:
    """The rows as aligned plain text under the title: linear, for files of many records."""
    widths = [max([len(col)] + [len(cells[i]) for cells in rows]) for i, col in enumerate(COLUMNS)]

    def line(cells):
        return "  ".join(c.rjust(w) if col in RIGHT else c.ljust(w)
                         for c, w, col in zip(cells, widths, COLUMNS)).rstrip()

    return "\n".join([title, line(COLUMNS), *map(line, rows)])
