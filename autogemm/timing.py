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


def _flush_buffer():
    import cupy

    dev = cupy.cuda.Device().id
    if dev not in _flush_buffers:
        l2 = cupy.cuda.runtime.getDeviceProperties(dev)["l2CacheSize"]
        _flush_buffers[dev] = cupy.empty(2 * l2 // 4, dtype=cupy.int32)
    return _flush_buffers[dev]


def time_gpu(fn: Callable[[], object], *, reps: int = 50, warmup: int = 5,
             flush_l2: bool = True) -> Timing:
    """Median time of `fn()` on the current stream, each run between its own pair of events.

    With `flush_l2`, a write of twice the L2 size runs (untimed) before each run, so every run
    reads its inputs from device memory, as the first use in a real program would.
    """
    import cupy

    for _ in range(warmup):
        fn()
    flush = _flush_buffer() if flush_l2 else None
    stream = cupy.cuda.get_current_stream()
    events = [(cupy.cuda.Event(), cupy.cuda.Event()) for _ in range(reps)]
    for start, end in events:
        if flush is not None:
            flush.fill(0)
        start.record(stream)
        fn()
        end.record(stream)
    events[-1][1].synchronize()
    times = sorted(cupy.cuda.get_elapsed_time(s, e) * 1e3 for s, e in events)
    return Timing(statistics.median(times), quantile(times, 0.1), quantile(times, 0.9), reps)
