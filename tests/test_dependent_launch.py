"""Programmatic dependent launch (autogemm/runtime/dependent_launch.py): the wait each rendered
kernel begins with, found in any layout of a kernel's definition and nowhere else; on a GPU, a
captured chain of kernels launched dependent computes exactly what the same calls compute eagerly."""
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import autogemm
from autogemm.errors import AutogemmError
from autogemm.runtime import dependent_launch, tensor_map
from autogemm.runtime.dependent_launch import WAIT, with_wait
from autogemm.runtime.family import family
from autogemm.store.keys import problem_of
from autogemm.store.records import load


def body_start(source: str, name: str) -> str:
    """The text that follows WAIT in `source`: what the kernel did first before it."""
    return source[source.index(WAIT) + len(WAIT):].lstrip()


def test_the_wait_is_the_first_statement_of_the_named_kernel():
    source = ('// scale(x) of a kernel\n#define N 4\n__device__ float twice(float v) { return 2 * v; }\n'
              'extern "C" __global__ void __launch_bounds__(128, 1) __cluster_dims__(2, 1, 1)\n'
              'scale(const float* x,   // pointers: x (N, C) (see "scale(" below\n'
              '      float* y, int n)\n{\n    y[0] = twice(x[0]);\n}\n')
    out = with_wait(source, "scale")
    assert out.count(WAIT) == 1
    assert body_start(out, "scale").startswith("y[0] = twice(x[0]);")
    assert out.replace(WAIT, "") == source


def test_a_declaration_or_another_kernel_of_the_name_is_passed_over():
    source = ('extern "C" __global__ void scale(const float* x, float* y);\n'
              'extern "C" __global__ void scale_all(const float* x) { }\n'
              'extern "C" __global__ void scale(const float* x, float* y) { y[0] = x[0]; }\n')
    out = with_wait(source, "scale")
    assert out.count(WAIT) == 1
    assert out.index(WAIT) > source.index("scale_all")
    assert body_start(out, "scale").startswith("y[0] = x[0];")


@pytest.mark.parametrize("source", [
    '__device__ void scale(float* y) { y[0] = 1; }\n',                                  # no kernel
    'extern "C" __global__ void other(float* y) { /* scale(y) { */ }\n',                # in a comment
    'extern "C" __global__ void other(const char* s = "scale(x) {") { }\n',             # in a string
    '#define KERNEL extern "C" __global__ void scale(float* y) \\\n { y[0] = 1; }\nKERNEL\n',   # in a macro
    'extern "C" __global__ void other(float* y) { }\n'                                  # a device function
    'struct S { __device__ void scale(float* y) { y[0] = 1; } };\n',
    '#if __CUDA_ARCH__ < 900\nextern "C" __global__ void scale(float* y) { y[0] = 1; }\n'   # two definitions
    '#else\nextern "C" __global__ void scale(float* y) { y[0] = 2; }\n#endif\n',
])
def test_no_kernel_of_the_name_leaves_the_source_without_a_wait(source):
    assert with_wait(source, "scale") is None


@pytest.mark.parametrize("value, on", [(None, True), ("", True), ("1", True), ("0", False)])
def test_the_switch_reads_1_or_unset_as_on_and_0_as_off(monkeypatch, value, on):
    if value is None:
        monkeypatch.delenv(dependent_launch.ENV, raising=False)
    else:
        monkeypatch.setenv(dependent_launch.ENV, value)
    assert dependent_launch.setting() is on


@pytest.mark.parametrize("value", ["yes", "2", "off", " 1"])
def test_any_other_value_of_the_switch_is_a_one_line_error(monkeypatch, value):
    monkeypatch.setenv(dependent_launch.ENV, value)
    with pytest.raises(AutogemmError, match=r"AUTOGEMM_DEPENDENT_LAUNCH is .*: set it to 1 .* or 0"):
        dependent_launch.setting()


def test_arguments_are_passed_as_cupy_passes_them(monkeypatch):
    """Each argument's bytes as the kernel reads them; None (CuPy's call, no dependent launch) for a
    type CuPy would not pass either."""
    class Array:                                    # stands in for cupy.ndarray
        def __init__(self, ptr):
            self.data = types.SimpleNamespace(ptr=ptr)

    class Map:                                      # stands in for a tensor map's argument
        address = 1234

    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(ndarray=Array))
    monkeypatch.setattr(tensor_map, "map_argument_type", lambda: Map)
    m = Map()
    values = dependent_launch._parameters((Array(0xdead0), np.int32(-3), np.float32(0.5), None, True, 7, 2.5, m))
    as_bytes = [v.tobytes() for v in values[:-1]]
    assert as_bytes == [np.uint64(0xdead0).tobytes(), np.int32(-3).tobytes(), np.float32(0.5).tobytes(),
                        np.uint64(0).tobytes(), b"\x01", np.int64(7).tobytes(), np.float64(2.5).tobytes()]
    assert values[-1] is m
    assert dependent_launch._parameters((Array(1), "text")) is None


def test_the_compiler_compiles_the_waiting_source_and_says_so(monkeypatch):
    """compile.load builds each kernel with the wait first in its body where it finds it (waits:
    True), else the source as rendered (waits: False); each once."""
    from autogemm.runtime import compile as compiler
    from autogemm.runtime.family import Instance
    from kernels.contract import Geometry

    built = []

    class Module:                                   # stands in for cupy.RawModule
        def __init__(self, code, options):
            built.append(code)

        def get_function(self, name):
            return types.SimpleNamespace(compile=lambda: None, name=name)

    fake = types.SimpleNamespace(RawModule=Module, cuda=types.SimpleNamespace(
        Device=lambda: types.SimpleNamespace(id=0), compiler=types.SimpleNamespace(CompileException=RuntimeError)))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(compiler, "_cache", {})
    geometry = Geometry(grid=(1, 1, 1), block=(32, 1, 1))
    found = Instance("f", "k1", 'extern "C" __global__ void k1(float* y) { y[0] = 1; }\n', geometry, None)
    hidden = Instance("f", "k2", '#define K2 extern "C" __global__ void k2(float* y) { y[0] = 1; }\nK2\n', geometry, None)
    assert compiler.compiled(found)[1] and compiler.load(found).name == "k1"
    assert not compiler.compiled(hidden)[1] and compiler.load(hidden).name == "k2"
    assert built == [with_wait(found.source, "k1"), hidden.source]


@pytest.mark.parametrize("path", sorted((Path(__file__).parents[1] / "tuned").glob("*.json")), ids=lambda p: p.name)
def test_every_shipped_records_kernel_is_compiled_waiting(path):
    """Each record's kernel is found and compiled with the wait first (so it may be launched
    dependent), the only difference from its template's rendering, which the record's hash covers."""
    for record in load(path).records.values():
        inst = family(record.key.family).instance(record.config, problem_of(record.key))
        waiting = with_wait(inst.source, inst.name)
        assert waiting is not None and waiting.replace(WAIT, "", 1) == inst.source, record.key


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("family_name, key", [("gemm_wgmma", ("800x1000x784", "nt+bias_sigmoid")),
                                              ("conv2d_dgrad_direct", ("1000x6x13x13x10x3", "pool"))])
def test_a_waiting_kernel_compiles_for_hopper_with_the_wait_in_it(family_name, key, tmp_path):
    from autogemm.runtime.device import H100
    from autogemm.store.keys import Key

    fam = family(family_name)
    problem = problem_of(Key(family_name, key[0], key[1], "float32"))
    inst = fam.instance(fam.default(problem, H100), problem)
    (tmp_path / "k.cu").write_text(with_wait(inst.source, inst.name))
    for kind in ("-cubin", "-ptx"):
        subprocess.run(["nvcc", "-arch=sm_90a", kind, "-o", str(tmp_path / f"k{kind}"), str(tmp_path / "k.cu")],
                       check=True, capture_output=True)
    assert (tmp_path / "k-ptx").read_text().count("griddepcontrol.wait;") == 1


@pytest.mark.gpu
def test_a_captured_chain_launched_dependent_computes_what_eager_calls_do(monkeypatch):
    """Three dependent GEMMs (the tiled family, gemm_wgmma with tensor maps, a fused epilogue) and a
    convolution, captured into a graph: by cuLaunchKernelEx on Hopper, bit for bit the eager results."""
    cupy = pytest.importorskip("cupy")
    launched = []
    real = dependent_launch._launch_kernel_ex()
    monkeypatch.setattr(dependent_launch, "_launch_kernel_ex",
                        lambda: lambda config, function, *rest: (launched.append(function), real(config, function, *rest))[1])
    rng = np.random.default_rng(7)

    def normal(*shape):
        return cupy.asarray(rng.standard_normal(shape).astype(np.float32))

    a, b, c, d, bias = normal(300, 200), normal(200, 136), normal(136, 264), normal(264, 72), normal(72)
    w, cb = normal(4, 1, 3, 3), normal(4)
    outs = [cupy.empty((300, 136), np.float32), cupy.empty((300, 264), np.float32),
            cupy.empty((300, 72), np.float32), cupy.empty((150, 4, 10, 10), np.float32)]

    def chain():
        autogemm.gemm(a, b, out=outs[0])
        autogemm.gemm(outs[0], c, out=outs[1], kernel_family="gemm_wgmma")
        autogemm.gemm(outs[1], d, out=outs[2], epilogue="bias_relu", bias=bias)
        autogemm.conv2d(outs[2].reshape(150, 1, 12, 12), w, cb, outs[3])

    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        chain()                                          # compiles, allocates scratch: not in a capture
        eager = [o.copy() for o in outs]
        assert not launched
        stream.begin_capture()
        chain()
        graph = stream.end_capture()
        for o in outs:
            o.fill(np.nan)
        graph.launch(stream)
        stream.synchronize()
    for got, want in zip(outs, eager):
        assert bool((got == want).all())
    if dependent_launch.enabled(cupy.cuda.Device().id):
        assert len(launched) >= 4
    else:
        assert not launched
