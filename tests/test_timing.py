"""autogemm.tuning.timing on the CPU: Timing's arithmetic and the interleaved comparison (fake timer)."""
from autogemm.tuning.timing import Timing, quantile, time_interleaved


def test_timing_spread_and_gflops():
    t = Timing(median_us=10.0, p10_us=9.5, p90_us=10.5, reps=50)
    assert t.spread == 0.1
    assert t.gflops(2 * 1000**3) == 200_000.0


def test_quantile_of_sorted_values():
    values = list(range(10))
    assert quantile(values, 0.1) == 1 and quantile(values, 0.9) == 9 and quantile(values, 1.0) == 9


def test_interleaved_passes_rotate_and_one_disturbed_pass_does_not_count():
    calls = []
    disturbed = {("b", 1)}                           # b's second pass ran while something else did

    def timer(fn, reps):
        name = fn()
        calls.append(name)
        slow = (name, sum(c == name for c in calls) - 1) in disturbed
        base = {"a": 10.0, "b": 8.0}[name] * (7 if slow else 1)
        return Timing(base, base - 1, base + 1, reps)

    result = time_interleaved({"a": lambda: "a", "b": lambda: "b"}, reps=30, rounds=3, timer=timer)
    assert calls == ["a", "b", "b", "a", "a", "b"]   # each pass starts one function later
    assert result["b"].median_us == 8.0 and result["a"].median_us == 10.0
    assert result["a"].reps == 30
