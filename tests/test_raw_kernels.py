"""A CUDA kernel of your own with no template (autogemm.tune_kernel, launch_kernel): made a family
whose configs are #defines, run on the CPU emulator against its reference, and every bad input
refused in one line before anything is compiled."""
import numpy as np
import pytest

import autogemm
from autogemm.errors import BadArguments
from autogemm.ops import raw
from autogemm.runtime.device import H100
from autogemm.runtime.family import family
from autogemm.testing.emulator import GXX, Launch, run
from autogemm.tuning.raw import _expected
from autogemm.tuning.verify import compare

@pytest.fixture(autouse=True)
def cache_of_its_own(monkeypatch, tmp_path):
    """The raw kernels' templates in a temporary cache folder, not the user's."""
    monkeypatch.setenv("AUTOGEMM_CACHE", str(tmp_path / "cache"))


@pytest.fixture(autouse=True)
def registry_as_it_was():
    """The raw kernels' families forgotten after each test: the rest of the suite sees ours alone."""
    from autogemm.runtime import plugins
    from kernels import REGISTRY

    before = set(REGISTRY)
    yield
    for name in set(REGISTRY) - before:
        plugins.unregister(name)
    family.cache_clear()


SCALE = """
extern "C" __global__ void scale(const float* x, float* y, int n) {
    const int first = (blockIdx.x * BLOCK + threadIdx.x) * ITEMS;   // BLOCK, ITEMS: definitions
    for (int i = first; i < first + ITEMS && i < n; ++i) y[i] = FACTOR * x[i];
}
"""
SPACE = {"BLOCK": [32, 64, 128], "ITEMS": [1, 2, 4], "FACTOR": [2]}
GRID = lambda cfg, p: -(-p["n"] // (cfg["BLOCK"] * cfg["ITEMS"]))  # noqa: E731
BLOCK = lambda cfg, p: cfg["BLOCK"]  # noqa: E731


def test_a_raw_kernel_becomes_a_family_whose_configs_are_definitions():
    name = raw.family_of(SCALE, "scale", {"n": 1000}, SPACE, GRID, BLOCK, "float32")
    fam = family(name)
    problem = raw.RawProblem((1000,), "float32")
    cfg = fam.config({"BLOCK": 64, "ITEMS": 2, "FACTOR": 2})
    inst = fam.instance(cfg, problem)
    assert name == "kernel_scale" and inst.name == "scale_BLOCK64_ITEMS2_FACTOR2"
    assert "#define BLOCK 64\n#define ITEMS 2" in inst.source and f"#define scale {inst.name}" in inst.source
    assert inst.geometry.grid == (8, 1, 1) and inst.geometry.block == (64, 1, 1)
    assert fam.default(problem, H100) == fam.config({"BLOCK": 32, "ITEMS": 1, "FACTOR": 2})
    assert len(fam.candidates(problem, H100)) == 9


def test_the_source_changing_changes_its_records_hash():
    problem, cfg = raw.RawProblem((1000,), "float32"), {"BLOCK": 64, "ITEMS": 2, "FACTOR": 2}
    name = raw.family_of(SCALE, "scale", {"n": 1000}, SPACE, GRID, BLOCK, "float32")
    before = family(name).code_hash(family(name).config(cfg), problem)
    raw.family_of(SCALE.replace("FACTOR * x[i]", "x[i] * FACTOR"), "scale", {"n": 1000}, SPACE, GRID, BLOCK,
                  "float32")
    assert family(name).code_hash(family(name).config(cfg), problem) != before
    raw.family_of(SCALE + "// a comment\n", "scale", {"n": 1000}, SPACE, GRID, BLOCK, "float32")
    assert family(name).code_hash(family(name).config(cfg), problem) == before    # comments aside


@pytest.mark.skipif(GXX is None, reason="g++ is not on PATH: the emulator needs it")
def test_the_raw_kernel_runs_on_the_cpu_emulator_against_its_reference(tmp_path):
    n = 1000
    name = raw.family_of(SCALE, "scale", {"n": n}, SPACE, GRID, BLOCK, "float32")
    fam, problem = family(name), raw.RawProblem((n,), "float32")
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    value, magnitude, k = _expected(lambda x, y: {"y": 2 * x.astype(np.float64)}, {"x": x, "y": x}, 1)["y"]
    cases = []
    for cfg in fam.candidates(problem, H100)[:4]:
        y = np.full(n, np.nan, np.float32)
        cases.append((Launch(fam.instance(cfg, problem), list(raw.arguments({"x": x, "y": y}, {"n": n}))), y))
    run([launch for launch, _ in cases], tmp_path)
    for launch, y in cases:
        assert compare(y, value, magnitude, k, "float32").ok, launch.instance.name


@pytest.mark.parametrize("kwargs, message", [
    (dict(name="scale-it"), "give the kernel's name in the source"),
    (dict(name="nothere"), "the source has no kernel nothere"),
    (dict(source="   "), "give the kernel's CUDA code"),
    (dict(source="missing/kernel.cu"), "source missing/kernel.cu: cannot read it"),
    (dict(source=SCALE + "// {% endraw %}"), "may not contain 'endraw'"),
    (dict(problem={"n": 0}), "give {size name: positive 32-bit int"),
    (dict(problem={"n": 2**31}), "give {size name: positive 32-bit int"),
    (dict(problem={}), "give {size name: positive 32-bit int"),
    (dict(source="#define BLOCK 64\n" + SCALE), "the source #defines BLOCK itself"),
    (dict(space={}), "space: give {DEFINITION"),
    (dict(space={"BLOCK": []}), "BLOCK needs a list of distinct"),
    (dict(space={"BLOCK": ["1; evil()"]}), "BLOCK needs a list of distinct non-negative 32-bit ints or identifiers"),
    (dict(space={"BLOCK": [-1, 32]}), "BLOCK needs a list of distinct non-negative"),
    (dict(space={"BLOCK": [1, True]}), "BLOCK needs a list of distinct non-negative"),
    (dict(name="s" * 34), "at most 33 characters"),
    (dict(problem={f"n{i}": 1 for i in range(9)}), "1 to 8 sizes"),
    (dict(constraints=lambda cfg, p: True), "constraints: give a list of functions"),
    (dict(source="#if !defined(OTHER)\n#endif\n#define BLOCK 64\n" + SCALE), "the source #defines BLOCK itself"),
    (dict(space={"not a name": [1]}), "is not a preprocessor name"),
    (dict(grid=5), "grid: give a function of"),
    (dict(dtype="int32"), "must be float32 or float64"),
])
def test_what_cannot_be_a_raw_kernel_is_one_line(kwargs, message):
    given = dict(source=SCALE, name="scale", problem={"n": 10}, space=SPACE, grid=GRID, block=BLOCK, dtype="float32")
    given.update(kwargs)
    with pytest.raises(BadArguments, match=message) as caught:
        raw.family_of(**given)
    assert "\n" not in str(caught.value)


def test_a_default_the_source_gives_itself_under_ifndef_is_the_configs_to_set():
    source = "#ifndef BLOCK\n#define BLOCK 64\n#endif\n" + SCALE
    assert raw.family_of(source, "scale", {"n": 10}, SPACE, GRID, BLOCK, "float32") == "kernel_scale"


def test_the_callers_own_functions_failing_are_one_line_naming_them():
    name = raw.family_of(SCALE, "scale", {"n": 10}, SPACE, lambda cfg, p: 1 // 0, BLOCK, "float32",
                         constraints=[lambda cfg, p: cfg["NOPE"]])
    fam, problem = family(name), raw.RawProblem((10,), "float32")
    cfg = fam.config({"BLOCK": 32, "ITEMS": 1, "FACTOR": 2})
    with pytest.raises(autogemm.AutogemmError, match="family kernel_scale: its constraint raised KeyError: 'NOPE'"):
        fam.fits(cfg, problem, H100)
    with pytest.raises(autogemm.AutogemmError, match="its grid raised ZeroDivisionError"):
        fam.instance(cfg, problem)


def test_new_launch_functions_replace_the_old_ones_kernels():
    from autogemm.ops.kernels import kernel

    problem, cfg = raw.RawProblem((1000,), "float32"), {"BLOCK": 64, "ITEMS": 2, "FACTOR": 2}
    raw.family_of(SCALE, "scale", {"n": 1000}, SPACE, GRID, BLOCK, "float32")
    assert kernel("kernel_scale", problem, cfg, H100).geometry.grid == (8, 1, 1)
    raw.family_of(SCALE, "scale", {"n": 1000}, SPACE, lambda cfg, p: 3, BLOCK, "float32")
    assert kernel("kernel_scale", problem, cfg, H100).geometry.grid == (3, 1, 1)


def test_a_repeated_call_is_remembered_until_what_it_closes_over_or_the_registry_changes():
    from autogemm.ops.kernels import kernel
    from kernels import REGISTRY

    problem, cfg = raw.RawProblem((1000,), "float32"), {"BLOCK": 64, "ITEMS": 2, "FACTOR": 2}
    grid_of = lambda blocks: lambda cfg, p: blocks  # noqa: E731
    name = raw.family_of(SCALE, "scale", {"n": 1000}, SPACE, grid_of(5), BLOCK, "float32")
    module = REGISTRY[name]
    assert raw.family_of(SCALE, "scale", {"n": 1000}, SPACE, grid_of(5), BLOCK, "float32") == name
    assert REGISTRY[name] is module and kernel(name, problem, cfg, H100).geometry.grid == (5, 1, 1)
    raw.family_of(SCALE, "scale", {"n": 1000}, SPACE, grid_of(7), BLOCK, "float32")
    assert kernel(name, problem, cfg, H100).geometry.grid == (7, 1, 1)
    REGISTRY.pop(name)
    raw.family_of(SCALE, "scale", {"n": 1000}, SPACE, grid_of(7), BLOCK, "float32")
    assert REGISTRY[name] is not module and kernel(name, problem, cfg, H100).geometry.grid == (7, 1, 1)


def test_launch_functions_that_alternate_keep_each_ones_geometry():
    """Other code, other closures or another object's method: the kernels built with the old
    functions forgotten, also where the arguments were seen before."""
    from autogemm.ops.kernels import kernel

    class Op:
        def __init__(self, blocks):
            self.blocks = blocks

        def grid(self, cfg, p):
            return self.blocks

    problem, cfg = raw.RawProblem((1000,), "float32"), {"BLOCK": 64, "ITEMS": 2, "FACTOR": 2}
    five, seven = (lambda cfg, p: 5), (lambda cfg, p: (7,))
    boxed = lambda blocks: (lambda box: lambda cfg, p: box[0])([blocks])  # noqa: E731  (an unhashable closure)
    for grid, blocks in ((five, 5), (seven, 7), (five, 5), (boxed(9), 9), (boxed(11), 11), (Op(3).grid, 3),
                         (Op(4).grid, 4)):
        name = raw.family_of(SCALE, "scale", {"n": 1000}, SPACE, grid, BLOCK, "float32")
        assert kernel(name, problem, cfg, H100).geometry.grid == (blocks, 1, 1)


@pytest.mark.parametrize("problem, space", [({"n": 1000.0}, SPACE), ({"n": True}, SPACE),
                                            ({"n": 1000}, {**SPACE, "BLOCK": [32.0, 64]})])
def test_values_equal_to_ones_seen_but_of_another_type_are_checked_again(problem, space):
    raw.family_of(SCALE, "scale", {"n": 1000 if problem["n"] != 1 else 1}, SPACE, GRID, BLOCK, "float32")
    with pytest.raises(BadArguments):
        raw.family_of(SCALE, "scale", problem, space, GRID, BLOCK, "float32")


def test_a_bad_launch_shape_fails_the_config_in_one_line():
    name = raw.family_of(SCALE, "scale", {"n": 10}, SPACE, lambda cfg, p: (0,), BLOCK, "float32")
    fam = family(name)
    with pytest.raises(BadArguments, match="grid: must give 1 to 3 positive ints, got"):
        fam.instance(fam.config({"BLOCK": 32, "ITEMS": 1, "FACTOR": 2}), raw.RawProblem((10,), "float32"))


@pytest.mark.parametrize("reference, message", [
    (lambda x, y: {"z": x}, "output 'z' is none of the arrays"),
    (lambda x, y: {"y": x[:3]}, "output y has shape"),
    (lambda x, y: [x], "must return {output name: values}"),
    (lambda x, y: 1 / 0, "reference failed: ZeroDivisionError"),
    (lambda x, y: {"y": (x, x)}, "must be its values, or .value, magnitude, k."),
    (lambda x, y: {"y": (x, abs(x), None)}, "k .the longest sum behind an element. must be an int"),
])
def test_a_reference_that_does_not_fit_the_arrays_is_one_line(reference, message):
    arrays = {"x": np.ones(4, np.float32), "y": np.ones(4, np.float32)}
    with pytest.raises(BadArguments, match=message):
        _expected(reference, arrays, 1)


def test_tune_kernel_refuses_arrays_it_cannot_take_before_any_gpu_work():
    with pytest.raises(BadArguments, match="arrays: give {name: NumPy array"):
        autogemm.tune_kernel(SCALE, "scale", {"n": 4}, {"x": [1, 2]}, SPACE, GRID, BLOCK, lambda x: {"x": x})
    with pytest.raises(BadArguments, match="one floating-point array at least"):
        autogemm.tune_kernel(SCALE, "scale", {"n": 4}, {"x": np.ones(4, np.int32)}, SPACE, GRID, BLOCK,
                             lambda x: {"x": x})


@pytest.mark.skipif(GXX is None, reason="g++ is not on PATH: the emulator needs it")
def test_the_examples_transpose_runs_on_the_cpu_emulator_for_every_config(tmp_path):
    """examples/raw_kernel/transpose.cu, as tune_transpose.py tunes it, on a ragged 37 x 70 matrix."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "examples" / "raw_kernel" / "tune_transpose.py"
    spec = importlib.util.spec_from_file_location("tune_transpose", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    rows, cols = 37, 70
    problem = {"rows": rows, "cols": cols}
    kernel = dict(example.KERNEL)
    name = raw.family_of(kernel.pop("source"), kernel.pop("name"), problem, dtype="float32", **kernel)
    fam, p = family(name), raw.RawProblem((rows, cols), "float32")
    x = np.random.default_rng(2).standard_normal((rows, cols)).astype(np.float32)
    cases = []
    for cfg in fam.candidates(p, H100)[:6] + fam.sample(p, H100, 4, seed=1):
        out = np.full((cols, rows), np.nan, np.float32)
        cases.append((Launch(fam.instance(cfg, p), list(raw.arguments({"x": x, "out": out}, problem))), out))
    run([launch for launch, _ in cases], tmp_path)
    for launch, out in cases:
        assert np.array_equal(out, x.T), launch.instance.name


@pytest.fixture
def tuned_here(tmp_path, monkeypatch):
    """A temporary tuned/ folder that lookup reads (the cache folder is the test's already)."""
    from autogemm.store import locations, lookup

    monkeypatch.setenv(locations.TUNED_ENV, str(tmp_path / "tuned"))
    lookup.reload()
    yield tmp_path / "tuned"
    lookup.reload()


@pytest.mark.gpu
def test_tune_kernel_stores_a_checked_config_that_launch_kernel_runs(tuned_here, caplog):
    import cupy

    from autogemm.runtime.device import this_device
    from autogemm.store.records import file_for, load

    n = 100_003
    x = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    kernel = dict(name="scale", space=SPACE, grid=GRID, block=BLOCK)
    best = autogemm.tune_kernel(SCALE, **kernel, problem={"n": n}, arrays={"x": x, "y": np.zeros_like(x)},
                                reference=lambda x, y: {"y": 2 * x}, trials=9, timeout=60)
    assert set(best) == set(SPACE)
    (record,) = load(file_for(tuned_here, this_device())).records.values()
    assert record.key.family == "kernel_scale" and record.config == best and record.max_rel_error == 0
    xd, yd = cupy.asarray(x), cupy.full(n, cupy.nan, cupy.float32)
    inst = autogemm.launch_kernel(SCALE, **kernel, problem={"n": n}, arrays={"x": xd, "y": yd})
    assert inst.name == "scale_" + "_".join(f"{k}{v}" for k, v in best.items())
    assert cupy.array_equal(yd, 2 * xd)

    changed = SCALE.replace("FACTOR * x[i]", "x[i] * FACTOR")
    with caplog.at_level("WARNING", logger="autogemm"):
        autogemm.launch_kernel(changed, **kernel, problem={"n": n}, arrays={"x": xd, "y": yd})
        autogemm.launch_kernel(changed, **kernel, problem={"n": n}, arrays={"x": xd, "y": yd})
    assert [r.getMessage() for r in caplog.records if "source has changed" in r.getMessage()] == [
        "autogemm.launch_kernel: scale's source has changed since it was tuned for 100003 on this GPU: its old "
        "config still runs; autogemm.tune_kernel again to tune this version"]
    assert cupy.array_equal(yd, 2 * xd)


@pytest.mark.gpu
@pytest.mark.parametrize("source, reference, message", [
    (SCALE.replace("y[i] =", "y[i] = undeclared +"), lambda x, y: {"y": 2 * x}, "undeclared"),
    (SCALE, lambda x, y: {"y": 3 * x}, "y: "),
])
def test_a_kernel_that_fails_every_candidate_is_one_line(tuned_here, source, reference, message):
    x = np.random.default_rng(4).standard_normal(1000).astype(np.float32)
    with pytest.raises(autogemm.AutogemmError, match=message) as caught:
        autogemm.tune_kernel(source, "scale", {"n": 1000}, {"x": x, "y": np.zeros_like(x)}, SPACE, GRID, BLOCK,
                             reference, trials=4, timeout=60)
    assert "\n" not in str(caught.value) and str(caught.value).startswith("autogemm.tune_kernel(scale): ")


def test_a_source_file_is_read_again_once_it_changes(tmp_path):
    import os

    path = tmp_path / "scale.cu"
    path.write_text(SCALE)
    assert raw.source_text(path) == SCALE
    path.write_text(SCALE + "// edited\n")
    os.utime(path, ns=(1, 1))
    assert raw.source_text(str(path)) == SCALE + "// edited\n"
