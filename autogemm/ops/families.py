"""Any registered family's kernel on the caller's arrays: a plugin family's (autogemm/runtime/
plugins.py) as its own op, or any family whose module says how its problem and arguments come from
named arrays (`problem_for(**arrays)`, `arguments(problem, geometry, **arrays)`).

    autogemm.load_family("examples/rowsoftmax/rowsoftmax")     # or pip install it: an entry point
    autogemm.launch("rowsoftmax", x=x, out=out)                # its tuned config for this problem
"""
from collections.abc import Mapping

from autogemm.errors import BadArguments
from autogemm.ops.kernels import launch as launch_call
from autogemm.runtime import plugins
from kernels import REGISTRY


def launch(family: str, config: Mapping | str | None = None, **arrays):
    """Run family `family`'s kernel on `arrays` (CuPy arrays and scalars, by the names its module's
    problem_for and arguments take), on the current stream: with the config the tuned records give
    this problem on this GPU (None), the family's default ("default") or `config`. Returns the
    Instance launched (its name and config)."""
    plugins.require(family)
    module = REGISTRY[family]
    if not (callable(getattr(module, "problem_for", None)) and callable(getattr(module, "arguments", None))):
        raise BadArguments(f"autogemm.launch: family {family} declares no problem_for and arguments (how its "
                           f"problem and kernel arguments come from named arrays); call its own op")
    try:
        problem = module.problem_for(**arrays)
    except (TypeError, ValueError) as exc:     # the family's own checks of the arrays it was given
        raise BadArguments(f"autogemm.launch({family}): {exc}") from None
    return launch_call(family, problem, config, lambda geometry: module.arguments(problem, geometry, **arrays))


def load_family(path) -> str:
    """Register the family package at folder `path` (its module, template and measure.py) for this
    process; its name. An installed package's `autogemm.families` entry points are loaded already."""
    return plugins.load_folder(path, f"autogemm.load_family({str(path)!r})")
