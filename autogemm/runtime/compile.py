"""Compiling rendered kernels with cupy.RawModule (NVRTC), cached in-process by source and options;
each kernel compiled with the wait for the grid before it first in its body (dependent_launch.WAIT)
where its definition is found."""
import re

from autogemm.errors import CompileError
from autogemm.runtime.dependent_launch import with_wait
from autogemm.runtime.family import Instance

OPTIONS = ("--std=c++17",)
# Every kernel asks for the largest shared-memory carveout: an SM whose carveout must change between
# two kernels drains first, which cost a third of an epoch's time when kernels asked for different
# carveouts (benchmarks/README.md).
CARVEOUT_PERCENT = 100
_cache: dict[tuple, tuple[object, bool]] = {}     # (source hash, options, device) -> (kernel, waits)


def load(instance: Instance, options: tuple[str, ...] = OPTIONS):
    """The cupy.RawKernel of `instance` on the current device, compiling it on first use (with
    `options` and the instance's own)."""
    return compiled(instance, options)[0]


def compiled(instance: Instance, options: tuple[str, ...] = OPTIONS) -> tuple[object, bool]:
    """`load`'s kernel, and whether it begins with the wait for the grid before it (what
    dependent_launch.launch takes)."""
    import cupy

    options = options + instance.options
    key = (instance.source_hash, options, cupy.cuda.Device().id)
    compiled = _cache.get(key)
    if compiled is None:
        waiting = with_wait(instance.source, instance.name)
        try:
            module = cupy.RawModule(code=waiting or instance.source, options=options)
            kernel = module.get_function(instance.name)
            kernel.compile()  # force NVRTC now, so errors surface here, not at the first launch
        except cupy.cuda.compiler.CompileException as exc:
            raise CompileError(f"{instance.name}: NVRTC failed: {describe(exc, waiting or instance.source)}") from None
        if instance.geometry.smem_bytes > 0:
            # Opt in to the size: beyond 48 KiB with the kernel's static shared memory (the split-K
            # flag), a launch without it fails.
            kernel.max_dynamic_shared_size_bytes = instance.geometry.smem_bytes
        kernel.preferred_shared_memory_carveout = CARVEOUT_PERCENT
        compiled = _cache[key] = (kernel, waiting is not None)
    return compiled


def describe(exc: Exception, source: str) -> str:
    """The first compiler error with the rendered line it points at, on one line."""
    log = str(exc)
    match = re.search(r"\((\d+)\): (error.*)", log)
    if not match:
        return log.strip().splitlines()[0] if log.strip() else type(exc).__name__
    line = int(match.group(1))
    lines = source.splitlines()
    text = lines[line - 1].strip() if 0 < line <= len(lines) else "?"
    return f"line {line}: {match.group(2).strip()} | {text}"
