"""Helpers for the store, lookup, search and CLI tests: records, metadata and fake measures."""
import json
import math
import os
import threading
import time
from pathlib import Path

from autogemm.runtime.device import H100
from autogemm.runtime.family import Config, family
from autogemm.store.keys import make_key, problem_of
from autogemm.store.records import Meta, Record, file_for, save
from autogemm.errors import CompileError
from autogemm.tuning.measure import KernelMeasure
from autogemm.tuning.timing import Timing

SOFTWARE = {"driver": "13.0", "cuda_runtime": "13.2", "cupy": "14.2.0"}
GEMM = dict(bm=64, bn=64, bk=16, ty=16, tx=16, tm=4, tn=4, vec=4, copy="regs", stages=2, split_k=1, pad=True, math="fma")
TF32X3 = dict(GEMM, copy="async", stages=3, tm=1, tn=2, math="3xtf32")


def meta(device=H100) -> Meta:
    return Meta.here(device, SOFTWARE)


def record(shape=(800, 1000, 784), op="nt", dtype="float32", fam="gemm", config=None, median_us=50.0,
           template_hash=None, **kw) -> Record:
    config = Config(config if config is not None else GEMM)
    fields = dict(p10_us=median_us * 0.98, p90_us=median_us * 1.05, gflops=1000.0, cublas_us=60.0,
                  max_rel_error=1e-7, trials=40, failed=1, date="2026-11-20T12:00:00+00:00",
                  command="autogemm tune --shapes nn")
    fields.update(kw)
    key = make_key(fam, shape, op, dtype)
    return Record(key, config, median_us=median_us,
                  template_hash=template_hash or family(fam).code_hash(config, problem_of(key)), **fields)


def write_store(directory: Path, records, device=H100) -> Path:
    path = file_for(directory, device)
    save(path, records, meta(device))
    return path


def edit(path: Path, change) -> None:
    """Load the file as plain JSON, let `change(doc)` edit it, write it back (a hand edit)."""
    doc = json.loads(Path(path).read_text())
    change(doc)
    Path(path).write_text(json.dumps(doc))


class FakeMeasure:
    """A measure with a time model: `model(cfg) -> µs`, failures for `fails(cfg)` (raised),
    optional extra behaviour per call (`script(cfg, call_number) -> µs or None`)."""

    def __init__(self, model=None, fails=lambda cfg: False, script=None, noise=0.0, seed=0):
        import random

        self.model = model or gemm_model
        self.fails = fails
        self.script = script
        self.noise = noise
        self.rng = random.Random(seed)
        self.calls: list[tuple[Config, int]] = []
        self.prepared: list[list[Config]] = []

    def prepare(self, configs):
        self.prepared.append(list(configs))

    def __call__(self, cfg, reps):
        self.calls.append((cfg, reps))
        if self.fails(cfg):
            raise RuntimeError(f"compile failed for bk={cfg.get('bk')}")
        t = self.script(cfg, len(self.calls)) if self.script else None
        if t is None:
            t = self.model(cfg) * (1 + self.noise * self.rng.uniform(-1, 1))
        return Timing(t, t * 0.98, t * 1.03, reps)

    def measured(self) -> list[Config]:
        return [cfg for cfg, _ in self.calls]


def gemm_model(cfg) -> float:
    """A smooth fake cost over the GEMM space: favours 64x64 tiles, register tiles 4x4, split 2
    (gemm_wgmma: 128x128 tiles, 3 stages; other families: a cost that favours their middle values)."""
    if "warpgroups" in cfg:
        return 9 + abs(math.log2(cfg.bm / 128)) + abs(math.log2(cfg.bn / 128)) + abs(cfg.stages - 3)
    if "bm" not in cfg:
        return 5 + sum(abs(math.log2(v)) % 3 for v in cfg.values())
    return (10 + abs(math.log2(cfg.bm / 64)) + abs(math.log2(cfg.bn / 64)) + abs(math.log2(cfg.tm * cfg.tn / 16))
            + abs(math.log2(cfg.split_k / 2)) + (0 if cfg.stages == 2 else 1) + 0.4 * cfg.pad)


class CompilingMeasure(KernelMeasure):
    """KernelMeasure's own compile path (prepare, first_ready, cancel, built) on its real thread pool,
    with compiles that take `compile_s(cfg)` seconds and fail (CompileError) where `broken(cfg)`;
    measuring times the model, with no GPU. `events` lists ("built"/"measured", config) in order;
    `most_at_once` is the most compiles that ran together."""

    def __init__(self, key, compile_s, broken=lambda cfg: False, model=gemm_model, parallelism=4):
        super().__init__(key, H100)
        self.compile_s, self.broken, self.model, self.parallelism = compile_s, broken, model, parallelism
        self.events, self.running, self.most_at_once = [], 0, 0
        self._lock = threading.Lock()

    def build(self, instance, device_id):
        cfg = instance.config
        with self._lock:
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        time.sleep(self.compile_s(cfg))
        with self._lock:
            self.running -= 1
            self.events.append(("built", cfg))
        if self.broken(cfg):
            raise CompileError(f"{instance.name}: NVRTC failed: line 1: error: planted")

    @staticmethod
    def _device_id():
        return 0

    def __call__(self, cfg, reps):
        self.built(cfg)
        self.events.append(("measured", cfg))
        t = self.model(cfg)
        return Timing(t, t * 0.98, t * 1.03, reps)


# ---- fakes a spawned tuning worker imports (autogemm tune --gpus): module-level, pickled by name ----
WORKER_GPU = None       # the GPU this worker process was given


def fake_gpu_context(gpu: int):
    """gpus.gpu_context without a GPU: every device an H100."""
    global WORKER_GPU
    WORKER_GPU = gpu
    return H100, SOFTWARE


def failing_gpu_context(gpu: int):
    """gpus.gpu_context where the GPU cannot be used (a CUDA error that is not autogemm's)."""
    raise RuntimeError(f"cudaErrorDevicesUnavailable: GPU {gpu} is busy")


def thread_telling_gpu_context(gpu: int):
    """gpus.gpu_context that ends the worker with the BLAS thread count it started with."""
    raise RuntimeError(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}")


def slow_measure_for(key, device, seed=0):
    """A FakeMeasure whose every measurement takes 20 ms."""
    return FakeMeasure(model=lambda cfg: time.sleep(0.02) or gemm_model(cfg))


def measure_for_dying_on_gpu_1(key, device, seed=0):
    """slow_measure_for, but the worker of GPU 1 dies (status 3) as it sets up its first target."""
    if WORKER_GPU == 1:
        import os

        os._exit(3)
    return slow_measure_for(key, device, seed)
