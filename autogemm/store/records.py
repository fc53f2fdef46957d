"""The tuned/ store: one JSON file per GPU model, one record per (family, shape, op, dtype).

    {"meta": {"schema": 1, "gpu": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0",
              "sm_count": 132, "driver": "13.0", "cuda_runtime": "13.2", "cupy": "14.2.0",
              "templates": {"gemm": "<template hash>", ...}, "params": {"gemm": ["bm", ...], ...},
              "updated": "2026-11-22T06:00:00+00:00"},
     "records": [{"family": "gemm", "shape": "800x1000x784", "op": "nt", "dtype": "float32",
                  "config": {"bm": 64, ...}, "median_us": 21.3, "p10_us": 21.0, "p90_us": 21.9,
                  "gflops": 58900.0, "cublas_us": 25.1, "max_rel_error": 3.1e-07,
                  "cublas_error": 1.1e-06, "trials": 40, "failed": 2, "date": "2026-11-22T06:00:00+00:00",
                  "template_hash": "<code hash>", "command": "autogemm tune --shapes nn"}, ...]}

cublas_error (cuBLAS's error on the record's operands, at its precision) is optional: records
written before it was measured have none.

A file is data, never code: `load` checks every key, type and value (configs through
Family.config, so no string reaches a template) and names the file and the record in a one-line
StoreError. `save` merges with the file as it is at write time (a faster record replaces, a
slower one does not, others stay) and replaces it atomically; it never overwrites a file it
cannot read.

A record's template_hash is the hash of what the compiler sees of its config's kernel for its key
(Family.code_hash: the source rendered, includes expanded, comments and layout normalised). The
record is stale when that is no longer its config's hash, or when its config is not in today's
space at all (the space it was tuned in has changed since; then only plain words and numbers are
accepted): kept, shown as stale, used by lookup for its own shape only where its config still
holds, and re-tuned by `autogemm tune --stale`. Moving code between template files or rewording a
comment leaves every record current.
"""
import contextlib
import dataclasses
import functools
import json
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from autogemm import files
from autogemm.errors import InvalidConfig, StoreError
from autogemm.runtime.device import DeviceInfo
from autogemm.runtime.family import Config, families, family
from autogemm.store.keys import Key, brief, parse_key, problem_of
from kernels import REGISTRY

SCHEMA = 1
MAX_BYTES = 64 << 20      # a tuned file of every shape of many networks is well under 1 MiB
_HASH = re.compile(r"[0-9a-f]{16}")
_CC = re.compile(r"[0-9]{1,2}\.[0-9]{1,2}")
_WORD = re.compile(r"[A-Za-z0-9_.-]{1,40}")
META_FIELDS = ("schema", "gpu", "compute_capability", "sm_count", "driver", "cuda_runtime", "cupy",
               "templates", "params", "updated")
RECORD_FIELDS = ("family", "shape", "op", "dtype", "config", "median_us", "p10_us", "p90_us", "gflops",
                 "cublas_us", "max_rel_error", "cublas_error", "trials", "failed", "date", "template_hash", "command")
OPTIONAL_FIELDS = ("cublas_error",)     # absent from records written before it was measured


def now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


@dataclass(frozen=True)
class Meta:
    """Where and with what the file's results were measured (as of its last write)."""

    gpu: str
    compute_capability: str
    sm_count: int
    driver: str
    cuda_runtime: str
    cupy: str
    templates: dict          # family -> template hash at the last write
    params: dict             # family -> parameter names at the last write
    updated: str

    @classmethod
    def here(cls, device: DeviceInfo, software: dict) -> "Meta":
        """Metadata for results measured now on `device` with `software` (device.software())."""
        return cls(device.name, device.compute_capability, device.sm_count, software["driver"],
                   software["cuda_runtime"], software["cupy"],
                   {name: family(name).template_hash for name in families()},
                   {name: list(family(name).params) for name in families()}, now())

    def keeping(self, older: "Meta") -> "Meta":
        """This meta with `older`'s entries for families not registered here (a plugin's), kept."""
        gone = [name for name in older.templates if name not in self.templates]
        return dataclasses.replace(self, templates={**self.templates, **{n: older.templates[n] for n in gone}},
                                   params={**self.params, **{n: older.params[n] for n in gone if n in older.params}})

    def to_json(self) -> dict:
        return dict(schema=SCHEMA, gpu=self.gpu, compute_capability=self.compute_capability,
                    sm_count=self.sm_count, driver=self.driver, cuda_runtime=self.cuda_runtime,
                    cupy=self.cupy, templates=dict(self.templates),
                    params={k: list(v) for k, v in self.params.items()}, updated=self.updated)


@dataclass(frozen=True)
class Record:
    """The best config found for one key, with how it was measured."""

    key: Key
    config: Config
    median_us: float
    p10_us: float
    p90_us: float
    gflops: float
    cublas_us: float | None          # GEMMs: cuBLAS in the same run
    max_rel_error: float | None      # max-norm relative error against the float64 reference
    trials: int                      # configs compiled and run, failures included
    failed: int
    date: str
    template_hash: str
    command: str
    cublas_error: float | None = None   # GEMMs: cuBLAS's max-norm relative error on the same operands

    @functools.cached_property
    def stale(self) -> bool:
        """Measured on code that has changed since (lookup uses it for its own shape only)."""
        fam = family(self.key.family)
        config = _holding(self.key.family, self.config)
        try:
            return config is None or self.template_hash != fam.code_hash(config, problem_of(self.key))
        except (InvalidConfig, ValueError):     # a config that today's templates cannot render for its key
            return True

    @property
    def speedup(self) -> float | None:
        """cuBLAS time over ours: above 1 is faster than cuBLAS (None without a finite ratio)."""
        ratio = self.cublas_us / self.median_us if self.cublas_us else None
        return ratio if ratio is not None and math.isfinite(ratio) else None

    @property
    def error_ratio(self) -> float | None:
        """Its error over cuBLAS's on the same operands (None where either is unknown or zero)."""
        if self.max_rel_error is None or not self.cublas_error:
            return None
        return self.max_rel_error / self.cublas_error

    def to_json(self) -> dict:
        measured = {} if self.cublas_error is None else {"cublas_error": self.cublas_error}
        return dict(family=self.key.family, shape=self.key.shape, op=self.key.op, dtype=self.key.dtype,
                    config=dict(self.config), median_us=self.median_us, p10_us=self.p10_us,
                    p90_us=self.p90_us, gflops=self.gflops, cublas_us=self.cublas_us,
                    max_rel_error=self.max_rel_error, **measured, trials=self.trials, failed=self.failed,
                    date=self.date, template_hash=self.template_hash, command=self.command)


def _holding(family_name: str, config: Config) -> Config | None:
    """family(family_name).holds(config), asked once per distinct config (a file repeats a few)."""
    return _holds(family_name, tuple((k, type(v), v) for k, v in config.items()))   # type: True is not 1


def forget_configs():
    """Forget which configs a family's space holds (a raw kernel's space changed in this process)."""
    _holds.cache_clear()


@functools.lru_cache(maxsize=4096)
def _holds(family_name: str, typed: tuple) -> Config | None:
    return family(family_name).holds({k: v for k, _, v in typed})


@dataclass(frozen=True)
class Store:
    path: Path
    meta: Meta
    records: dict            # Key -> Record
    foreign: tuple = ()      # records of families not registered here (a plugin not loaded): kept as read


def file_for(directory: Path, device: DeviceInfo) -> Path:
    """tuned/<gpu slug>.json, e.g. tuned/nvidia-h100-80gb-hbm3.json."""
    return Path(directory) / f"{device.slug}.json"


# ---- reading ---------------------------------------------------------------------------------
def load(path: Path) -> Store:
    """The checked contents of a tuned file; StoreError naming the file (and record) otherwise."""
    path = Path(path)
    try:
        text = files.read_regular(path, MAX_BYTES).decode("utf-8")
    except UnicodeDecodeError:
        raise StoreError(f"{path}: not a tuned file (not UTF-8 text)") from None
    except files.FileError as exc:
        raise StoreError(f"{path}: cannot read: {exc}") from None
    try:
        doc = files.parse_json(text, object_pairs_hook=_unique_keys, parse_constant=_no_constants, parse_int=_int)
    except json.JSONDecodeError as exc:
        raise StoreError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except ValueError as exc:
        raise StoreError(f"{path}: {exc}") from None
    if not isinstance(doc, dict):
        raise StoreError(f"{path}: expected a JSON object with 'meta' and 'records', got {type(doc).__name__}")
    _exact_keys(doc, ("meta", "records"), str(path))
    meta = _meta(doc["meta"], f"{path}: meta")
    if not isinstance(doc["records"], list):
        raise StoreError(f"{path}: 'records' must be a list, got {type(doc['records']).__name__}")
    records: dict[Key, Record] = {}
    where_of: dict[Key, int] = {}
    memo: dict = {}
    foreign, foreign_keys = [], {}
    for i, item in enumerate(doc["records"]):
        if _foreign(item, f"{path}: record {i}"):
            key = tuple(item[f] for f in ("family", "shape", "op", "dtype"))
            if key in foreign_keys:
                raise StoreError(f"{path}: record {i} ({' '.join(key)}) repeats record {foreign_keys[key]}")
            foreign.append(item)
            foreign_keys[key] = i
            continue
        record = _record(item, f"{path}: record {i}", memo)
        if record.key in records:
            raise StoreError(f"{path}: record {i} ({record.key}) repeats record {where_of[record.key]}")
        records[record.key], where_of[record.key] = record, i
    return Store(path, meta, records, tuple(foreign))


def _foreign(item, where: str) -> bool:
    """Whether `item` is a record of a family not registered in this process (a plugin family whose
    package is not installed or loaded here), checked only as plain data: kept and written back as
    read, never looked up."""
    if not isinstance(item, dict) or not isinstance(item.get("family"), str) or item["family"] in REGISTRY:
        return False
    if not (_WORD.fullmatch(item["family"]) and item["family"].isidentifier()):
        raise StoreError(f"{where}: family {brief(item['family'])} is not a family name")
    if set(item) - set(RECORD_FIELDS) - set(OPTIONAL_FIELDS) or len(json.dumps(item)) > 8192:
        raise StoreError(f"{where}: a record of family {item['family']} (not loaded here) must have a record's "
                         f"fields and nothing more")
    shape, config = item.get("shape"), item.get("config")
    plain = isinstance(config, dict) and all(_WORD.fullmatch(k) and (type(v) in (int, bool) or (
        type(v) is str and _WORD.fullmatch(v))) for k, v in config.items())
    if not (isinstance(shape, str) and re.fullmatch(r"[1-9][0-9]{0,9}(x[1-9][0-9]{0,9}){0,7}", shape) and plain
            and all(isinstance(item.get(f), str) and _WORD.fullmatch(item[f]) for f in ("op", "dtype"))):
        raise StoreError(f"{where}: a record of family {item['family']} (not loaded here) must have a shape of "
                         f"sizes, a word for op and dtype, and a config of plain words and numbers")
    return True


def _unique_keys(pairs):
    seen = {}
    for k, v in pairs:
        if k in seen:
            raise ValueError(f"key {brief(k)} appears twice in one object")
        seen[k] = v
    return seen


def _int(text: str) -> int:
    if len(text) > 4300:        # int() refuses them, with advice to the programmer
        raise ValueError(f"an integer of {len(text)} digits ({text[:12]}...) is in no tuned file")
    return int(text)


def _no_constants(name):
    raise ValueError(f"{name} is not a number JSON allows")


def _exact_keys(obj: dict, fields: tuple, where: str, optional: tuple = ()):
    unknown = [k for k in obj if k not in fields]
    if unknown:
        raise StoreError(f"{where}: unknown key {brief(unknown[0])}; expected {', '.join(fields)}")
    missing = [k for k in fields if k not in obj and k not in optional]
    if missing:
        raise StoreError(f"{where}: missing key {missing[0]!r}")


def _string(obj, name, where, pattern=None, limit=200) -> str:
    value = obj[name]
    if (not isinstance(value, str) or not value or len(value) > limit or not value.isprintable()
            or (pattern and not pattern.fullmatch(value))):
        raise StoreError(f"{where}: {name}={brief(value)} is not a valid {name}")
    return value


def _date(obj, name, where) -> str:
    value = _string(obj, name, where, limit=40)
    try:
        datetime.fromisoformat(value)
    except ValueError:
        raise StoreError(f"{where}: {name}={brief(value)} is not an ISO 8601 date") from None
    return value


MAX_COUNT = 2**53     # the integers that every JSON reader holds exactly (RFC 7493)


def _count(obj, name, where, least=0) -> int:
    value = obj[name]
    if type(value) is not int or not least <= value <= MAX_COUNT:
        raise StoreError(f"{where}: {name}={brief(value)} must be an integer in {least}..2**53")
    return value


def _number(obj, name, where, positive=True, optional=False) -> float | None:
    value = obj[name]
    if value is None and optional:
        return None
    try:
        number = float(value) if type(value) in (int, float) else math.nan
    except OverflowError:        # an integer of 309 digits or more
        number = math.inf
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        raise StoreError(f"{where}: {name}={brief(value)} must be a finite number "
                         f"{'> 0' if positive else '>= 0'}{' or null' if optional else ''}")
    return number


def _meta(obj, where: str) -> Meta:
    if not isinstance(obj, dict):
        raise StoreError(f"{where}: expected an object, got {type(obj).__name__}")
    if "schema" in obj and obj["schema"] != SCHEMA:    # first: another schema may have other keys
        raise StoreError(f"{where}: schema version {brief(obj['schema'])} is not the one this autogemm "
                         f"reads ({SCHEMA}); re-tune or upgrade autogemm")
    _exact_keys(obj, META_FIELDS, where)
    templates, params = obj["templates"], obj["params"]
    for name, table in (("templates", templates), ("params", params)):
        if not isinstance(table, dict) or any(not (isinstance(k, str) and _WORD.fullmatch(k) and k.isidentifier())
                                              for k in table):
            raise StoreError(f"{where}: {name} must map kernel families (names such as {', '.join(families()[:3])}) "
                             f"to values")
    if not all(isinstance(h, str) and _HASH.fullmatch(h) for h in templates.values()):
        raise StoreError(f"{where}: templates must map families to 16-digit hex hashes")
    if not all(isinstance(v, list) and all(isinstance(p, str) and p.isidentifier() for p in v)
               for v in params.values()):
        raise StoreError(f"{where}: params must map families to lists of parameter names")
    return Meta(_string(obj, "gpu", where), _string(obj, "compute_capability", where, _CC),
                _count(obj, "sm_count", where, 1), _string(obj, "driver", where, limit=40),
                _string(obj, "cuda_runtime", where, limit=40), _string(obj, "cupy", where, limit=40),
                dict(templates), {k: list(v) for k, v in params.items()}, _date(obj, "updated", where))


_PLAIN = (int, float, bool, str, type(None))


def _record(obj, where: str, memo: dict | None = None) -> Record:
    """One record, checked. `memo` (one per file): each distinct config checked once (a file of
    many shapes repeats a few configs)."""
    memo = {} if memo is None else memo
    if not isinstance(obj, dict):
        raise StoreError(f"{where}: expected an object, got {type(obj).__name__}")
    fields = ("family", "shape", "op", "dtype")
    if all(isinstance(obj.get(f), str) for f in fields):    # name the record as early as we can
        words = [v if _WORD.fullmatch(v) else brief(v, 24) for v in (obj[f] for f in fields)]
        where = f"{where} ({words[0]} {words[1]}:{words[2]} {words[3]})"
    _exact_keys(obj, RECORD_FIELDS, where, OPTIONAL_FIELDS)
    try:
        key = parse_key(*(obj[f] for f in fields))
        problem_of(key)           # sizes that no call can have (a convolution over 2**31 elements)
    except ValueError as exc:
        raise StoreError(f"{where}: {exc}") from None
    template_hash = _string(obj, "template_hash", where, _HASH)
    values = obj["config"]
    seen = None
    if isinstance(values, dict) and all(type(v) in _PLAIN for v in values.values()):
        seen = (key.family, tuple((k, type(v), v) for k, v in values.items()))    # type: True is not 1
    if seen in memo:
        config = memo[seen]
    else:
        config = _config(key.family, values, f"{where}: config")
    if seen is not None:
        memo[seen] = config
    return Record(
        key, config,
        median_us=_number(obj, "median_us", where), p10_us=_number(obj, "p10_us", where),
        p90_us=_number(obj, "p90_us", where), gflops=_number(obj, "gflops", where, positive=False),
        cublas_us=_number(obj, "cublas_us", where, optional=True),
        max_rel_error=_number(obj, "max_rel_error", where, positive=False, optional=True),
        trials=_count(obj, "trials", where), failed=_count(obj, "failed", where),
        date=_date(obj, "date", where), template_hash=template_hash,
        command=_string(obj, "command", where, limit=2000),
        cublas_error=_number(obj, "cublas_error", where, positive=False, optional=True) if "cublas_error" in obj else None,
    )


# Values that older spaces wrote and today's spells otherwise, read in today's spelling so that a
# stale record still serves its shape: the GEMM's pad was a padding in elements (0 or 4).
RESPELLED = {("gemm", "pad"): {0: False, 4: True}}
# Parameters a space gained, with the value that computes as the older space did: a record's config
# without them gets it, so that it still serves its shape (a current one too: a parameter that
# chooses no template code leaves the records current).
ADDED = {("gemm_wgmma", "split_k"): 1, ("gemm_wgmma", "producer"): 0, ("gemm_wgmma", "tma"): 0,
         ("gemm_wgmma", "pretranspose"): 0, ("gemm_wgmma", "cluster_m"): 1, ("gemm_wgmma", "cluster_n"): 1,
         ("gemm_wgmma", "persistent"): 0, ("gemm_wgmma", "reg_a"): 0, ("gemm_wgmma", "swap"): 0,
         ("linear_backward", "prefetch"): 0,
         **{(name, "math"): "fma" for name in ("conv2d", "conv2d_dgrad", "conv2d_wgrad")},
         **{(name, "stages"): 1 for name in ("conv2d", "conv2d_dgrad", "conv2d_wgrad")}}


def _config(family_name: str, obj, where: str) -> Config:
    """A record's config: one of today's space, else one kept as a stale record's (`_stale_config`)."""
    try:
        return family(family_name).config(_with_added(family_name, obj), where)
    except InvalidConfig:
        return _stale_config(family_name, obj, where)


def _stale_config(family_name: str, obj, where: str) -> Config:
    """A stale record's config, kept to be shown and written back: parameter names and values
    must be short words, integers or booleans (the space may have gained or lost parameters since)."""
    if not isinstance(obj, dict) or len(obj) > 32:
        raise StoreError(f"{where}: expected an object of at most 32 parameters")
    for name, value in obj.items():
        plain = type(value) in (int, bool) or (type(value) is str and _WORD.fullmatch(value))
        if not _WORD.fullmatch(name) or not plain:
            raise StoreError(f"{where}: {brief(name, 24)}: {brief(value, 24)} is not a plain word, "
                             "integer or boolean")
    return Config(_with_added(family_name, {name: _respelled(family_name, name, value) for name, value in obj.items()}))


def _with_added(family_name: str, obj):
    """A config object with the parameters its family's space gained since (ADDED) where it lacks them."""
    if not isinstance(obj, dict):
        return obj
    return {**obj, **{name: value for (fam, name), value in ADDED.items() if fam == family_name and name not in obj}}


def _respelled(family_name: str, name: str, value):
    table = RESPELLED.get((family_name, name), {})
    return table[value] if type(value) is int and value in table else value


# ---- writing ---------------------------------------------------------------------------------
def merge(current: dict, new: Iterable[Record]) -> tuple[dict, list[tuple[Record, str]]]:
    """(merged records, [(record, "added" | "replaced" | "kept")]): a new record replaces a slower
    or stale one of its key; a slower new record is not stored (kept: the old one stays)."""
    merged = dict(current)
    outcomes = []
    for record in new:
        old = merged.get(record.key)
        if old is None:
            outcome = "added"
        elif (old.stale and not record.stale) or record.median_us < old.median_us:
            outcome = "replaced"
        else:
            outcomes.append((record, "kept"))
            continue
        merged[record.key] = record
        outcomes.append((record, outcome))
    return merged, outcomes


def save(path: Path, records: Iterable[Record], meta: Meta) -> list[tuple[Record, str]]:
    """Merge `records` into the file at `path` (created if missing), atomically.

    The file is read again under a lock on its folder, so results written meanwhile by another
    process are kept. A file that does not load (corrupted, hand-edited, another GPU's) is left
    untouched and StoreError raised.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"{path.parent}: cannot create the folder: {files.failure(exc)}") from None
    with _folder_lock(path.parent):
        current: dict = {}
        foreign: tuple = ()
        if path.exists():
            old = load(path)
            if old.meta.gpu != meta.gpu:
                raise StoreError(f"{path}: holds results for {old.meta.gpu}, not {meta.gpu}; "
                                 f"choose another --out or file")
            current, foreign = old.records, old.foreign
            meta = meta.keeping(old.meta)
        merged, outcomes = merge(current, records)
        ordered = sorted(merged.values(), key=lambda r: (r.key.family, r.key.op, r.key.dtype, r.key.sizes))
        doc = {"meta": meta.to_json(), "records": [r.to_json() for r in ordered] + list(foreign)}
        _meta(doc["meta"], f"{path}: writing meta")          # nothing is written that load would refuse
        for i, item in enumerate(doc["records"][:len(ordered)]):
            _record(item, f"{path}: writing record {i}")
        _write_atomic(path, doc)
    return outcomes


def printable(text: str, limit: int = 2000) -> str:
    """`text` as a record may hold it: characters that are not printable escaped, cut to `limit`."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _pieces(doc: dict):
    """The file's text in pieces: the meta block one field a line, then one record a line
    (readable, and a re-tuned shape is a one-line diff)."""
    dumps = lambda v: json.dumps(v, allow_nan=False)  # noqa: E731
    meta = doc["meta"]
    yield '{\n "meta": {\n' + ",\n".join(f"  {dumps(k)}: {dumps(v)}" for k, v in meta.items()) + "\n },\n"
    yield ' "records": [' + ("\n" if doc["records"] else "")
    for i, record in enumerate(doc["records"]):
        yield "  " + dumps(record) + ("," if i + 1 < len(doc["records"]) else "") + "\n"
    yield (" " if doc["records"] else "") + "]\n}\n"


def _write_atomic(path: Path, doc: dict):
    try:
        files.write_atomic(path, (piece.encode() for piece in _pieces(doc)))
    except files.FileError as exc:
        raise StoreError(f"{path}: cannot write: {exc}") from None


@contextlib.contextmanager
def _folder_lock(folder: Path):
    """An exclusive flock on the folder itself (no lock file left behind); a no-op where
    flock is unavailable."""
    try:
        import fcntl

        fd = os.open(folder, os.O_RDONLY)
    except (ImportError, OSError):
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
