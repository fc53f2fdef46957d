"""Programmatic dependent launch: a kernel's blocks resident while the grid before it finishes.

Every kernel autogemm compiles begins by waiting for the grid before it in its stream to finish and
its writes to be visible (`griddepcontrol.wait`, which returns at once where there is nothing to
wait for; compile.py puts it first in the body with `with_wait`, where it finds the one definition
of the kernel: a record's code hash, of the template's rendering, does not cover it).
Launched into a CUDA graph being captured, on a GPU of compute capability 9.0 or more, such a kernel
goes in by cuLaunchKernelEx with the programmatic-stream-serialization attribute (through ctypes:
CuPy's launches take no attributes): the graph then launches it as the blocks of the grid before it
exit rather than after that grid completes, and one kernel's completion, the next one's launch and
its blocks' start overlap (benchmarks/issue41-h200/: 2-7% off the trainer's epochs). Because each
such kernel waits before it reads or writes anything, every kernel after it in the stream, waiting
for it, also waits for all before it.

Eager launches (no capture) stay on CuPy's launch, the cheaper on the host; so does a kernel with no
wait (a raw kernel, named by a #define; a source whose definition was not found), an argument of a
type CuPy would not pass either, and everything with $AUTOGEMM_DEPENDENT_LAUNCH=0.
"""
import ctypes
import functools
import os
import re

import numpy as np

from autogemm.errors import AutogemmError, brief
from autogemm.runtime.render import LITERAL_OR_COMMENT

# The kernel's first statement. Signalling dependents early (griddepcontrol.launch_dependents) was
# measured and not kept: waiting blocks then hold SMs that a graph's parallel branches need.
WAIT = ('\n#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900\n'
        '    asm volatile("griddepcontrol.wait;" ::: "memory");   // the grid before this one: finished, visible\n'
        '#endif\n')
MIN_COMPUTE_CAPABILITY, MIN_DRIVER, MIN_NVRTC = 90, 12030, (11, 8)
ENV = "AUTOGEMM_DEPENDENT_LAUNCH"
_PROGRAMMATIC_STREAM_SERIALIZATION = 6     # CUlaunchAttributeID
_DIRECTIVE = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.M)    # a preprocessor line, its continuations too
_BODY = re.compile(r"\s*\{")


def with_wait(source: str, name: str) -> str | None:
    """`source` with WAIT as the first statement of the body of `name`, where `name` has exactly one
    definition declared __global__; else None. Comments, literals and preprocessor lines (macros,
    code between #if branches is read as any code) are not searched."""
    masked = LITERAL_OR_COMMENT.sub(lambda m: " " * len(m[0]), source)
    masked = _DIRECTIVE.sub(lambda m: re.sub(r"[^\n]", " ", m[0]), masked)
    bodies = []
    for match in _mentions(masked, name):
        declaration = masked[max(masked.rfind(c, 0, match.start()) for c in ";{}") + 1:match.start()]
        at, depth = match.end(), 1
        while at < len(masked) and depth:
            depth += {"(": 1, ")": -1}.get(masked[at], 0)
            at += 1
        body = _BODY.match(masked, at)
        if "__global__" in declaration.split() and depth == 0 and body:   # a kernel's definition
            bodies.append(body.end())
    if len(bodies) != 1:
        return None
    return source[:bodies[0]] + WAIT + source[bodies[0]:]


def _mentions(text: str, name: str):
    """The matches of `name(` in `text` as a whole word (found by str.find: a regular expression
    beginning with \\b scans each position)."""
    call = re.compile(rf"{re.escape(name)}\s*\(")
    at = text.find(name)
    while at >= 0:
        match = call.match(text, at)
        if match and not (at and (text[at - 1].isalnum() or text[at - 1] == "_")):
            yield match
        at = text.find(name, at + 1)


class _Attribute(ctypes.Structure):        # CUlaunchAttribute: an id, then a 64-byte value, 8-aligned
    _fields_ = [("id", ctypes.c_int), ("value", ctypes.c_int64 * 8)]


class _Config(ctypes.Structure):           # CUlaunchConfig
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared_mem", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_Attribute)), ("n_attrs", ctypes.c_uint)]


@functools.cache
def _launch_kernel_ex():
    function = ctypes.CDLL("libcuda.so.1").cuLaunchKernelEx
    function.argtypes = [ctypes.POINTER(_Config), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
    function.restype = ctypes.c_int
    return function


def setting() -> bool:
    """$AUTOGEMM_DEPENDENT_LAUNCH: 1 or unset (on), 0 (off); any other value is an error."""
    value = os.environ.get(ENV) or "1"
    if value not in ("0", "1"):
        raise AutogemmError(f"${ENV} is {brief(value)}: set it to 1 (programmatic dependent launch in "
                            "CUDA graphs, the default) or 0 (off)")
    return value == "1"


@functools.cache
def enabled(device_id: int) -> bool:
    """Whether captured launches on this device go in dependent: not turned off (`setting`, read
    once a process), compute capability 9.0 or more, NVRTC 11.8 or later (which compiles the wait
    for it), and a driver that captures them into graphs (CUDA 12.3)."""
    import cupy

    return (setting() and cupy.cuda.runtime.driverGetVersion() >= MIN_DRIVER
            and cupy.cuda.nvrtc.getVersion() >= MIN_NVRTC
            and int(cupy.cuda.Device(device_id).compute_capability) >= MIN_COMPUTE_CAPABILITY)


def _parameters(args) -> list | None:
    """Host copies of `args` as CuPy would pass them (an array: its pointer; a NumPy scalar: its
    bytes; a Python int, float or bool: int64, float64, bool; None: a null pointer; a tensor map:
    its 128 bytes), each with an address; None for an argument of another type."""
    import cupy

    from autogemm.runtime.tensor_map import map_argument_type

    values = []
    for a in args:
        if isinstance(a, cupy.ndarray):
            values.append(np.array(a.data.ptr, np.uint64))
        elif isinstance(a, np.generic):
            values.append(np.array(a))
        elif a is None:
            values.append(np.array(0, np.uint64))
        elif isinstance(a, bool):
            values.append(np.array(a, np.bool_))
        elif isinstance(a, int):
            values.append(np.array(a, np.int64))
        elif isinstance(a, float):
            values.append(np.array(a, np.float64))
        elif isinstance(a, map_argument_type()):
            values.append(a)
        else:
            return None
    return values


def _dims(x) -> ctypes.Array:
    x = tuple(x) if isinstance(x, tuple | list) else (x,)
    return (ctypes.c_uint * 3)(*x, *(1,) * (3 - len(x)))


def launch(kernel, waits: bool, grid, block, args: tuple, shared_mem: int = 0):
    """Launch `kernel` (a cupy.RawKernel; `waits`: its body begins with WAIT) on the current
    stream: by programmatic dependent launch where this module's docstring says, else CuPy's call."""
    import cupy

    stream = cupy.cuda.get_current_stream() if setting() and waits else None
    if stream is not None and _capturing(stream) and enabled(cupy.cuda.Device().id):
        values = _parameters(args)
        if values is not None:
            pointers = (ctypes.c_void_p * max(len(values), 1))(
                *(v.address if not isinstance(v, np.ndarray) else v.ctypes.data for v in values))
            attribute = _Attribute(_PROGRAMMATIC_STREAM_SERIALIZATION)
            attribute.value[0] = 1
            config = _Config(_dims(grid), _dims(block), shared_mem, stream.ptr, ctypes.pointer(attribute), 1)
            status = _launch_kernel_ex()(ctypes.byref(config), kernel.kernel.ptr, pointers, None)
            if status:
                raise cupy.cuda.driver.CUDADriverError(status)
            return
    kernel(grid, block, args, shared_mem=shared_mem)


def _capturing(stream) -> bool:
    import cupy

    try:
        return stream.is_capturing()
    except cupy.cuda.runtime.CUDARuntimeError:     # the legacy stream, asked while another stream captures
        return False
