"""A CUDA kernel of your own, with no template: its source compiled with each config's choices as
preprocessor definitions, made a family (`kernel_<name>`) so that tuning, the store and lookup
treat it as any other. `autogemm.tune_kernel` (autogemm/tuning/raw.py) tunes it;
`launch_kernel` runs the tuned config of a problem, and says where the source has changed since.

    source = '''extern "C" __global__ void scale(const float* x, float* y, int n) {
        int i = blockIdx.x * BLOCK + threadIdx.x;                   // BLOCK: a definition
        if (i < n) y[i] = 2 * x[i];
    }'''
    kernel = dict(source=source, name="scale", space={"BLOCK": [64, 128, 256]},
                  grid=lambda cfg, p: -(-p["n"] // cfg["BLOCK"]), block=lambda cfg, p: cfg["BLOCK"])
    autogemm.tune_kernel(**kernel, problem={"n": 1 << 20}, arrays={"x": x, "y": y},
                         reference=lambda x, y: {"y": 2 * x})
    autogemm.launch_kernel(**kernel, problem={"n": 1 << 20}, arrays={"x": x_gpu, "y": y_gpu})

The kernel's arguments are the arrays in the order given, then the problem's sizes as 32-bit ints
in theirs. Its keys: the problem's sizes, no op, the dtype of its first floating-point array.
"""
import hashlib
import itertools
import logging
import os
import re
import sys
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autogemm import files
from autogemm.errors import BadArguments, brief
from autogemm.ops.kernels import launch
from autogemm.runtime import plugins, render
from autogemm.runtime.device import this_device
from autogemm.store import locations, lookup, records
from kernels import REGISTRY
from kernels.contract import DTYPES, NO_OP, Geometry

log = logging.getLogger("autogemm")
PREFIX = "kernel_"
MAX_SIZES, MAX_PARAMS = 8, 32        # what a tuned file's keys and configs hold
_DEFINE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_known: dict[tuple, tuple] = {}     # family_of's arguments -> (family, its module): checked, registered
KNOWN_MAX = 256                     # entries kept (new lambdas each call would add one a call)
_checked: set = set()               # (family, problem, lookup.generation) whose record launch_kernel has checked
_warned: set = set()                # (family, problem) said to be tuned on an older source
_read: dict[Path, tuple] = {}       # a source file -> ((mtime ns, size) when read, its text)


@dataclass(frozen=True)
class RawProblem:
    """One call of a raw kernel: its sizes (in the problem's order) and dtype."""

    sizes: tuple
    dtype: str = "float32"


def source_text(source) -> str:
    """The CUDA source: a Path (or a str naming an existing .cu file) read, else the string itself."""
    if isinstance(source, Path) or (isinstance(source, str) and source.endswith((".cu", ".cuh")) and "\n" not in source):
        path = Path(source)
        try:
            stamp = path.stat()
            stamp = (stamp.st_mtime_ns, stamp.st_size)
            if _read.get(path, (None,))[0] != stamp:
                _read[path] = (stamp, path.read_text())
        except OSError as exc:
            raise BadArguments(f"source {path}: cannot read it: {exc.strerror or exc}") from None
        return _read[path][1]
    if not isinstance(source, str) or not source.strip():
        raise BadArguments("source: give the kernel's CUDA code, or the path of its .cu file")
    return source


def family_of(source, name: str, problem: Mapping, space: Mapping, grid: Callable, block: Callable,
              dtype: str, constraints=(), shared_bytes: Callable | None = None) -> str:
    """Register `name` of `source` as family kernel_<name> (again, where its source or space
    changed); its family name. BadArguments, one line, for what cannot be one. Arguments seen
    before (the same source text, sizes and space, of the same types, and the same launch function
    objects) cost a dict lookup. The launch functions are taken as pure functions of (config,
    problem): a kernel is built once per problem and config with what they gave then."""
    text = source_text(source)
    launch_of = (grid, block, shared_bytes, tuple(constraints) if isinstance(constraints, (list, tuple)) else constraints)
    try:
        known = (text, name, tuple((k, type(v), v) for k, v in problem.items()),
                 tuple((k, tuple((type(c), c) for c in v)) for k, v in space.items()), dtype, launch_of,
                 os.environ.get(locations.CACHE_ENV), os.environ.get("HOME"))
        family, module = _known.get(known, (None, None))
    except (TypeError, AttributeError):      # unhashable or not mappings: the checks below say what
        known, family, module = None, None, None
    if module is not None and REGISTRY.get(family) is module:
        _use_launch(module, launch_of)
        return family
    if not isinstance(name, str) or not _DEFINE.fullmatch(name) or len(PREFIX + name) > 40:
        raise BadArguments(f"name {brief(name)}: give the kernel's name in the source (extern \"C\"), at most "
                           f"{40 - len(PREFIX)} characters")
    if not re.search(rf"\b{name}\s*\(", text):
        raise BadArguments(f"the source has no kernel {name}(...): give the name of its extern \"C\" __global__ function")
    if "endraw" in text:
        raise BadArguments("the source may not contain 'endraw' (it is kept verbatim inside a Jinja raw block)")
    if not isinstance(problem, Mapping) or not 0 < len(problem) <= MAX_SIZES or not all(
            isinstance(k, str) and _DEFINE.fullmatch(k) and type(v) is int and 0 < v < 2**31 for k, v in problem.items()):
        raise BadArguments(f"problem {brief(problem)}: give {{size name: positive 32-bit int, ...}} (1 to {MAX_SIZES} "
                           f"sizes), e.g. {{'n': 1048576}}")
    params = _space(space)
    defined = [key for key in params if re.search(rf"^\s*#\s*define\s+{key}\b", text, re.M)
               and not re.search(rf"^\s*#\s*if(ndef\s+{key}\b|\s+!\s*defined\s*\(?\s*{key}\b)", text, re.M)]
    if defined:
        raise BadArguments(f"the source #defines {defined[0]} itself, which the space sets; drop its #define "
                           f"(or wrap it in #ifndef {defined[0]})")
    if dtype not in DTYPES:
        raise BadArguments(f"arrays: a raw kernel's first floating-point array must be float32 or float64, got {dtype}")
    for what, f in (("grid", grid), ("block", block), ("shared_bytes", shared_bytes or (lambda c, p: 0))):
        if not callable(f):
            raise BadArguments(f"{what}: give a function of (config, problem), e.g. lambda cfg, p: cfg['BLOCK']")
    if callable(constraints) or not all(callable(rule) for rule in constraints):
        raise BadArguments("constraints: give a list of functions of (config, problem), False where a config "
                           "cannot run")
    family = PREFIX + name
    digest = hashlib.sha256(repr((text, sorted(params.items()), tuple(problem))).encode()).hexdigest()[:16]
    folder = locations.cache_dir() / "raw_kernels" / f"{family}-{digest}"
    template = folder / "kernel.cu.j2"
    if not template.is_file():
        defines = "{% for key, value in defines %}\n#define {{ key }} {{ value }}\n{% endfor %}\n"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            files.write_atomic(template, (f"// {{{{ name }}}}: {name}, with the config's definitions\n{defines}"
                                          f"#define {name} {{{{ name }}}}\n{{% raw %}}{text}{{% endraw %}}\n").encode())
        except (OSError, files.FileError) as exc:
            raise BadArguments(f"{folder}: cannot write the kernel's template there: {exc}") from None
    module = REGISTRY.get(family)
    if module is None or getattr(module, "DIGEST", None) != digest:
        module = _module(family, name, digest, tuple(problem), params)
        _register(module, folder)
    _use_launch(module, launch_of)
    if known is not None:
        if len(_known) >= KNOWN_MAX:
            _known.clear()
        _known[known] = (family, module)
    return family


def _use_launch(module, launch_of: tuple):
    """The family's geometry from the caller's functions (grid, block, shared_bytes, constraints),
    each guarded (its errors one line naming it); the kernels built with functions that compute
    otherwise forgotten."""
    current = getattr(module, "LAUNCH", None)
    if current == launch_of:
        return
    if current is not None and _code(current) != _code(launch_of):
        lookup.reload()
    grid, block, shared_bytes, constraints = launch_of
    guard = lambda what, f: plugins._guarded(module.NAME, what, f) if f is not None else None  # noqa: E731
    module.LAUNCH = launch_of
    module.GRID, module.BLOCK, module.SHARED = guard("grid", grid), guard("block", block), guard("shared_bytes",
                                                                                                 shared_bytes)
    module.USER_CONSTRAINTS = tuple(guard("constraint", rule) for rule in constraints)


def _code(f):
    """What a launch function computes by: its code, defaults, the values it closes over and the
    object it is a method of (an unhashable one by identity: compared only while both are alive),
    or a tuple's of them."""
    if isinstance(f, tuple):
        return tuple(map(_code, f))
    cells = tuple(_hashable(cell.cell_contents) for cell in getattr(f, "__closure__", None) or ())
    owner = getattr(f, "__self__", None)
    return (getattr(f, "__code__", getattr(getattr(f, "__func__", None), "__code__", f)),
            _hashable(getattr(f, "__defaults__", None)), cells, ("object", id(owner)) if owner is not None else None)


def _hashable(value):
    try:
        hash(value)
        return value
    except TypeError:
        return ("object", id(value))


def _space(space) -> dict:
    if not isinstance(space, Mapping) or not 0 < len(space) <= MAX_PARAMS:
        raise BadArguments(f"space: give {{DEFINITION: [choices], ...}} (1 to {MAX_PARAMS}), e.g. {{'BLOCK': [64, 128, 256]}}")
    params = {}
    for key, choices in space.items():
        if not (isinstance(key, str) and _DEFINE.fullmatch(key) and len(key) <= 40):
            raise BadArguments(f"space: {brief(key)} is not a preprocessor name of at most 40 characters")
        values = tuple(choices) if isinstance(choices, (list, tuple)) else ()
        if not values or len(set(map(repr, values))) != len(values) or not all(
                (type(v) is int and 0 <= v < 2**31) or (type(v) is str and _DEFINE.fullmatch(v) and len(v) <= 40)
                for v in values):
            raise BadArguments(f"space: {key} needs a list of distinct non-negative 32-bit ints or identifiers, "
                               f"got {brief(choices)}")
        params[key] = values
    return params


def _module(family: str, name: str, digest: str, size_names: tuple, params: dict):
    """The family module of a raw kernel: the contract's names, its geometry from the user's functions."""
    module = types.ModuleType(f"_autogemm_{family}_{digest}")
    module.__file__ = None
    module.NAME, module.TEMPLATE, module.DIGEST, module.KERNEL = family, f"{family}/kernel.cu.j2", digest, name
    module.PARAMS, module.KEY_SIZES, module.KEY_OPS, module.Problem = params, size_names, (NO_OP,), RawProblem

    def sized(p):
        return dict(zip(size_names, p.sizes))

    def threads(c, p):
        return _triple(module.BLOCK(dict(c), sized(p)), "block")

    module.CONSTRAINTS = (
        ("a block must have 1..max threads per block of the device",
         lambda c, p, d: 1 <= threads(c, p)[0] * threads(c, p)[1] * threads(c, p)[2] <= d.max_threads_per_block),
        ("the config must keep the constraints given to tune_kernel",
         lambda c, p, d: all(rule(dict(c), sized(p)) for rule in module.USER_CONSTRAINTS)),
    )
    module.template_args = lambda c, p: {"defines": tuple(c.items())}
    module.instance_name = lambda c, p: name + "_" + "_".join(f"{k}{v}" for k, v in c.items())
    module.geometry = lambda c, p: Geometry(grid=_triple(module.GRID(dict(c), sized(p)), "grid"), block=threads(c, p),
                                           smem_bytes=int(module.SHARED(dict(c), sized(p))) if module.SHARED else 0)
    module.flops = lambda p: 0
    module.key_of = lambda p: (p.sizes, NO_OP)
    module.problem_of = lambda sizes, op, dtype: RawProblem(tuple(sizes), dtype)
    module.default_candidates = lambda p, d: (dict(zip(params, combo)) for combo in _first_choices(params))
    module.reference = lambda p, **arrays: module.REFERENCE(**arrays)
    return module


def _first_choices(params: dict):
    """Untuned configs: each parameter's first choice, then the space in order, its first 64 (the
    first that runs is the default; the search draws from the whole space)."""
    yield tuple(v[0] for v in params.values())
    yield from itertools.islice(itertools.product(*params.values()), 64)


def _triple(value, what: str) -> tuple:
    dims = (value,) if isinstance(value, (int, np.integer)) else tuple(value) if isinstance(value, (tuple, list)) else ()
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, (int, np.integer)) and d >= 1 for d in dims):
        raise BadArguments(f"{what}: must give 1 to 3 positive ints, got {brief(value)}")
    return tuple(int(d) for d in dims) + (1,) * (3 - len(dims))


def _register(module, folder: Path):
    """Add (or replace, where the source changed in this process) the family; forget what was
    rendered and chosen for the old one."""
    from autogemm.runtime.family import family

    sys.modules[module.__name__] = module
    REGISTRY[module.NAME] = module
    render.add_family_folder(module.NAME, folder)
    family.cache_clear()
    records.forget_configs()
    lookup.reload()


def dtype_of(arrays: Mapping) -> str:
    """The dtype of the first floating-point array: the arithmetic a raw kernel's keys name."""
    for a in arrays.values():
        if hasattr(a, "dtype") and np.dtype(a.dtype).kind == "f":
            return str(np.dtype(a.dtype))
    raise BadArguments("arrays: a raw kernel needs one floating-point array at least (its dtype names its records)")


def arguments(arrays: Mapping, problem: Mapping) -> tuple:
    """The kernel's arguments: the arrays in order, then the sizes as int32."""
    return (*arrays.values(), *(np.int32(v) for v in problem.values()))


def launch_kernel(source, name: str, problem: Mapping, arrays: Mapping, grid: Callable, block: Callable,
                  space: Mapping, config: Mapping | str | None = None, constraints=(),
                  shared_bytes: Callable | None = None):
    """Run kernel `name` of `source` on `arrays` (CuPy arrays) with the config tuned for
    `problem` on this GPU (config None: the store's, the nearest shape's, else the first choices;
    "default"; or a config), on the current stream. Logs once where the tuned record is of an
    earlier version of the source. Returns the Instance launched.

    A repeated call costs what a family's launch does and a dict lookup (a source file is read again
    only once it has changed)."""
    dtype = dtype_of(arrays)
    family = family_of(source, name, problem, space, grid, block, dtype, constraints, shared_bytes)
    p = RawProblem(tuple(problem.values()), dtype)
    if config is None and (family, p, lookup.generation) not in _checked:
        _checked.add((family, p, lookup.generation))
        if lookup.choose(family, p, this_device()).source == "stale" and (family, p) not in _warned:
            _warned.add((family, p))
            log.warning("autogemm.launch_kernel: %s's source has changed since it was tuned for %s on this GPU: its "
                        "old config still runs; autogemm.tune_kernel again to tune this version", name,
                        "x".join(map(str, p.sizes)))
    return launch(family, p, config, lambda geometry: arguments(arrays, problem))
