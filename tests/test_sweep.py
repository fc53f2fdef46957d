"""autogemm.tuning.sweep and `autogemm sweep`: a restricted space measured whole, the search on the same
space, and both re-timed together; with the GPU replaced by a fake measure."""
import pytest
from test_tune_cli import autogemm, one_line_error

from autogemm.errors import InvalidConfig
from autogemm.runtime.device import H100
from autogemm.runtime.family import family
from autogemm.tuning.search import SearchError, Settings
from autogemm.tuning.sweep import sweep
from fake_tuned import FakeMeasure
from kernels.gemm import PARAMS, Problem

PROBLEM = Problem.contiguous(800, 1000, 784, "float32", False, True)
SPACE = dict(copy=("async",), stages=(3,), vec=(4,), pad=(True,), split_k=(1, 2), bk=(16,), bm=(64, 128),
             bn=(64, 128))
FAST = Settings(trials=12, timeout=None, rounds=2, final_reps=5)


def test_restricted_family_narrows_choices_and_keeps_the_template():
    gemm = family("gemm")
    sub = gemm.restricted(SPACE)
    assert sub.params["bm"] == (64, 128) and sub.params["ty"] == gemm.params["ty"]
    assert sub.template_hash == gemm.template_hash and gemm.params["bm"] == PARAMS["bm"]
    assert all(c.copy == "async" and c.bk == 16 for c in sub.candidates(PROBLEM, H100))
    with pytest.raises(InvalidConfig, match="not in the gemm space"):
        sub.config({**dict(sub.default(PROBLEM, H100)), "bm": 32})


@pytest.mark.parametrize("choices, message", [({"bogus": (1,)}, "no parameter 'bogus'"),
                                              ({"bk": (17,)}, "bk=17 is not in the gemm space"),
                                              ({"copy": ("tma",)}, "copy='tma' is not in the gemm space")])
def test_restricting_to_values_outside_the_space_is_refused(choices, message):
    with pytest.raises(InvalidConfig, match=message):
        family("gemm").restricted(choices)


def test_sweep_measures_every_valid_config_and_compares_the_search():
    fam = family("gemm").restricted(SPACE)
    valid = [c for c in fam.all_configs() if not fam.violations(c, PROBLEM, H100)]
    measure = FakeMeasure(fails=lambda cfg: cfg.tm == 8)
    report = sweep(fam, PROBLEM, H100, measure, FAST)
    assert report.valid == len(valid) > FAST.trials
    assert set(report.timings) | set(report.failures) == set(valid)
    assert report.failures and all(c.tm == 8 for c in report.failures)
    assert min(report.timings.values()) == pytest.approx(report.final[report.best])
    assert report.search.trials == FAST.trials and report.search.config in report.final
    assert report.ratio >= 1.0
    assert all(len(batch) <= 64 for batch in measure.prepared)


def test_sweep_of_a_space_where_nothing_runs_is_an_error():
    fam = family("gemm").restricted(SPACE)
    with pytest.raises(SearchError, match="none of the"):
        sweep(fam, PROBLEM, H100, FakeMeasure(fails=lambda cfg: True), FAST)


@pytest.mark.parametrize("args, message", [
    (["--fix", "bk"], "argument --fix: 'bk': expected NAME=VALUE"),
    (["--fix", "bogus=1"], "gemm has no parameter 'bogus'"),
    (["--fix", "bk=17"], "restricting bk: bk=17 is not in the gemm space"),
    (["--trials", "0"], "argument --trials: 0 must be >= 1"),
])
def test_sweep_argument_errors(args, message):
    one_line_error(autogemm("sweep", "--shapes", "800x1000x784:nt", *args), message)
