"""autogemm.tuning.search with an injected measure: constraints before compiling, failures, noise, re-timing,
exhaustive small spaces, and studies that resume."""
import random
import time

import optuna
import pytest
from optuna.trial import TrialState

from autogemm.runtime.device import H100
from autogemm.runtime.family import Config, family
from autogemm.store.keys import make_key, problem_of
from autogemm.tuning.measure import COMPILERS
from autogemm.tuning.search import (JournalFileBackend, SearchError, Settings, neighbours, open_study, tune,
                                    valid_neighbours)
from fake_tuned import GEMM, CompilingMeasure, FakeMeasure, gemm_model

GEMM_FAM = family("gemm")
GEMM_KEY = make_key("gemm", (800, 1000, 784), "nt", "float32")
PROBLEM = problem_of(GEMM_KEY)
FAST = Settings(trials=24, timeout=None, top=4, rounds=3, final_reps=7, quick_reps=3)


def search(measure, settings=FAST, **kw):
    return tune(GEMM_FAM, PROBLEM, H100, measure, settings, **kw)


def stored_study(path):
    storage = optuna.storages.JournalStorage(JournalFileBackend(str(path)))
    return optuna.load_study(study_name=f"gemm:{PROBLEM}", storage=storage)


def test_constraints_are_checked_before_anything_is_compiled(tmp_path):
    measure = FakeMeasure()
    result = search(measure, study_path=tmp_path / "s.log")
    compiled = [cfg for batch in measure.prepared for cfg in batch]
    assert len(compiled) == result.trials == FAST.trials
    assert set(measure.measured()) == set(compiled)
    assert all(not GEMM_FAM.violations(cfg, PROBLEM, H100) for cfg in compiled)
    assert all(len(batch) <= 8 for batch in measure.prepared)            # FakeMeasure: 8 in flight
    pruned = [t for t in stored_study(tmp_path / "s.log").trials if t.state == TrialState.PRUNED]
    assert result.rejected == len(pruned) > 0
    messages = dict(GEMM_FAM.constraints)
    for t in pruned:
        cfg = Config(t.params)
        assert t.user_attrs["reason"] in messages and cfg not in compiled
        assert GEMM_FAM.violations(cfg, PROBLEM, H100)[0] == t.user_attrs["reason"]


def test_failures_are_recorded_with_reasons_and_the_search_goes_on(tmp_path):
    fails = lambda cfg: cfg["math"] == "3xtf32"   # noqa: E731  (the default, and other seeds)
    measure = FakeMeasure(fails=fails)
    result = search(measure, settings=Settings(**{**FAST.__dict__, "trials": 40}), study_path=tmp_path / "s.log")
    assert result.failed > 0 and result.trials == 40 and result.config["math"] == "fma"
    study = stored_study(tmp_path / "s.log")
    failed = [t for t in study.trials if t.state == TrialState.FAIL]
    pruned = [t for t in study.trials if t.state == TrialState.PRUNED]
    assert failed and all(t.user_attrs["reason"].startswith("RuntimeError: compile failed for bk=") for t in failed)
    assert pruned and all(t.user_attrs["reason"] in dict(GEMM_FAM.constraints) for t in pruned)
    assert study.user_attrs["result"]["config"] == dict(result.config)


def test_the_winner_is_retimed_so_one_lucky_quick_run_does_not_pick_it():
    """`lucky` measures 1 µs once (during the search), then 30 µs; `steady` is 12 µs every time."""
    lucky = Config(dict(GEMM, split_k=3))
    steady = Config(dict(GEMM, split_k=2))
    seen = []

    def script(cfg, call):
        if cfg == lucky:
            seen.append(call)
            return 1.0 if len(seen) == 1 else 30.0
        return 12.0 if cfg == steady else 50.0

    measure = FakeMeasure(script=script)
    result = search(measure, known=(lucky, steady))
    assert result.config == steady and result.median_us == 12.0
    finalists = {cfg: (quick, final) for cfg, quick, final in result.finalists}
    assert finalists[lucky] == (1.0, 30.0)                 # best of the quick runs, dethroned
    assert finalists[steady] == (12.0, 12.0)
    reps = [r for cfg, r in measure.calls if cfg == steady]
    assert reps == [FAST.quick_reps] + [FAST.final_reps] * FAST.rounds


def test_noise_does_not_pick_a_worse_config():
    """a: 10 µs, b: 11 µs, each measurement +-10%: the quick runs alone pick b now and then; the
    interleaved re-timing (median of 9 rounds) picks a every time."""
    a, b = Config(dict(GEMM, split_k=2)), Config(dict(GEMM, split_k=4))

    def wins(settings, seeds=12):
        count = 0
        for seed in range(seeds):
            rng = random.Random(seed)
            script = lambda cfg, call: {a: 10.0, b: 11.0}.get(cfg, 40.0) * (1 + rng.uniform(-0.1, 0.1))  # noqa: E731
            count += search(FakeMeasure(script=script), settings=settings, known=(b, a)).config == a
        return count

    quick_only = wins(Settings(**{**FAST.__dict__, "trials": 4, "top": 1, "rounds": 1}))
    retimed = wins(Settings(**{**FAST.__dict__, "trials": 4, "top": 4, "rounds": 9}))
    assert quick_only < 12 and retimed == 12


def test_known_configs_go_first():
    known = Config(dict(GEMM, split_k=6))
    measure = FakeMeasure()
    search(measure, known=(known,))
    candidates = GEMM_FAM.candidates(PROBLEM, H100)             # the family's untuned guesses
    seeded = int(FAST.trials * FAST.seeded)
    assert candidates[0] == GEMM_FAM.default(PROBLEM, H100) and len(candidates) > seeded
    measured = measure.measured()
    assert measured[:seeded] == [candidates[0], known, *candidates[1:seeded - 1]]
    # then the random samples: the candidates past the seeded share wait for TPE or the local search
    assert measured[seeded:seeded + FAST.samples] == GEMM_FAM.sample(PROBLEM, H100, FAST.samples, seed=FAST.seed)


def test_a_family_of_thousands_of_candidates_leaves_trials_to_the_local_search():
    """gemm_wgmma lists thousands of untuned candidates; only `start` (a known config, past the first
    hundred of them) and its neighbour `better` are fast: the candidates leave trials to the local
    search, which finds `better` around `start`."""
    from kernels import gemm

    wgmma = family("gemm_wgmma")
    problem = gemm.Problem.contiguous(4096, 784, 8192, "float32", False, False, precision="tf32")
    start = wgmma.config(dict(bm=64, bn=224, warpgroups=1, stages=2, math="tf32", inflight=0, split_k=1, producer=0,
                              tma=0, pretranspose=1, cluster_m=1, cluster_n=1, persistent=0, reg_a=0, swap=0))
    better = Config(dict(start, producer=1, tma=1))          # a step repaired by a second (tma needs a producer)
    candidates = wgmma.candidates(problem, H100)
    assert len(candidates) > 1000 and candidates.index(start) > 100
    assert better in valid_neighbours(wgmma, start, problem, H100)
    script = lambda cfg, call: {start: 20.0, better: 10.0}.get(cfg, 50.0)  # noqa: E731
    settings = Settings(**{**FAST.__dict__, "trials": 40, "local": 0.6})
    measure = FakeMeasure(script=script)
    result = tune(wgmma, problem, H100, measure, settings, known=(start,))
    assert result.config == better


def test_every_failure_is_a_search_error():
    with pytest.raises(SearchError, match="none of .* config.* ran; last: RuntimeError: compile failed"):
        search(FakeMeasure(fails=lambda cfg: True),
               settings=Settings(**{**FAST.__dict__, "max_failures_in_a_row": 10}))


def test_small_spaces_are_measured_exhaustively():
    fam = family("softmax_xent")
    problem = problem_of(make_key("softmax_xent", (800, 10), "-", "float32"))
    model = lambda cfg: 5 + abs(cfg["block"] - 128) / 64 + abs(cfg["tpr"] - 4)    # noqa: E731
    measure = FakeMeasure(model=model)
    result = tune(fam, problem, H100, measure, Settings(trials=100, timeout=None, top=3, rounds=2))
    valid = [c for c in fam.all_configs() if not fam.violations(c, problem, H100)]
    searched = measure.measured()[:result.trials]
    assert result.trials == len(valid) == len(set(searched)) and set(searched) == set(valid)
    assert dict(result.config) == dict(block=128, tpr=4)


def test_a_search_whose_proposals_stop_gaining_ends_early_after_searching_around_the_best():
    """Every config but the default (the first seeded) takes 20 µs or more: `patience` proposals past
    the seeded ones without a gain start the local search, as many more end the search."""
    default = GEMM_FAM.default(PROBLEM, H100)
    measure = FakeMeasure(script=lambda cfg, call: 10.0 if cfg == default else None, model=lambda cfg: 20 + gemm_model(cfg))
    settings = Settings(**{**FAST.__dict__, "trials": 200, "patience": 5})
    result = search(measure, settings)
    seeded = len(GEMM_FAM.candidates(PROBLEM, H100)) + settings.samples     # fewer than the seeded share
    assert result.config == default and seeded + 2 * 5 <= result.trials < seeded + 2 * 5 + 8
    around = set(valid_neighbours(GEMM_FAM, default, PROBLEM, H100))
    assert around & set(measure.measured()[seeded:])            # the local search ran before the end
    unbounded = search(FakeMeasure(), Settings(**{**FAST.__dict__, "trials": 60, "patience": None}))
    assert unbounded.trials == 60


def test_configs_are_measured_as_they_are_built_and_the_compilers_never_wait_for_a_batch():
    """The default's compile takes 0.6 s, every other 20 ms: the GPU measures those built meanwhile
    and the freed slots are filled at once, so more configs than one window are measured before it;
    no more compiles run at once than the measure's parallelism."""
    default = GEMM_FAM.default(PROBLEM, H100)
    measure = CompilingMeasure(GEMM_KEY, compile_s=lambda cfg: 0.6 if cfg == default else 0.02, parallelism=2)
    started = time.monotonic()
    result = search(measure, Settings(**{**FAST.__dict__, "trials": 24}))
    measured = [cfg for event, cfg in measure.events if event == "measured"][:result.trials]   # then re-timed
    assert len(set(measured)) == result.trials == 24 and measured[0] != default
    assert measured.index(default) > measure.parallelism       # slots refilled while it compiled
    assert measure.most_at_once <= measure.parallelism
    assert result.waiting_s < 0.6 + 23 * 0.02 + 0.5 and time.monotonic() - started < 10


def test_a_failed_compile_is_a_failed_trial_with_its_reason():
    measure = CompilingMeasure(GEMM_KEY, compile_s=lambda cfg: 0.01, broken=lambda cfg: cfg["bk"] == 32)
    result = search(measure, Settings(**{**FAST.__dict__, "trials": 24}))
    assert result.failed > 0 and result.config["bk"] != 32
    measured = {cfg for event, cfg in measure.events if event == "measured"}
    assert result.trials == 24 and not any(cfg["bk"] == 32 for cfg in measured)


def test_ctrl_c_while_configs_compile_drops_the_compiles_not_started(tmp_path):
    """The window holds 8 configs, refilled after each measurement: a Ctrl-C in the third leaves the
    8 in flight failed as "interrupted" (a resumed run measures them) and cancels the compiles that
    the pool has not started."""
    class Interrupted(CompilingMeasure):
        def __call__(self, cfg, reps):
            if sum(e == "measured" for e, _ in self.events) == 2:
                raise KeyboardInterrupt
            return super().__call__(cfg, reps)

    measure = Interrupted(GEMM_KEY, compile_s=lambda cfg: 0.2, parallelism=8)
    with pytest.raises(KeyboardInterrupt):
        search(measure, Settings(**{**FAST.__dict__, "trials": 24, "in_flight": 8}), study_path=tmp_path / "s.log")
    built = sum(e == "built" for e, _ in measure.events)
    time.sleep(0.5)                                             # what was compiling ends, nothing more
    assert measure.running == 0 and built >= 3
    assert sum(e == "built" for e, _ in measure.events) <= min(built + COMPILERS, 8 + 3)
    study = stored_study(tmp_path / "s.log")
    assert TrialState.RUNNING not in [t.state for t in study.trials]
    assert sum(t.user_attrs.get("reason") == "interrupted" for t in study.trials) == 8


def test_timeout_stops_the_search():
    slow = lambda cfg: time.sleep(0.02) or gemm_model(cfg)     # noqa: E731
    result = search(FakeMeasure(model=slow), settings=Settings(**{**FAST.__dict__, "trials": 500, "timeout": 0.2}))
    assert result.trials < 100


def test_resume_continues_the_study_without_measuring_a_config_twice(tmp_path):
    path = tmp_path / "study.log"
    first = FakeMeasure()
    one = search(first, settings=Settings(**{**FAST.__dict__, "trials": 12}), study_path=path)
    searched_before = set(first.measured())
    assert one.trials == 12

    second = FakeMeasure()
    two = search(second, settings=Settings(**{**FAST.__dict__, "trials": 30}), study_path=path, resume=True)
    assert two.trials == 30 and not two.reused
    searched_now = second.measured()[:30 - 12]             # the search phase, before re-timing
    assert len(set(searched_now)) == 18 and not set(searched_now) & searched_before

    third = FakeMeasure()
    three = search(third, settings=Settings(**{**FAST.__dict__, "trials": 30}), study_path=path, resume=True)
    assert three.reused and third.calls == [] and three.config == two.config and three.trials == 30


def test_a_resumed_study_drops_the_queue_an_earlier_run_left(tmp_path):
    """A journal from before the candidates took a capped share of the trials queued every one of
    them; resumed, that queue is dropped, and the candidates take their share before the random
    samples, as in a fresh study."""
    path = tmp_path / "study.log"
    candidates = GEMM_FAM.candidates(PROBLEM, H100)
    seeded = int(FAST.trials * FAST.seeded)
    assert len(candidates) > seeded + FAST.samples
    old = open_study(path, f"gemm:{PROBLEM}", FAST.seed, resume=False, space={})
    for cfg in candidates:
        old.enqueue_trial(dict(cfg))
    measure = FakeMeasure()
    search(measure, study_path=path, resume=True)
    measured = measure.measured()
    assert measured[:seeded] == candidates[:seeded]
    assert measured[seeded:seeded + FAST.samples] == GEMM_FAM.sample(PROBLEM, H100, FAST.samples, seed=FAST.seed)


def test_without_resume_an_old_study_is_started_afresh(tmp_path):
    path = tmp_path / "study.log"
    search(FakeMeasure(), settings=Settings(**{**FAST.__dict__, "trials": 8}), study_path=path)
    again = FakeMeasure()
    result = search(again, settings=Settings(**{**FAST.__dict__, "trials": 8}), study_path=path)
    assert not result.reused and len(again.calls) >= 8


def test_ctrl_c_marks_the_trial_in_flight_and_resume_finishes_the_work(tmp_path):
    path = tmp_path / "study.log"

    def script(cfg, call):
        if call == 6:
            raise KeyboardInterrupt
        return None

    with pytest.raises(KeyboardInterrupt):
        search(FakeMeasure(script=script), settings=Settings(**{**FAST.__dict__, "trials": 30}), study_path=path)
    study = stored_study(path)
    states = [t.state for t in study.trials]
    assert TrialState.RUNNING not in states
    interrupted = [t for t in study.trials if t.user_attrs.get("reason") == "interrupted"]
    assert len(interrupted) >= 1
    assert "result" not in study.user_attrs
    done_before = {Config(t.params) for t in study.trials if t.state == TrialState.COMPLETE}

    resumed = FakeMeasure()
    result = search(resumed, settings=Settings(**{**FAST.__dict__, "trials": 30}), study_path=path, resume=True)
    assert result.trials == 30 and result.failed == 0          # "interrupted" is not a failure
    searched = resumed.measured()[:30 - len(done_before)]
    assert len(done_before) == 5 and not set(searched) & done_before
    assert Config(interrupted[0].params) in searched            # measured again, this time fully


@pytest.mark.usefixtures("default_handlers")
def test_a_stop_while_a_result_is_told_leaves_it_told_and_raises_the_stop(tmp_path, monkeypatch):
    """Ctrl-C while the 5th result's journal entry is written: the entry is finished first
    (signals.deferred), and the Stop then finds that trial told, not one to fail as interrupted
    (which raised Optuna's UpdateFinishedTrialError in place of the Stop)."""
    import os
    import signal

    from optuna.storages.journal._storage import JournalOperation

    from autogemm import signals

    from autogemm.tuning.search import _WholeJournal

    told, append = [], _WholeJournal._append

    def append_logs(self, logs):               # the write itself, inside signals.deferred()
        if any(log.get("op_code") == JournalOperation.SET_TRIAL_STATE_VALUES and log.get("state") == 1 for log in logs):
            told.append(1)
            if len(told) == 5:
                os.kill(os.getpid(), signal.SIGINT)
        return append(self, logs)

    monkeypatch.setattr(_WholeJournal, "_append", append_logs)
    with pytest.raises(signals.Stop), signals.stoppable():
        search(FakeMeasure(), Settings(**{**FAST.__dict__, "trials": 30}), study_path=tmp_path / "s.log")
    states = [t.state for t in stored_study(tmp_path / "s.log").trials]
    assert states.count(TrialState.COMPLETE) == 5 and TrialState.RUNNING not in states


def test_neighbours_move_one_parameter_one_step():
    cfg = Config(GEMM)
    around = neighbours(GEMM_FAM, cfg)
    assert Config(dict(GEMM, bm=48)) in around and Config(dict(GEMM, bm=80)) in around
    assert Config(dict(GEMM, pad=False)) in around and Config(dict(GEMM, split_k=2)) in around
    assert all(sum(c[k] != cfg[k] for k in cfg) == 1 for c in around)
    assert len(around) == sum(2 if 0 < v.index(cfg[k]) < len(v) - 1 else 1 for k, v in GEMM_FAM.params.items())


def test_a_step_that_breaks_a_constraint_is_repaired_by_a_second():
    """gemm_wgmma's tma needs a producer: from a one-loop config, the TMA producer with the same tiles
    is two steps away, and among the valid neighbours; every single valid step is too."""
    from kernels import gemm

    wgmma = family("gemm_wgmma")
    problem = gemm.Problem.contiguous(4096, 784, 8192, "float32", True, False, precision="tf32")
    cfg = wgmma.config(dict(bm=128, bn=128, warpgroups=2, stages=3, math="tf32", inflight=0, split_k=1, producer=0,
                            tma=0, pretranspose=0, cluster_m=1, cluster_n=1, persistent=0, reg_a=0, swap=0))
    around = valid_neighbours(wgmma, cfg, problem, H100)
    assert Config(dict(cfg, producer=1, tma=1)) in around
    assert not any(wgmma.violations(c, problem, H100) for c in around)
    assert {c for c in neighbours(wgmma, cfg) if not wgmma.violations(c, problem, H100)} <= set(around)
    assert Config(dict(cfg, tma=1)) not in around                      # the refused step itself


def test_the_last_trials_search_around_the_best():
    """Only `start` and its neighbour `better` (split_k one step up) are fast: TPE alone rarely
    lands on `better`; the local phase tries the neighbours of the best so far."""
    start = Config(dict(GEMM, split_k=2))
    better = Config(dict(GEMM, split_k=3))
    script = lambda cfg, call: {start: 20.0, better: 10.0}.get(cfg, 50.0)  # noqa: E731
    result = search(FakeMeasure(script=script), settings=Settings(**{**FAST.__dict__, "trials": 40, "local": 0.6}), known=(start,))
    assert result.config == better


def test_the_sampler_searches_the_space_it_is_given_without_inferring_it():
    """TPE's multivariate space is the family's (parameters with one choice left out), not the
    intersection of every trial's, which Optuna recomputed over all trials at each ask."""
    from optuna.distributions import CategoricalDistribution

    space = {name: CategoricalDistribution(choices) for name, choices in GEMM_FAM.params.items()}
    study = open_study(None, "space", 0, resume=False, space=space)
    inferred = study.sampler.infer_relative_search_space(study, None)
    assert inferred == {name: d for name, d in space.items() if len(d.choices) > 1} and len(inferred) > 1
