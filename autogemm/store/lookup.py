"""Which config a call without `config=` gets: tuned for its shape on this GPU, else tuned for its
shape on older template code (a stale record, whose config today's space still holds), else the
nearest tuned shape (every size within a factor of 4) whose config can run it, else the family's
default. A stale record serves only its own shape: for it, the config found by measuring this very
shape is a better guess than another shape's or the untuned default, until `autogemm tune --stale`
measures again. A GEMM at precision tf32 is served by tf32 records and by the FP32-accurate ones
(bf16: bf16, tf32 and FP32-accurate): of those, a record of its shape beats a nearest one, and
between two of its shape the faster wins. An FP32-accurate call never gets a tf32 or bf16 record.
A GEMM with a fused epilogue is served, in each arithmetic, by the records tuned with it, and
where its shape has none by those of its layout tuned without one (kernels.gemm.served_by_ops).

Two folders hold tuned files (autogemm.store.locations): the one `autogemm tune` writes (the user's
store), then the results shipped with autogemm. For each key, a current record beats a stale one,
and between two of the same kind the user's wins. A call that none of this GPU's records serves
takes the shipped current records of its twins, other GPUs of the same compute capability and SM
count (an H100 SXM and an H200 are one chip with other memory), in the same order, before the
default. Each file is read once and read again only when its mtime or size changes; callers
(autogemm.ops.kernels) cache the instance chosen per problem, so a repeated call never comes here.
A file of this GPU's that does not load raises its StoreError: a corrupted store never yields a
silently different kernel; another GPU's is passed over with a warning.
"""
import contextlib
import dataclasses
import logging
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from autogemm import files
from autogemm.errors import AutogemmError, StoreError
from autogemm.runtime.device import H100, DeviceInfo, this_device
from autogemm.runtime.family import Config, family
from autogemm.store import locations
from autogemm.store.keys import Key, distance, key_of, make_key, serving_keys
from autogemm.store.records import Record, Store, file_for, load
from kernels import REGISTRY

# A tuned config stands in for another shape only if no size differs by more than this factor:
# a config tuned for a shape much smaller can be slower than the default (benchmarks/README.md).
NEAR_RATIO = 4.0
log = logging.getLogger("autogemm")


@dataclass(frozen=True)
class Choice:
    config: Config
    source: str                  # "exact", "stale", "nearest" or "default"
    record: Record | None = None
    distance: float = 0.0
    other_op: bool = False       # the record is of another op (a GEMM's layout, tuned without the call's epilogue)
    twin: str = ""               # the record is of this GPU's twin, so named (twin_indexes)

    @property
    def rank(self) -> tuple[int, bool, float, float]:
        """Lower is better: a record of the shape, then a nearest one (the closer first), then the
        default; of each kind this GPU's before a twin's (whose times are another GPU's); between
        two records of the shape, the faster. A stale record's time is still a measurement of its
        own shape (its template changed since), so it competes with exact ones on time; a nearest
        record's time is another shape's, so distance decides first."""
        return _RANK[self.source], bool(self.twin), self.distance, self.record.median_us if self.record else 0.0

    @property
    def rank_in_arithmetic(self) -> tuple[int, bool, float, bool, float]:
        """`rank` between the records of one family and arithmetic: between two as close, one of
        the call's own op first (a GEMM's tuned with its epilogue; the other, timed without it,
        is faster on paper only)."""
        source, twin, distance, time = self.rank
        return source, twin, distance, self.other_op, time


_RANK = {"exact": 0, "stale": 0, "nearest": 1, "default": 2}


class Index:
    """Loaded stores, arranged for lookup: per key the record that serves it, current ones (also
    by group, for the nearest shape) apart from stale ones. `stores` come first-wins: the user's
    file before the shipped one; with `stale=False`, their current records alone."""

    def __init__(self, stores: list[Store], stale: bool = True):
        self.stores = stores
        self.exact: dict[Key, Record] = {}
        self.stale: dict[Key, Record] = {}
        self.groups: dict[tuple, list[Record]] = defaultdict(list)
        self.origin: dict[Record, Path] = {}       # which file each record came from
        for store in stores:
            for record in store.records.values():
                if record.stale and not stale:
                    continue
                chosen = self.stale if record.stale else self.exact
                if record.key not in chosen:
                    chosen[record.key] = record
                    self.origin[record] = store.path
        for record in self.exact.values():
            self.groups[_group(record.key)].append(record)

    def serving(self) -> dict[Key, Record]:
        """Per key, the record that lookup uses for it: the current one, else the stale one."""
        return {**self.stale_serving(), **self.exact}

    def stale_serving(self) -> dict[Key, Record]:
        """The stale records that lookup uses: those of keys without a current record (what
        `autogemm tune --stale` tunes again)."""
        return {key: r for key, r in self.stale.items() if key not in self.exact}

    def nearest(self, key: Key, usable) -> tuple[Record, float] | None:
        """The closest record of key's family, op and dtype (ties: smaller shape) that `usable` accepts,
        among those whose every size is within NEAR_RATIO of key's."""
        ranked = sorted(((distance(key, r.key), r.key.sizes, r) for r in self.groups.get(_group(key), ())
                         if r.key != key and _similar(key, r.key)), key=lambda t: t[:2])
        return next(((r, d) for d, _, r in ranked if usable(r)), None)


def _similar(a: Key, b: Key) -> bool:
    return len(a.sizes) == len(b.sizes) and all(max(x, y) <= NEAR_RATIO * min(x, y) for x, y in zip(a.sizes, b.sizes))


def _group(key: Key) -> tuple:
    return key.family, key.op, key.dtype, len(key.sizes)


generation = 0          # counts reloads: what callers cached from an older generation is stale
_loaded: dict[Path, tuple[tuple, Store]] = {}
_unloadable: dict[Path, tuple] = {}    # another GPU's files that did not load: their stamp, passed over until it changes
_indexes: dict[tuple, tuple[tuple, Index]] = {}    # (files' paths, with stale records) -> (their stamps, Index)
_logged: set = set()
_untuned = False       # inside untuned(): no tuned file is read


def index_for(device: DeviceInfo, directories: list[Path] | None = None) -> Index | None:
    """The stores of `device` in `directories` (default: the user's, then the shipped folder, none
    inside `untuned()`), first-wins, or None where no folder has a file for it. A new index of them
    warns of the stale records it serves."""
    if directories is None:
        directories = [] if _untuned else [folder for _, folder in locations.lookup_dirs()]
    stores = [store for folder in directories if (store := _store(file_for(folder, device), device))]
    if not stores:
        return None
    index, built = _indexed(stores, stale=True)
    serving = index.stale_serving()
    if built and serving:
        log.warning("autogemm: %s: %d stale record(s): their kernels' templates changed since tuning; "
                    "their configs still serve their own shapes until `autogemm tune --stale` re-tunes them",
                    ", ".join(str(s.path) for s in stores), len(serving))
    return index


def twin_indexes(device: DeviceInfo) -> list[Index]:
    """The current records of each twin of `device` in the shipped folder (none inside `untuned()`),
    by GPU name: GPUs of its compute capability and SM count, whose tuned configs fit it as they fit
    them (every choice is still checked against this GPU: Family.fits). A file there that does not
    load is passed over with a warning, once for as long as it stays as it is."""
    if _untuned:
        return []
    own = file_for(locations.shipped_dir(), device).name
    twins = []
    for path in sorted(locations.shipped_dir().glob("*.json")):
        if path.name == own or _unloadable.get(path) == _stamp(path):
            continue
        try:
            store = _store(path, None)
        except StoreError as exc:       # another GPU's file: this GPU's calls go on without it
            _unloadable[path] = _stamp(path)
            log.warning("autogemm: %s (looking for a twin of %s's tuned results: passed over)", exc, device.name)
            continue
        if store and store.meta.gpu != device.name and (store.meta.compute_capability, store.meta.sm_count) == (
                device.compute_capability, device.sm_count):
            twins.append(_indexed([store], stale=False)[0])
    return twins


def _indexed(stores: list[Store], stale: bool) -> tuple[Index, bool]:
    """(the Index of `stores`, with their stale records or not; whether it was built now): built
    again only when one of their files has changed."""
    paths = tuple(s.path for s in stores)
    stamp = tuple(_loaded[path][0] for path in paths)
    cached = _indexes.get((paths, stale))
    if cached is not None and cached[0] == stamp:
        return cached[1], False
    _indexes[paths, stale] = stamp, Index(stores, stale)
    return _indexes[paths, stale][1], True


def _stamp(path: Path, st=None) -> tuple | None:
    """What tells one version of a file from another (its stat, and the families registered: a
    family registered since can read records read before as another's); None where it cannot be
    stat'ed."""
    try:
        st = st or path.stat()
    except OSError:
        return None
    return path, st.st_mtime_ns, st.st_size, len(REGISTRY)


def _store(path: Path, device: DeviceInfo | None) -> Store | None:
    """The file at `path`, loaded (again only if its mtime or size changed, or a family has been
    registered since: its records were read as another's), or None if absent; StoreError where it
    holds another GPU's results than `device`'s (None: any GPU's)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreError(f"{path}: cannot read: {files.failure(exc)}") from None
    stamp = _stamp(path, st)
    cached = _loaded.get(path)
    if not (cached and cached[0] == stamp):
        cached = _loaded[path] = (stamp, load(path))
    store = cached[1]
    if device is not None and store.meta.gpu != device.name:
        raise StoreError(f"{path}: holds results for {store.meta.gpu}, not this GPU ({device.name})")
    return store


def choose(family_name: str, problem, device: DeviceInfo) -> Choice:
    """The config for `problem`: exact tuned record, else exact stale one, else nearest usable one,
    of this GPU's, else of its twins', else the default. Logs the choice once per key (family,
    shape, op, dtype) on the "autogemm" logger."""
    fam = family(family_name)
    key = key_of(family_name, problem)
    index = index_for(device)
    choice = _choose_in(index, fam, key, problem, device) if index is not None else None
    if choice is None:
        twins = [(c, twin) for twin in twin_indexes(device) if (c := _choose_in(twin, fam, key, problem, device))]
        if twins:
            choice, index = min(twins, key=lambda found: found[0].rank)
            choice = dataclasses.replace(choice, twin=index.stores[0].meta.gpu)
    if choice is None:
        choice = Choice(fam.default(problem, device), "default")
    if key not in _logged:
        _logged.add(key)
        name = fam.instance_name(choice.config, problem)
        how = {"exact": "tuned", "default": "default (no usable tuned record)",
               "stale": "tuned on older templates (stale: autogemm tune --stale)",
               "nearest": f"tuned for {choice.record.key.shape if choice.record else ''} "
                          f"(nearest, distance {choice.distance:.2f})"}[choice.source]
        if choice.other_op:
            how += f" as {choice.record.key.op}"
        if choice.twin:
            how += f" on {choice.twin} (this GPU's twin: no record of its own serves it)"
        origin = f" from {index.origin[choice.record]}" if choice.record else ""
        log.info("autogemm: %s: %s %s%s", key, how, name, origin)
    return choice


def _choose_in(index: Index, fam, key: Key, problem, device: DeviceInfo) -> Choice | None:
    """The best of `index`'s records that serve `key` and can run `problem` on `device`, or None."""
    fits = lambda cfg: cfg is not None and fam.fits(cfg, problem, device)  # noqa: E731
    # A GEMM with an epilogue takes its own op's record of an arithmetic, else its layout's; a
    # tf32 or bf16 call then the best of its precision's and the more accurate ones' (their
    # configs at the call's precision where the family can: Family.at_precision).
    best: dict[str, Choice] = {}
    lowered_fits = lambda cfg: cfg is not None and fits(fam.at_precision(cfg, problem))  # noqa: E731
    for serving in serving_keys(key):
        lower = serving.dtype != key.dtype      # a more accurate arithmetic's record: usable as it runs here
        usable = (lambda cfg: fits(cfg) or lowered_fits(cfg)) if lower else fits
        c = _from_index(index, serving, fam, usable, other_op=serving.op != key.op)
        if c and lower and fits(lowered := fam.at_precision(c.config, problem)):
            c = dataclasses.replace(c, config=lowered)
        if c and (serving.dtype not in best or c.rank_in_arithmetic < best[serving.dtype].rank_in_arithmetic):
            best[serving.dtype] = c
    return min(best.values(), key=lambda c: c.rank, default=None)


def _from_index(index: Index, key: Key, fam, fits, other_op: bool) -> Choice | None:
    """The exact record of `key`, else its stale one, else the nearest usable one, as a Choice."""
    exact, stale = index.exact.get(key), index.stale.get(key)
    if exact is not None and fits(exact.config):
        return Choice(exact.config, "exact", exact, other_op=other_op)
    if stale is not None and fits(stale_config := fam.holds(stale.config)):
        return Choice(stale_config, "stale", stale, other_op=other_op)
    found = index.nearest(key, lambda r: fits(r.config))
    return Choice(found[0].config, "nearest", found[0], found[1], other_op) if found else None


@dataclass(frozen=True)
class Measured:
    """What the tuned records say of a launch's time: its shape's record, or the nearest one's."""
    source: str          # "exact" (its shape's record, current or stale), or "nearest"
    distance: float      # to the record's shape (keys.distance)
    median_us: float     # the record's time, tuned alone with L2 flushed
    sizes: tuple         # the record's shape


def measured(family_name: str, sizes, op: str, arithmetic: str,
             gpu: str | DeviceInfo | None = None) -> Measured | None:
    """The record that lookup would take a launch's time from: the fastest of its shape's records
    among those serving it, else the nearest serving one (the closest, then the faster), of the
    GPU's files, else of its twins'; None where they hold neither. `gpu`: whose files (this GPU's
    by default; a GPU named has twins only where a file of its own says which chip it is)."""
    key = make_key(family_name, sizes, op, arithmetic)
    own, chip = _own_and_chip(gpu)
    found = _measured_in(own, key) if own is not None else None
    if found is None and chip is not None:
        measured_twins = [m for twin in twin_indexes(chip) if (m := _measured_in(twin, key))]
        found = min(measured_twins, key=lambda m: (m.source != "exact", m.distance, m.median_us), default=None)
    return found


def _measured_in(index: Index, key: Key) -> Measured | None:
    exact = [r for k in serving_keys(key) if (r := index.exact.get(k) or index.stale.get(k))]
    if exact:
        best = min(exact, key=lambda r: r.median_us)
        return Measured("exact", 0.0, best.median_us, best.key.sizes)
    near = [found for k in serving_keys(key) if (found := index.nearest(k, lambda r: True))]
    if not near:
        return None
    record, d = min(near, key=lambda found: (found[1], found[0].median_us))
    return Measured("nearest", d, record.median_us, record.key.sizes)


def has_records(gpu: str | DeviceInfo | None = None) -> bool:
    """Whether a tuned file of this GPU (or of `gpu`), or of a twin of it, is there to read."""
    own, chip = _own_and_chip(gpu)
    return own is not None or chip is not None and bool(twin_indexes(chip))


def _own_and_chip(gpu: str | DeviceInfo | None) -> tuple[Index | None, DeviceInfo | None]:
    """(the own index, the device whose twins serve where it has no record) of this GPU (None), of
    a DeviceInfo, or of the GPU so named: which chip that is, its own file's meta says, else this
    GPU where it is the one named (nn's trainer names its own); a GPU named that is neither has no
    twins (None)."""
    if gpu is None or isinstance(gpu, DeviceInfo):
        device = this_device() if gpu is None else gpu
        return index_for(device), device
    named = dataclasses.replace(H100, name=gpu)
    own = index_for(named)
    if own is None:
        return None, _this_gpu_if_named(gpu)
    meta = own.stores[0].meta
    return own, dataclasses.replace(named, compute_capability=meta.compute_capability, sm_count=meta.sm_count)


def _this_gpu_if_named(name: str) -> DeviceInfo | None:
    try:
        device = this_device()
    except AutogemmError:               # no GPU here
        return None
    return device if device.name == name else None


@contextlib.contextmanager
def untuned():
    """Inside, lookup reads no tuned file: every call runs what a shape no one tuned gets (`autogemm
    bench --untuned`)."""
    global _untuned
    before, _untuned = _untuned, True
    reload()
    try:
        yield
    finally:
        _untuned = before
        reload()


def reload():
    """Forget loaded stores (after a store changed, or $AUTOGEMM_TUNED did) and, through
    `generation`, the kernels chosen with them: the next call of each shape looks up again."""
    global generation
    generation += 1
    _loaded.clear()
    _unloadable.clear()
    _indexes.clear()
    _logged.clear()
