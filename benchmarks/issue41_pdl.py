"""An experiment, run at f4d7f4c before the built path (autogemm/runtime/dependent_launch.py):
programmatic dependent launch (PDL) between the step's kernels.

Each kernel autogemm compiles gets, first thing in its body, `griddepcontrol.wait` (its blocks wait
there until the grid before it in the stream has finished and its writes are visible) and then
`griddepcontrol.launch_dependents` (the next grid may launch once every block of this one has
started), and is launched by cuLaunchKernelEx (through ctypes: CuPy has no launch attributes) with
the programmatic-stream-serialization attribute. The next kernel's blocks are then resident and
waiting as the last blocks of the one before end, instead of launching after it completes.

    python benchmarks/issue41_pdl.py micro                      # a chain of small kernels in a graph
    python benchmarks/issue41_pdl.py [--pdl] nn.bench ARGS...   # a module's main, with or without PDL
"""
import ctypes
import functools
import os
import runpy
import sys
import time

import numpy as np

from autogemm.runtime.tensor_map import MAP_ALIGN

# $PDL_TRIGGER=exit: without launch_dependents, the next grid launches as this one's blocks exit
TRIGGER = os.environ.get("PDL_TRIGGER", "start")
PROLOGUE = ('\n#if __CUDA_ARCH__ >= 900\n asm volatile("griddepcontrol.wait;" ::: "memory");\n'
            + (' asm volatile("griddepcontrol.launch_dependents;");\n' if TRIGGER == "start" else "")
            + '#endif\n')
_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION = 6


class _Attribute(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_int), ("value", ctypes.c_int * 16)]


class _Config(ctypes.Structure):
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("smem", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_Attribute)), ("n_attrs", ctypes.c_uint)]


@functools.cache
def _launch_ex():
    fn = ctypes.CDLL("libcuda.so.1").cuLaunchKernelEx
    fn.argtypes = [ctypes.POINTER(_Config), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn


def with_prologue(source: str, name: str) -> str:
    """`source` with PROLOGUE at the start of kernel `name`'s body."""
    start = source.index(name + "(", source.index("__global__"))
    depth, at = 0, start + len(name)
    while True:
        depth += {"(": 1, ")": -1}.get(source[at], 0)
        at += 1
        if depth == 0:
            break
    brace = source.index("{", at)
    return source[:brace + 1] + PROLOGUE + source[brace + 1:]


def _dims(x):
    x = tuple(x) if isinstance(x, tuple | list) else (x,)
    return (ctypes.c_uint * 3)(*(x + (1,) * (3 - len(x))))


class PDLKernel:
    """A compiled kernel launched by cuLaunchKernelEx with the PDL attribute: RawKernel's call."""

    def __init__(self, raw):
        self.raw = raw

    def __getattr__(self, name):
        return getattr(self.raw, name)

    def __setattr__(self, name, value):
        if name == "raw":
            object.__setattr__(self, name, value)
        else:
            setattr(self.raw, name, value)

    def __call__(self, grid, block, args, shared_mem=0):
        import cupy

        keep, params = [], []
        for a in args:
            if isinstance(a, cupy.ndarray):
                v = ctypes.c_void_p(a.data.ptr)
            elif isinstance(a, np.generic):
                v = np.array(a)
                keep.append(v)
                params.append(ctypes.c_void_p(v.ctypes.data))
                continue
            elif hasattr(a, "storage"):        # a tensor map: its 128 bytes, aligned in `storage`
                base = a.storage.ctypes.data
                params.append(ctypes.c_void_p(base + -base % MAP_ALIGN))
                continue
            else:
                raise TypeError(f"argument of type {type(a).__name__}")
            keep.append(v)
            params.append(ctypes.c_void_p(ctypes.addressof(v)))
        attr = _Attribute(_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION, 0)
        attr.value[0] = 1
        cfg = _Config(_dims(grid), _dims(block), shared_mem, cupy.cuda.get_current_stream().ptr,
                      ctypes.pointer(attr), 1)
        array = (ctypes.c_void_p * max(len(params), 1))(*params)
        status = _launch_ex()(ctypes.byref(cfg), self.raw.kernel.ptr, array, None)
        if status:
            raise RuntimeError(f"cuLaunchKernelEx: CUDA error {status}")


def enable():
    """Every kernel autogemm compiles from here on with PROLOGUE, launched with PDL."""
    import dataclasses

    from autogemm.runtime import compile as compiler

    load, kernels = compiler.load, {}

    def pdl_load(instance, options=compiler.OPTIONS):
        key = (instance.source_hash, options)
        if key not in kernels:
            changed = dataclasses.replace(instance, source=with_prologue(instance.source, instance.name))
            kernels[key] = PDLKernel(load(changed, options))
        return kernels[key]

    compiler.load = pdl_load


def micro(launches=30, n=128 * 1024, replays=200):
    """ms of a graph of `launches` dependent small kernels, without and with PDL; the same result."""
    import cupy

    src = ('extern "C" __global__ void step(const float* x, float* y, int n) {'
           ' int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i] * 0.999f + 1.0f; }')
    plain = cupy.RawModule(code=src).get_function("step")
    pdl = PDLKernel(cupy.RawModule(code=with_prologue(src, "step")).get_function("step"))
    stream = cupy.cuda.Stream(non_blocking=True)
    rows = []
    for label, kern in (("plain", plain), ("pdl", pdl), ("plain", plain), ("pdl", pdl)):
        with stream:
            bufs = [cupy.random.rand(n, dtype=np.float32) + 1 for _ in range(2)]
            start = bufs[0].copy()
            stream.begin_capture()
            for i in range(launches):
                kern(((n + 255) // 256,), (256,), (bufs[i % 2], bufs[(i + 1) % 2], np.int32(n)))
            graph = stream.end_capture()
            bufs[0][...] = start
            graph.launch(stream)
            stream.synchronize()
            want = start.get().astype(np.float64)
            for _ in range(launches):
                want = (want * np.float32(0.999)).astype(np.float32) + np.float32(1.0)
            got = bufs[launches % 2].get()
            err = float(np.abs(got - want).max())
            times = []
            for _ in range(replays):
                e0, e1 = cupy.cuda.Event(), cupy.cuda.Event()
                e0.record(stream)
                graph.launch(stream)
                e1.record(stream)
                e1.synchronize()
                times.append(cupy.cuda.get_elapsed_time(e0, e1) * 1000)
        rows.append((label, float(np.median(times)), float(np.median(times)) / launches, err))
    print(f"{'launches':>10} {'kind':>6} {'graph us':>9} {'us/kernel':>10} {'max err':>9}")
    for label, t, per, err in rows:
        print(f"{launches:>10} {label:>6} {t:9.2f} {per:10.3f} {err:9.2e}")


if __name__ == "__main__":
    argv = sys.argv[1:]
    if argv[:1] == ["micro"]:
        micro()
        sys.exit(0)
    if argv[:1] == ["--pdl"]:
        enable()
        argv = argv[1:]
    module, *rest = argv
    sys.argv = [module, *rest]
    t0 = time.time()
    runpy.run_module(module, run_name="__main__", alter_sys=True)
