"""One training run of a RunConfig (nn/config.py), on every rank alike: `Trainer` sets up the backend,
data, weights, the ranks' split, the model and its step, then trains and evaluates epoch by epoch
and writes what rank 0 keeps (checkpoint, run log). nn.train drives it and says what happens.

Every set-up failure that ranks can agree on is a RanksFailed on all of them (`agreed`).
"""
import hashlib
import math
import os
import platform
import time
from dataclasses import asdict

import numpy as np

import autogemm
from autogemm import AutogemmError
from nn import allreduce as reductions
from nn import checkpoint, cnn, cost_model
from nn.backends import get_backend
from nn.backends.base import host_free_bytes
from nn.config import RunConfig, fingerprint
from nn.data import load_dataset
from nn.dist import Dist, rank_rows, split_sizes
from nn.errors import NNError
from nn.layers import parse_layers
from nn.mlp import MLP, Epoch, Step, bytes_needed, init_params, param_count
from nn.model_parallel import ShardedMLP, ShardedStep, check_split, ring_bytes, step_elements, unshard
from nn.outputs import Outputs


class Trainer:
    """A run set up on this rank (collective: every rank constructs its own, together)."""

    def __init__(self, run: RunConfig, dist: Dist):
        cfg = self.cfg = run.config
        self.run, self.dist = run, dist
        options = {"tuned": run.use_tuned} if cfg.backend == "cupy" else {}
        options |= {"precision": cfg.precision} if cfg.backend in ("cupy", "cublas") else {}
        backend = self.backend = agreed(dist, lambda: get_backend(cfg.backend, cfg.dtype, **options))
        self.outputs = Outputs(run.checkpoint, run.log, run.resume, lambda log: fingerprint(log["config"], log["sizes"]))
        self.ds, self.sizes, self.ckpt, self.layers = self._load()
        self.n_train = len(self.ds.train.y)
        kind = agreed(dist, lambda: reductions.resolve(run.allreduce, dist, backend))
        if run.parallel == "model":
            agreed(dist, lambda: check_split(self.sizes, dist.size))
        self.parallel, self.why = agreed(dist, lambda: choose_split(run, dist, backend, self.sizes, kind))
        # Rows: this rank's share of each batch, or every row when the ranks split the model or nothing.
        whole_batch = self.parallel in ("model", "none")
        index, self.spans = rank_rows(self.n_train, cfg.batch, *((0, 1) if whole_batch else (dist.rank, dist.size)))
        x_train = backend.read_only(backend.asarray(self.ds.train.x[index]))  # X: (rows of this rank, D) dtype
        y_train = backend.asarray(self.ds.train.y[index])  # (rows of this rank,) int64
        self.allreduce = None if self.parallel == "none" else agreed(
            dist, lambda: reductions.choose(kind, dist, backend, run.overlap))
        self.model, self.step = self._model(max(count for _, count in self.spans))
        # A model split all-reduces its logits inside each forward pass, a data split its gradients during
        # or after the backward pass; either is captured into the epoch's graph when the all-reduce can be.
        graph_safe = self.allreduce is None or getattr(self.allreduce, "graph_safe", False)
        self.epoch_pass = Epoch(self.step, self.spans, x_train, y_train,
                                None if self.parallel == "model" else self.allreduce, graph=run.graph and graph_safe)
        dist.barrier()  # ranks set up one after another; the first epoch's times should not count that
        # what each rank sends a step (a ring all-reduce): the logits of a model split, else every gradient
        elements = 0 if self.parallel == "none" else step_elements(self.sizes, cfg.batch, self.parallel) \
            if self.layers is None else self.model.flat.size
        self.sent = ring_bytes(elements, backend.dtype.itemsize, dist.size)
        self.reduced_by = reductions.describe(self.allreduce, self.parallel)
        self.log = {"run": self.ckpt.run, "config": asdict(cfg), "sizes": list(self.sizes),
                    "resumed_from_epoch": self.ckpt.epoch if run.resume else None,
                    "data": {"source": self.ds.source, "train": self.n_train, "val": len(self.ds.val.y),
                             "test": len(self.ds.test.y)},
                    "environment": environment(backend, dist, self.parallel, self.sent, self.reduced_by, self.why),
                    "epochs": self.ckpt.history, "final": None}

    def _load(self):
        """(data set, sizes, checkpoint, CNN layers or None): rank 0 reads the files first (a bad file
        fails there alone, and a download happens once), then the others; each rank's the same."""
        cfg, dist = self.cfg, self.dist

        def load():
            found = setup(cfg, self.run, self.backend)
            if dist.rank == 0:
                self.outputs.claim(cfg.fingerprint(found[1]), found[2].run)
            return found

        first = agreed(dist, load, lambda rank: rank == 0)
        others = agreed(dist, load, lambda rank: rank != 0)
        ds, sizes, ckpt, layers = first or others
        if dist.size > 1:
            dist.same_everywhere({"data set sizes": [len(ds.train.y), len(ds.val.y), len(ds.test.y)],
                                  "data set (a hash of every image)": sample_hash(ds),
                                  "network": list(sizes), "checkpoint epoch": ckpt.epoch},
                                 "every rank must read the same data set and checkpoint")
        return ds, sizes, ckpt, layers

    def _model(self, max_rows: int):
        """(model, step): the CNN, the MLP's hidden-unit slice of this rank (a model split), or the MLP."""
        cfg, ckpt, dist = self.cfg, self.ckpt, self.dist
        if self.layers is not None:
            model = cnn.CNN(self.backend, self.layers, cfg.activation, ckpt.params)
            step = cnn.CNNStep(model, max_rows, cfg.batch, cfg.optimizer, cfg.lr, cfg.reg)
            if ckpt.state is not None:
                step.load_state(ckpt.state)
            return model, step
        if self.parallel == "model":
            model = ShardedMLP(self.backend, self.sizes, cfg.activation, ckpt.params, dist.rank, dist.size,
                               self.allreduce or (lambda buf: buf))
            return model, ShardedStep(model, max_rows, cfg.batch, cfg.lr, cfg.reg)
        model = MLP(self.backend, self.sizes, cfg.activation, ckpt.params)
        return model, Step(model, max_rows, cfg.batch, cfg.lr, cfg.reg)

    # ---- an epoch ---------------------------------------------------------------------------

    def train_epoch(self, advance, stop) -> tuple[bool, float, "EpochTimer"]:
        """(finished, ms, the phases' marks): one epoch's steps; unfinished where `stop()` said so."""
        timer = EpochTimer(self.backend)
        start = time.perf_counter()
        finished = self.epoch_pass.run(timer.lap, advance, stop)
        self.backend.synchronize()
        return finished, (time.perf_counter() - start) * 1e3, timer

    def loss(self) -> float:
        """The epoch's mean loss with the L2 term, the same on every rank (collective)."""
        cfg, dist, backend, model = self.cfg, self.dist, self.backend, self.model
        if self.parallel == "model":   # every rank has the whole loss and its slices' share of the L2 term
            reg_term = float(dist.sum([model.reg_term(cfg.reg)])[0])
            return float(backend.to_numpy(self.step.loss_sum)[0]) / self.n_train + reg_term
        if self.parallel == "none":  # every rank has the whole loss and the whole network
            return float(backend.to_numpy(self.step.loss_sum)[0]) / self.n_train + model.reg_term(cfg.reg)
        return float(dist.sum(backend.to_numpy(self.step.loss_sum))[0]) / self.n_train + model.reg_term(cfg.reg)

    def diverged(self, loss: float) -> bool:
        """Whether the loss or the weights are no longer finite on any rank (collective)."""
        return self.dist.any_rank(not (math.isfinite(loss) and self.model.finite()))

    def record(self, epoch: int, loss: float, train_ms: float, timer: "EpochTimer", eval_start: float) -> dict:
        """The epoch's entry of the run log, validated (collective) and appended to the history."""
        val = self.accuracy(self.ds.val)
        eval_ms = (time.perf_counter() - eval_start) * 1e3
        phases = {} if self.epoch_pass.graphed else timer.totals_ms()
        entry = {"epoch": epoch, "loss": loss, "val_accuracy": val, "ms": {**phases, "train": train_ms, "eval": eval_ms}}
        self.ckpt.history.append(entry)
        return entry

    def accuracy(self, split) -> float:
        """Fraction of `split` classified right, each rank counting its contiguous share (every rank
        all of it when the ranks split the model: each forward pass is a collective)."""
        backend, dist = self.backend, self.dist
        if isinstance(self.model, ShardedMLP):
            return self.model.count_correct(backend.asarray(split.x), split.y) / len(split.y)
        sizes = split_sizes(len(split.y), dist.size)
        lo = sum(sizes[:dist.rank])
        hi = lo + sizes[dist.rank]
        correct = self.model.count_correct(backend.asarray(split.x[lo:hi]), split.y[lo:hi])
        return float(dist.sum([correct])[0]) / len(split.y)

    # ---- what rank 0 writes -------------------------------------------------------------------

    def save(self, epoch: int) -> str | None:
        """Rank 0 writes the checkpoint (the whole network: a model split's slices gathered, collective)
        and the run log; the error it met, else None."""
        run, dist = self.run, self.dist
        params = None
        if run.checkpoint and self.parallel == "model":
            shards = dist.gather(self.model.params_numpy())
            params = unshard(shards) if dist.rank == 0 else None
        elif run.checkpoint and dist.rank == 0:
            params = self.model.params_numpy()
        if dist.rank != 0:
            return None
        try:
            if run.checkpoint:
                self.ckpt.params, self.ckpt.epoch = params, epoch
                adam = self.layers is not None and self.cfg.optimizer == "adam"
                self.ckpt.state = self.step.state_numpy() if adam else None
                self.outputs.save_checkpoint(self.ckpt)
            self.outputs.write_log(self.log)
        except NNError as e:
            return str(e)
        return None

    def finish(self, final: dict):
        """The run log's last word (`final`), written by rank 0."""
        self.log["final"] = final
        if self.dist.rank == 0:
            self.outputs.write_log(self.log)

    def close(self):
        """Free the all-reduce's communicator on every rank together (NCCL's, left to the interpreter's
        exit, hung ranks on two H200s); the epoch's graph may hold its work, so the graph goes first."""
        if hasattr(self.allreduce, "close"):
            self.epoch_pass.release()
            self.dist.barrier()
            self.allreduce.close()


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


# ---------------------------------------------------------------- set-up

def setup(cfg, run: RunConfig, backend):
    """Data set and starting weights (from the checkpoint when resuming), once the network is
    known to fit in memory: (data set, sizes, checkpoint, CNN layers or None)."""
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
        check_memory(cfg, sizes, backend, cnn.bytes_needed(layers, cfg.batch, backend.dtype.itemsize, cfg.optimizer),
                     8 * sum(layer.params for layer in layers))
        try:
            fresh = cnn.init_cnn_params(layers, cfg.seed)
        except MemoryError as e:
            raise NNError(out_of_memory(e, cfg)) from None
    else:
        layers, sizes = None, (features, *cfg.hidden, ds.classes)
        fresh = None
        check_memory(cfg, sizes, backend, bytes_needed(sizes, cfg.batch, backend.dtype.itemsize), 8 * param_count(sizes))
    if run.resume:
        shapes = [(w.shape, b.shape) for w, b in fresh] if fresh is not None else None
        ckpt = checkpoint.load(run.checkpoint, cfg.fingerprint(sizes), cfg.dtype, shapes)
    else:
        if run.checkpoint and os.path.lexists(run.checkpoint):
            raise NNError(f"checkpoint {run.checkpoint} exists; pass --resume to continue it, "
                          "or choose another path (it is never overwritten by a fresh run)")
        params = fresh if fresh is not None else init_params(sizes, cfg.init, cfg.seed)
        ckpt = checkpoint.Checkpoint(params, 0, cfg.fingerprint(sizes), run=checkpoint.new_run_id())
    return ds, sizes, ckpt, layers


def sample_hash(ds) -> str:
    """A short hash of the whole data set, every image and label: ranks that read different files,
    or files that differ in one pixel, disagree on it (hashlib reads the arrays in place: well under
    a second for Fashion-MNIST)."""
    digest = hashlib.sha256()
    for split in (ds.train, ds.val, ds.test):
        digest.update(np.ascontiguousarray(split.x))
        digest.update(np.ascontiguousarray(split.y))
    return digest.hexdigest()[:16]


def check_memory(cfg, sizes, backend, on_backend: int, on_host: int):
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
                          f"about {byte_words(need)} of {where} memory and {byte_words(free)} is free; "
                          f"{_smaller(cfg)}")


def choose_split(run: RunConfig, dist: Dist, backend, sizes, kind: str) -> tuple[str, str]:
    """(what the ranks split, why): auto's choice from nn.cost_model, or `run.parallel` as given with
    a warning where the model predicts it slower than one GPU; rank 0's prediction, shared (ranks on
    other hosts may hold other tuned files)."""
    cfg = run.config
    if dist.size == 1:
        return "data", ""
    if backend.name != "cupy" or kind not in cost_model.LINKS:
        if run.parallel != "auto":
            return run.parallel, ""
        return "data", f"auto: the {backend.name} backend: data split (no tuned kernel times to predict from)"
    words, error = None, None
    if dist.rank == 0:
        try:    # a tuned file that cannot be read fails here on rank 0 alone: the others wait in the bcast
            gpu = backend.device_name if run.use_tuned and autogemm.has_records(backend.device_name) else None
            plan = cost_model.predict(sizes, cfg.activation, cfg.batch, dist.size, cost_model.LINKS[kind], gpu,
                                      cfg.dtype, cfg.precision, cfg.layers if cfg.model == "cnn" else None)
            words = (plan.choice, plan.reason) if run.parallel == "auto" else (run.parallel,
                                                                                plan.warning(run.parallel))
        except (NNError, AutogemmError) as e:
            error = str(e)
    words, error = dist.comm.bcast((words, error), root=0)
    if error is not None:
        raise NNError(f"rank 0 of {dist.size}: {error}")
    return words


def environment(backend, dist, parallel: str, sent: int, allreduce: str, why: str = "") -> dict:
    """What ran: the backend and the precision its GEMMs computed at (the NumPy backend's: fp32,
    whatever --precision asked), ranks, the split (and why auto chose it), bytes, versions."""
    return {"python": platform.python_version(), "numpy": np.__version__, "platform": platform.platform(),
            "backend": backend.name, "precision": getattr(backend, "precision", "fp32"), "ranks": dist.size,
            "parallel": parallel, "parallel_reason": why, "bytes_sent_per_step": sent,
            "allreduce": allreduce,
            "cpus": os.cpu_count()}


# ---------------------------------------------------------------- agreement and errors

def agreed(dist, fn, on_rank=lambda rank: True):
    """fn() on the ranks that `on_rank` admits, then Dist.agree: a bad input on any rank ends
    every rank with one line. Returns fn's result (None where it did not run)."""
    result, error = None, None
    if on_rank(dist.rank):
        try:
            result = fn()
        except (NNError, AutogemmError) as e:
            error = str(e)
        except MemoryError as e:
            error = out_of_memory(e)
    dist.agree(error)
    return result


def byte_words(n: int) -> str:
    """`n` bytes in words: 512 B, 3.2 MB."""
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000


def _smaller(cfg) -> str:
    """What to change for a network that does not fit: the flags of its kind."""
    return f"choose a smaller {'--layers' if cfg is not None and cfg.model == 'cnn' else '--hidden'} or --batch"


def out_of_memory(e: MemoryError, cfg=None) -> str:
    return f"out of memory: {str(e) or 'an allocation failed'}; {_smaller(cfg)}"
