"""rowsoftmax's kernels on the CPU (autogemm's emulator) against float64, and compiled by nvcc
where it is on PATH: the tests a built-in family has, for a family outside autogemm."""
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import autogemm
from autogemm.runtime.device import H100
from autogemm.testing import loaded_family
from autogemm.testing.emulator import GXX, Launch, run
from autogemm.tuning.verify import compare

FOLDER = Path(__file__).resolve().parents[1] / "rowsoftmax"


@pytest.fixture(scope="module")
def softmax():
    """The family, from its folder (an installed one: as its entry point registered it)."""
    with loaded_family(FOLDER) as family:
        yield family


def problems(softmax):
    """Ragged row counts (spare rows in a block), odd rows (single loads), rows longer than a lane's cache."""
    p = softmax.Problem
    return [p(7, 50), p(37, 1024), p(5, 3000, "float64"), p(3, 5121, aligned=1)]


def configs(softmax, problem):
    """The default and sampled configs, one at least of each of cached and not, and of more than a warp a row."""
    sampled = softmax.sample(problem, H100, 40, seed=problem.cols)
    picked = softmax.candidates(problem, H100)[:1]
    for wanted in (lambda c: c.cached, lambda c: not c.cached, lambda c: c.lanes > 32, lambda c: c.rows > 1):
        picked += [c for c in sampled if wanted(c)][:1]
    return list(dict.fromkeys(picked))


def test_the_family_is_registered_with_its_contract(softmax):
    assert softmax.name == "rowsoftmax" and softmax.template_hash
    assert softmax.default(softmax.Problem(800, 1000), H100).vec == 4
    assert not softmax.fits(softmax.config(dict(lanes=32, vec=4, rows=1, cached=False)), softmax.Problem(2, 10), H100)


@pytest.mark.skipif(GXX is None, reason="g++ is not on PATH: the emulator needs it")
def test_every_kind_of_config_matches_float64_on_the_cpu(softmax, tmp_path):
    rng, cases = np.random.default_rng(0), []
    for problem in problems(softmax):
        t = np.dtype(problem.dtype).type
        x = (rng.standard_normal((problem.rows, problem.cols)) * 4).astype(t)     # X: (rows, cols)
        value, magnitude, k = softmax.module.reference(problem, x=x)["out"]
        for cfg in configs(softmax, problem):
            out = np.full_like(x, np.nan)                                          # poisoned
            args = softmax.module.arguments(problem, None, x=x, out=out)
            cases.append((Launch(softmax.instance(cfg, problem), list(args)), out, value, magnitude, k, problem))
    run([launch for launch, *_ in cases], tmp_path)
    for launch, out, value, magnitude, k, problem in cases:
        verdict = compare(out, value, magnitude, k, problem.dtype)
        assert verdict.ok, f"{launch.instance.name}: {verdict.describe()}"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_the_configs_compile_for_hopper_without_spills(softmax, tmp_path):
    """nvcc for sm_90a: every problem's configs build; float32's spill nothing."""
    for problem in problems(softmax):
        for cfg in configs(softmax, problem):
            inst = softmax.instance(cfg, problem)
            source = tmp_path / f"{inst.name}.cu"
            source.write_text(inst.source)
            built = subprocess.run(["nvcc", "-arch=sm_90a", "-cubin", "--resource-usage", "-o",
                                    str(tmp_path / f"{inst.name}.cubin"), str(source)], capture_output=True, text=True)
            assert built.returncode == 0, built.stderr
            if problem.dtype == "float32":      # float64's exp() calls a slow path whose frame ptxas counts as spills
                assert not re.search(r"[1-9]\d* bytes spill stores", built.stderr), (inst.name, built.stderr)


@pytest.mark.gpu
def test_launch_runs_the_tuned_or_default_config_on_the_gpu(softmax):
    cupy = pytest.importorskip("cupy")
    if cupy.cuda.runtime.getDeviceCount() == 0:
        pytest.skip("no CUDA device")
    x = cupy.asarray(np.random.default_rng(1).standard_normal((300, 1000)), dtype=cupy.float32)
    out = cupy.empty_like(x)
    autogemm.launch("rowsoftmax", x=x, out=out)
    value, magnitude, k = softmax.module.reference(softmax.Problem(300, 1000), x=x.get())["out"]
    assert compare(out.get(), value, magnitude, k, "float32").ok
    with pytest.raises(autogemm.BadArguments, match="must agree"):
        autogemm.launch("rowsoftmax", x=x, out=out[:10])
