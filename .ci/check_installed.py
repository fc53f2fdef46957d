"""CI, run by the wheel's own interpreter outside the checkout: the installed autogemm is the wheel's,
its version is the checkout's pyproject.toml's (module, metadata and `autogemm --version`), every
template file of the checkout is in it, and every kernel family renders from it.

    python check_installed.py CHECKOUT
"""
import itertools
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import autogemm
import kernels
from autogemm import version
from autogemm.runtime.device import H100
from autogemm.runtime import render
from autogemm.runtime.family import families, family
from autogemm.store import locations
from autogemm.store.keys import arity, dtypes, make_key, ops, problem_of


def main(checkout: Path) -> int:
    installed = Path(kernels.__file__).resolve().parent
    if checkout.resolve() in Path(autogemm.__file__).resolve().parents:
        return fail(f"autogemm was imported from the checkout ({autogemm.__file__}), not the wheel")
    expected = version._from_checkout(checkout / "pyproject.toml")
    command = subprocess.run([Path(sys.executable).parent / "autogemm", "--version"], capture_output=True, text=True)
    said = (autogemm.__version__, metadata.version("autogemm"), command.stdout.strip())
    if said != (expected, expected, f"autogemm {expected}"):
        return fail(f"the installed version says {said}; pyproject.toml says {expected}")
    missing = sorted(name for name in kernel_files(checkout / "kernels") if not (installed / name).is_file())
    if missing:
        return fail(f"the installed kernels/ ({installed}) lacks {', '.join(missing)}")
    shipped = sorted(p.name for p in locations.shipped_dir().glob("*.json"))
    if shipped != sorted(p.name for p in (checkout / "tuned").glob("*.json")):
        return fail(f"the installed tuned results {shipped} are not the checkout's")

    used = record_templates_loaded()
    hashes = {name: family(name).template_hash for name in families()}
    for name in families():
        fam = family(name)
        # a convolution of LeNet's and a wide one (its seeds on tensor cores at every precision)
        # LeNet's dense stack (below its pool, the first four sizes its map's)
        shapes = {"conv2d": ((1000, 1, 28, 28, 6, 3), (1000, 32, 12, 12, 64, 5)),
                  "pool2x2": ((1000, 6, 26, 26),), "dense": ((128, 10, 11, 11, 128, 100, 80, 10),)
                  }.get(name.split("_")[0]) or ((800, 10, 784)[:int(arity(name))],)
        for op, dtype, sizes in itertools.product(ops(name), dtypes(name), shapes):
            problem = problem_of(make_key(name, sizes, op, dtype))
            for cfg in fam.candidates(problem, H100) + fam.sample(problem, H100, 8):
                source = fam.instance(cfg, problem).source
                if f"{fam.instance_name(cfg, problem)}(" not in source:
                    return fail(f"{name}: the kernel rendered for {dict(cfg)} does not define its symbol")
                used.update(fam.helper_templates(cfg))
                fam.code_hash(cfg, problem)
    unused = sorted(name for name in kernel_files(installed) if not name.endswith(".py") and name not in used)
    if unused:
        return fail(f"no config of any family rendered {', '.join(unused)}")
    print(f"installed autogemm at {Path(autogemm.__file__).parent}: {len(used)} templates render, "
          f"{len(hashes)} families hashed, {len(shipped)} shipped tuned files")
    return 0


def kernel_files(folder: Path) -> list[str]:
    """The templates, includes and modules under a kernels/ folder, by their path in it."""
    return [p.relative_to(folder).as_posix() for p in folder.rglob("*")
            if p.suffix in (".j2", ".cuh", ".py") and "__pycache__" not in p.parts]


def record_templates_loaded() -> set:
    """The set that every template file of kernels/ Jinja loads from now on is added to (includes too)."""
    used = set()
    loader = next(one for one in render._environment().loader.loaders if hasattr(one, "searchpath"))
    get_source = loader.get_source

    def recording(environment, name):
        used.add(name)
        return get_source(environment, name)

    loader.get_source = recording
    return used


def fail(message: str) -> int:
    print(f"check_installed: {message}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
