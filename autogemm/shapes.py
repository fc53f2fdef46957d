"""GEMM shapes from the command line (`MxNxK[:op]`) and from the MLP's training step (`nn`)."""
import re
from dataclasses import dataclass

from autogemm.errors import AutogemmError

OPS = ("nn", "nt", "tn", "tt")
_SHAPE = re.compile(r"^(\d+)x(\d+)x(\d+)(?::([nt]{2}))?$")


@dataclass(frozen=True)
class Shape:
    m: int
    n: int
    k: int
    op: str = "nn"
    role: str = ""      # where the MLP uses it (Z1 = X W1^T, ...), empty for explicit shapes

    @property
    def trans_a(self) -> bool:
        return self.op[0] == "t"

    @property
    def trans_b(self) -> bool:
        return self.op[1] == "t"

    def __str__(self) -> str:
        return f"{self.m}x{self.n}x{self.k}:{self.op}"


def mlp_shapes(batch: int = 800, hidden: tuple[int, ...] = (1000,), inputs: int = 784,
               classes: int = 10) -> list[Shape]:
    """The GEMMs of one training step, in order: forward per layer, then backward per layer."""
    sizes = [inputs, *hidden, classes]
    shapes = []
    for layer, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:]), start=1):
        shapes.append(Shape(batch, fan_out, fan_in, "nt", f"Z{layer} = A{layer - 1} W{layer}^T"))
    for layer in range(len(sizes) - 1, 0, -1):
        fan_in, fan_out = sizes[layer - 1], sizes[layer]
        shapes.append(Shape(fan_out, fan_in, batch, "tn", f"dW{layer} = G{layer}^T A{layer - 1}"))
        if layer > 1:
            shapes.append(Shape(batch, fan_in, fan_out, "nn", f"dA{layer - 1} = G{layer} W{layer}"))
    return shapes


def parse_shapes(text: str, batch: int = 800, hidden: tuple[int, ...] = (1000,)) -> list[Shape]:
    """`nn` for the MLP's shapes, or a comma-separated list of MxNxK[:op] (op nn, nt, tn, tt)."""
    shapes = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        if item == "nn":
            shapes += mlp_shapes(batch, hidden)
            continue
        match = _SHAPE.match(item)
        if not match:
            raise AutogemmError(f"--shapes: {item!r} is not MxNxK[:op] (e.g. 800x1000x784:nt) or 'nn'")
        m, n, k = (int(g) for g in match.groups()[:3])
        if min(m, n, k) < 1:
            raise AutogemmError(f"--shapes: {item!r} has a zero size; every size must be >= 1")
        shapes.append(Shape(m, n, k, match.group(4) or "nn"))
    if not shapes:
        raise AutogemmError("--shapes: no shapes given; use 'nn' or MxNxK[:op],...")
    return list(dict.fromkeys(shapes))
