"""How a kernel call is named in tuned/ files: (family, shape, op, dtype), and back to a Problem.

    family              shape       op
    gemm, gemm_naive    "MxNxK"     nn | nt | tn | tt   (epilogue, C and alignment left out: one
                                                         tuned config serves all of them)
    elementwise         "ROWSxCOLS" one of kernels.elementwise.OPS
    softmax_xent        "ROWSxCOLS" "-"
    colsum              "ROWSxCOLS" "-"
    linear_xent         "ROWSxCLASSESxINPUTS"   sigmoid | relu (the input gradient's activation) | "-" (none)

The nearest-shape rule measures distance between keys as the sum of |log| ratios of their sizes.
"""
import math
import re
from typing import NamedTuple

from autogemm.runtime.family import FAMILIES
from kernels.contract import DTYPES, MAX_SIZE
from kernels import colsum as colsum_family
from kernels import elementwise as ew_family
from kernels import gemm as gemm_family
from kernels import linear_xent as lx_family
from kernels import softmax_xent as sx_family

GEMM_OPS = ("nn", "nt", "tn", "tt")
NO_OP = "-"
_GEMM_LIKE = ("gemm", "gemm_naive")
_LX_OPS = tuple(a or NO_OP for a in lx_family.ACTIVATIONS)


def ops(family: str) -> tuple[str, ...]:
    """The op names a family's keys may carry."""
    if family in _GEMM_LIKE:
        return GEMM_OPS
    if family == "elementwise":
        return tuple(ew_family.OPS)
    if family == "linear_xent":
        return _LX_OPS
    return (NO_OP,)


def arity(family: str) -> int:
    """How many sizes the family's shape has: 3 (M, N, K) for GEMMs and (rows, classes, inputs)
    for linear_xent, else 2 (rows, cols)."""
    return 3 if family in _GEMM_LIKE or family == "linear_xent" else 2


class Key(NamedTuple):
    family: str
    shape: str      # "800x1000x784"
    op: str
    dtype: str

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(int(s) for s in self.shape.split("x"))

    def __str__(self) -> str:
        op = f":{self.op}" if self.op != NO_OP else ""
        return f"{self.family} {self.shape}{op} {self.dtype}"


def make_key(family: str, sizes, op: str, dtype: str) -> Key:
    """A checked Key; ValueError naming what is wrong."""
    if family not in FAMILIES:
        raise ValueError(f"family {brief(family)} is not one of {', '.join(FAMILIES)}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype {brief(dtype)} is not one of {', '.join(DTYPES)}")
    if op not in ops(family):
        raise ValueError(f"op {brief(op)} is not one of {', '.join(ops(family))} for {family}")
    sizes = tuple(sizes)
    if len(sizes) != arity(family) or not all(type(s) is int and 1 <= s <= MAX_SIZE for s in sizes):
        raise ValueError(f"{family} needs {arity(family)} sizes, integers in 1..{MAX_SIZE}, got {brief(sizes)}")
    return Key(family, "x".join(map(str, sizes)), op, dtype)


_SHAPE = re.compile(r"[1-9][0-9]{0,9}(?:x[1-9][0-9]{0,9})*")


def parse_key(family, shape, op, dtype) -> Key:
    """A Key from the strings of a tuned file; ValueError unless each is a str of the right form."""
    for name, value in (("family", family), ("shape", shape), ("op", op), ("dtype", dtype)):
        if not isinstance(value, str):
            raise ValueError(f"{name} must be a string, got {brief(value)}")
    if not _SHAPE.fullmatch(shape):
        raise ValueError(f"shape {brief(shape)} is not sizes >= 1 joined by 'x' (e.g. 800x1000x784)")
    return make_key(family, tuple(int(s) for s in shape.split("x")), op, dtype)


def key_of(family: str, problem) -> Key:
    """The key under which `problem` of `family` is tuned and looked up."""
    if family in _GEMM_LIKE:
        return make_key(family, (problem.m, problem.n, problem.k), problem.op, problem.dtype)
    if family == "linear_xent":
        return make_key(family, (problem.rows, problem.classes, problem.inputs), problem.op, problem.dtype)
    op = problem.op if family == "elementwise" else NO_OP
    return make_key(family, (problem.rows, problem.cols), op, problem.dtype)


def problem_of(key: Key):
    """The Problem of freshly allocated (contiguous, aligned) operands of `key`."""
    sizes = key.sizes
    if key.family in _GEMM_LIKE:
        return gemm_family.Problem.contiguous(*sizes, key.dtype, key.op[0] == "t", key.op[1] == "t")
    if key.family == "elementwise":
        return ew_family.Problem(key.op, *sizes, key.dtype, aligned=4)
    if key.family == "linear_xent":
        return lx_family.Problem(*sizes, key.dtype, None if key.op == NO_OP else key.op, aligned=4)
    module = sx_family if key.family == "softmax_xent" else colsum_family
    return module.Problem(*sizes, key.dtype)


def distance(a: Key, b: Key) -> float:
    """Sum over sizes of |log(a_i / b_i)|: 0 for the same shape, log 2 for one size doubled."""
    return sum(abs(math.log(x / y)) for x, y in zip(a.sizes, b.sizes))


def brief(value, limit: int = 40) -> str:
    """repr of a value from a file, cut short: messages stay one readable line."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."
