"""One timer for everything: CUDA events around each run, warm-up, L2 flushed, median and spread.

The same helper times autogemm's kernels and cuBLAS, in the same process, so ratios are fair.
"""
import statistics
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    median_us: float
    p10_us: float
    p90_us: float
    reps: int

    @property
    def spread(self) -> float:
        """(p90 - p10) / median: 0.05 means the middle 80% of runs lie within 5%."""
        return (self.p90_us - self.p10_us) / self.median_us if self.median_us else 0.0

    def gflops(self, flops: int) -> float:
        return flops / (self.median_us * 1e3) if self.median_us else 0.0


def quantile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


_flush_buffers: dict[int, object] = {}
_head_starts: dict[int, object] = {}

# One thread spinning on the SM clock: queued before each timed run, it keeps the GPU busy while
# the host issues the run, so the events time the kernel, not Python's launch overhead (10-20 µs
# for a GEMM plan, 50-100 µs for a convolution entry point or a PyTorch operator, more than a
# small kernel takes).
_SPIN = r"""
extern "C" __global__ void autogemm_head_start(long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) { }
}
"""
HEAD_START_US = (50, 5000)   # the spin's bounds: at least 50 µs, else twice the issue time, capped


def _flush_buffer():
    import cupy

    dev = cupy.cuda.Device().id
    if dev not in _flush_buffers:
        l2 = cupy.cuda.runtime.getDeviceProperties(dev)["l2CacheSize"]
        _flush_buffers[dev] = cupy.empty(2 * l2 // 4, dtype=cupy.int32)
    return _flush_buffers[dev]


def _head_start(issue_us: float):
    """A launcher of the spin kernel on the current device, long enough to cover `issue_us` of
    host time twice over (within HEAD_START_US)."""
    import cupy
    import numpy as np

    dev = cupy.cuda.Device().id
    if dev not in _head_starts:
        kernel = cupy.RawKernel(_SPIN, "autogemm_head_start")
        khz = cupy.cuda.runtime.getDeviceProperties(dev)["clockRate"]
        _head_starts[dev] = kernel, khz
    kernel, khz = _head_starts[dev]
    cycles = np.int64(min(max(2 * issue_us, HEAD_START_US[0]), HEAD_START_US[1]) * khz // 1000)
    return lambda: kernel((1,), (1,), (cycles,))


def time_gpu(fn: Callable[[], object], *, reps: int = 50, warmup: int = 5,
             flush_l2: bool = True) -> Timing:
    """Median time of `fn()` on the current stream, each run between its own pair of events.

    With `flush_l2`, a write of twice the L2 size runs (untimed) before each run, so every run
    reads its inputs from device memory, as the first use in a real program would. Either way a
    short spin kernel runs (untimed) just before each run, so the GPU is still busy when the
    host has issued it: the time is the kernel's, not the host's launch overhead. The spin lasts
    twice the quickest warm-up call's issue time (at least 50 µs).
    """
    import time

    import cupy

    issue_us = 0.0
    for i in range(warmup):
        start = time.perf_counter()
        fn()
        took = (time.perf_counter() - start) * 1e6
        issue_us = took if i == 0 else min(issue_us, took)
    flush = _flush_buffer() if flush_l2 else None
    head_start = _head_start(issue_us)
    stream = cupy.cuda.get_current_stream()
    events = [(cupy.cuda.Event(), cupy.cuda.Event()) for _ in range(reps)]
    for start, end in events:
        if flush is not None:
            flush.fill(0)
        head_start()
        start.record(stream)
        fn()
        end.record(stream)
    events[-1][1].synchronize()
    times = sorted(cupy.cuda.get_elapsed_time(s, e) * 1e3 for s, e in events)
    return Timing(statistics.median(times), quantile(times, 0.1), quantile(times, 0.9), reps)


def interleaved(items: list, run: Callable, rounds: int, on_failure: Callable | None = None) -> dict:
    """{item: [run(item) of each pass]} over `rounds` round-robin passes, each starting one item
    later: a disturbance during one item's turn (another process, clock changes) moves one pass of
    it, not the comparison. With `on_failure`, an item whose run raises is dropped after
    on_failure(item, exception); without, the exception propagates."""
    results: dict = {item: [] for item in items}
    for r in range(rounds):
        alive = [item for item in items if item in results]
        for i in range(len(alive)):
            item = alive[(i + r) % len(alive)]
            try:
                results[item].append(run(item))
            except Exception as exc:  # noqa: BLE001 - the caller says whether a failure is fatal
                if on_failure is None:
                    raise
                on_failure(item, exc)
                del results[item]
    return results


def median_of(timings: list[Timing]) -> Timing:
    """The passes of one item as one Timing: the median of their medians and quantiles."""
    return Timing(statistics.median(t.median_us for t in timings), statistics.median(t.p10_us for t in timings),
                  statistics.median(t.p90_us for t in timings), sum(t.reps for t in timings))


def time_interleaved(fns: dict, *, reps: int = 50, rounds: int = 3, timer=None, **options) -> dict:
    """{name: Timing} of several functions timed interleaved (see `interleaved`), reps // rounds
    runs a pass. `timer` defaults to time_gpu; `options` go to it."""
    timer = timer or time_gpu
    per_pass = max(1, reps // rounds)
    passes = interleaved(list(fns), lambda name: timer(fns[name], reps=per_pass, **options), rounds)
    return {name: median_of(ts) for name, ts in passes.items()}
