"""Measuring candidate configs on the GPU for the search: compile, verify, time. What every family's
measure shares (KernelMeasure); each family's own, which binds its operands and launch, is
`measure.py` in its folder (kernels/<family>/), found by autogemm/tuning/measures.py.

    measure = measure_for(key, device)      # operands and their float64 reference, built once
    measure.prepare(configs)                # start compiling them on a thread pool (NVRTC releases the GIL)
    cfg = measure.first_ready(configs)      # the first of them compiled (or failed)
    t = measure(config, reps)               # verify and admit once (poisoned output), then time: Measured
    measure.baseline(reps)                  # cuBLAS on the same operands (GEMMs), else None

Operands are random normal (never zeros, which would hide wrong indexing); the expected outputs are
the family's float64 reference (its module's `reference`). A config that fails to compile, launch or
match raises (CompileError, a CUDA error, Mismatch): the search records the reason and goes on.
"""
import copy
import os
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

import numpy as np

from autogemm.errors import AutogemmError
from autogemm.ops.kernels import kernel
from autogemm.runtime import compile as compiler
from autogemm.runtime.device import DeviceInfo
from autogemm.runtime.family import Config, family
from autogemm.store.keys import Key, problem_of, same_problem
from autogemm.tuning.timing import Timing, time_gpu
from autogemm.tuning.verify import compare
from kernels import REGISTRY
from kernels.elementwise import ROW_OPS

QUICK_WARMUP = 2


class Mismatch(AutogemmError):
    """A candidate's output does not match the float64 reference."""


class Inaccurate(Mismatch):
    """An FP32-accurate candidate's error is beyond verify.FP32_ERROR_BOUND times cuBLAS FP32's."""


@dataclass(frozen=True)
class Measured(Timing):
    max_rel_error: float | None = None


_pool: ThreadPoolExecutor | None = None
COMPILERS = min(16, os.cpu_count() or 1)      # NVRTC compiles at once


def _compile_pool() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=COMPILERS, thread_name_prefix="nvrtc")
    return _pool


class KernelMeasure:
    """What every family shares; subclasses bind operands (`launcher`) and check (`verify`: by
    default, the families with one output `out` and its reference `expected`)."""

    POISON = np.nan     # what `out` holds before a checked run: a value no correct kernel leaves
    parallelism = COMPILERS

    def __init__(self, key: Key, device: DeviceInfo, seed: int = 0):
        self.key, self.device = key, device
        self.family = family(key.family)
        self.problem = problem_of(key)
        self.rng = np.random.default_rng(seed)
        self.dtype = np.dtype(self.problem.dtype).type
        self.precision = getattr(self.problem, "precision", "fp32")
        self.reference = REGISTRY[key.family].reference
        self.flush_l2 = True    # each timed run reads from device memory (False: what the run before left in L2)
        self._verified: dict[Config, float] = {}     # config -> max-norm relative error
        self._builds: dict[Config, Future] = {}      # compiles started by prepare, not yet measured
        self._broken: dict[Config, Exception] = {}   # configs that could not be rendered
        self._on_device: dict[int, tuple] = {}       # id(reference value) -> (it, it and its magnitude on the GPU)

    # ---- the search's interface -------------------------------------------------------------------
    def prepare(self, configs):
        """Render each config and start compiling it on the thread pool; returns at once."""
        device_id = self._device_id()
        for cfg in configs:
            if cfg in self._builds or cfg in self._broken:
                continue
            try:
                instance = kernel(self.key.family, self.problem, cfg, self.device)
            except AutogemmError as exc:
                self._broken[cfg] = exc
                continue
            self._builds[cfg] = _compile_pool().submit(self.build, instance, device_id)

    @staticmethod
    def build(instance, device_id: int):
        """Compile `instance` for the device (on a compile thread)."""
        import cupy

        with cupy.cuda.Device(device_id):
            compiler.load(instance)

    @staticmethod
    def _device_id() -> int:
        import cupy

        return cupy.cuda.Device().id

    def first_ready(self, configs) -> Config:
        """The first of `configs` (prepared ones) whose compile has ended, waiting for one if none has."""
        pending = {self._builds[c]: c for c in configs if c in self._builds and not self._builds[c].done()}
        ready = [c for c in configs if self._builds.get(c) not in pending]
        if ready:
            return ready[0]
        done, _ = wait(pending, return_when=FIRST_COMPLETED)
        return next(c for c in configs if self._builds[c] in done)

    def cancel(self):
        """Drop the compiles that have not started (a search that stopped)."""
        for cfg in [c for c, job in self._builds.items() if job.cancel()]:
            del self._builds[cfg]

    def built(self, cfg: Config):
        """Wait for `cfg`'s compile, if prepare started one; raise what rendering or compiling it raised."""
        if cfg in self._broken:
            raise self._broken.pop(cfg)
        build = self._builds.pop(cfg, None)
        if build is not None and build.exception() is not None:
            raise build.exception()

    def __call__(self, cfg: Config, reps: int) -> Measured:
        self.built(cfg)
        run = self.launcher(cfg)
        if cfg not in self._verified:
            self._verified[cfg] = self.admit(self.verify(run))
        t = time_gpu(run, reps=reps, warmup=QUICK_WARMUP, flush_l2=self.flush_l2)
        return Measured(t.median_us, t.p10_us, t.p90_us, t.reps, self._verified[cfg])

    def baseline(self, reps: int) -> Timing | None:
        return None

    def rebound(self, key: Key) -> "KernelMeasure | None":
        """This measure for `key` where it is another family's key of the same call and problem (the
        same operands, reference, on the device too, and cuBLAS figures; its own compiles and
        checks), else None."""
        if not same_problem(key, self.key):
            return None
        other = copy.copy(self)
        other.key, other.family = key, family(key.family)
        other._verified, other._builds, other._broken = {}, {}, {}
        return other

    # ---- per family ---------------------------------------------------------------------------------
    def launcher(self, cfg: Config):
        raise NotImplementedError

    def admit(self, error: float) -> float:
        """A checked candidate's error, or the exception that keeps the search from timing it (the
        GEMMs: Inaccurate); a benchmark's verify alone reports, admits nothing."""
        return error

    def verify(self, run) -> float:
        self.out.fill(self.POISON)
        run()
        return self.check(self.out, *self.expected)

    # ---- helpers ------------------------------------------------------------------------------------
    def verify_named(self, run, loss_acc=None) -> float:
        """verify for outputs `self.out` named as `self.expected`'s: each poisoned, `loss_acc` (where
        the reference has a "loss") zeroed, then each checked; the largest error."""
        for out in self.out.values():
            out.fill(self.POISON)
        if loss_acc is not None:
            loss_acc.fill(0)
        run()
        error = max(self.check(out, *self.expected[name]) for name, out in self.out.items())
        if loss_acc is not None:
            self.check(loss_acc, *self.expected["loss"])
        return error

    def normal(self, *shape):
        return self.rng.standard_normal(shape).astype(self.dtype)

    def pointwise_operand(self, op: str | None, rows: int, cols: int):
        """The second operand of a pointwise op over (rows, cols): a bias (cols,) for the ops that add
        one, the activation's saved output (rows, cols) for its derivative (dsigmoid, drelu), else None."""
        if op in ROW_OPS:
            return self.normal(cols)
        if op in ("dsigmoid", "drelu"):
            return self.saved_output(op[1:], rows, cols)
        return None

    def saved_output(self, activation: str, *shape):
        """Random outputs of `activation` ("sigmoid": in (0.01, 0.99); "relu": half of them zero), as
        a backward op's saved activation."""
        if activation == "relu":
            return np.maximum(self.normal(*shape), 0)
        return self.rng.uniform(0.01, 0.99, shape).astype(self.dtype)

    def check(self, out, value, magnitude, k: int, dtype=None) -> float:
        """max-norm relative error of `out` (device) against the reference (host: copied to the
        device once, and the check runs there), at `out`'s arithmetic `dtype` (default: the key's);
        Mismatch if off."""
        import cupy

        if id(value) not in self._on_device:
            self._on_device[id(value)] = (value, cupy.asarray(value), cupy.asarray(magnitude))
        _, value, magnitude = self._on_device[id(value)]
        dtype = self.dtype if dtype is None else dtype
        verdict = compare(out.reshape(value.shape), value, magnitude, k, dtype, self.precision)
        if not verdict.ok:
            raise Mismatch(verdict.describe())
        return verdict.max_rel_error
