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
import math
import os
import re
import sys
import time
from dataclasses import asdict, fields

# Under mpirun, each rank's BLAS gets its share of this host's cores, not all of them (ranks
# oversubscribing the cores run many times slower). This must run before NumPy loads, hence above the imports below.
_LOCAL = os.environ.get("MPI_LOCALNRANKS") or os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") or "1"
_LOCAL_RANKS = int(_LOCAL) if _LOCAL.isascii() and _LOCAL.isdigit() and len(_LOCAL) < 7 else 1  # else ignored
if _LOCAL_RANKS > 1:
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, str(max(1, (os.cpu_count() or 1) // _LOCAL_RANKS)))

import numpy as np

from autogemm import AutogemmError, arguments, signals
from nn import allreduce as reductions
from nn import checkpoint, cnn
from nn.backends import ACTIVATIONS, BACKENDS, DTYPES, PRECISIONS, cuda_available
from nn.config import CNN_DEFAULTS, DEFAULTS, GRADING_MODES, MODELS, PARALLEL, PRESETS, Config, RunConfig
from nn.data import DATASETS, SCALES
from nn.dist import Dist, Interrupt, Interrupted, RanksFailed, maybe_init_dist, print0
from nn.errors import ArgumentParser, NNError, one_line
from nn.layers import LENET, canonical, describe
from nn.mlp import INITS
from nn.outputs import ResumeHint
from nn.trainer import Trainer, agreed, byte_words, out_of_memory

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
                   help="the GEMMs and convolutions on a GPU backend: fp32 (FP32-accurate), tf32 or bf16 (operands rounded "
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
    if values["precision"] != "fp32" and values["dtype"] != "float32":
        preset_flag = f"--preset {args.preset}" if args.preset else f"--grading-mode {args.grading_mode}"
        why = f" ({preset_flag} sets it: add --dtype float32, or drop --precision)" if args.dtype is None else ""
        raise NNError(f"--precision {values['precision']} rounds float32 GEMM and convolution operands; "
                      f"this run is {values['dtype']}{why}")
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


def run_config(args, argv=()) -> RunConfig:
    """The one typed configuration of the run `args` asks for (resolve's Config, the run's options);
    the run log's default path, runs/train-<UTC time>-<pid>.json, is made here."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    log = None if args.no_log else args.log or f"runs/train-{stamp}-{os.getpid()}.json"
    return RunConfig(resolve(args), use_tuned=args.use_tuned, graph=not args.no_graph, parallel=args.parallel,
                     allreduce=args.allreduce, overlap=not args.no_overlap, checkpoint=args.checkpoint,
                     resume=args.resume, log=log, quiet=args.quiet, argv=tuple(argv))


# ---------------------------------------------------------------- training

def run(config: RunConfig, dist: Dist, interrupt: Interrupt | None = None) -> dict:
    """Train as configured, saying each epoch; returns the run log (rank 0 also writes it and checkpoints).

    Every failure that ranks can agree on is a RanksFailed on all of them; a Ctrl-C honoured at a
    step boundary is an Interrupted on all of them, its message saying what was kept."""
    cfg = config.config
    trainer = Trainer(config, dist)
    if not config.quiet:
        print0(_start_line(trainer), flush=True)
    hint = ResumeHint(config.checkpoint, config.argv, dist.size, trainer.ckpt.epoch)
    requested = lambda: interrupt is not None and interrupt.requested  # noqa: E731
    stop = lambda: dist.any_rank(requested())   # noqa: E731  (collective: every rank asks after every eager step)

    def stopped(epoch, finished):
        where = f"{'after' if finished else 'in'} epoch {epoch}"
        if dist.rank == 0:
            trainer.finish({"interrupted": where})
        return Interrupted(f"{signals.interrupted(interrupt.signum)} {where}; {hint.say()}", 128 + interrupt.signum)

    try:
        if trainer.ckpt.epoch < cfg.epochs and stop():     # a stop signal during set-up
            raise stopped(trainer.ckpt.epoch + 1, False)
        # Overflow on the NumPy backend is no warning: a run that diverges is stopped below, in one line.
        with Progress(dist.rank == 0 and not config.quiet and sys.stdout.isatty()) as progress, \
                np.errstate(all="ignore"), (interrupt.deferred() if interrupt else contextlib.nullcontext()):
            for epoch in range(trainer.ckpt.epoch + 1, cfg.epochs + 1):
                progress.epoch(f"{epoch}/{cfg.epochs}", len(trainer.spans))
                finished, train_ms, timer = trainer.train_epoch(progress.advance, stop)
                progress.done()
                if not finished:
                    raise stopped(epoch, False)
                start = time.perf_counter()
                loss = trainer.loss()
                if trainer.diverged(loss):
                    raise RanksFailed(f"training diverged in epoch {epoch} (loss {loss:g}, or weights no longer "
                                      f"finite); try a smaller --lr (now {cfg.lr:g}) or --reg (now {cfg.reg:g}); "
                                      f"{hint.say(command=False)}")
                entry = trainer.record(epoch, loss, train_ms, timer, start)
                if not config.quiet:
                    progress.print(_epoch_line(entry, cfg.epochs, trainer.epoch_pass.graphed))
                stop_now = dist.agree(trainer.save(epoch), requested())    # a write failed on rank 0 ends every rank
                hint.epoch = epoch
                if stop_now and epoch < cfg.epochs:
                    raise stopped(epoch, True)
        test = trainer.accuracy(trainer.ds.test)
        val = trainer.ckpt.history[-1]["val_accuracy"] if trainer.ckpt.history else trainer.accuracy(trainer.ds.val)
        n_test = len(trainer.ds.test.y)
        print0(f"test accuracy {100 * test:.2f}% ({round(test * n_test)}/{n_test})"
               + (f"; log {config.log}" if config.log else ""), flush=True)
        trainer.finish({"val_accuracy": val, "test_accuracy": test})
    except (RanksFailed, Interrupted):   # raised on every rank alike: the communicator still ends together
        trainer.close()
        raise
    except KeyboardInterrupt as e:    # a second stop signal: one process stops where it was, the hint holds
        if dist.size > 1:
            raise
        raise Interrupted(f"{signals.interrupted(signals.signum_of(e))}; {hint.say()}", signals.status(e)) from None
    trainer.close()
    return trainer.log


def _start_line(trainer: Trainer) -> str:
    """What trains, on what, split how, on which data: the line a run starts with."""
    cfg, dist, ds = trainer.cfg, trainer.dist, trainer.ds
    network = describe(trainer.layers) if trainer.layers is not None else "-".join(map(str, trainer.sizes))
    optimizer = f", {cfg.optimizer}" if trainer.layers is not None else ""
    precision = ""
    if cfg.precision != "fp32":
        computed = "GEMMs and convolutions" if trainer.layers is not None else "GEMMs"
        precision = (f" ({cfg.precision} {computed})" if cfg.backend in ("cupy", "cublas")
                     else f" (--precision {cfg.precision} ignored: the NumPy backend is float32)")
    return (f"{network} {cfg.activation}{optimizer}, {cfg.dtype}{precision}, {trainer.backend.name} backend, "
            f"{dist.size} rank{'s' * (dist.size > 1)}"
            + (_split_words(trainer.parallel, trainer.why, trainer.sent, trainer.reduced_by) if dist.size > 1 else "")
            + f"; {cfg.dataset} {trainer.n_train}/{len(ds.val.y)}/{len(ds.test.y)} "
            f"from {ds.source}; batch {cfg.batch} ({len(trainer.spans)} steps), lr {cfg.lr:g}, reg {cfg.reg:g}"
            + (f"; resumed after epoch {trainer.ckpt.epoch}" if trainer.run.resume else ""))


def _epoch_line(entry: dict, epochs: int, graphed: bool) -> str:
    ms = entry["ms"]
    split = ("one CUDA graph" if graphed else
             f"fwd {ms['forward']:.1f}  bwd {ms['backward']:.1f}  upd {ms['update']:.1f}  comm {ms['comm']:.1f} ms")
    return (f"epoch {entry['epoch']:>3}/{epochs}  loss {entry['loss']:.4f}  val {100 * entry['val_accuracy']:6.2f}%  "
            f"| {split}  | epoch {ms['train']:.1f} ms (+ eval {ms['eval']:.0f})")


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


def _split_words(parallel: str, why: str, sent: int, reduced_by: str) -> str:
    """The start-up line's words on the split: what is split and sent, and why auto chose it (or
    what the cost model says of the split asked for)."""
    why = f"; {why}" if why else ""
    if parallel == "none":
        return f", no split: every rank trains the whole batch{why}"
    return f", {parallel} parallel ({byte_words(sent)} sent by each rank a step, {reduced_by}{why})"


# ---------------------------------------------------------------- entry point

# Settings ranks may differ in: the run log's path holds the process id, and each host may keep the
# data set in a folder of its own (the data itself is compared, by a hash).
_PER_RANK = ("log", "no_log", "quiet", "data_dir")


def _parse(argv):
    args = build_parser().parse_args(argv)
    return args, run_config(args, argv)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    try:
        dist = maybe_init_dist()
    except NNError as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    config = None
    with Interrupt(always_deferred=dist.size > 1) as interrupt:
        try:
            args, config = agreed(dist, lambda: _parse(argv))
            dist.same_everywhere({k: v for k, v in {**asdict(config.config), **vars(args)}.items() if k not in _PER_RANK},
                                 "start every rank with the same flags")
            if config.use_tuned and config.config.backend == "numpy":
                print0("--use-tuned: no CUDA device (or no GPU backend) here; falling back to the NumPy backend",
                       flush=True)
            run(config, dist, interrupt)
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
            dist.fail(out_of_memory(e, config and config.config))
            return 2
        except Exception as e:
            dist.crash(e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
