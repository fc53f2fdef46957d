"""GPU: short real tuning runs, stored in a temporary tuned/ folder and then used by autogemm.ops.gemm;
the timer against a launcher slow to issue."""
import json

import numpy as np
import pytest

from autogemm import cli
from autogemm.store import locations, lookup
from autogemm.store.records import file_for, load
from autogemm.tuning.verify import compare
from kernels import gemm

pytestmark = pytest.mark.gpu


@pytest.fixture
def folders(tmp_path, monkeypatch):
    monkeypatch.setenv(locations.TUNED_ENV, str(tmp_path / "tuned"))
    monkeypatch.setenv("AUTOGEMM_CACHE", str(tmp_path / "cache"))
    lookup.reload()
    yield tmp_path
    lookup.reload()


def test_two_gemm_shapes_are_tuned_stored_and_used(folders, capsys):
    import cupy

    import autogemm
    from autogemm.ops.gemm import plan_gemm
    from autogemm.runtime.device import this_device

    status = cli.main(["tune", "--shapes", "800x1000x784:nt,800x10x1000:nt", "--trials", "12", "--timeout", "60",
                       "--patience", "0"])
    printed = capsys.readouterr()
    assert status == 0, printed.err
    assert "autogemm tune: best of each shape" in printed.out
    store = load(file_for(folders / "tuned", this_device()))
    assert store.meta.gpu == this_device().name and store.meta.cupy == cupy.__version__
    assert {r.key.shape for r in store.records.values()} == {"800x1000x784", "800x10x1000"}
    for r in store.records.values():
        # the tiled family measures all 12 trials; gemm_wgmma has few configs for 10 columns, which
        # the search may run out of proposing
        assert (r.trials == 12 if r.key.family == "gemm" else 0 < r.trials <= 12), r
        assert not r.stale and r.cublas_us > 0 and r.gflops > 0
        assert r.p10_us <= r.median_us <= r.p90_us and r.max_rel_error < 1e-5

    lookup.reload()
    rng = np.random.default_rng(0)
    for (m, n, k) in ((800, 1000, 784), (800, 10, 1000), (790, 1000, 784)):   # the last: nearest shape
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((n, k)).astype(np.float32)
        da, db = cupy.asarray(a), cupy.asarray(b)
        # each family's record for the shape: the call runs the fastest (autogemm.ops.kernels)
        tuned = min((r for r in store.records.values() if r.key.sizes == (800, n, k)), key=lambda r: r.median_us)
        call = plan_gemm(da, db, trans_b=True)
        assert call.instance.config == tuned.config
        out = autogemm.gemm(da, db, trans_b=True)
        value, magnitude, _ = gemm.reference(gemm.Problem(m, n, k, trans_b=True), a, b)["d"]
        assert compare(cupy.asnumpy(out), value, magnitude, k, np.float32).ok

    assert cli.main(["show", "--all", str(folders / "tuned")]) == 0
    assert "800x10x1000" in capsys.readouterr().out


def test_a_gemm_with_an_epilogue_is_tuned_with_it_and_its_fused_call_uses_the_record(folders, capsys):
    """The forward layer's GEMM (bias, then sigmoid) is measured fused, against the float64
    reference with the epilogue, beside cuBLAS and the elementwise pass; its record serves the
    fused call alone: the call without the epilogue gets what the shipped records (or the default) give it."""
    import cupy

    import autogemm
    from autogemm.ops.gemm import plan_gemm
    from autogemm.ops.kernels import implementation
    from autogemm.runtime.device import this_device

    status = cli.main(["tune", "--shapes", "600x1000x784:nt+bias_sigmoid,300x200x100:nn+drelu", "--trials", "6",
                       "--families", "gemm"])
    printed = capsys.readouterr()
    assert status == 0, printed.err
    records = load(file_for(folders / "tuned", this_device())).records
    assert {(r.key.shape, r.key.op) for r in records.values()} == {("600x1000x784", "nt+bias_sigmoid"),
                                                                  ("300x200x100", "nn+drelu")}
    for r in records.values():      # the sigmoid's outputs are O(1): 3xTF32's error in Z shows plain
        assert r.cublas_us > 0 and r.max_rel_error < 1e-3, r
    forward = next(r for r in records.values() if r.key.op == "nt+bias_sigmoid")
    lookup.reload()
    rng = np.random.default_rng(1)
    a, w = rng.standard_normal((600, 784)).astype(np.float32), rng.standard_normal((1000, 784)).astype(np.float32)
    bias = rng.standard_normal(1000).astype(np.float32)
    da, dw, dbias = cupy.asarray(a), cupy.asarray(w), cupy.asarray(bias)
    fused = plan_gemm(da, dw, trans_b=True, epilogue="bias_sigmoid", bias=dbias, kernel_family=forward.key.family)
    assert fused.instance.config == forward.config
    value, magnitude, _ = gemm.reference(gemm.Problem(600, 1000, 784, trans_b=True, epilogue="bias_sigmoid"), a, w,
                                         bias=bias)["d"]
    fused()
    assert compare(cupy.asnumpy(fused.out), value, magnitude, 784, np.float32).ok
    bare = plan_gemm(da, dw, trans_b=True)         # the call picks its family (autogemm.ops.kernels.implementation)
    plain = gemm.Problem.contiguous(600, 1000, 784, trans_b=True)
    served = lookup.choose(implementation("gemm", plain, None, this_device()), plain, this_device())
    assert served.record is None or served.record.key.op == "nt"       # the shipped records', never the fused one
    assert bare.instance.config == served.config
    bench = folders / "bench.json"
    assert cli.main(["bench", "--shapes", "600x1000x784:nt+bias_sigmoid", "--reps", "5", "--json", str(bench)]) == 0
    rows = {r["variant"]: r for r in json.loads(bench.read_text())["results"]}
    assert rows["cublas"]["kernel"] == "cublas + elementwise bias_sigmoid" and rows["cublas"]["median_us"] > 0
    assert any(variant.endswith("tuned") and row["median_us"] > 0 for variant, row in rows.items())
    assert autogemm.gemm_key_op(False, True, "bias_sigmoid") == "nt+bias_sigmoid"


def test_the_other_families_tune_against_numpy(folders, capsys):
    """The output layer (linear_xent; linear_backward, apart past 16 MiB of hidden activations), column
    sums and the SGD step (two ranks) of a network, measured for real."""
    status = cli.main(["tune", "--shapes", "nn", "--hidden", "4096", "--batch", "2048", "--train-size", "2048",
                       "--families", "elementwise,linear_xent,linear_backward,colsum", "--trials", "6",
                       "--ranks", "1,2"])
    assert status == 0, capsys.readouterr().err
    from autogemm.runtime.device import this_device

    records = load(file_for(folders / "tuned", this_device())).records.values()
    assert {r.key.family for r in records} == {"elementwise", "linear_xent", "linear_backward", "colsum"}
    assert all(r.failed == 0 and r.max_rel_error is not None and r.cublas_us is None for r in records)


def test_resume_after_a_finished_run_measures_nothing_new(folders, capsys):
    args = ["tune", "--shapes", "64x64x64:nn", "--trials", "5", "--families", "gemm"]
    assert cli.main(args) == 0
    assert cli.main([*args, "--resume"]) == 0
    assert "from the finished study" in capsys.readouterr().out


def test_the_timer_times_the_kernel_not_a_slow_host():
    """A launcher that takes 300 µs of host time before a few-µs kernel is timed at the kernel's
    time: the head-start spin outlasts the issue."""
    import time

    import cupy

    from autogemm.tuning.timing import time_gpu

    x = cupy.ones(1 << 16, cupy.float32)

    def slow_to_issue():
        deadline = time.perf_counter() + 300e-6
        while time.perf_counter() < deadline:
            pass
        x.__imul__(1.0)

    fast = time_gpu(lambda: x.__imul__(1.0), reps=30, flush_l2=False)
    slow = time_gpu(slow_to_issue, reps=30, flush_l2=False)
    assert slow.median_us < 50 and slow.median_us < 3 * fast.median_us + 5
