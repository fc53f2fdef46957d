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
import importlib
import importlib.metadata
import importlib.util
import sys
from pathlib import Path

from autogemm.errors import AutogemmError, brief
from autogemm.runtime import render
from kernels import REGISTRY

GROUP = "autogemm.families"
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
            module = point.load()
        except Exception as exc:     # the plugin's own code, run at its import
            broken[point.name] = f"importing {point.value} failed: {type(exc).__name__}: {_first_line(exc)}"
            continue
        try:
            register(module, f"entry point {point.name} ({point.value})")
        except FamilyError as exc:
            broken[point.name] = str(exc)


def load_folder(path) -> str:
    """Register the family package at folder `path` (its __init__.py the module); its name."""
    folder = Path(path).expanduser().resolve()
    init = folder / "__init__.py"
    if not folder.is_dir():
        raise FamilyError(f"--family {path}: no such folder")
    if not init.is_file():
        raise FamilyError(f"--family {path}: not a family folder (no __init__.py: a family is a package holding its "
                          f"module, template and measure.py)")
    for name, known in _folders.items():
        if known == folder:
            return name
    module_name = f"_autogemm_family_{len(_folders)}_{folder.name}"
    spec = importlib.util.spec_from_file_location(module_name, init, submodule_search_locations=[str(folder)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:         # the plugin's own code
        del sys.modules[module_name]
        raise FamilyError(f"--family {path}: importing {init} failed: {type(exc).__name__}: "
                          f"{_first_line(exc)}") from None
    return register(module, f"--family {path}")


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
    name = module.NAME
    if not name.isidentifier() or name != name.lower():
        fail(f"NAME {brief(name)} must be a lower-case Python identifier")
    if name in BUILT_IN:
        fail(f"NAME {name} is a built-in family's; give yours another name")
    folder = Path(module.__file__).resolve().parent
    if name in _folders and _folders[name] != folder:
        fail(f"NAME {name} is already the family of {_folders[name]}")
    if call_of_module(module) != name:
        fail(f"CALL {brief(module.CALL)}: a plugin family computes a call of its own (drop CALL)")
    template = module.TEMPLATE
    if not template.startswith(f"{name}/") or not (folder / template.removeprefix(f"{name}/")).is_file():
        fail(f"TEMPLATE {brief(template)} must be \"{name}/<file>\", a file in {folder}")
    if not (folder / "measure.py").is_file():
        fail(f"no measure.py in {folder} (its Measure class: operands, reference and launch for tuning)")
    for param, choices in module.PARAMS.items():
        if not (isinstance(param, str) and param.isidentifier() and isinstance(choices, tuple) and choices):
            fail(f"PARAMS {brief(param)}: each parameter an identifier with a non-empty tuple of choices")
        if not all(type(c) in (int, bool, str) for c in choices):
            fail(f"PARAMS {param}: choices must be ints, booleans or strings (they reach the template)")
    if not all(isinstance(c, tuple) and len(c) == 2 and isinstance(c[0], str) and callable(c[1])
               for c in module.CONSTRAINTS):
        fail("CONSTRAINTS: each a (message, predicate(cfg, problem, device)) pair")
    if not module.KEY_OPS or not all(isinstance(op, str) for op in module.KEY_OPS):
        fail("KEY_OPS: the ops a key may carry, strings (kernels.contract.NO_OP where it has none)")
    _folders[name] = folder
    render.add_family_folder(name, folder)
    REGISTRY[name] = module
    return name


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


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""
