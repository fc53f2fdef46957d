"""`python -m nn.train`: train an MLP or a CNN on one process or under `mpirun -n R`, report each epoch, log JSON.

    python -m nn.train                         # 784-1000-10 sigmoid on Fashion-MNIST, float32, a few minutes
    python -m nn.train --preset cme213         # CME 213's starter setup (raw pixels, lr 0.001, float64)
    python -m nn.train --model lenet           # the LeNet-like CNN, Adam, batch 1000
    mpirun -n 4 python -m nn.train --grading-mode 2 --checkpoint ck.npz
"""
if __name__ == "__main__":  # first: a stop signal while the modules below load ends in one line, no traceback
    from autogemm import signals

    signals.starting()

import argparse
import contextlib
import datetime
import hashlib
import math
import os
import platform
import re
import sys
import time
from dataclasses import asdict, dataclass, fields

# Under mpirun, each rank's BLAS gets its share of this host's cores, not all of them (ranks
# oversubscribing the cores run many times slower). This must run before NumPy loads, hence above the imports below.
_LOCAL = os.environ.get("MPI_LOCALNRANKS") or os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") or "1"
_LOCAL_RANKS = int(_LOCAL) if _LOCAL.isascii() and _LOCAL.isdigit() and len(_LOCAL) < 7 else 1  # else ignored
if _LOCAL_RANKS > 1:
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, str(max(1, (os.cpu_count() or 1) // _LOCAL_RANKS)))

import numpy as np

import autogemm
from autogemm import AutogemmError, arguments, signals
from nn import checkpoint, cost_model
from nn.backends import ACTIVATIONS, BACKENDS, DTYPES, PRECISIONS, cuda_available, get_backend
from nn.backends.base import host_free_bytes
from nn.data import DATASETS, SCALES, load_dataset
from nn import allreduce as reductions
from nn.dist import Dist, Interrupt, Interrupted, RanksFailed, maybe_init_dist, print0, rank_rows, split_sizes
from nn.errors import ArgumentParser, NNError, one_line
from nn import cnn
from nn.layers import LENET, canonical, describe, parse_layers
from nn.mlp import INITS, MLP, Epoch, Step, bytes_needed, init_params, param_count
from nn.model_parallel import ShardedMLP, ShardedStep, check_split, ring_bytes, step_elements, unshard
from nn.outputs import Outputs, ResumeHint

# ---------------------------------------------------------------- settings

DEFAULTS = dict(model="mlp", layers=None, hidden=(1000,), activation="sigmoid", optimizer="sgd", batch=800,
                epochs=30, lr=1.0, reg=1e-4, dtype="float32", dataset="fashion-mnist", data_dir=None, seed=0,
                scale="unit", init="cme213", train_size=None, backend="numpy", precision="fp32")
# A CNN's defaults (--model lenet, or --layers): the reports' Keras recipe.
CNN_DEFAULTS = dict(activation="relu", optimizer="adam", batch=1000, epochs=20, lr=1e-3, reg=0.0, init="he")
MODELS = ("mlp", "lenet")
# What ranks split: chosen by nn.cost_model (auto), a batch's rows, the hidden units (nn.model_parallel),
# or nothing (each rank trains the whole batch: one GPU's speed, where no split pays).
PARALLEL = ("auto", "data", "model", "none")
PRESETS = {"cme213": dict(hidden=(1000,), reg=1e-4, lr=0.001, epochs=20, batch=800, scale="raw", dtype="float64")}
_GRADING = dict(hidden=(100,), batch=800, reg=1e-4, scale="raw", dtype="float64")
GRADING_MODES = {1: dict(_GRADING, lr=0.001, epochs=40), 2: dict(_GRADING, lr=0.01, epochs=10),
                 3: dict(_GRADING, lr=0.025, epochs=1)}
# Left out of a checkpoint's fingerprint: settings that do not change the weights (a checkpoint may be
# resumed across them), and hidden, which the fingerprint holds as sizes = [inputs, *hidden, classes].
_NOT_FINGERPRINTED = ("epochs", "data_dir", "backend", "hidden", "precision")


@dataclass(frozen=True)
class Config:
    model: str              # "mlp", or "cnn" (of `layers`)
    layers: str | None      # a CNN's --layers spec (nn.layers)
    hidden: tuple
    activation: str
    optimizer: str
    batch: int
    epochs: int
    lr: float
    reg: float
    dtype: str
    dataset: str
    data_dir: str | None
    seed: int
    scale: str
    init: str
    train_size: int | None
    backend: str
    precision: str          # the GEMMs' on a GPU backend: "fp32" (FP32-accurate), "tf32" or "bf16"

    def fingerprint(self, sizes) -> dict:
        """What a checkpoint (or run log) must agree with to be resumed by this run."""
        return fingerprint(asdict(self), sizes)


def fingerprint(config: dict, sizes) -> dict:
    """The settings of `config` (a Config as a dict) that determine the weights, with the network's
    sizes [inputs, *hidden, classes]."""
    return dict({k: v for k, v in config.items() if k not in _NOT_FINGERPRINTED}, sizes=list(sizes))


# ---------------------------------------------------------------- command line

def _number(kind, lowest, strict):
    def parse(text):
        try:
            if kind is int and not re.fullmatch(r"\s*[+-]?[0-9]+\s*", text):
                raise ValueError(text)      # int() would take '1_000' and other scripts' digits
            value = kind(text)
        except ValueError:
            if kind is int and re.fullmatch(r"\s*[+-]?[0-9]+\s*", text):    # past int()'s 4,300 digits
                raise argparse.ArgumentTypeError(f"{text.strip()[:12]}... ({len(text.strip())} digits) is too "
                                                 "large") from None
            raise argparse.ArgumentTypeError(f"{text!r} is not a{'n integer' if kind is int else ' number'}") from None
        if kind is float and not math.isfinite(value):      # 1e400 is inf: no bound of it is the point
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if value < lowest or (strict and value == lowest):
            raise argparse.ArgumentTypeError(f"{text} must be {'>' if strict else '>='} {lowest}")
        return value
    return parse


positive_int, positive_float, nonneg_int, nonneg_float = (
    _number(int, 0, True), _number(float, 0, True), _number(int, 0, False), _number(float, 0, False))


DESCRIPTION = """\
Train an MLP (784-1000-10 by default: --hidden) or a CNN (--model lenet, or
any --layers) on Fashion-MNIST or MNIST, on one process or under `mpirun -n R`
(the [mpi] extra); report each epoch's loss and accuracy; log the run as JSON.

It trains on NumPy anywhere. The flags under "GPU" need a CUDA GPU and CuPy
(the [cuda13] or [cuda12] extra), save --use-tuned, which falls back to NumPy
without one. Where an MLP and a CNN differ, each default is given for both.
"""


def _default(name: str) -> str:
    """'(default: X)', or where a CNN's default differs from the MLP's, both."""
    mlp, cnn_value = DEFAULTS[name], CNN_DEFAULTS.get(name, DEFAULTS[name])
    if cnn_value == mlp:
        return f"(default: {mlp})"
    return f"(default: {mlp} for an MLP, {cnn_value} for a CNN)"


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="python -m nn.train", description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="Explicit flags override --preset and --grading-mode. Under mpirun, rank 0 alone\n"
                              "prints and writes; every global batch is split across ranks.")
    # Every value defaults to None here, so that a preset can tell what the user set explicitly.
    _model_flags(p.add_argument_group("model", "the network, its weights' initialisation, and CME 213's presets"))
    _data_flags(p.add_argument_group("data"))
    _optimisation_flags(p.add_argument_group("optimisation"))
    _gpu_flags(p.add_argument_group("GPU", "the backend: numpy anywhere; cupy, cublas and the flags below on a "
                                           "CUDA GPU with CuPy"))
    _distributed_flags(p.add_argument_group("distributed", "under `mpirun -n R` (needs the [mpi] extra)"))
    _output_flags(p.add_argument_group("outputs"))
    return p


def _model_flags(g):
    d = DEFAULTS
    g.add_argument("--model", choices=MODELS,
                   help="mlp: the dense network of --hidden; lenet: the LeNet-like CNN "
                        f"({LENET}), trained with the CNN defaults below (default: mlp)")
    g.add_argument("--layers", metavar="SPEC",
                   help="a CNN of these layers, comma-separated: convCxK (C filters K x K, valid), pool2, denseN "
                        "(e.g. conv16x5,pool2,conv32x3,pool2,dense256; the output layer is added), trained with the "
                        "CNN defaults below")
    g.add_argument("--hidden", **arguments.size_list(positive_int),
                   help=f"the MLP's hidden layer sizes: 100,10 or 100 10 (default: {','.join(map(str, d['hidden']))})")
    g.add_argument("--activation", choices=ACTIVATIONS, help=f"hidden activation {_default('activation')}")
    g.add_argument("--init", choices=INITS,
                   help=f"cme213: 0.01 randn; he: randn sqrt(2/fan_in); biases 0 {_default('init')}")
    g.add_argument("--seed", type=nonneg_int, help=f"seed of the weight initialisation {_default('seed')}")
    presets = g.add_mutually_exclusive_group()
    presets.add_argument("--preset", choices=tuple(PRESETS),
                         help="cme213: the MLP of hidden 1000, reg 1e-4, lr 0.001, 20 epochs, batch 800, raw pixels, "
                              "float64")
    presets.add_argument("--grading-mode", type=int, choices=tuple(GRADING_MODES),
                         help="CME 213 grading: the MLP of hidden 100, batch 800, reg 1e-4, raw, float64; "
                              "1: lr 0.001, 40 epochs; 2: lr 0.01, 10 epochs; 3: lr 0.025, 1 epoch")


def _data_flags(g):
    d = DEFAULTS
    g.add_argument("--dataset", choices=DATASETS, help=f"data set (default: {d['dataset']})")
    g.add_argument("--data-dir", help="directory holding the four IDX files (default: search the usual places, then "
                                      "download)")
    g.add_argument("--scale", choices=SCALES, help=f"pixels raw 0..255 (CME 213) or unit [0, 1] {_default('scale')}")
    g.add_argument("--train-size", type=positive_int,
                   help="train on the first N of the 54,000 training images (default: all)")


def _optimisation_flags(g):
    g.add_argument("--optimizer", choices=cnn.OPTIMIZERS,
                   help=f"adam (CNNs only, Keras' betas and eps) or sgd with L2 {_default('optimizer')}")
    g.add_argument("--batch", type=positive_int, help=f"global batch size {_default('batch')}")
    g.add_argument("--epochs", type=positive_int,
                   help=f"epochs to train in all, counting resumed ones {_default('epochs')}")
    g.add_argument("--lr", type=positive_float, help=f"learning rate {_default('lr')}")
    g.add_argument("--reg", type=nonneg_float, help=f"L2 coefficient, loss + reg/2 sum ||W||^2 {_default('reg')}")
    g.add_argument("--dtype", choices=DTYPES, help=f"floating-point type of the weights and data {_default('dtype')}")


def _gpu_flags(g):
    d = DEFAULTS
    g.add_argument("--backend", choices=tuple(BACKENDS),
                   help=f"array backend: numpy (the CPU), cupy (autogemm's untuned kernels), cublas (CuPy and "
                        f"cuBLAS) (default: {d['backend']})")
    g.add_argument("--use-tuned", action="store_true",
                   help="use the autogemm-tuned GPU kernels; without a CUDA device, fall back to NumPy "
                        "(unless --backend cupy is given too)")
    g.add_argument("--precision", choices=PRECISIONS,
                   help="the MLP's GEMMs on a GPU backend: fp32 (FP32-accurate), tf32 or bf16 (operands rounded "
                        "to TF32 or bfloat16 in each product, float32 sums and weights, where a faster kernel does "
                        f"so); NumPy computes fp32 (default: {d['precision']})")
    g.add_argument("--no-graph", action="store_true",
                   help="run the cupy backend's steps eagerly instead of replaying each epoch as one CUDA graph "
                        "(slower; gives the forward/backward/update time split)")


def _distributed_flags(g):
    g.add_argument("--parallel", choices=PARALLEL, default="auto",
                   help="split each batch's rows over the ranks (data: their gradients are all-reduced), the MLP's "
                        "hidden units (model: the logits are; one hidden layer) or nothing (none: every rank trains "
                        "the whole batch); auto: the split a cost model of this run predicts fastest (tuned kernel "
                        "times, all-reduce costs), none where no split is predicted to beat one GPU; the NumPy "
                        "backend: data (default: auto)")
    g.add_argument("--allreduce", choices=reductions.KINDS, default="auto",
                   help="the all-reduce (of the gradients, or of the logits with --parallel model): mpi (through "
                        "host memory; on a GPU, staged on the step's stream) or nccl (GPU to GPU, one GPU per rank); "
                        "on a GPU either is captured into the epoch's CUDA graph; auto: NCCL where every rank has a "
                        "GPU of its own, else CUDA-aware MPI where the library is, else mpi (default: auto)")
    g.add_argument("--no-overlap", action="store_true",
                   help="with --parallel data on a GPU backend: all-reduce each layer's gradients after the "
                        "backward pass instead of during it, beside the layers below (the same sums)")


def _output_flags(g):
    g.add_argument("--checkpoint", metavar="PATH",
                   help="write weights here after every epoch (atomically); an existing file needs --resume")
    g.add_argument("--resume", action="store_true", help="continue from --checkpoint's last finished epoch")
    g.add_argument("--log", metavar="PATH",
                   help="JSON run log, rewritten every epoch (default: runs/train-<UTC time>-<pid>.json)")
    g.add_argument("--no-log", action="store_true", help="write no run log")
    g.add_argument("--quiet", action="store_true", help="no progress bar, no per-epoch lines: only the result")


def resolve(args) -> Config:
    """Explicit flags, else the preset's or grading mode's values, else DEFAULTS."""
    is_cnn = args.model == "lenet" or args.layers is not None
    if is_cnn:
        _check_cnn_flags(args)
        if args.parallel == "model":
            raise NNError("--parallel model splits the MLP's hidden layer; a CNN trains with --parallel data")
        # stored and compared in one form: ' conv2x3 , dense8 ' resumes as conv2x3,dense8; '' is no network
        args.model, args.layers = "cnn", canonical(args.layers) if args.layers is not None else LENET
    preset = PRESETS.get(args.preset) or GRADING_MODES.get(args.grading_mode) or (CNN_DEFAULTS if is_cnn else {})
    values = {}
    for f in fields(Config):
        given = getattr(args, f.name)
        values[f.name] = given if given is not None else preset.get(f.name, DEFAULTS[f.name])
    values["hidden"] = tuple(values["hidden"])
    if not is_cnn and values["optimizer"] == "adam":
        raise NNError("--optimizer adam is for CNNs (--model lenet or --layers); the MLP trains with sgd")
    if len(values["hidden"]) >= checkpoint.MAX_LAYERS:
        raise NNError(f"--hidden: {len(values['hidden'])} hidden layers; at most {checkpoint.MAX_LAYERS - 1}")
    if values["precision"] != "fp32" and (is_cnn or values["dtype"] != "float32"):
        preset_flag = f"--preset {args.preset}" if args.preset else f"--grading-mode {args.grading_mode}"
        why = f" ({preset_flag} sets it: add --dtype float32, or drop --precision)" if args.dtype is None else ""
        raise NNError(f"--precision {values['precision']} rounds the MLP's float32 GEMM operands; "
                      + ("a CNN's kernels compute in fp32 only" if is_cnn else f"this run is {values['dtype']}{why}"))
    if args.use_tuned:
        if args.backend not in (None, "cupy"):
            raise NNError(f"--use-tuned runs the autogemm kernels; it cannot be combined with --backend {args.backend}")
        # alone, it falls back to NumPy where there is no GPU; with --backend cupy it needs one
        values["backend"] = "cupy" if args.backend == "cupy" or (cuda_available() and "cupy" in BACKENDS) else "numpy"
    asked_gpu = args.use_tuned or values["backend"] in ("cupy", "cublas")  # --use-tuned's fallback has no overlap
    if args.no_overlap and (not asked_gpu or args.parallel in ("model", "none")):
        raise NNError("--no-overlap is for --parallel data on a GPU backend (cupy, cublas), whose step all-reduces "
                      "each layer's gradients during the backward pass; the others reduce after it anyway")
    for flag, path in (("--checkpoint", args.checkpoint), ("--log", args.log), ("--data-dir", args.data_dir)):
        if path is not None and not path.strip():        # given, and empty: not the same as not given
            raise NNError(f"{flag} {path!r}: an empty path; give a file path, or leave {flag} out")
    if args.resume and not args.checkpoint:
        raise NNError("--resume needs --checkpoint PATH")
    if args.log and args.no_log:
        raise NNError("--log and --no-log contradict each other")
    return Config(**values)


def _check_cnn_flags(args):
    """NNError for flags that do not apply to a CNN, naming them."""
    if args.model == "lenet" and args.layers is not None:
        raise NNError("--model lenet and --layers both name the layers; give one")
    if args.model == "mlp":
        raise NNError("--layers builds a CNN; it cannot be combined with --model mlp")
    clashes = [flag for flag, given in (("--hidden", args.hidden), ("--preset", args.preset),
                                        ("--grading-mode", args.grading_mode)) if given is not None]
    if args.init not in (None, "he"):
        clashes.append(f"--init {args.init}")
    if clashes:
        raise NNError(f"{', '.join(clashes)} {'is' if len(clashes) == 1 else 'are'} for the MLP; a CNN takes "
                      "--layers, He init, and the other flags")


# ---------------------------------------------------------------- training

class EpochTimer:
    """Backend marks after each phase of each step, summed per phase when the epoch is over."""

    PHASES = ("forward", "backward", "comm", "update")

    def __init__(self, backend):
        self.backend = backend
        self.marks = [(None, backend.mark())]

    def lap(self, phase):
        self.marks.append((phase, self.backend.mark()))

    def totals_ms(self) -> dict:
        ms = dict.fromkeys(self.PHASES, 0.0)
        for (_, start), (phase, end) in zip(self.marks, self.marks[1:]):
            ms[phase] += self.backend.elapsed_ms(start, end)
        return ms


class Progress:
    """A rich progress bar over the batches of each epoch, on rank 0 at a terminal only."""

    def __init__(self, enabled):
        self.bar = None
        if enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as Bar

            self.bar = Bar(TextColumn("epoch {task.fields[epoch]}"), BarColumn(), MofNCompleteColumn(),
                           TimeElapsedColumn(), transient=True)

    def __enter__(self):
        if self.bar:
            self.bar.start()
        return self

    def __exit__(self, *exc):
        if self.bar:
            self.bar.stop()

    def epoch(self, label, steps):
        if self.bar:
            self.task = self.bar.add_task("", total=steps, epoch=label)

    def advance(self):
        if self.bar:
            self.bar.advance(self.task)

    def done(self):
        if self.bar:
            self.bar.remove_task(self.task)

    def print(self, line):
        """A line above the bar (not wrapped to the terminal's width), or a plain print0."""
        if self.bar:
            self.bar.console.print(line, soft_wrap=True, markup=False, highlight=False)
        else:
            print0(line, flush=True)


def _accuracy(model, split, dist, backend) -> float:
    """Fraction of `split` classified right, each rank counting its contiguous share (every rank
    all of it when the ranks split the model: each forward pass is a collective)."""
    if isinstance(model, ShardedMLP):
        return model.count_correct(backend.asarray(split.x), split.y) / len(split.y)
    sizes = split_sizes(len(split.y), dist.size)
    lo = sum(sizes[:dist.rank])
    hi = lo + sizes[dist.rank]
    correct = model.count_correct(backend.asarray(split.x[lo:hi]), split.y[lo:hi])
    return float(dist.sum([correct])[0]) / len(split.y)


def _setup(cfg, args, backend):
    """Data set and starting weights (from the checkpoint when resuming), once the network is
    known to fit in memory."""
    ds = load_dataset(name=cfg.dataset, data_dir=cfg.data_dir, scale=cfg.scale, dtype=np.dtype(cfg.dtype),
                      train_size=cfg.train_size)
    features = ds.train.x.shape[1]
    if cfg.model == "cnn":
        side = math.isqrt(features)
        if side * side != features:
            raise NNError(f"--layers: the data set's {features} features are not a square image")
        layers = parse_layers(cfg.layers, ds.classes, (1, side, side))
        sizes = (features, ds.classes)                  # the layers spec in the config holds the rest
        # from the layers' shapes alone, before any weight exists (conv65536x3's dense layer is 3.5 GB)
        _check_memory(cfg, sizes, backend, cnn.bytes_needed(layers, cfg.batch, backend.dtype.itemsize, cfg.optimizer),
                      8 * sum(layer.params for layer in layers))
        try:
            fresh = cnn.init_cnn_params(layers, cfg.seed)
        except MemoryError as e:
            raise NNError(_out_of_memory(e, cfg)) from None
    else:
        layers, sizes = None, (features, *cfg.hidden, ds.classes)
        fresh = None
        _check_memory(cfg, sizes, backend, bytes_needed(sizes, cfg.batch, backend.dtype.itemsize), 8 * param_count(sizes))
    if args.resume:
        shapes = [(w.shape, b.shape) for w, b in fresh] if fresh is not None else None
        ckpt = checkpoint.load(args.checkpoint, cfg.fingerprint(sizes), cfg.dtype, shapes)
    else:
        if args.checkpoint and os.path.lexists(args.checkpoint):
            raise NNError(f"checkpoint {args.checkpoint} exists; pass --resume to continue it, "
                          "or choose another path (it is never overwritten by a fresh run)")
        params = fresh if fresh is not None else init_params(sizes, cfg.init, cfg.seed)
        ckpt = checkpoint.Checkpoint(params, 0, cfg.fingerprint(sizes), run=checkpoint.new_run_id())
    return ds, sizes, ckpt, layers


def _sample_hash(ds) -> str:
    """A short hash of the whole data set, every image and label: ranks that read different files,
    or files that differ in one pixel, disagree on it (hashlib reads the arrays in place: well under
    a second for Fashion-MNIST)."""
    digest = hashlib.sha256()
    for split in (ds.train, ds.val, ds.test):
        digest.update(np.ascontiguousarray(split.x))
        digest.update(np.ascontiguousarray(split.y))
    return digest.hexdigest()[:16]


def _check_memory(cfg, sizes, backend, on_backend: int, on_host: int):
    """NNError when the network cannot fit: the backend holds `on_backend` bytes (the weights,
    their gradient, a batch of activations), the host `on_host` (the float64 initial weights; one
    memory on NumPy)."""
    if backend.name == "numpy":
        needs = [("host", on_host + on_backend, host_free_bytes())]
    else:
        needs = [(backend.name, on_backend, backend.free_bytes()), ("host", on_host, host_free_bytes())]
    for where, need, free in needs:
        if free is not None and need > free:
            network = cfg.layers if cfg.model == "cnn" else "-".join(map(str, sizes))
            raise NNError(f"the network {network} in {cfg.dtype} with batch {cfg.batch} needs "
                          f"about {_bytes(need)} of {where} memory and {_bytes(free)} is free; "
                          f"{_smaller(cfg)}")


def _bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000


def _smaller(cfg) -> str:
    """What to change for a network that does not fit: the flags of its kind."""
    return f"choose a smaller {'--layers' if cfg is not None and cfg.model == 'cnn' else '--hidden'} or --batch"


def _out_of_memory(e: MemoryError, cfg=None) -> str:
    return f"out of memory: {str(e) or 'an allocation failed'}; {_smaller(cfg)}"


def _agreed(dist, fn, on_rank=lambda rank: True):
    """fn() on the ranks that `on_rank` admits, then Dist.agree: a bad input on any rank ends
    every rank with one line. Returns fn's result (None where it did not run)."""
    result, error = None, None
    if on_rank(dist.rank):
        try:
            result = fn()
        except (NNError, AutogemmError) as e:
            error = str(e)
        except MemoryError as e:
            error = _out_of_memory(e)
    dist.agree(error)
    return result


def run(cfg: Config, args, dist: Dist, interrupt: Interrupt | None = None, argv=()) -> dict:
    """Train as configured; returns the run log (rank 0 also prints it and writes it and checkpoints).

    Every failure that ranks can agree on is a RanksFailed on all of them; a Ctrl-C honoured at a
    step boundary is an Interrupted on all of them, its message saying what was kept."""
    options = {"tuned": args.use_tuned} if cfg.backend == "cupy" else {}
    options |= {"precision": cfg.precision} if cfg.backend in ("cupy", "cublas") else {}
    backend = _agreed(dist, lambda: get_backend(cfg.backend, cfg.dtype, **options))
    outputs = Outputs(args.checkpoint, args.log, args.resume, lambda log: fingerprint(log["config"], log["sizes"]))

    def setup():
        found = _setup(cfg, args, backend)
        if dist.rank == 0:
            outputs.claim(cfg.fingerprint(found[1]), found[2].run)
        return found

    # Rank 0 reads the files first: a bad file fails there alone, and a download happens once.
    first = _agreed(dist, setup, lambda rank: rank == 0)
    others = _agreed(dist, setup, lambda rank: rank != 0)
    ds, sizes, ckpt, layers = first or others
    if dist.size > 1:
        dist.same_everywhere({"data set sizes": [len(ds.train.y), len(ds.val.y), len(ds.test.y)],
                              "data set (a hash of every image)": _sample_hash(ds),
                              "network": list(sizes), "checkpoint epoch": ckpt.epoch},
                             "every rank must read the same data set and checkpoint")

    n_train = len(ds.train.y)
    kind = _agreed(dist, lambda: reductions.resolve(args.allreduce, dist, backend))
    if args.parallel == "model":
        _agreed(dist, lambda: check_split(sizes, dist.size))
    parallel, why = _agreed(dist, lambda: _split(cfg, args, dist, backend, sizes, kind))
    model_split, whole_batch = parallel == "model", parallel in ("model", "none")
    # Rows: this rank's share of each batch, or every row when the ranks split the model or nothing.
    index, spans = rank_rows(n_train, cfg.batch, 0, 1) if whole_batch else rank_rows(n_train, cfg.batch, dist.rank,
                                                                                       dist.size)
    x_train = backend.read_only(backend.asarray(ds.train.x[index]))  # X: (rows of this rank, D) dtype
    y_train = backend.asarray(ds.train.y[index])  # (rows of this rank,) int64
    max_rows = max(count for _, count in spans)
    allreduce = None if parallel == "none" else _agreed(
        dist, lambda: reductions.choose(kind, dist, backend, not args.no_overlap))
    if layers is not None:
        model = cnn.CNN(backend, layers, cfg.activation, ckpt.params)
        step = cnn.CNNStep(model, max_rows, cfg.batch, cfg.optimizer, cfg.lr, cfg.reg)
        if ckpt.state is not None:
            step.load_state(ckpt.state)
    elif model_split:
        model = ShardedMLP(backend, sizes, cfg.activation, ckpt.params, dist.rank, dist.size,
                           allreduce or (lambda buf: buf))
        step = ShardedStep(model, max_rows, cfg.batch, cfg.lr, cfg.reg)
    else:
        model = MLP(backend, sizes, cfg.activation, ckpt.params)
        step = Step(model, max_rows, cfg.batch, cfg.lr, cfg.reg)
    # A model split all-reduces its logits inside each forward pass, a data split its gradients during
    # or after the backward pass; either is captured into the epoch's graph when the all-reduce can be.
    graph_safe = allreduce is None or getattr(allreduce, "graph_safe", False)
    epoch_pass = Epoch(step, spans, x_train, y_train, None if model_split else allreduce,
                       graph=not args.no_graph and graph_safe)
    dist.barrier()  # ranks set up one after another; the first epoch's times should not count that
    # what each rank sends a step (a ring all-reduce): the logits of a model split, else every gradient
    elements = 0 if parallel == "none" else step_elements(sizes, cfg.batch, parallel) if layers is None \
        else model.flat.size
    sent = ring_bytes(elements, backend.dtype.itemsize, dist.size)
    reduced_by = reductions.describe(allreduce, parallel)

    log = {"run": ckpt.run, "config": asdict(cfg), "sizes": list(sizes), "resumed_from_epoch": ckpt.epoch if args.resume else None,
           "data": {"source": ds.source, "train": n_train, "val": len(ds.val.y), "test": len(ds.test.y)},
           "environment": _environment(backend, dist, parallel, sent, reduced_by, why),
           "epochs": ckpt.history, "final": None}
    if not args.quiet:
        network = describe(layers) if layers is not None else "-".join(map(str, sizes))
        optimizer = f", {cfg.optimizer}" if layers is not None else ""
        precision = ""
        if cfg.precision != "fp32":
            precision = (f" ({cfg.precision} GEMMs)" if "precision" in options
                         else f" (--precision {cfg.precision} ignored: the NumPy backend is float32)")
        print0(f"{network} {cfg.activation}{optimizer}, {cfg.dtype}{precision}, {backend.name} backend, "
               f"{dist.size} rank{'s' * (dist.size > 1)}"
               + (_split_words(parallel, why, sent, reduced_by) if dist.size > 1 else "")
               + f"; {cfg.dataset} {n_train}/{len(ds.val.y)}/{len(ds.test.y)} "
               f"from {ds.source}; batch {cfg.batch} ({len(spans)} steps), lr {cfg.lr:g}, reg {cfg.reg:g}"
               + (f"; resumed after epoch {ckpt.epoch}" if args.resume else ""), flush=True)

    def requested() -> bool:
        return interrupt is not None and interrupt.requested

    def stop() -> bool:
        """Whether a rank was asked to stop (collective: every rank asks after every eager step)."""
        return dist.any_rank(requested())

    hint = ResumeHint(args.checkpoint, argv, dist.size, ckpt.epoch)

    def stopped(epoch, finished):
        where = f"{'after' if finished else 'in'} epoch {epoch}"
        if dist.rank == 0:
            log["final"] = {"interrupted": where}
            outputs.write_log(log)
        return Interrupted(f"{signals.interrupted(interrupt.signum)} {where}; {hint.say()}", 128 + interrupt.signum)

    try:
        if ckpt.epoch < cfg.epochs and stop():     # a stop signal during set-up
            raise stopped(ckpt.epoch + 1, False)
        # Overflow on the NumPy backend is no warning: a run that diverges is stopped below, in one line.
        with Progress(dist.rank == 0 and not args.quiet and sys.stdout.isatty()) as progress, \
                np.errstate(all="ignore"), (interrupt.deferred() if interrupt else contextlib.nullcontext()):
            for epoch in range(ckpt.epoch + 1, cfg.epochs + 1):
                progress.epoch(f"{epoch}/{cfg.epochs}", len(spans))
                timer = EpochTimer(backend)
                start = time.perf_counter()
                finished = epoch_pass.run(timer.lap, progress.advance, stop)
                backend.synchronize()
                train_ms = (time.perf_counter() - start) * 1e3
                progress.done()
                if not finished:
                    raise stopped(epoch, False)

                start = time.perf_counter()
                if model_split:   # every rank has the whole loss and its slices' share of the L2 term
                    reg_term = float(dist.sum([model.reg_term(cfg.reg)])[0])
                    loss = float(backend.to_numpy(step.loss_sum)[0]) / n_train + reg_term
                elif parallel == "none":  # every rank has the whole loss and the whole network
                    loss = float(backend.to_numpy(step.loss_sum)[0]) / n_train + model.reg_term(cfg.reg)
                else:
                    loss = float(dist.sum(backend.to_numpy(step.loss_sum))[0]) / n_train + model.reg_term(cfg.reg)
                if dist.any_rank(not (math.isfinite(loss) and model.finite())):
                    raise RanksFailed(f"training diverged in epoch {epoch} (loss {loss:g}, or weights no longer "
                                      f"finite); try a smaller --lr (now {cfg.lr:g}) or --reg (now {cfg.reg:g}); "
                                      f"{hint.say(command=False)}")
                val = _accuracy(model, ds.val, dist, backend)
                eval_ms = (time.perf_counter() - start) * 1e3
                phases = {} if epoch_pass.graphed else timer.totals_ms()
                ckpt.history.append({"epoch": epoch, "loss": loss, "val_accuracy": val,
                                     "ms": {**phases, "train": train_ms, "eval": eval_ms}})
                if not args.quiet:
                    split = ("one CUDA graph" if epoch_pass.graphed else
                             f"fwd {phases['forward']:.1f}  bwd {phases['backward']:.1f}  upd {phases['update']:.1f}"
                             f"  comm {phases['comm']:.1f} ms")
                    progress.print(f"epoch {epoch:>3}/{cfg.epochs}  loss {loss:.4f}  val {100 * val:6.2f}%  | {split}"
                                   f"  | epoch {train_ms:.1f} ms (+ eval {eval_ms:.0f})")

                error = None
                params = None
                if args.checkpoint and model_split:   # rank 0 writes the whole network: the slices gathered
                    shards = dist.gather(model.params_numpy())
                    params = unshard(shards) if dist.rank == 0 else None
                elif args.checkpoint and dist.rank == 0:
                    params = model.params_numpy()
                if dist.rank == 0:
                    try:
                        if args.checkpoint:
                            ckpt.params, ckpt.epoch = params, epoch
                            ckpt.state = step.state_numpy() if layers is not None and cfg.optimizer == "adam" else None
                            outputs.save_checkpoint(ckpt)
                        outputs.write_log(log)
                    except NNError as e:
                        error = str(e)
                stop_now = dist.agree(error, requested())    # a write that failed on rank 0 ends every rank
                hint.epoch = epoch
                if stop_now and epoch < cfg.epochs:
                    raise stopped(epoch, True)

        test = _accuracy(model, ds.test, dist, backend)
        val = ckpt.history[-1]["val_accuracy"] if ckpt.history else _accuracy(model, ds.val, dist, backend)
        log["final"] = {"val_accuracy": val, "test_accuracy": test}
        print0(f"test accuracy {100 * test:.2f}% ({round(test * len(ds.test.y))}/{len(ds.test.y)})"
               + (f"; log {args.log}" if args.log else ""), flush=True)
        if dist.rank == 0:
            outputs.write_log(log)
    except (RanksFailed, Interrupted):   # raised on every rank alike: the communicator still ends together
        _close_communicator(allreduce, epoch_pass, dist)
        raise
    except KeyboardInterrupt as stop:    # a second stop signal: one process stops where it was, the hint holds
        if dist.size > 1:
            raise
        words = signals.interrupted(signals.signum_of(stop))
        raise Interrupted(f"{words}; {hint.say()}", signals.status(stop)) from None
    _close_communicator(allreduce, epoch_pass, dist)
    return log


def _close_communicator(allreduce, epoch_pass, dist):
    """Free the all-reduce's communicator on every rank together (NCCL's, left to the interpreter's
    exit, hung ranks on two H200s); the epoch's graph may hold its work, so the graph goes first."""
    if hasattr(allreduce, "close"):
        epoch_pass.release()
        dist.barrier()
        allreduce.close()


def _split(cfg, args, dist, backend, sizes, kind: str) -> tuple[str, str]:
    """(what the ranks split, why): auto's choice from nn.cost_model, or --parallel as given with a
    warning where the model predicts it slower than one GPU; rank 0's prediction, shared (ranks on
    other hosts may hold other tuned files)."""
    if dist.size == 1:
        return "data", ""
    if backend.name != "cupy" or kind not in cost_model.LINKS:
        if args.parallel != "auto":
            return args.parallel, ""
        return "data", f"auto: the {backend.name} backend: data split (no tuned kernel times to predict from)"
    words, error = None, None
    if dist.rank == 0:
        try:    # a tuned file that cannot be read fails here on rank 0 alone: the others wait in the bcast
            gpu = backend.device_name if args.use_tuned and autogemm.has_records(backend.device_name) else None
            plan = cost_model.predict(sizes, cfg.activation, cfg.batch, dist.size, cost_model.LINKS[kind], gpu,
                                      cfg.dtype, cfg.precision, cfg.layers if cfg.model == "cnn" else None)
            words = (plan.choice, plan.reason) if args.parallel == "auto" else (args.parallel,
                                                                                 plan.warning(args.parallel))
        except (NNError, AutogemmError) as e:
            error = str(e)
    words, error = dist.comm.bcast((words, error), root=0)
    if error is not None:
        raise NNError(f"rank 0 of {dist.size}: {error}")
    return words


def _split_words(parallel: str, why: str, sent: int, reduced_by: str) -> str:
    """The start-up line's words on the split: what is split and sent, and why auto chose it (or
    what the cost model says of the split asked for)."""
    why = f"; {why}" if why else ""
    if parallel == "none":
        return f", no split: every rank trains the whole batch{why}"
    return f", {parallel} parallel ({_bytes(sent)} sent by each rank a step, {reduced_by}{why})"


def _environment(backend, dist, parallel: str, sent: int, allreduce: str, why: str = "") -> dict:
    """What ran: the backend and the precision its GEMMs computed at (the NumPy backend's: fp32,
    whatever --precision asked), ranks, the split (and why auto chose it), bytes, versions."""
    return {"python": platform.python_version(), "numpy": np.__version__, "platform": platform.platform(),
            "backend": backend.name, "precision": getattr(backend, "precision", "fp32"), "ranks": dist.size,
            "parallel": parallel, "parallel_reason": why, "bytes_sent_per_step": sent,
            "allreduce": allreduce,
            "cpus": os.cpu_count()}


# ---------------------------------------------------------------- entry point

# Settings ranks may differ in: the run log's path holds the process id, and each host may keep the
# data set in a folder of its own (the data itself is compared, by a hash).
_PER_RANK = ("log", "no_log", "quiet", "data_dir")


def _parse(argv):
    args = build_parser().parse_args(argv)
    return args, resolve(args)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    try:
        dist = maybe_init_dist()
    except NNError as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    cfg = None
    with Interrupt(always_deferred=dist.size > 1) as interrupt:
        try:
            args, cfg = _agreed(dist, lambda: _parse(argv))
            dist.same_everywhere({k: v for k, v in {**asdict(cfg), **vars(args)}.items() if k not in _PER_RANK},
                                 "start every rank with the same flags")
            if args.use_tuned and cfg.backend == "numpy":
                print0("--use-tuned: no CUDA device (or no GPU backend) here; falling back to the NumPy backend",
                       flush=True)
            if not args.log and not args.no_log:
                stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
                args.log = f"runs/train-{stamp}-{os.getpid()}.json"
            elif args.no_log:
                args.log = None
            run(cfg, args, dist, interrupt, argv)
        except RanksFailed as e:  # every rank raised it: rank 0 says it once
            print0(f"error: {one_line(e)}", file=sys.stderr, flush=True)
            return 2
        except Interrupted as e:
            print0(one_line(e), file=sys.stderr, flush=True)
            dist.leave(e.status)
            return e.status
        except KeyboardInterrupt as e:  # a second stop signal: stop now, wherever this rank was
            print0(signals.interrupted(signals.signum_of(e)), file=sys.stderr, flush=True)
            dist.exit_all(signals.status(e))
            return signals.status(e)
        except (NNError, AutogemmError) as e:  # this rank alone, mid-run: a corrupted tuned/ file, a bad config
            dist.fail(e)
            return 2
        except MemoryError as e:
            dist.fail(_out_of_memory(e, cfg))
            return 2
        except Exception as e:
            dist.crash(e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
