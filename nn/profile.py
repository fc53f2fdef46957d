"""Where a training step's time goes: each operation of one step of an MLP or the CNN, timed on its own.

    python -m nn.profile                                  # the CME 213 network, tuned kernels, on the GPU
    python -m nn.profile --network grading --backend cupy-default --json profile.json
    python -m nn.profile --network lenet                  # the LeNet-like CNN, batch 1000
    python -m nn.profile --layers conv32x5,pool2,conv64x5,pool2,dense1024 --batch 1000   # any CNN
    python -m nn.profile --network large --ranks 4 --parallel model   # rank 0's step of 4 ranks' split

The step's operations are recorded as the step enqueues them: one rank's, whose weight updates are
the fused in-place GEMMs, or with `--ranks R` rank 0's step of R ranks' split (its share of the rows,
gradients formed for the all-reduce then applied; or its hidden units on every row), the
all-reduce left out (benchmarks/issue37_comm.py times those). Each is then run `--reps` times in a row, captured in one CUDA graph
where the backend can capture (warm caches, launch gaps as inside the epoch's graph), and the
median over `--replays` replays is reported per call; the whole step is timed the same way. Inputs
are random: the times do not depend on the data.
"""
if __name__ == "__main__":  # first: a stop signal while the modules below load ends in one line, no traceback
    from autogemm import signals

    signals.starting()

import statistics
import sys
from dataclasses import asdict, dataclass

import numpy as np

import autogemm

from nn.backends.storage import launched_operands
from nn.bench import BACKEND_NAMES, available_backends, make_backend
from nn.cnn import CNN, CNNStep, init_cnn_params
from nn.errors import ArgumentParser, NNError, exit_status, output_path
from nn.layers import parse_layers
from nn.mlp import MLP, Step, init_params
from nn.model_parallel import ShardedMLP, ShardedStep, check_split
from nn.networks import ConvNetwork, Network, cnn_networks, cnn_of, networks
from nn.outputs import claim_json, write_json
from nn.train import positive_int

OPERATIONS = ("gemm", "linear_xent", "linear_backward", "dense_stack", "softmax_xent", "column_sums", "sgd_update",
              "conv2d", "conv2d_backward_data", "conv2d_backward_weights", "maxpool2x2", "maxpool2x2_backward",
              "adam_update")


@dataclass
class Timed:
    operation: str
    median_us: float
    p10_us: float
    p90_us: float


def describe(name: str, args, kwargs, column_major=()) -> str:
    """A recorded call in words: the operation, its sizes and what is fused into it; `column_major`:
    the backend's (read-only array, column-major copy) pairs (its Storage's), which its GEMMs may read instead."""
    shape = lambda x: "x".join(map(str, x.shape))  # noqa: E731
    if name == "gemm":
        a, ta, b, tb = launched_operands(args[0], kwargs.get("trans_a", False), args[1], kwargs.get("trans_b", False),
                                         column_major)     # the op launched
        m, k = a.shape[::-1] if ta else a.shape
        n = b.shape[0] if tb else b.shape[1]
        extras = [kwargs["epilogue"]] if kwargs.get("epilogue") else []
        extras += ["in place"] if kwargs.get("c") is not None else []
        return f"gemm {m}x{n}x{k}:{'t' if ta else 'n'}{'t' if tb else 'n'}" + "".join(f" {e}" for e in extras)
    if name == "linear_xent":
        a, w = args[:2]
        activation = kwargs.get("activation", args[9] if len(args) > 9 else None)
        return f"linear_xent {a.shape[0]}x{w.shape[0]}x{a.shape[1]}" + (f" {activation}" if activation else "")
    if name == "dense_stack":
        x, weights = args[:2]
        widths = "x".join(map(str, (x.shape[1], *(w.shape[0] for w in weights))))
        dx = autogemm.DENSE_STACK_INPUT_GRAD if len(args) > 9 and args[9] is not None else ""
        dx = autogemm.DENSE_STACK_POOLED if len(args) > 10 and args[10] is not None else dx
        return f"dense_stack {x.shape[0]}x{widths}:{args[8]}{dx}"
    if name == "linear_backward":
        g, w, a, grad_in, activation, dw = args[:6]
        transposed = autogemm.row_major_operand(grad_in, False)[1]      # stored as G^T
        return (f"linear_backward {a.shape[0]}x{w.shape[0]}x{a.shape[1]} {activation}"
                + (autogemm.LINEAR_BACKWARD_TRANSPOSED if transposed else "")
                + (" in place" if dw is w else ""))
    if name.startswith("conv2d"):   # the maps it reads by the filters (or their gradient)
        maps, filters = args[1:3] if name == "conv2d_backward_weights" else args[:2]
        pooled = " with its pool" if kwargs.get("where") is not None else ""
        return f"{name} {shape(maps)} by {shape(filters)}{pooled}"
    return f"{name} {shape(args[0])}"


def record_step(step, x, labels, allreduce=None) -> list[tuple[str, callable]]:
    """(description, replay) of each operation that one `step.train_batch(x, labels, allreduce)`
    enqueues; operations a backend composes of others count once."""
    backend = step.model.backend
    column_major = backend.storage.column_major if hasattr(backend, "storage") else ()   # the cupy backend's copies
    recorded, depth = [], [0]

    def recording(name):
        method = getattr(backend, name)

        def call(*args, **kwargs):
            if depth[0] == 0:
                recorded.append((describe(name, args, kwargs, column_major),
                                 lambda: method(*args, **kwargs)))
            depth[0] += 1
            try:
                return method(*args, **kwargs)
            finally:
                depth[0] -= 1
        return call

    for name in OPERATIONS:
        setattr(backend, name, recording(name))
    try:
        step.train_batch(x, labels, allreduce)
    finally:
        for name in OPERATIONS:
            delattr(backend, name)
    return recorded


def time_calls(what: str, backend, fn, reps: int, replays: int) -> Timed:
    """µs per call of `fn`: `reps` calls in a row (one CUDA graph where the backend captures),
    one warm-up, then the median and spread over `replays`."""
    if getattr(backend, "can_capture", False):
        graph = backend.capture(lambda: [fn() for _ in range(reps)])
        run = lambda: graph.launch(backend.stream)  # noqa: E731
    else:
        run = lambda: [fn() for _ in range(reps)]  # noqa: E731
    run()
    times = []
    for _ in range(replays):
        start = backend.mark()
        run()
        times.append(backend.elapsed_ms(start, backend.mark()) * 1e3 / reps)
    times.sort()
    pick = lambda q: times[min(len(times) - 1, int(q * len(times)))]  # noqa: E731
    return Timed(what, statistics.median(times), pick(0.1), pick(0.9))


def network_named(name: str) -> Network | ConvNetwork:
    """An MLP of nn.networks, or lenet (batch 1000); NNError (one line) for another name."""
    known = networks() | {"lenet": cnn_networks()["lenet"]}
    if name not in known:
        raise NNError(f"--network: unknown {name}; choose from {', '.join(known)} (or --layers SPEC)")
    return known[name]


def profile(net: Network | ConvNetwork, backend_name: str, reps: int, replays: int, dtype: str = "float32",
            ranks: int = 1, parallel: str = "data"):
    """(each operation of rank 0's step of `ranks` ranks timed alone, the whole step timed the same
    way); the all-reduce of a split is left out."""
    backend = make_backend(backend_name, dtype)
    rng = np.random.default_rng(0)
    batch = net.batch
    rows = batch if parallel == "model" else -(-batch // ranks)        # rank 0's share: the largest
    x = backend.read_only(backend.asarray(rng.random((rows, 784))))  # X: (rows, 784) dtype, the data as the trainer keeps it
    labels = backend.asarray(rng.integers(0, 10, rows))              # (rows,) int
    reduce = None if ranks == 1 else (lambda buf: buf)               # the sum over ranks, left out
    if isinstance(net, ConvNetwork):
        layers = parse_layers(net.layers)
        step = CNNStep(CNN(backend, layers, "relu", init_cnn_params(layers)), rows, batch)
    else:
        sizes = (784, net.hidden, 10)
        params = init_params(sizes, "he" if net.activation == "relu" else "cme213")
        if parallel == "model":
            check_split(sizes, ranks)
            model = ShardedMLP(backend, sizes, net.activation, params, 0, ranks, reduce)
            step, reduce = ShardedStep(model, rows, batch, net.lr, 1e-4), None
        else:
            step = Step(MLP(backend, sizes, net.activation, params), rows, batch, net.lr, 1e-4)
    operations = [time_calls(what, backend, fn, reps, replays) for what, fn in record_step(step, x, labels, reduce)]
    return operations, time_calls("whole step", backend, lambda: step.train_batch(x, labels, reduce), reps, replays)


def report(net: Network | ConvNetwork, backend_name: str, operations: list[Timed], whole: Timed, ranks: int = 1,
           parallel: str = "data") -> str:
    steps = net.images / net.batch
    if isinstance(net, ConvNetwork):
        shape = f"{net.layers}, batch {net.batch}"
    else:
        shape = f"784-{net.hidden}-10, batch {net.batch}"
    total = sum(t.median_us for t in operations)
    width = max(len(t.operation) for t in operations + [whole])
    split = f", rank 0 of {ranks} ({parallel} split, the all-reduce left out)" if ranks > 1 else ""
    name = "CNN" if net.name == getattr(net, "layers", None) else net.name
    lines = [f"{name} ({shape}{split}) on {backend_name}: µs per call, median [p10, p90]"]
    for t in operations:
        lines.append(f"  {t.operation:<{width}}  {t.median_us:9.2f}  [{t.p10_us:.2f}, {t.p90_us:.2f}]  "
                     f"{100 * t.median_us / total:5.1f}%")
    lines.append(f"  {'sum of the operations':<{width}}  {total:9.2f}")
    lines.append(f"  {whole.operation:<{width}}  {whole.median_us:9.2f}  [{whole.p10_us:.2f}, {whole.p90_us:.2f}]"
                 f"  ({steps:g} steps an epoch: {whole.median_us * steps / 1e3:.2f} ms)")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = ArgumentParser(prog="python -m nn.profile", description=__doc__.splitlines()[0] + " On a CUDA GPU with "
                       "CuPy where there is one; --backend numpy (the default without one) runs on the CPU.")
    p.add_argument("--network", help=f"one of {', '.join(networks())}, lenet (default: cme213)")
    p.add_argument("--layers", metavar="SPEC", help="instead of --network: the CNN of these layers, as nn.train --layers "
                                                    "(e.g. conv32x5,pool2,conv64x5,pool2,dense1024)")
    p.add_argument("--batch", type=int, help="the --layers CNN's batch (default: 1000)")
    p.add_argument("--backend", help="numpy, cublas, cupy-default, cupy-tuned, cupy-tuned-tf32 or cupy-tuned-bf16 "
                                     "(default: cupy-tuned on a GPU, else numpy)")
    p.add_argument("--reps", type=positive_int, default=20, help="calls in a row per replay (default: 20)")
    p.add_argument("--replays", type=positive_int, default=15, help="timed replays; the median is reported (default: 15)")
    p.add_argument("--ranks", type=positive_int, default=1, help="profile rank 0's step of this many ranks (default: 1)")
    p.add_argument("--parallel", choices=("data", "model"), default="data",
                   help="what the ranks split, as nn.train --parallel (default: data)")
    p.add_argument("--json", metavar="PATH", type=output_path, help="write the times as JSON")
    line = " ".join(["python -m nn.profile", *(argv or sys.argv[1:])])

    def command():
        args = p.parse_args(argv)
        if args.network is not None and args.layers is not None:
            raise NNError("--network and --layers both name the network; give one")
        net = cnn_of(args.layers, args.batch) or network_named(args.network or "cme213")
        backend = args.backend or ("cupy-tuned" if "cupy-tuned" in available_backends() else "numpy")
        ours = [name for name in BACKEND_NAMES if not name.startswith("torch")]
        if backend not in ours:
            raise NNError(f"--backend: unknown {backend!r}; choose from {', '.join(ours)}")
        if args.ranks > 1024:
            raise NNError(f"--ranks {args.ranks}: give 1 to 1024")
        if args.parallel == "model" and isinstance(net, ConvNetwork):
            raise NNError("--parallel model splits the MLP's hidden layer; a CNN is split by data")
        parallel = args.parallel if args.ranks > 1 else "data"    # one rank splits nothing, as in nn.train
        if args.json:
            claim_json("--json", args.json, "python -m nn.profile")
        operations, whole = profile(net, backend, args.reps, args.replays, ranks=args.ranks, parallel=parallel)
        print(report(net, backend, operations, whole, args.ranks, parallel))
        if args.json:
            write_json("--json", args.json, {"command": line, "network": net.name, "batch": net.batch, "backend": backend,
                                             "ranks": args.ranks, "parallel": parallel,
                                             "operations": [asdict(t) for t in operations], "step": asdict(whole)})

    return exit_status(command)


if __name__ == "__main__":
    sys.exit(main())
