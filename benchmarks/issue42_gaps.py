"""Issue 42: the kernels of a CUDA-graphed epoch and the gaps between them, from an Nsight Systems
trace (`nsys stats --report cuda_gpu_trace --format csv` of a run with --cuda-graph-trace=node): per
kernel name, how often it ran, its median duration and the median idle time before it (from the
previous kernel's end), and the totals per step (the steps: the fewest runs of any kernel, each
running at least once a step).

    python benchmarks/issue42_gaps.py TRACE.csv
"""
import argparse
import csv
import statistics
from collections import defaultdict


def column(row: dict, word: str) -> str:
    return next(k for k in row if k.startswith(word))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    args = parser.parse_args()
    with open(args.trace, newline="") as f:
        rows = [r for r in csv.DictReader(f) if not r[column(r, "Name")].startswith("[CUDA mem")]
    start, duration, name = (column(rows[0], w) for w in ("Start", "Duration", "Name"))
    rows.sort(key=lambda r: int(r[start]))
    durations, gaps = defaultdict(list), defaultdict(list)
    previous_end = None
    for r in rows:
        t0, dt, label = int(r[start]), int(r[duration]), r[name][:90]
        durations[label].append(dt)
        if previous_end is not None and t0 - previous_end < 50_000:      # within a graph (< 50 µs idle)
            gaps[label].append(max(0, t0 - previous_end))
        previous_end = max(previous_end or 0, t0 + dt)
    print(f"{'runs':>6} {'median µs':>10} {'gap before µs':>14}  kernel")
    busy = idle = 0.0
    for label in sorted(durations, key=lambda k: -sum(durations[k])):
        d, g = durations[label], gaps[label]
        busy += sum(d) / 1000
        idle += sum(g) / 1000
        print(f"{len(d):6d} {statistics.median(d) / 1000:10.2f} {statistics.median(g) / 1000 if g else 0:14.2f}  {label}")
    steps = min(len(d) for d in durations.values())
    print(f"a step: {busy / steps:.1f} µs of kernels, {idle / steps:.1f} µs between them ({steps:.0f} steps)")


if __name__ == "__main__":
    main()
