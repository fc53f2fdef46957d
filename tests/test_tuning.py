"""autogemm.tuning.tune and the tuning targets of autogemm.tuning.targets: shapes of the MLP step, one study per
shape, each result stored as soon as it is found, Ctrl-C and --resume."""
import pytest

from autogemm.errors import AutogemmError
from autogemm.runtime.device import H100
from autogemm.store.records import file_for, load
from autogemm.tuning.search import Settings
from autogemm.store.keys import Target
from autogemm.tuning.targets import networks, parse_targets
from autogemm.tuning.tune import study_path, tune_targets
from fake_tuned import GEMM, CompilingMeasure, FakeMeasure, meta, record, write_store

FAST = Settings(trials=10, timeout=None, top=3, rounds=2, final_reps=5, quick_reps=3)


# ---- targets: a network's launches come from its entry point (nn.targets, tested in test_nn_targets) --
def test_nn_is_the_entry_point_of_the_mlp_step():
    from nn.targets import step_targets

    assert "nn" in networks()
    assert parse_targets("nn", ranks=(1, 4), hidden=(100,)) == step_targets(ranks=(1, 4), hidden=(100,))


def test_a_network_that_is_missing_or_broken_is_one_line(monkeypatch):
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [])
    with pytest.raises(AutogemmError, match=r"or a network \(none is installed: `pip install -e \.`"):
        parse_targets("nn")
    broken = importlib.metadata.EntryPoint("nn", "nn.no_such_module:step_targets", "autogemm.targets")
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [broken])
    with pytest.raises(AutogemmError, match=r"^--shapes nn: cannot load its entry point nn.no_such_module:step_targets: "
                                            r"ModuleNotFoundError"):
        parse_targets("nn")


def test_a_float32_tune_takes_every_precisions_launches_but_the_gemms():
    """The large network's step stores G1 transposed at tf32 alone: a plain (float32, fp32) tune's
    targets, every_precision, hold both linear_backward variants but only the fp32 step's GEMMs;
    each precision's own targets hold its step's launches."""
    large = dict(batch=8192, hidden=(4096,), train_size=None)
    fp32, tf32, bf16 = ({(t.family, t.sizes, t.op) for t in parse_targets("nn", **large, precision=p)}
                        for p in ("fp32", "tf32", "bf16"))
    every = {(t.family, t.sizes, t.op) for t in parse_targets("nn", **large, every_precision=True)}
    transposed, row_major = ("linear_backward", (8192, 10, 4096), "sigmoid_t"), ("linear_backward", (8192, 10, 4096), "sigmoid")
    assert row_major in fp32 and row_major in bf16 and transposed in tf32 and transposed not in fp32 | bf16
    assert every == fp32 | {transposed} and ("gemm_wgmma", (4096, 784, 8192), "nt") in tf32 - every


def test_an_entry_point_without_precision_is_called_without_it(monkeypatch):
    """A network's entry point that takes no `precision` (a plugin older than it) still serves
    --precision tf32: its step's launches, the same at every precision; one that refuses a
    precision is skipped there by a float32 tune's every_precision, and a one-line error when asked."""
    import importlib.metadata

    import autogemm.tuning.targets as targets

    def old_plugin(hidden, train_size, ranks, activation, batch=800):
        return [Target("colsum", (batch, hidden[0]), "-")]

    def picky_plugin(hidden, train_size, ranks, activation, precision="fp32"):
        if precision == "bf16":
            raise ValueError("this network does not train in bf16")
        return [Target("colsum", (800 if precision == "fp32" else 400, hidden[0]), "-")]

    entry = importlib.metadata.EntryPoint("mine", "mine:plugin", "autogemm.targets")
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [entry])
    monkeypatch.setattr(importlib.metadata.EntryPoint, "load", lambda self: old_plugin)
    assert [str(t) for t in targets.parse_targets("mine", precision="tf32", every_precision=True)] == ["colsum 800x1000"]
    monkeypatch.setattr(importlib.metadata.EntryPoint, "load", lambda self: picky_plugin)   # refuses bf16 alone
    assert [str(t) for t in targets.parse_targets("mine", every_precision=True)] == ["colsum 800x1000", "colsum 400x1000"]
    with pytest.raises(AutogemmError, match="^--shapes mine: this network does not train in bf16$"):
        targets.parse_targets("mine", precision="bf16")
    assert not targets._takes(lambda precision, /: 0, "precision") and targets._takes(lambda **kw: 0, "precision")


def test_parse_targets_lists_and_families():
    assert [str(t) for t in parse_targets("800x10x1000:tn, 1x2x3", families=("gemm",))] == [
        "gemm 800x10x1000:tn", "gemm 1x2x3:nn"]
    assert [str(t) for t in parse_targets("800x1000x784:nt")] == [                    # each implementation
        "gemm 800x1000x784:nt", "gemm_wgmma 800x1000x784:nt"]
    only = parse_targets("nn", families=("linear_xent",), hidden=(100,))
    assert [str(t) for t in only] == ["linear_xent 800x10x100:sigmoid", "linear_xent 400x10x100:sigmoid"]
    relu = parse_targets("nn", families=("linear_xent",), activation="relu")
    assert [t.op for t in relu] == ["relu", "relu"]
    assert len(parse_targets("nn,800x1000x784:nt+bias_sigmoid")) == len(parse_targets("nn"))      # no repeats
    with pytest.raises(AutogemmError, match="nothing to tune"):
        parse_targets("800x10x1000", families=("colsum",))
    with pytest.raises(AutogemmError, match=r"is not MxNxK\[:op\] \(e.g. 800x1000x784:nt or 800x1000x784:nt\+bias_sigmoid\) or a network \(lenet, nn\)"):
        parse_targets("nn,12x12")


# ---- tune_targets --------------------------------------------------------------------------------
def run(targets, out, cache, measures=None, **kw):
    measures = measures if measures is not None else {}

    def measure_for(key, device, seed):
        return measures.setdefault(key, FakeMeasure())

    return list(tune_targets(targets, "float32", H100, out, kw.pop("settings", FAST), meta=meta(),
                             command="autogemm tune --test", measure_for=measure_for, studies=cache, **kw))


TWO = [Target("gemm", (800, 1000, 784), "nt", "Z1"), Target("softmax_xent", (800, 10), "-", "G2")]


def test_each_result_is_stored_with_how_it_was_measured(tmp_path):
    outcomes = run(TWO, tmp_path / "tuned", tmp_path / "cache")
    assert [o.stored for o in outcomes] == ["added", "added"]
    records = load(file_for(tmp_path / "tuned", H100)).records
    r = records[outcomes[0].key]
    assert r.config == outcomes[0].result.config and r.trials == 10 and r.command == "autogemm tune --test"
    assert r.gflops == pytest.approx(2 * 800 * 1000 * 784 / (r.median_us * 1e3), rel=1e-3)
    assert r.cublas_us is None and not r.stale             # the fake measure has no baseline
    assert study_path(H100, outcomes[1].key, tmp_path / "cache").exists()
    assert study_path(H100, outcomes[1].key, tmp_path / "cache").name == "softmax_xent-800x10-all-float32.log"


def test_a_slower_result_leaves_the_stored_record(tmp_path):
    path = write_store(tmp_path, [record(median_us=1.0, config=GEMM)])
    outcomes = run(TWO[:1], tmp_path, tmp_path / "cache")
    assert outcomes[0].stored == "kept" and load(path).records[outcomes[0].key].median_us == 1.0


def test_the_stored_record_and_nearby_winners_are_tried_first(tmp_path):
    best = dict(GEMM, split_k=6)
    near = dict(GEMM, split_k=3)
    write_store(tmp_path, [record(config=best), record((400, 1000, 784), config=near)])
    measures = {}
    outcome, = run(TWO[:1], tmp_path, tmp_path / "cache", measures)
    first = measures[outcome.key].measured()[:3]
    assert [dict(c) for c in first[1:]] == [best, near]       # after the family default


def test_ctrl_c_keeps_finished_shapes_and_resume_goes_on(tmp_path):
    out, cache = tmp_path / "tuned", tmp_path / "cache"
    targets = TWO + [Target("gemm", (800, 10, 1000), "nt", "Z2")]
    measures = {}

    def interrupting(key, device, seed):
        if key.shape == "800x10":
            return FakeMeasure(script=lambda cfg, call: (_ for _ in ()).throw(KeyboardInterrupt) if call == 4 else None)
        return measures.setdefault(key, FakeMeasure())

    done = []
    with pytest.raises(KeyboardInterrupt):
        for o in tune_targets(targets, "float32", H100, out, FAST, meta=meta(), command="c",
                              measure_for=interrupting, studies=cache):
            done.append(o)
    assert len(done) == 1 and list(load(file_for(out, H100)).records) == [done[0].key]

    measures.clear()
    outcomes = run(targets, out, cache, measures, resume=True)
    assert outcomes[0].result.reused and measures[outcomes[0].key].calls == []
    assert not outcomes[1].result.reused and outcomes[2].stored == "added"
    assert len(load(file_for(out, H100)).records) == 3


def test_a_shape_whose_every_config_fails_is_reported_and_the_rest_go_on(tmp_path):
    def measure_for(key, device, seed):
        return FakeMeasure(fails=lambda cfg: key.family == "gemm")

    outcomes = list(tune_targets(TWO, "float32", H100, tmp_path, Settings(**{**FAST.__dict__, "max_failures_in_a_row": 5}),
                                 meta=meta(), command="c", measure_for=measure_for, studies=tmp_path / "c"))
    assert outcomes[0].result is None and "none of" in outcomes[0].error
    assert outcomes[1].stored == "added"


def test_the_gemm_families_of_one_problem_share_its_operands_reference_and_cublas_time(tmp_path):
    """gemm and gemm_wgmma of one shape: one measure (operands, float64 reference) rebound to the
    second family, cuBLAS timed once; the next shape gets its own."""
    from autogemm.tuning.timing import Timing

    made, cublas_runs = [], []

    class Measure(CompilingMeasure):
        def baseline(self, reps):
            cublas_runs.append(self.key)
            return Timing(40.0, 39.0, 41.0, reps)

    def measure_for(key, device, seed):
        made.append(key)
        return Measure(key, compile_s=lambda cfg: 0.0)

    targets = [Target("gemm", (800, 1000, 784), "nt"), Target("gemm_wgmma", (800, 1000, 784), "nt"),
               Target("gemm_wgmma", (400, 1000, 784), "nt")]
    outcomes = list(tune_targets(targets, "float32", H100, tmp_path, FAST, meta=meta(), command="c",
                                 measure_for=measure_for, studies=tmp_path / "c"))
    assert [o.stored for o in outcomes] == ["added"] * 3
    assert [k.family for k in made] == ["gemm", "gemm_wgmma"] and made[1].shape == "400x1000x784"
    assert cublas_runs == [made[0]] * FAST.rounds + [made[1]] * FAST.rounds
    assert outcomes[0].cublas_us == outcomes[1].cublas_us == 40.0


def test_a_gemm_with_an_epilogue_starts_from_the_configs_that_serve_it_now():
    """The first search of a layer's fused GEMM tries the config that its layout's record of its
    arithmetic (stale too) gives it today, before other shapes' winners."""
    from autogemm.runtime.family import family
    from autogemm.store.keys import make_key
    from autogemm.tuning.tune import _known

    fam = family("gemm")
    layout = record(config=dict(GEMM, split_k=2), template_hash="0" * 16)          # stale: older template
    other_shape = record((400, 1000, 784), op="nt+bias_sigmoid", config=dict(GEMM, split_k=3))
    existing = {r.key: r for r in (layout, other_shape)}
    assert layout.stale
    key = make_key("gemm", (800, 1000, 784), "nt+bias_sigmoid", "float32")
    assert [c["split_k"] for c in _known(existing, key, H100, fam)][:1] == [2]
    assert [dict(c) for c in _known(existing, key, H100, fam)][1:] == [dict(other_shape.config)]


def test_fp32_calls_are_not_tuned_or_run_on_a_family_that_is_not_fp32_accurate(monkeypatch):
    """A family whose module says FP32_ACCURATE = False serves no fp32 call of float32 data: `tune`
    leaves its fp32 targets to the others and an untold call never picks it; at tf32 it serves as
    before. gemm_wgmma's 3xTF32, summed a stage at a time, keeps the bound: both serve fp32."""
    from autogemm.ops.kernels import implementation
    from autogemm.runtime.device import H100
    from autogemm.runtime.family import family
    from autogemm.store import lookup
    from autogemm.store.keys import Target
    from autogemm.tuning.tune import runnable_targets
    from kernels.gemm.call import Problem

    targets = [Target(name, (800, 1000, 784), "nt") for name in ("gemm", "gemm_wgmma")]
    fp32, tf32 = (Problem.contiguous(800, 1000, 784, "float32", False, True, precision=p) for p in ("fp32", "tf32"))
    assert [t.family for t in runnable_targets(targets, "float32", H100)[0]] == ["gemm", "gemm_wgmma"]
    assert family("gemm").serves(fp32) and family("gemm_wgmma").serves(fp32)
    monkeypatch.setattr(family("gemm_wgmma").module, "FP32_ACCURATE", False)
    assert [t.family for t in runnable_targets(targets, "float32", H100)[0]] == ["gemm"]
    assert [t.family for t in runnable_targets(targets, "tf32", H100)[0]] == ["gemm", "gemm_wgmma"]
    assert not family("gemm_wgmma").serves(fp32) and family("gemm_wgmma").serves(tf32)
    unseen = Problem.contiguous(3000, 2000, 1008, "float32", False, True)
    try:
        assert implementation("gemm", unseen, None, H100) == "gemm"
    finally:
        lookup.reload()              # forget the choice made under the patch
