"""`--parallel auto`: what R ranks should split, from a cost model of one training step.

A step on R ranks takes the compute of one rank's share plus the communication it waits for:

- compute: the launches of that rank's step as the GPU backend makes them (nn.targets records
  them), each timed by this GPU's tuned record of its shape less RECORD_OVERHEAD_US (a record is
  timed alone with L2 flushed; inside the epoch's graph a launch takes that much less), a near
  shape's record scaled by a power of the work ratio, a roofline where there is none. Launches
  on the step's side branch count for SIDE_SHARE of their time: they run beside the critical path,
  sharing the SMs.
- communication: each all-reduce costs latency + ring bytes / bus bandwidth of its `Link`.
  The data split all-reduces its gradients in buckets of layers (nn.allreduce.merge_buckets) on a
  side branch as the backward pass makes them: it waits for the last bucket, and for the rest where
  they outlast half the compute. The model split all-reduces the logits inside the forward pass: all of it
  waits, and its compute is measured MODEL_SPLIT_SLOWDOWN slower than nn.profile's.

The candidates: "data" (each rank a share of every batch's rows), "model" (the MLP's hidden units,
every row), and "none" (every rank trains the whole batch, nothing sent: one GPU's time). A split
is chosen only where it is predicted at least MARGIN faster than one GPU; the model's errors are
measured in docs/SCALING.md.
"""
if __name__ == "__main__":  # first: a stop signal while the modules below load ends in one line, no traceback
    from autogemm import signals

    signals.starting()

import argparse
import math
import re
from dataclasses import dataclass

import numpy as np

import autogemm
from nn.allreduce import merge_buckets
from nn.model_parallel import ring_bytes
from nn.recorder import LaunchRecorder, record_cnn_step, record_step

# Fitted to nn.profile's launches in the graph against their tuned records (benchmarks/issue37-h100/).
RECORD_OVERHEAD_US = 3.3   # a tuned record's time less the same launch's in the epoch's graph
FIXED_US = {"gemm": 15.0, "other": 1.5}   # an untuned launch's time that does not shrink with its work
# A near shape's time t scales with the work ratio to the power ALPHA(t): small launches are bound by
# latency and by SMs left idle (0.35 below 20 µs), large ones by their work (0.85 from 200 µs):
# both fitted to the records above.
ALPHA = (0.35, 0.85)
SIDE_SHARE = 0.5           # of a side-branch launch's time that the critical path feels
# The model split's step took this much longer under mpirun on 4 H200s than its launches in
# nn.profile's graph on an H100 and its all-reduce (docs/SCALING.md, benchmarks/issue37-h200x4/):
# the all-reduce in the middle of the forward pass holds every rank to the slowest, each step.
MODEL_SPLIT_SLOWDOWN = 1.5
MARGIN = 1.10              # a split must be predicted this much faster than one GPU to be chosen
ROOFLINE = {"flops": 20e12, "bytes": 2.0e12}   # an untuned kernel's rate: FLOP/s, bytes/s


@dataclass(frozen=True)
class Link:
    """An all-reduce's cost on R ranks: latency_us(R) + the ring's bytes sent / bus bandwidth."""
    name: str
    latency_us: float          # at 2 ranks
    latency_per_rank_us: float  # added for each rank past 2
    bus_gbs: float             # GB/s of the bytes each rank sends (2 (R-1)/R of the buffer)

    def allreduce_us(self, nbytes: int, ranks: int) -> float:
        if ranks <= 1 or nbytes == 0:
            return 0.0
        latency = self.latency_us + self.latency_per_rank_us * (ranks - 2)
        return latency + ring_bytes(nbytes, 1, ranks) / (self.bus_gbs * 1e3)


# Fitted to benchmarks/issue37-h200x4/diagnose/ (issue37_comm.py: 32 KB to 13 MB in a CUDA graph, 2
# and 4 H200s of one host over NVLink; MPICH 5.0 through host memory). CUDA-aware MPI is not measured
# (no lent machine has one): a guess between NCCL's and the host's.
LINKS = {
    "nccl": Link("NCCL", 7.0, 2.8, 240.0),
    "staged": Link("MPI staged through host memory", 75.0, 12.0, 3.5),
    "host": Link("MPI through host memory", 15.0, 6.0, 4.5),
    "cuda-aware": Link("CUDA-aware MPI", 30.0, 5.0, 50.0),
}
# On paper, for docs/SCALING.md: NCCL between hosts, one 200 Gb/s InfiniBand link a GPU.
INFINIBAND = Link("NCCL over InfiniBand, 2 nodes", 20.0, 2.0, 20.0)


@dataclass(frozen=True)
class Prediction:
    parallel: str          # "data", "model" or "none"
    compute_us: float      # one rank's step
    comm_us: float         # what the step waits for
    sent_bytes: int        # all-reduced a step

    @property
    def step_us(self) -> float:
        return self.compute_us + self.comm_us


@dataclass(frozen=True)
class Plan:
    choice: str                        # the split to run
    predictions: dict                  # name -> Prediction, "none" (one GPU's time) among them
    reason: str                        # for the start-up line

    def speedup(self, name: str) -> float:
        return self.predictions["none"].step_us / self.predictions[name].step_us

    def warning(self, asked: str) -> str:
        """For a split asked for by name: "" where it is predicted to beat one GPU, else what to do."""
        if asked not in self.predictions or asked == "none" or self.speedup(asked) >= 1:
            return ""
        p = self.predictions[asked]
        return (f"predicted slower than one GPU: {p.step_us:.0f} µs a step ({p.compute_us:.0f} computing, "
                f"{p.comm_us:.0f} waiting on {_bytes(p.sent_bytes)}) against {self.predictions['none'].step_us:.0f}; "
                f"a larger --batch (weak scaling) or a wider network would scale, and --parallel auto "
                f"trains the whole batch on every rank where no split pays")


# ---------------------------------------------------------------- compute

def launch_us(gpu: str | None, family: str, sizes, op: str, arithmetic: str) -> tuple[tuple, float]:
    """(how well it is known, as autogemm's lookup ranks a choice: lower is better; its time in the
    epoch's graph) of one launch of `family`, from the tuned records of the GPU named `gpu` (None:
    no records, a roofline)."""
    matmul = family.startswith("gemm") or family in ("linear_xent", "linear_backward", "dense_stack")
    found = autogemm.measured(family, sizes, op, arithmetic, gpu) if gpu is not None else None
    if found is not None:
        t = max(1.0, found.median_us - RECORD_OVERHEAD_US)
        if found.source == "exact":
            return (0, 0.0, found.median_us), t
        alpha = ALPHA[0] + (ALPHA[1] - ALPHA[0]) * min(1.0, max(0.0, math.log10(t / 20)))
        scale = _work(family, sizes, op) / _work(family, found.sizes, op)
        return (1, found.distance, found.median_us), t * scale ** alpha
    fixed = FIXED_US["gemm" if family.startswith("gemm") else "other"]
    work = _work(family, sizes, op)
    return (2, 0.0, 0.0), fixed + (2 * work / ROOFLINE["flops"] if matmul else 8 * work / ROOFLINE["bytes"]) * 1e6


def _work(family: str, sizes, op: str) -> int:
    """What a launch's time scales with: its sizes' product (a GEMM's m n k, an array's elements), or
    a dense stack's products of rows and each layer's weights, forward and back."""
    if family == "dense_stack":
        rows, *widths = sizes
        if op.endswith(autogemm.DENSE_STACK_POOLED):   # the pool's input map C x H x W for the inputs
            c, h, w, *widths = widths
            widths = [c * (h // 2) * (w // 2), *widths]
        return 2 * rows * sum(a * b for a, b in zip(widths, widths[1:]))
    return math.prod(sizes)


def step_compute_us(launches, gpu: str | None, dtype: str, precision: str) -> float:
    """One rank's step: each call's time on the family autogemm would run it on (the launches of one
    call, its implementations and a convolution's with and without its pool fused: the best known),
    side-branch calls at SIDE_SHARE."""
    arithmetic = {"fp32": dtype, "tf32": "tf32", "bf16": "bfloat16"}[precision]
    calls = {}
    for launch, side in launches:
        call = (launch.sizes, launch.role, side)
        key_dtype = arithmetic if arithmetic in autogemm.key_dtypes(launch.family) else dtype
        estimate = launch_us(gpu, launch.family, launch.sizes, launch.op, key_dtype)
        calls[call] = min(estimate, calls.get(call, estimate), key=lambda e: e[0])
    return sum(us * (SIDE_SHARE if side else 1.0) for (_, _, side), (_, us) in calls.items())


def recorded_step(sizes, activation: str, rows: int, batch: int, ranks: int, parallel: str, dtype: str,
                  precision: str, layers: str | None = None) -> list:
    """(autogemm.Target, whether on the side branch) for each launch of rank 0's step: the MLP of
    `sizes`, or the CNN of nn.layers spec `layers`."""
    recorder = LaunchRecorder(dtype=dtype, precision=precision)
    if layers is None:
        record_step(rows, batch, sizes, activation, ranks, 0 if parallel == "model" else None, precision, recorder)
    else:
        record_cnn_step(rows, batch, layers, ranks, recorder=recorder)
    return list(zip(recorder.launches, recorder.on_side))


# ---------------------------------------------------------------- the plan

def predict(sizes, activation: str, batch: int, ranks: int, link: Link, gpu: str | None, dtype: str = "float32",
            precision: str = "fp32", layers: str | None = None) -> Plan:
    """The step's predicted time for each split on `ranks` ranks (the model split for an MLP of one
    hidden layer of at least `ranks` units alone), and the one to run; kernels timed by the tuned
    records of the GPU named `gpu` (None: a roofline)."""
    itemsize = np.dtype(dtype).itemsize

    def compute(rows, parallel, r):
        return step_compute_us(recorded_step(sizes, activation, rows, batch, r, parallel, dtype, precision, layers),
                               gpu, dtype, precision)

    one = compute(batch, "data", 1)
    predictions = {"none": Prediction("none", one, 0.0, 0)}
    if ranks == 1:
        return Plan("none", predictions, "one rank")
    rows = -(-batch // ranks)
    buckets = [b * itemsize for b in bucket_sizes(sizes, layers, itemsize)]
    c = compute(rows, "data", ranks)
    times = [link.allreduce_us(b, ranks) for b in buckets]
    waits = times[-1] + max(0.0, sum(times[:-1]) - c / 2)
    predictions["data"] = Prediction("data", c, waits, sum(buckets))
    if layers is None and len(sizes) == 3 and sizes[1] >= ranks:
        logits = batch * sizes[-1] * itemsize
        predictions["model"] = Prediction("model", compute(batch, "model", ranks) * MODEL_SPLIT_SLOWDOWN,
                                          link.allreduce_us(logits, ranks), logits)
    return choose(predictions, ranks, link)


def choose(predictions: dict, ranks: int, link: Link) -> Plan:
    """The fastest split predicted at least MARGIN faster than one GPU, else none."""
    one = predictions["none"].step_us
    splits = sorted((p for name, p in predictions.items() if name != "none"), key=lambda p: p.step_us)
    if not splits:
        return Plan("none", predictions, "auto: no split applies")
    best = splits[0]
    sent = _bytes(best.sent_bytes)
    if best.step_us * MARGIN <= one:
        reason = (f"auto: {best.parallel} split predicted {one / best.step_us:.1f}x one GPU "
                  f"({best.step_us:.0f} µs a step: {best.compute_us:.0f} computing, {best.comm_us:.0f} waiting "
                  f"on {sent} over {link.name}; one GPU {one:.0f} µs)")
        return Plan(best.parallel, predictions, reason)
    reason = (f"auto: no split pays: the best, {best.parallel}, is predicted {best.step_us:.0f} µs a step "
              f"({best.compute_us:.0f} computing, {best.comm_us:.0f} waiting on {sent} over {link.name}) "
              f"against one GPU's {one:.0f}, so the ranks do not split it (one GPU's speed). "
              f"To use {ranks} GPUs, give each more work: a larger --batch (weak scaling) or a wider network")
    return Plan("none", predictions, reason)


def bucket_sizes(sizes, layers: str | None = None, itemsize: int = 4) -> list[int]:
    """Values in each all-reduced bucket of a data split, in the order the backward pass finishes
    them: its layers' W and b (of the CNN of spec `layers` where given), the output layer's first,
    merged as nn.allreduce.merge_buckets merges them."""
    if layers is not None:
        from nn.layers import parse_layers

        per_layer = [layer.params for layer in reversed(parse_layers(layers, sizes[-1])) if layer.params]
    else:
        per_layer = [(n_in + 1) * n_out for n_in, n_out in reversed(list(zip(sizes[:-1], sizes[1:])))]
    flat = np.empty(sum(per_layer), np.dtype(f"f{itemsize}"))
    ends = np.cumsum([0, *per_layer])
    spans = [(i, len(flat) - ends[i + 1], len(flat) - ends[i]) for i in range(len(per_layer))]
    return [b.size for b in merge_buckets(flat, spans)[0]]


def _bytes(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.0f} KB"


# ---------------------------------------------------------------- command line

def _rank_count(text: str) -> int:
    """A rank count, 1 to 1024, in ASCII digits (int() takes '٢' and '1_0')."""
    if not re.fullmatch(r"\s*\+?[0-9]{1,4}\s*", text) or not 1 <= int(text) <= 1024:
        raise argparse.ArgumentTypeError(f"{text[:20]!r}: give rank counts from 1 to 1024")
    return int(text)


def main(argv=None) -> int:
    """`python -m nn.cost_model`: the predicted step of a network on R ranks, every split, no GPU needed."""
    import sys

    from nn.networks import cnn_networks, networks
    from nn.errors import ArgumentParser, NNError, exit_status

    links = {**LINKS, "infiniband": INFINIBAND}
    p = ArgumentParser(prog="python -m nn.cost_model",
                       description="Predict a network's training step on R ranks for every split (and the one "
                                   "--parallel auto picks), from a GPU's tuned records. Needs no GPU.")
    p.add_argument("--network", default="cme213", help=f"one of {', '.join([*networks(), *cnn_networks()])}")
    p.add_argument("--ranks", **autogemm.arguments.size_list(_rank_count, "R", unique=True), default=(2, 4, 8),
                   help="rank counts, 2,4,8 or 2 4 8 (default: 2,4,8)")
    p.add_argument("--link", choices=tuple(links), default="nccl",
                   help="the all-reduce's costs: nccl (GPUs of one host over NVLink), staged, host, cuda-aware "
                        "(MPI), infiniband (NCCL between 2 nodes, on paper) (default: nccl)")
    p.add_argument("--gpu", default="NVIDIA H100 80GB HBM3", help="whose tuned file times the kernels (default: "
                                                                  "NVIDIA H100 80GB HBM3; also NVIDIA H200)")
    p.add_argument("--precision", choices=("fp32", "tf32", "bf16"), default="fp32")
    p.add_argument("--weak", action="store_true", help="the batch grows with the ranks (each rank's stays)")

    def command():
        args = p.parse_args(argv)
        mlps, cnns = networks(), cnn_networks()
        if args.network not in mlps and args.network not in cnns:
            raise NNError(f"--network: unknown {args.network!r}; choose from {', '.join([*mlps, *cnns])}")
        if not autogemm.has_records(args.gpu):
            raise NNError(f"--gpu {args.gpu!r}: no tuned file for it (autogemm show lists them)")
        net = mlps.get(args.network) or cnns[args.network]
        cnn = args.network in cnns
        sizes, activation = ((784, 10), "relu") if cnn else ((784, net.hidden, 10), net.activation)
        link = links[args.link]
        print(f"{args.network}, batch {net.batch}{' a rank' if args.weak else ''}, {args.precision}, on {args.gpu} "
              f"records, {link.name}: µs a step (computing + waiting), speed-up over one GPU"
              + (" in images a second" if args.weak else ""))
        for r in args.ranks:
            batch = net.batch * r if args.weak else net.batch
            plan = predict(sizes, activation, batch, r, link, args.gpu, "float32", args.precision,
                           net.layers if cnn else None)
            one = plan.predictions["none"].step_us
            if args.weak:   # against one GPU on the network's batch: images a second
                one = predict(sizes, activation, net.batch, 1, link, args.gpu, "float32", args.precision,
                              net.layers if cnn else None).predictions["none"].step_us * r
            cells = [f"{name} {q.compute_us:.0f} + {q.comm_us:.0f} = {q.step_us:.0f} ({one / q.step_us:.2f}x)"
                     for name, q in plan.predictions.items() if name != "none" or r == 1]
            print(f"  {r:>4} rank{'s' * (r > 1)}: " + "; ".join(cells) + f"  -> auto: {plan.choice}")

    return exit_status(command)


if __name__ == "__main__":
    import sys

    sys.exit(main())
