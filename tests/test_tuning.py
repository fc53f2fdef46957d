"""autogemm.tuning.tune and the tuning targets of autogemm.tuning.targets: shapes of the MLP step, one study per
shape, each result stored as soon as it is found, Ctrl-C and --resume."""
import pytest

from autogemm.errors import AutogemmError
from autogemm.runtime.device import H100
from autogemm.store.records import file_for, load
from autogemm.tuning.search import Settings
from autogemm.tuning.targets import Target, batch_rows, mlp_targets, parse_targets
from autogemm.tuning.tune import study_path, tune_targets
from fake_tuned import GEMM, FakeMeasure, meta, record, write_store

FAST = Settings(trials=10, timeout=None, top=3, rounds=2, final_reps=5, quick_reps=3)


# ---- targets -------------------------------------------------------------------------------------
def test_batch_rows_full_partial_and_per_rank():
    assert batch_rows(800, 54_000) == [800, 400]
    assert batch_rows(800, 54_000, (1, 4)) == [800, 400, 200, 100]
    assert batch_rows(800, 54_000, (3,)) == [267, 266, 134, 133]       # np.array_split sizes
    assert batch_rows(800, 1600) == [800]                                # no partial batch
    assert batch_rows(800, 500) == [500]                                 # one short batch
    assert batch_rows(4, 10, (8,)) == [1]                                # zero shares left out


def test_mlp_targets_of_the_default_network():
    targets = mlp_targets()
    gemms = [(t.sizes, t.op) for t in targets if t.family == "gemm"]
    assert gemms == [(s, op) for b in (800, 400) for s, op in (
        ((b, 1000, 784), "nt"),     # Z1 = A0 W1^T
        ((b, 10, 1000), "nt"),      # Z2 = A1 W2^T
        ((10, 1000, b), "tn"),      # dW2 = G2^T A1
        ((1000, 784, b), "tn"))]    # dW1 = G1^T A0 (and the fused W1 update)
    others = {(t.family, t.sizes, t.op) for t in targets if t.family != "gemm"}
    assert others == {("linear_xent", (800, 10, 1000), "sigmoid"), ("linear_xent", (400, 10, 1000), "sigmoid"),
                      ("colsum", (800, 1000), "-"), ("colsum", (800, 10), "-"),
                      ("colsum", (400, 1000), "-"), ("colsum", (400, 10), "-"),
                      ("elementwise", (1, 1000), "sgd"), ("elementwise", (1, 10), "sgd")}
    assert targets[0].role == "Z1 = A0 W1^T" and str(targets[0]) == "gemm 800x1000x784:nt"


def test_more_ranks_add_their_shares_and_the_weight_updates():
    targets = mlp_targets(ranks=(1, 4))
    assert Target("gemm", (200, 1000, 784), "nt") in [Target(t.family, t.sizes, t.op) for t in targets]
    updates = [t.sizes for t in targets if t.family == "elementwise"]
    assert (1000, 784) in updates and (10, 1000) in updates
    assert len({(t.family, t.sizes, t.op) for t in targets}) == len(targets)


def test_parse_targets_lists_and_families():
    assert [str(t) for t in parse_targets("800x10x1000:tn, 1x2x3")] == ["gemm 800x10x1000:tn", "gemm 1x2x3:nn"]
    only = parse_targets("nn", families=("linear_xent",), hidden=(100,))
    assert [str(t) for t in only] == ["linear_xent 800x10x100:sigmoid", "linear_xent 400x10x100:sigmoid"]
    relu = parse_targets("nn", families=("linear_xent",), activation="relu")
    assert [t.op for t in relu] == ["relu", "relu"]
    no_hidden = mlp_targets(hidden=())
    assert [str(t) for t in no_hidden if t.family == "linear_xent"] == ["linear_xent 800x10x784", "linear_xent 400x10x784"]
    assert len(parse_targets("nn,800x1000x784:nt")) == len(mlp_targets())      # no repeats
    with pytest.raises(AutogemmError, match="nothing to tune"):
        parse_targets("800x10x1000", families=("colsum",))
    with pytest.raises(AutogemmError, match="is not MxNxK"):
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
