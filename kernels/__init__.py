"""CUDA kernel templates, one family per ``<family>.cu.j2``, its parameter space beside it in ``<family>.py``.

A family module declares, as plain data and predicates (this layer imports nothing of autogemm):

    TEMPLATE            the template file name
    PARAMS              {name: (allowed values, ...)}: every value a template may receive
    CONSTRAINTS         ((message, predicate(cfg, problem, device) -> bool), ...): what can run
    Problem             the frozen description of one call (shape, dtype, layout, epilogue)
    default_candidates(problem, device)         sound untuned configs, best first
    template_args(cfg, problem) -> dict         the values rendered (cfg plus derived ones)
    instance_name(cfg, problem) -> str          the compiled symbol, cache key and log name
    geometry(cfg, problem) -> Geometry          grid, block, shared memory, workspace
    flops(problem) -> int

and where its kernel is rendered from more than TEMPLATE (includes, or files chosen by parameters):

    sources(cfg) -> tuple[str, ...]             every template file of cfg's kernel, TEMPLATE first
                                                (default: (TEMPLATE,))
    SOURCE_PARAMS       the parameters that `sources` reads (default: none)

A tuned record stays current while the code (comments aside) of its config's sources is unchanged:
an edit of a file that a config's kernel does not use leaves its record current.

``cfg`` arrives as a namespace whose values autogemm has already checked against PARAMS.
"""
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

TEMPLATE_DIR = Path(__file__).resolve().parent
DTYPES = {"float32": "float", "float64": "double"}
ITEMSIZE = {"float32": 4, "float64": 8}
SHORT = {"float32": "f32", "float64": "f64"}   # dtype in instance names
MAX_SIZE = 2**31 - 1    # every kernel takes its sizes as 32-bit ints


class Geometry(NamedTuple):
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem_bytes: int = 0
    workspace_elems: int = 0   # scratch of the problem's dtype (split-K partial sums)
    counters: int = 0          # int32 counters that must start at zero (split-K tiles)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def check_problem(problem, sizes: tuple[str, ...], what: str):
    """ValueError unless `problem`'s dtype is one of DTYPES and each of its `sizes` an int in
    1..MAX_SIZE."""
    if problem.dtype not in DTYPES:
        raise ValueError(f"dtype {problem.dtype!r} is not one of {', '.join(DTYPES)}")
    for size in sizes:
        value = getattr(problem, size)
        if type(value) is not int or not 1 <= value <= MAX_SIZE:
            raise ValueError(f"{what} {size}={value!r} must be an integer in 1..{MAX_SIZE}")


@dataclass(frozen=True)
class RowsProblem:
    """A kernel over the rows of one (rows, cols) matrix (softmax_xent, colsum)."""

    rows: int
    cols: int
    dtype: str = "float32"

    def __post_init__(self):
        check_problem(self, ("rows", "cols"), "size")
