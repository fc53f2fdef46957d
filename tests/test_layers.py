"""The architecture as docs/ARCHITECTURE.md states it: each layer imports only the ones below it,
no module imports another that imports it back (lazy imports inside functions included), a kernel
family is one folder whose module imports nothing of autogemm or nn (its measure.py is the tuning
layer's), nn uses only the names autogemm/__init__.py exports, and nn's library imports none of nn's
tools."""
import ast
from pathlib import Path

import autogemm

ROOT = Path(__file__).resolve().parents[1]
# autogemm's layers, bottom up; a module may import its own layer's and those listed for it.
BELOW = {
    "base": set(),                                      # errors.py, files.py, signals.py
    "runtime": {"base"},
    "store": {"base", "runtime"},
    "ops": {"base", "runtime", "store"},
    "tuning": {"base", "runtime", "store", "ops"},
    "cli": {"base", "runtime", "store", "ops", "tuning", "torch"},
    "torch": {"base", "runtime", "store", "ops", "tuning"},   # autogemm.torch: the calls on torch tensors
    "testing": {"base", "runtime"},                     # autogemm.testing: the CPU emulator
    "api": {"base", "store", "ops"},                    # autogemm/__init__.py
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module `path` imports, at the top or inside a function (`from a import b` counts as
    a.b where a.b is a module of this repository, else as a)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else node.module)
    return found


MODULES = {module_name(p): p for folder in ("autogemm", "kernels", "nn")
           for p in (ROOT / folder).rglob("*.py")}


def is_measure(module: str) -> bool:
    """A family's measure (kernels/<family>/measure.py): a module of the tuning layer."""
    parts = module.split(".")
    return parts[0] == "kernels" and len(parts) == 3 and parts[2] == "measure"


def layer(module: str) -> str:
    parts = module.split(".")
    if is_measure(module):
        return "tuning"
    if len(parts) == 1:
        return "api"
    return parts[1] if parts[1] in BELOW else "base"


def ours(names) -> set[str]:
    return {n for n in names if n.split(".")[0] in ("autogemm", "kernels", "nn")}


def test_autogemm_layers_import_only_downward():
    wrong = []
    for module, path in MODULES.items():
        if not module.startswith("autogemm") and not is_measure(module):
            continue
        allowed = BELOW[layer(module)] | {layer(module)}
        for name in ours(imports(path)):
            if name.startswith("autogemm") and layer(name) not in allowed:
                wrong.append(f"{module} ({layer(module)}) imports {name} ({layer(name)})")
    assert not wrong, "\n".join(wrong)


def test_kernels_import_nothing_of_autogemm_or_nn():
    """Nothing under kernels/ but the measures imports autogemm or nn, nor any measure; the measures
    import nn nowhere."""
    wrong = [f"{m} imports {n}" for m, p in MODULES.items() if m.startswith("kernels") and not is_measure(m)
             for n in ours(imports(p)) if not n.startswith("kernels") or is_measure(n)]
    wrong += [f"{m} imports {n}" for m, p in MODULES.items() if is_measure(m)
              for n in ours(imports(p)) if n.startswith("nn")]
    assert not wrong, "\n".join(wrong)


def test_a_family_is_one_folder():
    """Each registered family is the package kernels/<name>/, its templates inside it; kernels/
    itself holds only what families share (the contract, bf16.py, includes), and every folder
    there is a registered family."""
    from kernels import FAMILIES

    BUILT_IN = {module.NAME: module for module in FAMILIES}       # plugins are tests/test_plugins.py's

    kernels = ROOT / "kernels"
    for name, module in BUILT_IN.items():
        assert Path(module.__file__) == kernels / name / "__init__.py", name
        assert module.TEMPLATE.startswith(f"{name}/") and (kernels / module.TEMPLATE).is_file(), name
    folders = {p.name for p in kernels.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(BUILT_IN)
    shared = {p.name for p in kernels.iterdir() if p.is_file()}
    assert shared == {"__init__.py", "contract.py", "bf16.py", "bf16.cuh", "common.cuh", "split_k.cuh"}


def test_a_family_is_its_folder_and_one_line():
    """The registries come from kernels.FAMILIES: the families, the calls of several (each
    module's CALL), the measures (each folder's measure.py, else its call's) and the tunable ones."""
    import kernels
    from autogemm.tuning.measure import KernelMeasure
    from autogemm.tuning.measures import measure_class
    from autogemm.tuning.targets import TUNE_FAMILIES

    assert list(kernels.REGISTRY.values())[:len(kernels.FAMILIES)] == list(kernels.FAMILIES)   # then plugins
    assert set(TUNE_FAMILIES) == {m.NAME for m in kernels.FAMILIES if not getattr(m, "BASELINE", False)}
    assert all(issubclass(measure_class(m.NAME), KernelMeasure) for m in kernels.FAMILIES)


def test_nn_uses_only_autogemms_public_names():
    """The names autogemm/__init__.py exports, and autogemm.torch (PyTorch users' API: nn.bench
    times a PyTorch model converted by it)."""
    wrong = []
    for module, path in MODULES.items():
        if not module.startswith("nn"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("autogemm", "kernels"):
                names = [a.name for a in node.names]
                if node.module != "autogemm" or not set(names) <= set(autogemm.__all__):
                    wrong.append(f"{module}: from {node.module} import {', '.join(names)}")
            if isinstance(node, ast.Import):
                wrong += [f"{module}: import {a.name}" for a in node.names
                          if a.name.split(".")[0] == "kernels" or (a.name.startswith("autogemm.")
                                                                   and a.name != "autogemm.torch")]
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle():
    graph = {m: {n for n in ours(imports(p)) if n in MODULES and n != m} for m, p in MODULES.items()}
    # a package imports its own modules by being imported first: only module -> module edges count
    state, cycles = {}, []

    def visit(m, path):
        state[m] = "open"
        for n in graph[m]:
            if state.get(n) == "open":
                cycles.append(" -> ".join(path[path.index(n):] + [n]))
            elif n not in state:
                visit(n, path + [n])
        state[m] = "done"

    for m in graph:
        if m not in state:
            visit(m, [m])
    assert not cycles, "\n".join(cycles)


def test_evidence_lives_apart_from_the_code():
    """Benchmark records and visit scripts are in benchmarks/, which nothing shipped imports; the
    shipped packages hold no lab script, and tuned/ (shipped as autogemm/tuned) tuned files alone."""
    shipped = [p for top in ("autogemm", "kernels", "nn") for p in (ROOT / top).rglob("*.py")
               if "tuned" not in p.relative_to(ROOT).parts]
    assert not [str(p) for p in shipped if any(m.split(".")[0] == "benchmarks" for m in imports(p))]
    assert sorted(p.name for p in (ROOT / "tuned").iterdir()) == sorted(p.name for p in (ROOT / "tuned").glob("*.json"))
    assert not [p for top in ("autogemm", "kernels", "nn") for p in (ROOT / top).rglob("*.sh")]


# nn's tools: the commands on top of nn's library (and nn.targets, autogemm's entry points into it).
NN_TOOLS = {"nn.train", "nn.bench", "nn.profile", "nn.scaling", "nn.targets"}
# Library modules with a small command line of their own, on the library alone (python -m nn.data,
# python -m nn.cost_model); nn.errors holds the parser every command line uses.
NN_COMMAND_LINES = {"nn.data", "nn.cost_model", "nn.errors"}


def test_nns_library_imports_none_of_its_tools_nor_argparse():
    library = {m: p for m, p in MODULES.items() if m.split(".")[0] == "nn" and m not in NN_TOOLS}
    assert NN_TOOLS <= set(MODULES) and "nn.trainer" in library
    wrong = [f"{m} imports {n}" for m, p in library.items() for n in imports(p)
             if n in NN_TOOLS or (n == "argparse" and m not in NN_COMMAND_LINES)]
    assert not wrong, "\n".join(wrong)
