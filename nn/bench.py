"""Training benchmark: ms per epoch of the same network on each backend, and PyTorch when importable.

    python -m nn.bench                      # every network below, every backend that runs here
    python -m nn.bench --networks cme213,lenet --backends cupy-tuned,torch-graph --json out.json --png out.png
    python -m nn.bench --layers conv32x5,pool2,conv64x5,pool2,dense1024 --backends cupy-tuned,torch-graph

The networks: MLPs (784-hidden-10, SGD) and the LeNet-like CNN (nn.layers.LENET, Adam) at batch
1000 and 128, or with --layers any CNN nn.train --layers trains (Adam, batch 1000 or --batch). Data: the first N Fashion-MNIST training images (unit-scaled), resident on the GPU.
Each backend runs one untimed epoch (compiles, captures), then `--epochs` timed ones; the median is
reported. The NumPy trainer runs a CNN on a slice of the images, its time scaled to the epoch.
Backends run in turn in one process, PyTorch's all on one stream (see `one_stream`); with --isolate
each runs in a process of its own.
"""
if __name__ == "__main__":  # first: a stop signal while the modules below load ends in one line, no traceback
    from autogemm import signals

    signals.starting()

import functools
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass

import numpy as np

from autogemm import files
from nn.backends import cuda_available, get_backend
from nn.backends.numpy_cnn import ADAM
from nn.cnn import CNN, CNNStep, init_cnn_params
from nn.data import load_dataset
from nn.dist import rank_rows
from nn.errors import ArgumentParser, NNError, exit_status, output_path, shown
from nn.layers import parse_layers
from nn.mlp import MLP, Epoch, Step, init_params
from nn.networks import ConvNetwork, Network, cnn_networks, cnn_of, networks
from nn.outputs import claim, claim_json, write_json


NUMPY_CNN_IMAGES = 2000   # the NumPy trainer's CNN slice (an epoch of 54,000 takes 18 s on 16 cores)


@dataclass
class Result:
    network: str
    backend: str
    ms_per_epoch: float  # for the network's whole epoch (scaled from `images` where fewer were timed)
    epochs: int
    accuracy: float      # training-set accuracy after the timed epochs (a sanity check, not a score)
    images: int          # images an epoch timed: all of the network's, or the NumPy trainer's slice
    batch: int = 0       # the network's batch


def make_backend(backend_name: str, dtype: str = "float32"):
    """The trainer backend of a benchmark name: numpy, cublas, cupy-default, cupy-tuned,
    cupy-tuned-tf32 or cupy-tuned-bf16 (its GEMMs at that precision)."""
    options = {"tuned": backend_name.startswith("cupy-tuned")} if backend_name.startswith("cupy") else {}
    precision = precision_of(backend_name)
    options |= {"precision": precision} if precision != "fp32" else {}
    return get_backend(backend_name.split("-")[0], dtype, **options)


def time_backend(net: Network | ConvNetwork, backend_name: str, x: np.ndarray, y: np.ndarray,
                 epochs: int) -> Result:
    """Median ms per epoch of autogemm's or the baseline's backend (graph-captured where it can be)."""
    backend = make_backend(backend_name)
    if isinstance(net, ConvNetwork):
        layers = parse_layers(net.layers)
        model = CNN(backend, layers, "relu", init_cnn_params(layers))
        step = CNNStep(model, net.batch, net.batch, "adam", ADAM["lr"])
    else:
        sizes = (x.shape[1], net.hidden, 10)
        model = MLP(backend, sizes, net.activation, init_params(sizes, "he" if net.activation == "relu" else "cme213"))
        step = Step(model, net.batch, net.batch, net.lr, 1e-4)
    index, spans = rank_rows(len(y), net.batch, 0, 1)
    xd, yd = backend.read_only(backend.asarray(x[index])), backend.asarray(y[index])  # X: (N, 784) float32, labels (N,)
    epoch = Epoch(step, spans, xd, yd, graph=True)
    times = []
    for i in range(epochs + 1):
        start = time.perf_counter()
        epoch.run()
        backend.synchronize()
        if i:
            times.append((time.perf_counter() - start) * 1e3)
    accuracy = model.count_correct(xd, y) / len(y)
    return Result(net.name, backend_name, statistics.median(times) * net.images / len(y), epochs, accuracy,
                  len(y), net.batch)


def torch_cnn(net: ConvNetwork, torch):
    """The layers of `net.layers` as a torch Sequential over rows of pixels."""
    layers = parse_layers(net.layers)
    modules = [torch.nn.Unflatten(1, layers[0].shape_in)]
    for i, layer in enumerate(layers):
        c, h, w = layer.shape_in
        if layer.kind == "conv":
            modules += [torch.nn.Conv2d(c, layer.width, layer.kernel), torch.nn.ReLU()]
        elif layer.kind == "pool":
            modules.append(torch.nn.MaxPool2d(2))
        else:
            if i == 0 or layers[i - 1].kind != "dense":
                modules.append(torch.nn.Flatten())
            modules.append(torch.nn.Linear(c * h * w, layer.width))
            if i < len(layers) - 1:
                modules.append(torch.nn.ReLU())
    return torch.nn.Sequential(*modules)


def precision_of(backend_name: str) -> str:
    """The GEMM precision a benchmark name asks for: its -tf32 or -bf16 suffix, else fp32."""
    suffix = backend_name.rsplit("-", 1)[-1]
    return suffix if suffix in ("tf32", "bf16") else "fp32"


@functools.cache
def one_stream(device: int):
    """The stream all of PyTorch's work on `device` runs on in this process: a CUDA graph of
    PyTorch's kernels replays about 0.3 µs a kernel slower once they have run on a second stream
    (benchmarks/issue42-h200, streams/)."""
    import torch

    return torch.cuda.Stream(device)


def time_torch(net: Network | ConvNetwork, x: np.ndarray, y: np.ndarray, epochs: int, graph: bool,
               precision: str = "fp32", convert: bool = False, compile: bool = False, fused: bool = False,
               whole_epoch: bool = False, seed: int | None = None) -> Result:
    """The same network in PyTorch (fp32: TF32 off; tf32: TF32 on; bf16: the forward pass and loss
    under BF16 autocast, float32 weights; cuDNN's algorithm search on), data on the GPU; with
    `graph`, each step replays a CUDA graph (PyTorch's whole-network capture: the gradients set to
    None before the capture, written, not accumulated, by its backward pass), its batch copied into
    the graph's inputs; with `whole_epoch` (a graph either way), the epoch is one CUDA graph whose
    steps read their batches where they lie (the gradients set to None before each step); `seed`:
    torch's, before the model is made (the same initial weights run after run); with `convert`, the
    model's layers swapped for autogemm's (autogemm.torch.convert), which follow the same precision
    settings; with `compile`, the model (converted or not) through torch.compile; with `fused`, the
    optimizer's fused implementation (one kernel a step) rather than its default (foreach)."""
    import torch

    stream = one_stream(torch.cuda.current_device())
    with torch.cuda.stream(stream):
        dev = torch.device("cuda")
        graph = graph or whole_epoch
        if seed is not None:
            torch.manual_seed(seed)
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        torch.backends.cudnn.allow_tf32 = precision == "tf32"
        torch.backends.cudnn.benchmark = True
        xd = torch.from_numpy(x).to(dev)                              # X: (N, 784) float32
        yd = torch.from_numpy(y.astype(np.int64)).to(dev)             # (N,) int64
        if isinstance(net, ConvNetwork):
            model = torch_cnn(net, torch).to(dev)
            opt = torch.optim.Adam(model.parameters(), lr=ADAM["lr"], betas=(ADAM["beta1"], ADAM["beta2"]),
                                   eps=ADAM["eps"], capturable=graph, fused=fused or None)
        else:
            model = torch.nn.Sequential(torch.nn.Linear(x.shape[1], net.hidden),
                                        torch.nn.Sigmoid() if net.activation == "sigmoid" else torch.nn.ReLU(),
                                        torch.nn.Linear(net.hidden, 10)).to(dev)
            opt = torch.optim.SGD(model.parameters(), lr=net.lr, weight_decay=1e-4, fused=fused or None)
        if convert:
            import autogemm.torch

            autogemm.torch.convert(model)
        forward = torch.compile(model) if compile else model
        loss_fn = torch.nn.CrossEntropyLoss()
        starts = range(0, len(y), net.batch)

        def step(xb, yb):
            # No autocast cache: a captured graph must recast the weights each step.
            with torch.autocast("cuda", torch.bfloat16, enabled=precision == "bf16", cache_enabled=False):
                loss = loss_fn(forward(xb), yb)
            loss.backward()
            opt.step()

        graphs, epoch_graph = {}, None      # {rows: (graph, its inputs)} a batch size, or the epoch's one
        if graph:  # the epoch's graph, or one per batch size (full, last partial) with inputs copied in
            sizes = sorted({min(net.batch, len(y) - s) for s in starts})
            for rows in sizes:            # each size warmed: cuDNN's algorithm search cannot run inside a capture
                for _ in range(3):
                    opt.zero_grad()
                    step(xd[:rows], yd[:rows])
            if whole_epoch:
                epoch_graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(epoch_graph, stream=stream):
                    for s in starts:
                        opt.zero_grad()
                        step(xd[s:s + net.batch], yd[s:s + net.batch])
            else:
                for rows in sizes:
                    xs, ys = xd[:rows].clone(), yd[:rows].clone()
                    opt.zero_grad()
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g, stream=stream):
                        step(xs, ys)
                    graphs[rows] = (g, xs, ys)

        def run_epoch():
            if epoch_graph is not None:
                epoch_graph.replay()
                return
            for s in starts:
                xb, yb = xd[s:s + net.batch], yd[s:s + net.batch]
                if graph:
                    g, xs, ys = graphs[len(yb)]
                    xs.copy_(xb)
                    ys.copy_(yb)
                    g.replay()
                else:
                    opt.zero_grad()
                    step(xb, yb)

        times = []
        for i in range(epochs + 1):
            torch.cuda.synchronize()
            start = time.perf_counter()
            run_epoch()
            torch.cuda.synchronize()
            if i:
                times.append((time.perf_counter() - start) * 1e3)
        with torch.no_grad():
            accuracy = float((model(xd).argmax(1) == yd).float().mean())
    name = torch_backend_name(graph, precision, convert, compile, fused, whole_epoch)
    return Result(net.name, name, statistics.median(times), epochs, accuracy, len(y), net.batch)


def torch_options(backend_name: str) -> dict:
    """time_torch's options of a torch-* benchmark name."""
    return dict(graph=not backend_name.startswith("torch-eager"), precision=precision_of(backend_name),
                convert="-autogemm" in backend_name, compile="-compile" in backend_name,
                fused="-fused" in backend_name, whole_epoch=backend_name.startswith("torch-epoch-graph"))


def torch_backend_name(graph: bool, precision: str, convert: bool, compile: bool, fused: bool,
                       whole_epoch: bool) -> str:
    """The benchmark name of time_torch's options (torch_options' inverse)."""
    mode = "torch-epoch-graph" if whole_epoch else "torch-graph" if graph else "torch-eager"
    return (mode + ("-compile" if compile else "") + ("-fused" if fused else "") + ("-autogemm" if convert else "")
            + (f"-{precision}" if precision != "fp32" else ""))


def run(nets: list[Network | ConvNetwork], backends: list[str], epochs: int, data_dir=None,
        isolate: bool = False) -> list[Result]:
    """Each network on each backend in turn; with `isolate`, each timed by `python -m nn.bench` in a
    process of its own."""
    ds = load_dataset("fashion-mnist", data_dir=data_dir, scale="unit", dtype=np.float32)
    short = [net for net in nets if net.images > len(ds.train.y)]
    if short:
        raise NNError(f"the network {short[0].name} trains on {short[0].images} images and {ds.source} holds "
                      f"{len(ds.train.y)}: its time per epoch would not be {short[0].name}'s")
    results = []
    for net in nets:
        x, y = ds.train.x[:net.images], ds.train.y[:net.images]
        for name in backends:
            cnn = isinstance(net, ConvNetwork)
            if name == "numpy" and not cnn and net.hidden * net.images > 256 * 54000:
                print(f"{net.name:>14}  {name:>12}  skipped: minutes an epoch on the CPU", flush=True)
                continue
            if isolate:
                result = time_in_own_process(net, name, epochs, data_dir)
            elif name.startswith("torch"):
                result = time_torch(net, x, y, epochs, **torch_options(name))
            elif name == "numpy" and cnn:         # a slice, of at least a batch
                images = max(NUMPY_CNN_IMAGES, net.batch)
                result = time_backend(net, name, x[:images], y[:images], 1)
            else:
                result = time_backend(net, name, x, y, epochs if name != "numpy" else 1)
            results.append(result)
            sliced = f", {result.images} images timed" if result.images < net.images else ""
            print(f"{net.name:>14}  {name:>12}  {result.ms_per_epoch:9.2f} ms/epoch  "
                  f"(train accuracy {100 * result.accuracy:.1f}%{sliced})", flush=True)
    if not results:
        raise NNError("nothing ran: the numpy backend skips networks this large (minutes an epoch); "
                      "choose smaller --networks or GPU --backends")
    return results


def time_in_own_process(net: Network | ConvNetwork, backend_name: str, epochs: int, data_dir=None) -> Result:
    """`net` on `backend_name` timed by `python -m nn.bench` in a new process (a session of its own:
    a stop signal reaches this process alone, which ends the child as it unwinds)."""
    spec = (["--networks", "", "--layers", net.layers, "--batch", str(net.batch)]
            if isinstance(net, ConvNetwork) and net.name not in cnn_networks() else ["--networks", net.name])
    with tempfile.TemporaryDirectory(prefix="nn-bench-") as tmp:
        out = os.path.join(tmp, "result.json")
        command = [sys.executable, "-m", "nn.bench", *spec, "--backends", backend_name, "--epochs", str(epochs),
                   "--json", out, *(["--data-dir", str(data_dir)] if data_dir else [])]
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, start_new_session=True)
        try:
            _, err = child.communicate()
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        if child.returncode != 0:
            lines = err.strip().splitlines()
            why = (f"killed by signal {-child.returncode}" if child.returncode < 0
                   else lines[-1].removeprefix("error: ") if lines else f"exit status {child.returncode}")
            raise NNError(f"{backend_name} on {net.name}, timed in a process of its own: {why}")
        with open(out) as f:
            (result,) = json.load(f)["results"]
    return Result(**result)


TORCH_BACKENDS = ("torch-eager", "torch-graph", "torch-graph-tf32", "torch-graph-bf16", "torch-graph-autogemm",
                  "torch-graph-autogemm-tf32", "torch-graph-autogemm-bf16", "torch-graph-compile",
                  "torch-graph-compile-autogemm", "torch-graph-compile-autogemm-tf32", "torch-graph-fused",
                  "torch-graph-fused-autogemm", "torch-graph-fused-tf32", "torch-graph-fused-autogemm-tf32",
                  "torch-epoch-graph", "torch-epoch-graph-autogemm", "torch-epoch-graph-tf32",
                  "torch-epoch-graph-autogemm-tf32", "torch-epoch-graph-bf16", "torch-epoch-graph-autogemm-bf16")
BACKEND_NAMES = ("numpy", "cublas", "cupy-default", "cupy-tuned", "cupy-tuned-tf32", "cupy-tuned-bf16", *TORCH_BACKENDS)


def available_backends() -> list[str]:
    names = ["numpy"]
    if cuda_available():
        names += ["cublas", "cupy-default", "cupy-tuned", "cupy-tuned-tf32", "cupy-tuned-bf16"]
        try:
            import torch

            if torch.cuda.is_available():
                names += list(TORCH_BACKENDS)
        except ImportError:
            pass
    return names


def table(results: list[Result]) -> str:
    backends = list(dict.fromkeys(r.backend for r in results))
    rows = [["network", *backends]]
    for net in dict.fromkeys(r.network for r in results):
        by = {r.backend: r.ms_per_epoch for r in results if r.network == net}
        rows.append([net, *(f"{by[b]:.2f}" if b in by else "-" for b in backends)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows)


def _matplotlib():
    try:
        import matplotlib
    except ImportError:
        raise NNError("--png needs matplotlib: pip install 'autogemm[plot]'") from None
    return matplotlib


def chart(results: list[Result], path: str) -> None:
    matplotlib = _matplotlib()

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nets = list(dict.fromkeys(r.network for r in results))
    ran = list(dict.fromkeys(r.backend for r in results))
    backends = [b for b in ran if b != "numpy"] or ran  # NumPy's bars only where nothing else ran (no GPU)
    fig, ax = plt.subplots(figsize=(max(8, len(nets) * 0.9), 4.5))
    width = 0.8 / max(1, len(backends))
    for i, b in enumerate(backends):
        by = {r.network: r.ms_per_epoch for r in results if r.backend == b}
        ax.bar([j + i * width for j in range(len(nets))], [by.get(n, 0) for n in nets], width, label=b)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(nets))], nets, rotation=45, ha="right")
    ax.set_ylabel("ms per epoch (lower is better)")
    ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=120)
    plt.close(fig)
    try:  # through a temporary file: a failed write leaves the earlier chart as it was
        files.write_atomic(path, png.getvalue())
    except files.FileError as e:
        raise NNError(f"--png {shown(path)}: cannot be written: {e}") from None


def main(argv=None) -> int:
    known = networks() | cnn_networks()
    p = ArgumentParser(prog="python -m nn.bench", description=__doc__.splitlines()[0] + " The numpy backend runs "
                       "anywhere; the others need a CUDA GPU and CuPy (torch-*: PyTorch with CUDA).")
    p.add_argument("--networks", help=f"comma list of {', '.join(known)} (default: all, or none with --layers)")
    p.add_argument("--layers", metavar="SPEC", help="a CNN of these layers too, as nn.train --layers "
                                                    "(e.g. conv32x5,pool2,conv64x5,pool2,dense1024)")
    p.add_argument("--batch", type=int, help="the --layers CNN's batch (default: 1000)")
    p.add_argument("--backends", help="comma list (default: all that run here: numpy, cublas, cupy-default, "
                                      "cupy-tuned, cupy-tuned-tf32, cupy-tuned-bf16, torch-eager, torch-graph, "
                                      "torch-graph-tf32, torch-graph-bf16, torch-graph-autogemm[-tf32|-bf16]: the "
                                      "PyTorch model converted by autogemm.torch; torch-graph-compile[-autogemm"
                                      "[-tf32]]: the model through torch.compile; torch-graph-fused[-autogemm][-tf32]: "
                                      "the optimizer's fused implementation; torch-epoch-graph[-autogemm]"
                                      "[-tf32|-bf16]: the whole epoch one CUDA graph; -tf32, -bf16: the GEMMs "
                                      "at that precision, PyTorch's bf16 under autocast)")
    p.add_argument("--epochs", type=int, default=5, help="timed epochs per run, after one warm-up (default: 5)")
    p.add_argument("--isolate", action="store_true", help="time each backend in a fresh process of its own, one "
                   "after another: nothing an earlier row left behind in the process can touch it")
    p.add_argument("--data-dir", help="Fashion-MNIST directory (default: the usual search)")
    p.add_argument("--json", metavar="PATH", type=output_path, help="write the results as JSON")
    p.add_argument("--png", metavar="PATH", type=output_path, help="draw a bar chart (needs matplotlib)")
    line = " ".join(["python -m nn.bench", *(argv or sys.argv[1:])])

    def command():
        args = p.parse_args(argv)
        layered = cnn_of(args.layers, args.batch)
        if args.networks is None:
            names = [] if args.layers else list(known)
        else:
            names = [] if args.networks == "" and args.layers else args.networks.split(",")
        unknown = [n for n in names if n not in known]
        if unknown:
            raise NNError(f"--networks: unknown {', '.join(map(repr, unknown))}; choose from {', '.join(known)}")
        nets = [known[n] for n in names] + ([layered] if layered else [])
        if args.epochs < 1:
            raise NNError("--epochs must be >= 1")
        backends = args.backends.split(",") if args.backends is not None else available_backends()
        unknown = [b for b in backends if b not in BACKEND_NAMES]
        if unknown:
            raise NNError(f"--backends: unknown {', '.join(map(repr, unknown))}; choose from {', '.join(BACKEND_NAMES)}")
        missing = [b for b in backends if b not in available_backends()]
        if missing:
            raise NNError(f"--backends: {missing[0]} does not run here (it needs "
                          f"{'PyTorch with CUDA' if missing[0].startswith('torch') else 'CuPy and a CUDA device'}); "
                          f"these do: {', '.join(available_backends())}")
        if args.json:
            claim_json("--json", args.json, "python -m nn.bench")
        if args.png:
            if not args.png.lower().endswith(".png"):
                raise NNError(f"--png {args.png}: the chart's file name must end in .png")
            _matplotlib()
            claim("--png", args.png, lambda path: path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n")
        results = run(nets, backends, args.epochs, args.data_dir, args.isolate)
        print(table(results))
        if args.json:
            write_json("--json", args.json, {"command": line, "results": [asdict(r) for r in results]})
        if args.png:
            chart(results, args.png)

    return exit_status(command)


if __name__ == "__main__":
    sys.exit(main())
