"""Kernel families from outside autogemm: a package that declares the entry point group
`autogemm.families` (each entry point's object is a family package), or a folder given at run time
(`autogemm tune --family PATH`, `autogemm.load_family(PATH)`).

A plugin family keeps the contract of a built-in one (kernels.contract.KernelFamily) and is laid out
as one: a package folder holding its module (`__init__.py`), its template (TEMPLATE, named
"<NAME>/<file>", "<NAME>/" being that folder) and its measure (`measure.py`, a `Measure` class).
Once registered it is in kernels.REGISTRY, so tune, show, bench and lookup treat it as they treat
ours; its records carry its name and its template's code hash. Installed plugins are loaded when
autogemm's runtime is; one that breaks the contract is left out, and why is kept (`broken`) for
the commands to say in one line, so that a broken plugin never stops the built-in families.
"""
import contextlib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import io
import re
import sys
from pathlib import Path

from autogemm.errors import AutogemmError, brief, first_line
from autogemm.runtime import render
from kernels import REGISTRY
from kernels.contract import arity_fits, key_arity

GROUP = "autogemm.families"
MAX_CHOICES = 1024        # a parameter's choices: a categorical distribution Optuna searches
_NAME = re.compile(r"[a-z_][a-z0-9_]{0,39}")
_WORD = re.compile(r"[A-Za-z0-9_.+-]{1,40}")
BUILT_IN = frozenset(REGISTRY)
REQUIRED = {"NAME": str, "TEMPLATE": str, "PARAMS": dict, "CONSTRAINTS": tuple, "KEY_SIZES": tuple, "KEY_OPS": tuple}
FUNCTIONS = ("default_candidates", "template_args", "instance_name", "geometry", "flops", "key_of", "problem_of",
             "reference")

_folders: dict[str, Path] = {}      # plugin family name -> its folder
broken: dict[str, str] = {}         # an installed plugin left out (its entry point's name) -> why


class FamilyError(AutogemmError):
    """A plugin family that cannot be loaded: what breaks the contract, and where."""


def folder_of(name: str) -> Path | None:
    """The folder of plugin family `name`; None for a built-in one."""
    return _folders.get(name)


def plugins() -> dict[str, Path]:
    """Every plugin family registered in this process, with its folder."""
    return dict(_folders)


def load_installed() -> None:
    """Register the families of every installed package's `autogemm.families` entry points (each
    once); a failing one is kept in `broken` instead."""
    for point in importlib.metadata.entry_points(group=GROUP):
        if point.name in broken or point.name in _folders:
            continue
        try:
            with _quiet():
                module = point.load()
        except (Exception, SystemExit) as exc:     # the plugin's own code, run at its import
            broken[point.name] = f"importing {point.value} failed: {type(exc).__name__}: {first_line(exc)}"
            continue
        try:
            register(module, f"entry point {point.name} ({point.value})")
        except FamilyError as exc:
            broken[point.name] = str(exc)


def load_folder(path, origin: str | None = None) -> str:
    """Register the family package at folder `path` (its __init__.py the module); its name.
    `origin`: how the user gave it, for the errors (default: --family PATH)."""
    origin = origin or f"--family {path}"
    folder = Path(path).expanduser().resolve()
    init = folder / "__init__.py"
    if not folder.is_dir():
        raise FamilyError(f"{origin}: no such folder")
    if not init.is_file():
        raise FamilyError(f"{origin}: not a family folder (no __init__.py: a family is a package holding its "
                          f"module, template and measure.py)")
    for name, known in _folders.items():
        if known == folder:
            return name
    module_name = f"_autogemm_family_{hashlib.sha256(str(folder).encode()).hexdigest()[:12]}_{folder.name}"
    spec = importlib.util.spec_from_file_location(module_name, init, submodule_search_locations=[str(folder)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        with _quiet():
            spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:         # the plugin's own code
        del sys.modules[module_name]
        raise FamilyError(f"{origin}: importing {init} failed: {type(exc).__name__}: {first_line(exc)}") from None
    return register(module, origin)


def register(module, origin: str) -> str:
    """Check `module` against the family contract and add it to kernels.REGISTRY; its name.
    FamilyError (one line, naming `origin`) for what breaks the contract."""
    def fail(what: str):
        raise FamilyError(f"{origin}: {what}")

    for attr, kind in REQUIRED.items():
        if not isinstance(getattr(module, attr, None), kind):
            fail(f"the family module has no {attr} ({kind.__name__}); see kernels/contract.py")
    missing = [f for f in FUNCTIONS if not callable(getattr(module, f, None))]
    if missing:
        fail(f"the family module has no {', '.join(missing)} (functions); see kernels/contract.py")
    if not isinstance(getattr(module, "Problem", None), type):
        fail("the family module has no Problem class")
    if getattr(module.Problem, "__hash__", None) is None:
        fail("Problem must be hashable: a frozen dataclass (@dataclass(frozen=True))")
    name = module.NAME
    if not _NAME.fullmatch(name):
        fail(f"NAME {brief(name)} must be a lower-case ASCII identifier of at most 40 characters")
    if name in BUILT_IN:
        fail(f"NAME {name} is a built-in family's; give yours another name")
    folder = Path(module.__file__).resolve().parent
    if name in _folders and _folders[name] != folder:
        fail(f"NAME {name} is already the family of {_folders[name]}")
    if call_of_module(module) != name:
        fail(f"CALL {brief(module.CALL)}: a plugin family computes a call of its own (drop CALL)")
    template = module.TEMPLATE
    file = (folder / template.removeprefix(f"{name}/")).resolve()
    if not template.startswith(f"{name}/") or not file.is_relative_to(folder) or not file.is_file():
        fail(f"TEMPLATE {brief(template)} must be \"{name}/<file>\", a file in {folder}")
    if not (folder / "measure.py").is_file():
        fail(f"no measure.py in {folder} (its Measure class: operands, reference and launch for tuning)")
    for param, choices in module.PARAMS.items():
        if not (isinstance(param, str) and _NAME.fullmatch(param.lower()) and isinstance(choices, tuple)
                and 0 < len(choices) <= MAX_CHOICES):
            fail(f"PARAMS {brief(param)}: each parameter an ASCII identifier with a tuple of 1 to {MAX_CHOICES} choices")
        if not all((type(c) is int and abs(c) < 2**31) or type(c) is bool or (type(c) is str and _WORD.fullmatch(c))
                   for c in choices):
            fail(f"PARAMS {param}: choices must be 32-bit ints, booleans or words (they reach the template)")
    if not all(isinstance(c, tuple) and len(c) == 2 and isinstance(c[0], str) and callable(c[1])
               for c in module.CONSTRAINTS):
        fail("CONSTRAINTS: each a (message, predicate(cfg, problem, device)) pair")
    if not module.KEY_OPS or not all(isinstance(op, str) and _WORD.fullmatch(op) for op in module.KEY_OPS):
        fail("KEY_OPS: the ops a key may carry, words (kernels.contract.NO_OP where it has none)")
    if not module.KEY_SIZES or not all(isinstance(size, str) and size.removesuffix("...").isidentifier()
                                       and (size == module.KEY_SIZES[-1] or not size.endswith("..."))
                                       for size in module.KEY_SIZES):
        fail("KEY_SIZES: what a key's sizes stand for, names (\"rows\", \"cols\"; the last may end in \"...\": "
             "one or more)")
    _folders[name] = folder
    render.add_family_folder(name, folder)
    REGISTRY[name] = Guarded(module)
    return name


class Guarded:
    """A plugin family module as autogemm calls it: an error its code raises (a bug of the plugin,
    not autogemm's) comes out as one FamilyError line naming the family and the function, which
    the search records for the config at hand and the commands print; key_of's keys are checked,
    default_candidates' configs listed at once."""

    def __init__(self, module):
        self.__dict__["_module"] = module

    def __getattr__(self, attr: str):
        value = getattr(self._module, attr)
        if attr == "CONSTRAINTS":
            return tuple((message, _guarded(self.NAME, f"constraint {message!r}", holds)) for message, holds in value)
        if attr == "default_candidates":
            return _guarded(self.NAME, attr, lambda *args: list(value(*args)))
        if attr == "key_of":
            return _guarded(self.NAME, attr, lambda problem: _checked_key(self._module, value(problem)))
        if attr in GUARDED and callable(value):
            return _guarded(self.NAME, attr, value)
        return value

    def __repr__(self):
        return f"<family module {self._module.__name__} (a plugin's)>"


GUARDED = ("template_args", "instance_name", "geometry", "flops", "problem_of", "reference", "problem_for",
           "arguments", "may_run")


ARGUMENT_CHECKS = ("problem_for", "problem_of")   # their TypeError/ValueError: the arguments', which the caller words


def _guarded(name: str, what: str, f):
    def call(*args, **kwargs):
        try:
            return f(*args, **kwargs)
        except AutogemmError:
            raise
        except Exception as exc:
            if what in ARGUMENT_CHECKS and isinstance(exc, (TypeError, ValueError)):
                raise
            raise FamilyError(f"family {name}: its {what} raised {type(exc).__name__}: {first_line(exc)}") from None
    return call


def _checked_key(module, key) -> tuple:
    """key_of's (sizes, op), checked: as many positive ints as KEY_SIZES, an op of KEY_OPS."""
    sizes, op = key
    sizes = tuple(sizes)
    if not arity_fits(module.KEY_SIZES, len(sizes)) or not all(type(s) is int and 0 < s < 2**31 for s in sizes):
        fewest, more = key_arity(module.KEY_SIZES)
        raise FamilyError(f"family {module.NAME}: its key_of gave sizes {brief(sizes)}: {fewest}{' or more' * more} "
                          f"positive 32-bit ints ({', '.join(module.KEY_SIZES)})")
    if op not in module.KEY_OPS:
        raise FamilyError(f"family {module.NAME}: its key_of gave op {brief(op)}, not one of KEY_OPS")
    return sizes, op


@contextlib.contextmanager
def _quiet():
    """A plugin's import prints nothing into a command's output (autogemm show --json)."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def unregister(name: str) -> None:
    """Forget plugin family `name` (a test's, loaded for its duration); built-in ones stay."""
    if name in BUILT_IN:
        raise FamilyError(f"{name} is a built-in family")
    REGISTRY.pop(name, None)
    _folders.pop(name, None)
    render.remove_family_folder(name)


def call_of_module(module) -> str:
    return getattr(module, "CALL", module.NAME)


def require(name: str) -> None:
    """AutogemmError unless family `name` is registered: why an installed plugin of that name was
    left out, or which families there are."""
    if name in REGISTRY:
        return
    if name in broken:
        raise FamilyError(f"family {name}: {broken[name]}")
    raise FamilyError(f"unknown kernel family {brief(name)}; known: {', '.join(REGISTRY)} (a plugin: pip install "
                      f"it, or give its folder as --family PATH)")
