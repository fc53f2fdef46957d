"""How a kernel call is named in tuned files: (family, shape, op, dtype), and back to a Problem.
The dtype field names the arithmetic: float32, float64, or for the GEMM also tf32 and bf16 (float32
data multiplied in TF32 or BF16: records that never serve a more accurate call) and bfloat16
(bfloat16 operands, float32 out: served by their own records alone).

Each family declares its keys (kernels.contract.KernelFamily): what its sizes stand for
(KEY_SIZES, joined by "x" in the shape: "800x1000x784" for a GEMM's m, n, k), the ops a key may
carry (KEY_OPS: a GEMM's nn | nt | tn | tt, with "+" and its fused epilogue where it has one, an
elementwise op, the output layer's activation, or "-"), and key_of / problem_of between a Problem
and its key. What a key leaves out (a GEMM's C and alignment) one tuned config serves alike.

The nearest-shape rule measures distance between keys as the sum of |log| ratios of their sizes.
"""
import math
import re
from dataclasses import dataclass
from typing import NamedTuple

from autogemm.errors import brief  # noqa: F401 (re-exported)
from kernels import REGISTRY, call_of
from kernels.contract import DTYPES, MAX_SIZE, NO_OP, arity_fits, key_arity


def ops(family: str) -> tuple[str, ...]:
    """The op names a family's keys may carry."""
    return REGISTRY[family].KEY_OPS


def dtypes(family: str) -> tuple[str, ...]:
    """The arithmetics a family's keys may name: its KEY_DTYPES (the GEMM's add "tf32", "bf16"), else the dtypes."""
    return getattr(REGISTRY[family], "KEY_DTYPES", tuple(DTYPES))


def arity(family: str) -> str:
    """How many sizes the family's shape has, in words ("3", "2 or more")."""
    fewest, more = key_arity(REGISTRY[family].KEY_SIZES)
    return f"{fewest} or more" if more else str(fewest)


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
    if family not in REGISTRY:
        raise ValueError(f"family {brief(family)} is not one of {', '.join(REGISTRY)}")
    if dtype not in dtypes(family):
        raise ValueError(f"dtype {brief(dtype)} is not one of {', '.join(dtypes(family))} for {family}")
    if op not in ops(family):
        raise ValueError(f"op {brief(op)} is not one of {', '.join(ops(family))} for {family}")
    sizes = tuple(sizes)
    if not arity_fits(REGISTRY[family].KEY_SIZES, len(sizes)) or \
            not all(type(s) is int and 1 <= s <= MAX_SIZE for s in sizes):
        raise ValueError(f"{family} needs {arity(family)} sizes, integers in 1..{MAX_SIZE}, got {brief(sizes)}")
    return Key(family, "x".join(map(str, sizes)), op, dtype)


@dataclass(frozen=True)
class Target:
    """One kernel launch to tune: a family, its sizes ((M, N, K), (rows, cols), ...), its op, and
    its role in the program that launches it (shown beside its results)."""

    family: str
    sizes: tuple[int, ...]
    op: str
    role: str = ""

    def key(self, dtype: str) -> Key:
        return make_key(self.family, self.sizes, self.op, dtype)

    def __str__(self) -> str:
        op = f":{self.op}" if self.op != NO_OP else ""
        return f"{self.family} {'x'.join(map(str, self.sizes))}{op}"


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
    """The key under which `problem` of `family` is tuned and looked up; its dtype field is the
    problem's arithmetic where it has one (a tf32 GEMM: "tf32"), else its dtype."""
    sizes, op = REGISTRY[family].key_of(problem)
    return make_key(family, sizes, op, getattr(problem, "arithmetic", problem.dtype))


def serving_keys(key: Key) -> list[Key]:
    """The keys whose records may serve `key`, best first: itself; for a GEMM of reduced precision
    those of the more accurate arithmetics (the family's `served_by`); then for a GEMM with an
    epilogue the same arithmetics' records of its layout tuned without one (`served_by_ops`)."""
    family = REGISTRY[key.family]
    served_by = getattr(family, "served_by", lambda arithmetic: (arithmetic,))
    served_by_ops = getattr(family, "served_by_ops", lambda op: (op,))
    return [key._replace(op=op, dtype=d) for op in served_by_ops(key.op) for d in served_by(key.dtype)]


def problem_of(key: Key):
    """The Problem of freshly allocated (contiguous, aligned) operands of `key`."""
    return REGISTRY[key.family].problem_of(key.sizes, key.op, key.dtype)


def same_problem(a: Key, b: Key) -> bool:
    """Whether `a` and `b` are keys of one call's problem (two families of it: gemm, gemm_wgmma)."""
    return call_of(a.family) == call_of(b.family) and problem_of(a) == problem_of(b)


def distance(a: Key, b: Key) -> float:
    """Sum over sizes of |log(a_i / b_i)|: 0 for the same shape, log 2 for one size doubled; infinite
    between keys of different numbers of sizes (dense stacks of other depths)."""
    if len(a.sizes) != len(b.sizes):
        return math.inf
    return sum(abs(math.log(x / y)) for x, y in zip(a.sizes, b.sizes))

