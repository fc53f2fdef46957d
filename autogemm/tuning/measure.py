"""Measuring candidate configs on the GPU for the search: compile, verify, time. What every family's
measure shares (KernelMeasure); each family's own, which binds its operands and launch, is
`measure.py` in its folder (kernels/<family>/), found by autogemm/tuning/measures.py.

    measure = measure_for(key, device)      # operands and their float64 reference, built once
    measure.prepare(configs)                # compile a batch in parallel (NVRTC releases the GIL)
    t = measure(config, reps)               # verify and admit once (poisoned output), then time: Measured
    measure.baseline(reps)                  # cuBLAS on the same operands (GEMMs), else None

Operands are random normal (never zeros, which would hide wrong indexing); the expected outputs are
the family's float64 reference (its module's `reference`). A config that fails to compile, launch or
match raises (CompileError, a CUDA error, Mismatch): the search records the reason and goes on.
"""
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from autogemm.errors import AutogemmError
from autogemm.ops.kernels import kernel
from autogemm.runtime import compile as compiler
from autogemm.runtime.device import DeviceInfo
from autogemm.runtime.family import Config, family
from autogemm.store.keys import Key, problem_of
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


def _compile_pool() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 1), thread_name_prefix="nvrtc")
    return _pool


class KernelMeasure:
    """What every family shares; subclasses bind operands (`launcher`) and check (`verify`: by
    default, the families with one output `out` and its reference `expected`)."""

    POISON = np.nan     # what `out` holds before a checked run: a value no correct kernel leaves

    def __init__(self, key: Key, device: DeviceInfo, seed: int = 0):
        self.key, self.device = key, device
        self.family = family(key.family)
        self.problem = problem_of(key)
        self.rng = np.random.default_rng(seed)
        self.dtype = np.dtype(self.problem.dtype).type
        self.precision = getattr(self.problem, "precision", "fp32")
        self.reference = REGISTRY[key.family].reference
        self._verified: dict[Config, float] = {}     # config -> max-norm relative error
        self._broken: dict[Config, Exception] = {}   # compile errors found by prepare

    # ---- the search's interface -------------------------------------------------------------------
    def prepare(self, configs):
        """Render each config and compile them all at once on a thread pool."""
        import cupy

        device_id = cupy.cuda.Device().id

        def build(instance):
            with cupy.cuda.Device(device_id):
                compiler.load(instance)

        jobs = {}
        for cfg in configs:
            try:
                instance = kernel(self.key.family, self.problem, cfg, self.device)
                jobs[cfg] = _compile_pool().submit(build, instance)
            except AutogemmError as exc:
                self._broken[cfg] = exc
        for cfg, job in jobs.items():
            if job.exception() is not None:
                self._broken[cfg] = job.exception()

    def __call__(self, cfg: Config, reps: int) -> Measured:
        if cfg in self._broken:
            raise self._broken.pop(cfg)
        run = self.launcher(cfg)
        if cfg not in self._verified:
            self._verified[cfg] = self.admit(self.verify(run))
        t = time_gpu(run, reps=reps, warmup=QUICK_WARMUP)
        return Measured(t.median_us, t.p10_us, t.p90_us, t.reps, self._verified[cfg])

    def baseline(self, reps: int) -> Timing | None:
        return None

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

    def check(self, out, value, magnitude, k: int) -> float:
        """max-norm relative error of `out` (device) against the reference; Mismatch if off."""
        import cupy

        got = cupy.asnumpy(out).reshape(value.shape)
        verdict = compare(got, value, magnitude, k, self.dtype, self.precision)
        if not verdict.ok:
            raise Mismatch(verdict.describe())
        return verdict.max_rel_error
