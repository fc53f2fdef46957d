"""The kernel of a call: its config (given, the family's default, or the store's choice), rendered
once per problem and kept, so that a repeated call costs one dict lookup; its launch, and the
scratch that split-K, its tile counters and pretransposed operands need."""
from collections.abc import Callable, Mapping

import numpy as np

from autogemm.runtime import compile as compiler
from autogemm.runtime import dependent_launch
from autogemm.runtime.device import DeviceInfo, this_device
from autogemm.runtime.family import Config, Instance, family
from autogemm.store import lookup
from kernels import IMPLEMENTATIONS
from kernels.contract import Geometry

_instances: dict[tuple, Instance] = {}
_implementations: dict[tuple, str] = {}
_generation = lookup.generation


def _follow_lookup():
    """Forget the kernels and families chosen with a store that lookup has since reloaded."""
    global _generation
    if _generation != lookup.generation:
        _instances.clear()
        _implementations.clear()
        _generation = lookup.generation


def kernel(family_name: str, problem, config: Mapping | str | None, device: DeviceInfo) -> Instance:
    """The rendered kernel for `problem`: `config` checked against the space; "default": the
    family's untuned default; None: the config autogemm.store.lookup chooses for this shape and GPU.

    Kept per (family, problem, config, device) until the store is reloaded (lookup.reload)."""
    _follow_lookup()
    key = (family_name, problem, config if config is None or config == "default" else Config(config), device)
    inst = _instances.get(key)
    if inst is None:
        fam = family(family_name)
        if config == "default":
            cfg = fam.default(problem, device)
        elif config is not None:
            cfg = fam.validate(config, problem, device)
        else:
            cfg = lookup.choose(family_name, problem, device).config
        inst = _instances[key] = fam.instance(cfg, problem)
    return inst


def implementation(call: str, problem, config: Mapping | str | None, device: DeviceInfo) -> str:
    """The family that runs `call` (a key of kernels.IMPLEMENTATIONS, else the family itself), among
    those that can run `problem` on `device` and serve it untold (Family.serves: no family that is
    not FP32-accurate for an FP32-accurate call; the first listed where none can: its error says
    why). With config None, the best known: of the families with a record of this shape (exact or
    stale), the faster (for a GEMM with an epilogue, timed with it where each family has such a
    record: `autogemm tune` tunes every family with it); else, where every family's nearest record
    is of one other shape, the faster there; else (no shape measured them all) the untuned order: the
    first whose module puts it first (`untuned_first`), else the first listed, each on the config
    lookup gives it (a nearest record's, or its default). "default": the first listed that can;
    a mapping: the family whose parameters it names (all of them, else the first whose parameters
    include every one it names: its error then says which it lacks)."""
    names = IMPLEMENTATIONS.get(call, (call,))
    if len(names) == 1:
        return names[0]
    if config is not None and config != "default":
        named = [n for n in names if set(config) <= set(family(n).params)]
        return next((n for n in named if set(config) == set(family(n).params)), (named or names)[0])
    _follow_lookup()
    key = (call, problem, device, config)
    if key not in _implementations:
        runnable = [name for name in names if family(name).serves(problem) and family(name).can_run(problem, device)]
        runnable = runnable or names[:1]
        _implementations[key] = runnable[0] if config == "default" else _best_known(runnable, problem, device)
    return _implementations[key]


def _best_known(names: list[str], problem, device: DeviceInfo) -> str:
    """implementation's choice among `names` by what lookup knows of each (its docstring says how):
    a nearest record's time is another shape's, evidence between families only where all were
    measured there."""
    choices = {name: lookup.choose(name, problem, device) for name in names}
    here = [name for name in names if choices[name].source in ("exact", "stale")]
    if here:
        return min(here, key=lambda name: choices[name].rank)
    shapes = {choices[n].record.key.shape if choices[n].source == "nearest" else None for n in names}
    if len(shapes) == 1 and None not in shapes:
        return min(names, key=lambda name: choices[name].rank)
    return next((name for name in names if family(name).untuned_first(problem, device)), names[0])


_scratch: dict[tuple, object] = {}
_outgrown: list = []     # scratch replaced by a larger buffer: a captured CUDA graph may still use it


def scratch(kind: str, dtype, size: int):
    """Per-device, per-stream scratch that only grows and is never freed; counters start (and stay)
    at zero."""
    import cupy

    key = (cupy.cuda.Device().id, cupy.cuda.get_current_stream().ptr, kind, np.dtype(dtype).str)
    buf = _scratch.get(key)
    if buf is None or buf.size < size:
        if buf is not None:
            _outgrown.append(buf)
        buf = cupy.zeros(max(size, 1), dtype=dtype)
        _scratch[key] = buf
    return buf


def launch(call: str, problem, config: Mapping | str | None, args: Callable[[Geometry], tuple]) -> Instance:
    """Launch `problem`'s kernel of the family `implementation` picks for `call` (see `kernel` for
    `config`) on the current stream with args(geometry)."""
    device = this_device()
    inst = kernel(implementation(call, problem, config, device), problem, config, device)
    g = inst.geometry
    dependent_launch.launch(*compiler.compiled(inst), g.grid, g.block, args(g), g.smem_bytes)
    return inst
