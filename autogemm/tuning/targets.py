"""Shapes from the command line (`MxNxK[:op]`) and from a network's training step (`nn`).

`Shape` is one GEMM (autogemm bench); `Target` is one kernel launch of any family to tune
(autogemm tune). A network's launches come from the network itself, through the entry point it
registers (nn.targets records its Step): for the full batch, the last partial batch of an epoch,
and each rank's share of both.
"""
import importlib.metadata
import inspect
import re
from dataclasses import dataclass

from autogemm.errors import AutogemmError, brief
from autogemm.store.keys import Target
from kernels import FAMILIES, IMPLEMENTATIONS, REGISTRY, call_of
from kernels.contract import MAX_SIZE
from kernels.gemm.call import EPILOGUES, KEY_OPS, PRECISIONS, split_op

_SHAPE = re.compile(r"^([0-9]+)x([0-9]+)x([0-9]+)(?::([nt]{2}(?:\+[a-z_]+)?))?$")


@dataclass(frozen=True)
class Shape:
    m: int
    n: int
    k: int
    op: str = "nn"      # a GEMM key's op (kernels.gemm.KEY_OPS): "nt", or with an epilogue "nt+bias_sigmoid"
    role: str = ""      # where the step uses it (A1 = A0 W1^T, ...), empty for explicit shapes

    @property
    def trans_a(self) -> bool:
        return split_op(self.op)[0]

    @property
    def trans_b(self) -> bool:
        return split_op(self.op)[1]

    @property
    def epilogue(self) -> str | None:
        return split_op(self.op)[2]

    def __str__(self) -> str:
        return f"{self.m}x{self.n}x{self.k}:{self.op}"


def parse_shapes(text: str, batch: int | None = None, hidden: tuple[int, ...] = (1000,),
                 precision: str = "fp32", layers: str | None = None) -> list[Shape]:
    """A comma-separated list of MxNxK[:op] (op nn, nt, tn, tt, each with +epilogue or not: the
    GEMM's fused epilogue, as nt+bias_sigmoid), or a network's name (`nn`,
    `lenet`, whose `layers` may be given) for the GEMMs of its training step at `precision` on a
    full batch (None: its default), one rank."""
    shapes = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        if item in networks():
            shapes += [Shape(*t.sizes, t.op, t.role)
                       for t in network_targets(item, batch, hidden, train_size=None, precision=precision,
                                                layers=layers if item == "lenet" else None)
                       if t.family == "gemm"]
            continue
        match = _SHAPE.match(item)
        if not match:
            raise AutogemmError(f"--shapes: {brief(item)} is not MxNxK[:op] (e.g. 800x1000x784:nt or "
                                f"800x1000x784:nt+bias_sigmoid) or a network ({', '.join(networks()) or NO_NETWORK})")
        if match.group(4) and match.group(4) not in KEY_OPS:
            raise AutogemmError(f"--shapes: {brief(item)}: the epilogue after '+' is not one of "
                                f"{', '.join(map(str, EPILOGUES[1:]))}")
        m, n, k = (int(g) if len(g.lstrip("0")) <= 10 else MAX_SIZE + 1 for g in match.groups()[:3])
        if min(m, n, k) < 1:
            raise AutogemmError(f"--shapes: {brief(item)} has a zero size; every size must be >= 1")
        if max(m, n, k) > MAX_SIZE:
            raise AutogemmError(f"--shapes: {brief(item)} has a size over {MAX_SIZE}, more than the kernels' "
                                "32-bit sizes hold")
        shapes.append(Shape(m, n, k, match.group(4) or "nn"))
    if not shapes:
        raise AutogemmError("--shapes: no shapes given; use 'nn' or MxNxK[:op],...")
    return list(dict.fromkeys(shapes))


CONVOLUTIONS = tuple(call for call in IMPLEMENTATIONS if call.startswith("conv2d"))


def network_convolutions(text: str, batch: int | None = None, layers: str | None = None) -> list[Target]:
    """The convolution calls (conv2d, conv2d_dgrad, conv2d_wgrad: kernels.IMPLEMENTATIONS) of the
    training steps of the networks named in `text` (others are skipped; lenet's of `layers` where
    given), on a full batch, one rank."""
    targets = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        if item in networks():
            targets += [t for t in network_targets(item, batch, train_size=None, layers=layers if item == "lenet" else None)
                        if t.family in CONVOLUTIONS]
    return _unique(targets)


# ---- tuning targets: every kernel launch of a network's training step --------------------------
# Every built-in family but the baselines (gemm_naive); to_bf16's and transpose's launches are
# autogemm's own calls', which no network's target names (nor a plugin family's).
TUNE_FAMILIES = tuple(module.NAME for module in FAMILIES if not getattr(module, "BASELINE", False))
# entry points: name -> f(hidden, train_size, ranks, activation[, batch, layers, parallel, precision])
# -> [Target]; the network's own default batch where none is given, and layers only where given;
# train_size None: the launches of one full batch; parallel only where not "data"; precision (the
# GEMMs', which may change what a step launches) only where not "fp32" and the entry point takes it;
# a float32 tune at fp32 also asks for the other precisions' launches (every_precision), skipping
# any precision that the entry point refuses
TARGETS_GROUP = "autogemm.targets"
NO_NETWORK = "none is installed: `pip install -e .` in the checkout registers nn"


def networks() -> dict:
    """The networks whose training steps can be tuned by name: the `autogemm.targets` entry points
    (nn registers `nn`, its MLP, and `lenet`, its CNN)."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=TARGETS_GROUP)}


def network_targets(name: str, batch: int | None = None, hidden: tuple[int, ...] = (1000,),
                    train_size: int | None = 54_000, ranks: tuple[int, ...] = (1,), activation: str = "sigmoid",
                    layers: str | None = None, parallel: str = "data", precision: str = "fp32") -> list[Target]:
    """Every kernel launch of network `name`'s training step, as that network records it (batch
    None: the network's own default; parallel "model": each rank's share of the hidden units;
    precision: its GEMMs', which may change what the step launches)."""
    entry = networks()[name]
    try:
        record = entry.load()
    except Exception as exc:   # a broken plugin is the user's one-line error, not a traceback
        raise AutogemmError(f"--shapes {name}: cannot load its entry point {entry.value}: "
                            f"{type(exc).__name__}: {exc}") from None
    given = {"batch": batch} if batch is not None else {}
    given |= {"layers": layers} if layers is not None else {}
    given |= {"parallel": parallel} if parallel != "data" else {}
    for keyword in ("layers", "parallel"):
        if keyword in given and not _takes(record, keyword):
            raise AutogemmError(f"--shapes {name}: the network takes no --{keyword} (it is another network's flag)")
    if precision != "fp32" and _takes(record, "precision"):
        given["precision"] = precision
    try:
        return list(record(hidden=tuple(hidden), train_size=train_size, ranks=tuple(ranks), activation=activation,
                           **given))
    except Exception as exc:   # a network's own error (a bad --layers spec) is one line too
        raise AutogemmError(f"--shapes {name}: {exc}") from None


def _takes(f, keyword: str) -> bool:
    """Whether calling f with `keyword` is allowed (a named parameter, or **kwargs)."""
    try:
        parameters = inspect.signature(f).parameters.values()
    except (TypeError, ValueError):      # no signature to read: do not risk the call
        return False
    return any((p.name == keyword and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)) or p.kind is p.VAR_KEYWORD
               for p in parameters)


def _unique(targets: list[Target]) -> list[Target]:
    """The first target of each (family, sizes, op), in order."""
    first = {}
    for t in targets:
        first.setdefault((t.family, t.sizes, t.op), t)
    return list(first.values())


def parse_targets(text: str, batch: int | None = None, hidden: tuple[int, ...] = (1000,), train_size: int = 54_000,
                  ranks: tuple[int, ...] = (1,), families: tuple[str, ...] = TUNE_FAMILIES,
                  activation: str = "sigmoid", layers: str | None = None, parallel: str = "data",
                  precision: str = "fp32", every_precision: bool = False) -> list[Target]:
    """A network's name (`nn`, `lenet`) for every launch of its training step at `precision`, or
    MxNxK[:op],... for GEMMs; kept to `families`. `every_precision`: also the launches that the
    step makes at the other precisions, but the GEMMs' (the other families' records serve every
    precision, and a float32 tune at fp32 is what tunes them)."""
    targets = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        if item in networks():
            args = (item, batch, hidden, train_size, ranks, activation, layers, parallel)
            targets += network_targets(*args, precision)
            for other in [p for p in PRECISIONS if p != precision] if every_precision else []:
                try:
                    targets += [t for t in network_targets(*args, other) if call_of(t.family) != "gemm"]
                except AutogemmError:       # a network that does not train at that precision
                    pass
        else:
            shape = parse_shapes(item)[0]
            targets += [Target(name, (shape.m, shape.n, shape.k), shape.op) for name in IMPLEMENTATIONS["gemm"]]
    kept = [t for t in _unique(targets) if t.family in families]
    if not kept:
        raise AutogemmError(f"--shapes {brief(text)} with --families {','.join(families)}: nothing to tune")
    return kept
