"""Issue 42: the kernels of nn.bench's CUDA-graphed CME 213 epoch and the idle time between them, by
torch.profiler (CUPTI records each kernel of a graph's replay): per kernel name, how often it ran in
the replays, its median duration and the median idle time before it (from the previous kernel's
end), and the totals a step (the steps: the commonest count of a kernel's runs, most kernels
running once a step). Each backend runs one warm-up and one timed epoch: with the epoch one graph,
two replays. With --copies, the memory copies (a graph a step: the batch copied into the graph's
inputs) count as kernels.

    python benchmarks/issue42_gaps.py [--backends torch-epoch-graph-tf32,torch-epoch-graph-autogemm-tf32] [--copies]
"""
import argparse
import statistics
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from nn.bench import run
from nn.networks import networks

IDLE = 50_000       # ns: longer idle ends a replay (the host between epochs)


def replays(kernels: list[tuple[int, int, str]]) -> list[list[tuple[int, int, str]]]:
    """`kernels` (start ns, duration ns, name) cut where the GPU idles longer than IDLE; the two
    longest runs: the epochs' replays (the warm-up steps before them run eager, a few at a time)."""
    runs, current, end = [], [], None
    for k in sorted(kernels):
        if end is not None and k[0] - end > IDLE:
            runs.append(current)
            current = []
        current.append(k)
        end = max(end or 0, k[0] + k[1])
    runs.append(current)
    return sorted(runs, key=len)[-2:]


def summary(segments: list[list[tuple[int, int, str]]]) -> str:
    """The table: per kernel name its runs, median duration and median idle before it; then a step's
    totals."""
    durations, gaps = defaultdict(list), defaultdict(list)
    for segment in segments:
        end = None
        for t0, dt, name in segment:
            durations[name].append(dt)
            if end is not None:
                gaps[name].append(max(0, t0 - end))
            end = max(end or 0, t0 + dt)
    lines = [f"{'runs':>6} {'median µs':>10} {'idle before µs':>15}  kernel"]
    for name in sorted(durations, key=lambda k: -sum(durations[k])):
        d, g = durations[name], gaps[name]
        lines.append(f"{len(d):6d} {statistics.median(d) / 1e3:10.2f} {statistics.median(g) / 1e3 if g else 0:15.2f}"
                     f"  {name[:90]}")
    steps = statistics.mode(len(d) for d in durations.values())
    busy = sum(sum(d) for d in durations.values()) / 1e3 / steps
    idle = sum(sum(g) for g in gaps.values()) / 1e3 / steps
    lines.append(f"a step: {busy:.1f} µs of kernels, {idle:.1f} µs idle between them ({steps} steps)")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="torch-epoch-graph-tf32,torch-epoch-graph-autogemm-tf32",
                        help="comma list of nn.bench's torch-* backends, each profiled in turn")
    parser.add_argument("--copies", action="store_true", help="count the memory copies as kernels")
    args = parser.parse_args()
    for backend in args.backends.split(","):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            result = run([networks()["cme213"]], [backend], epochs=1)[0]
            torch.cuda.synchronize()
        # The raw kernel records (start, duration): the profiler's public tables aggregate them.
        kernels = [(e.start_ns(), e.duration_ns(), e.name()) for e in prof.profiler.kineto_results.events()
                   if e.device_type() == torch.autograd.DeviceType.CUDA
                   and (args.copies or not e.name().startswith("Memcpy"))]
        print(f"== {backend}: {result.ms_per_epoch:.2f} ms/epoch (profiled)")
        print(summary(replays(kernels)))


if __name__ == "__main__":
    main()
