"""Shapes from the command line (`MxNxK[:op]`) and from the MLP's training step (`nn`).

`Shape` is one GEMM (autogemm bench); `Target` is one kernel launch of any family to tune
(autogemm tune): the training step's GEMMs and its softmax, column-sum and SGD kernels, for the
full batch, the last partial batch of an epoch, and each rank's share of both.
"""
import re
from dataclasses import dataclass

import numpy as np

from autogemm.errors import AutogemmError
from autogemm.store.keys import Key, make_key
from kernels.contract import MAX_SIZE, NO_OP

_SHAPE = re.compile(r"^([0-9]+)x([0-9]+)x([0-9]+)(?::([nt]{2}))?$")


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
        if max(m, n, k) > MAX_SIZE:
            raise AutogemmError(f"--shapes: {item!r} has a size over {MAX_SIZE}, more than the kernels' "
                                "32-bit sizes hold")
        shapes.append(Shape(m, n, k, match.group(4) or "nn"))
    if not shapes:
        raise AutogemmError("--shapes: no shapes given; use 'nn' or MxNxK[:op],...")
    return list(dict.fromkeys(shapes))


# ---- tuning targets: every kernel launch of the training step ----------------------------------
TUNE_FAMILIES = ("gemm", "elementwise", "softmax_xent", "colsum", "linear_xent")


@dataclass(frozen=True)
class Target:
    """One kernel launch to tune: a family, its sizes ((M, N, K) or (rows, cols)) and op."""

    family: str
    sizes: tuple[int, ...]
    op: str
    role: str = ""

    def key(self, dtype: str) -> Key:
        return make_key(self.family, self.sizes, self.op, dtype)

    def __str__(self) -> str:
        op = f":{self.op}" if self.op != NO_OP else ""
        return f"{self.family} {'x'.join(map(str, self.sizes))}{op}"


def batch_rows(batch: int, train_size: int, ranks: tuple[int, ...] = (1,)) -> list[int]:
    """Rows a rank's step sees: each rank's share (np.array_split) of the full batch and of the
    last, partial batch of an epoch; largest first, zero shares left out."""
    batches = {min(batch, train_size)}
    if train_size % batch:
        batches.add(train_size % batch)
    rows = {len(part) for b in batches for r in ranks for part in np.array_split(np.empty(b), r)}
    return sorted((r for r in rows if r > 0), reverse=True)


def mlp_targets(batch: int = 800, hidden: tuple[int, ...] = (1000,), train_size: int = 54_000,
                ranks: tuple[int, ...] = (1,), inputs: int = 784, classes: int = 10,
                activation: str = "sigmoid") -> list[Target]:
    """The launches of a training step with autogemm's kernels (epilogues fused into the GEMMs):
    per row count, the GEMMs of every layer but the output layer's backward product (the output
    layer, its loss and its input gradient are one linear_xent kernel; its forward GEMM stays, for
    evaluation), and the bias-gradient column sums; once, the SGD updates of the biases and (with
    more than one rank, where the update cannot fuse into the GEMM) of the weights. `activation` is
    the hidden layers' (the output layer's input gradient takes its derivative)."""
    sizes = [inputs, *hidden, classes]
    last = len(sizes) - 1
    head_grad = f"dA{last - 1} = G{last} W{last}"
    targets = []
    for rows in batch_rows(batch, train_size, ranks):
        targets += [Target("gemm", (s.m, s.n, s.k), s.op, s.role)
                    for s in mlp_shapes(rows, tuple(hidden), inputs, classes) if s.role != head_grad]
        op = activation if last > 1 else NO_OP
        targets.append(Target("linear_xent", (rows, classes, sizes[-2]), op,
                              f"Z{last}, G{last} = softmax(Z{last}) - Y" + (f", G{last - 1}" if last > 1 else "")))
        for layer, width in enumerate(sizes[1:], start=1):
            targets.append(Target("colsum", (rows, width), NO_OP, f"db{layer} = sum of G{layer}"))
    for layer, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:]), start=1):
        targets.append(Target("elementwise", (1, fan_out), "sgd", f"b{layer} -= lr db{layer}"))
        if max(ranks) > 1:
            targets.append(Target("elementwise", (fan_out, fan_in), "sgd", f"W{layer} -= lr dW{layer}"))
    return _unique(targets)


def _unique(targets: list[Target]) -> list[Target]:
    """The first target of each (family, sizes, op), in order."""
    first = {}
    for t in targets:
        first.setdefault((t.family, t.sizes, t.op), t)
    return list(first.values())


def parse_targets(text: str, batch: int = 800, hidden: tuple[int, ...] = (1000,), train_size: int = 54_000,
                  ranks: tuple[int, ...] = (1,), families: tuple[str, ...] = TUNE_FAMILIES,
                  activation: str = "sigmoid") -> list[Target]:
    """`nn` for every launch of the MLP's step, or MxNxK[:op],... for GEMMs; kept to `families`."""
    targets = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        if item == "nn":
            targets += mlp_targets(batch, hidden, train_size, ranks, activation=activation)
        else:
            shape = parse_shapes(item)[0]
            targets.append(Target("gemm", (shape.m, shape.n, shape.k), shape.op))
    kept = [t for t in _unique(targets) if t.family in families]
    if not kept:
        raise AutogemmError(f"--shapes {text!r} with --families {','.join(families)}: nothing to tune")
    return kept
