"""The all-reduces' cost by size, under `mpirun -n R`: what nn.cost_model's latency and bandwidth
constants are fitted to.

    mpirun -n 4 python benchmarks/issue37_comm.py --json comm-r4.json

Each size is all-reduced `--reps` times in a row, captured in one CUDA graph on the rank's stream
(as the epoch's graph holds them), replayed `--replays` times; the median per all-reduce is
reported. Kinds: nccl (NcclAllreduce), staged (StagedMpiAllreduce: pinned host copy, MPI in a host
function), host (MPI_Allreduce on a NumPy array, timed on the host). The float32 buffers hold
rank + 1 (never zeros); every sum is checked against R (R + 1) / 2.
"""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nn import allreduce as reductions  # noqa: E402
from nn.dist import maybe_init_dist  # noqa: E402

SIZES = (8_010, 82_010, 200_000, 795_010, 3_265_930)   # floats: logits 800x10, 8192x10; ...; CME 213's and
                                                         # the large network's gradients


class _Backend:
    """What the all-reduces read of a backend: its stream and dtype."""
    name = "cupy"

    def __init__(self, cupy, dtype):
        from nn.backends.gpu import gpu_for_rank, local_rank

        cupy.cuda.Device(gpu_for_rank(local_rank(), cupy.cuda.runtime.getDeviceCount())).use()
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.stream.use()
        self.dtype = np.dtype(dtype)


def time_graph(cupy, stream, fn, reps, replays) -> float:
    """Median µs per call of fn() captured `reps` times in one graph."""
    stream.begin_capture()
    for _ in range(reps):
        fn()
    graph = stream.end_capture()
    graph.upload(stream)
    graph.launch(stream)
    stream.synchronize()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(replays):
        start.record(stream)
        graph.launch(stream)
        end.record(stream)
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) * 1e3 / reps)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--replays", type=int, default=15)
    p.add_argument("--kinds", default="nccl,staged,host")
    p.add_argument("--json")
    args = p.parse_args()
    import cupy

    dist = maybe_init_dist()
    backend = _Backend(cupy, np.float32)
    kinds = args.kinds.split(",")
    made = {}
    if "nccl" in kinds:
        made["nccl"] = reductions.NcclAllreduce(dist, backend)
    if "staged" in kinds:
        made["staged"] = reductions.StagedMpiAllreduce(dist, backend)
    results = []
    expected = dist.size * (dist.size + 1) / 2
    for n in SIZES:
        buf = cupy.full(n, dist.rank + 1, np.float32)
        for kind, allreduce in made.items():
            buf.fill(dist.rank + 1)
            allreduce(buf)
            backend.stream.synchronize()
            ok = bool(cupy.all(buf == expected))
            # sums grow each call; values stay finite and exact enough for timing
            buf.fill(1.0 / (dist.size * 4096))
            us = time_graph(cupy, backend.stream, lambda: allreduce(buf), args.reps, args.replays)
            results.append({"kind": kind, "floats": n, "bytes": 4 * n, "median_us": us, "sum_ok": ok})
        if "host" in kinds:
            from mpi4py import MPI

            host = np.full(n, dist.rank + 1, np.float32)
            dist.comm.Allreduce(MPI.IN_PLACE, host, op=MPI.SUM)
            ok = bool(np.all(host == expected))
            times = []
            for _ in range(args.replays):
                dist.comm.Barrier()
                t = time.perf_counter()
                for _ in range(args.reps):
                    dist.comm.Allreduce(MPI.IN_PLACE, host, op=MPI.SUM)
                times.append((time.perf_counter() - t) * 1e6 / args.reps)
            results.append({"kind": "host", "floats": n, "bytes": 4 * n, "median_us": statistics.median(times),
                            "sum_ok": ok})
    for allreduce in made.values():
        dist.barrier()
        allreduce.close()
    if dist.rank == 0:
        for r in results:
            print(f"R={dist.size} {r['kind']:>7} {r['bytes'] / 1e3:9.1f} KB {r['median_us']:9.1f} us "
                  f"{r['bytes'] / r['median_us'] / 1e3:7.2f} GB/s {'ok' if r['sum_ok'] else 'WRONG SUM'}")
        if args.json:
            Path(args.json).write_text(json.dumps({"ranks": dist.size, "results": results}, indent=1))


if __name__ == "__main__":
    main()
