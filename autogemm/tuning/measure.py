"""Measuring candidate configs on the GPU for the search: compile, verify, time.

    measure = measure_for(key, device)      # operands and their float64 reference, built once
    measure.prepare(configs)                # compile a batch in parallel (NVRTC releases the GIL)
    t = measure(config, reps)               # verify once (poisoned output), then time: Measured
    measure.baseline(reps)                  # cuBLAS on the same operands (GEMMs), else None

Operands are random normal (never zeros, which would hide wrong indexing); the expected outputs are
the family's float64 reference (kernels/<family>.py). A config that fails to compile, launch or
match raises (CompileError, a CUDA error, Mismatch): the search records the reason and goes on.
"""
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from autogemm.errors import AutogemmError
from autogemm.ops.cublas import cublas_gemm
from autogemm.ops.gemm import empty_column_major
from autogemm.ops.kernels import kernel
from autogemm.runtime import compile as compiler
from autogemm.runtime.device import DeviceInfo
from autogemm.runtime.family import Config, family
from autogemm.store.keys import Key, problem_of
from autogemm.tuning.timing import Timing, time_gpu
from autogemm.tuning.verify import compare
from kernels import REGISTRY, call_of
from kernels.elementwise import ROW_OPS
from kernels.gemm import bf16_bits

QUICK_WARMUP = 2


class Mismatch(AutogemmError):
    """A candidate's output does not match the float64 reference."""


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
            self._verified[cfg] = self.verify(run)
        t = time_gpu(run, reps=reps, warmup=QUICK_WARMUP)
        return Measured(t.median_us, t.p10_us, t.p90_us, t.reps, self._verified[cfg])

    def baseline(self, reps: int) -> Timing | None:
        return None

    # ---- per family ---------------------------------------------------------------------------------
    def launcher(self, cfg: Config):
        raise NotImplementedError

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


class GemmMeasure(KernelMeasure):
    """D = epi(op(A) op(B)) on random A, B (and the epilogue's bias or saved activation); cuBLAS, with
    autogemm's elementwise pass for the epilogue, as the baseline on the same arrays."""

    def __init__(self, key: Key, device: DeviceInfo, seed: int = 0):
        import cupy

        super().__init__(key, device, seed)
        m, n, k = key.sizes
        p = self.problem
        host_a = self.normal(*((k, m) if p.trans_a else (m, k)))      # A: op(A) is (M, K)
        host_b = self.normal(*((n, k) if p.trans_b else (k, n)))      # B: op(B) is (K, N)
        if p.bf16_operands:                                           # their bfloat16 bits, uint16
            host_a, host_b = bf16_bits(host_a), bf16_bits(host_b)
        second = self.pointwise_operand(p.epilogue, m, n)             # bias (N,), or saved activation (M, N)
        self.expected = self.reference(p, a=host_a, b=host_b, **self.epilogue_operands(second))["d"]
        self.a, self.b = cupy.asarray(host_a), cupy.asarray(host_b)
        self.second = cupy.asarray(second) if second is not None else None
        self.out = cupy.empty((m, n), dtype=self.dtype)               # D: (M, N)

    def launcher(self, cfg: Config, family: str | None = None):
        """The planned call of `cfg` in `family` (default: the key's)."""
        from autogemm.ops.gemm import plan_gemm

        p = self.problem
        return plan_gemm(self.a, self.b, self.out, trans_a=p.trans_a, trans_b=p.trans_b, epilogue=p.epilogue,
                         config=cfg, kernel_family=family or self.key.family, precision=self.precision,
                         **self.epilogue_operands(self.second))

    def epilogue_operands(self, second) -> dict:
        """The epilogue's operand as the GEMM's keyword: bias= or aux= (none without an epilogue)."""
        if second is None:
            return {}
        return {"bias" if self.problem.epilogue in ROW_OPS else "aux": second}

    def cublas_launcher(self):
        """cuBLAS's GEMM at the call's precision, then (with an epilogue) autogemm's elementwise pass."""
        import cupy

        from autogemm.ops.elementwise import elementwise

        p = self.problem
        if p.epilogue is None:
            return lambda: cublas_gemm(self.a, self.b, self.out, p.trans_a, p.trans_b, self.precision)
        product = cupy.empty_like(self.out)                           # op(A) op(B): (M, N)

        def run():
            cublas_gemm(self.a, self.b, product, p.trans_a, p.trans_b, self.precision)
            elementwise(p.epilogue, self.out, product, self.second)
        return run

    def baseline(self, reps: int) -> Timing:
        run = self.cublas_launcher()
        self.verify(run)
        return time_gpu(run, reps=reps)


class ElementwiseMeasure(KernelMeasure):
    """One op of kernels/elementwise.py over (rows, cols), against NumPy in float64."""

    LR, REG = 0.1, 0.01

    def __init__(self, key: Key, device: DeviceInfo, seed: int = 0):
        import cupy

        super().__init__(key, device, seed)
        op, (rows, cols) = key.op, key.sizes
        x = self.normal(rows, cols)                                    # X: (rows, cols)
        y = self.pointwise_operand(op, rows, cols)                     # bias (cols,), saved output, or None
        self.w0 = self.normal(rows, cols) if op == "sgd" else None    # weights updated in place
        self.expected = self.reference(self.problem, x=x, y=y, w0=self.w0, lr=self.LR, reg=self.REG)["out"]
        self.x = cupy.asarray(x)
        self.y = cupy.asarray(y) if y is not None else None
        self.out = cupy.empty((rows, cols), dtype=self.dtype)

    def launcher(self, cfg: Config):
        from autogemm.ops.elementwise import elementwise

        op, out, x, y = self.key.op, self.out, self.x, self.y
        if op == "sgd":
            return lambda: elementwise(op, out, x, None, self.LR, self.REG, config=cfg)
        return lambda: elementwise(op, out, x, y, config=cfg)

    def verify(self, run) -> float:
        if self.w0 is not None:
            self.out.set(self.w0)       # sgd updates in place: start from the weights
        else:
            self.out.fill(np.nan)
        run()
        return self.check(self.out, *self.expected)


class SoftmaxXentMeasure(KernelMeasure):
    """grad = (softmax(Z) - onehot(labels)) / rows and the summed loss, against NumPy."""

    def __init__(self, key: Key, device: DeviceInfo, seed: int = 0):
        import cupy

        super().__init__(key, device, seed)
        rows, cols = key.sizes
        z = (self.rng.standard_normal((rows, cols)) * 3).astype(self.dtype)  # Z: (rows, cols)
        labels = self.rng.integers(0, cols, rows).astype(np.int32)          # (rows,)
        self.scale = 1.0 / rows
        self.expected = self.reference(self.problem, z=z, labels=labels, scale=self.scale)
        self.z, self.labels = cupy.asarray(z), cupy.asarray(labels)
        self.grad = cupy.empty((rows, cols), dtype=self.dtype)
        self.loss_acc = cupy.zeros(1, dtype=self.dtype)

    def launcher(self, cfg: Config):
        from autogemm.ops.elementwise import softmax_xent

        return lambda: softmax_xent(self.z, self.labels, self.grad, self.scale, self.loss_acc, config=cfg)

    def verify(self, run) -> float:
        self.grad.fill(np.nan)
        self.loss_acc.fill(0)
        run()
        error = self.check(self.grad, *self.expected["grad"])
        self.check(self.loss_acc, *self.expected["loss"])
        return error


class LinearXentMeasure(KernelMeasure):
    """The output layer on random activations, weights and labels: logits, G = (P - Y) / rows,
    the summed loss and (with an activation) the input gradient, against NumPy in float64."""

    def __init__(self, key: Key, device: DeviceInfo, seed: int = 0):
        import cupy

        super().__init__(key, device, seed)
        rows, classes, inputs = key.sizes
        a = self.saved_output(self.problem.activation or "sigmoid", rows, inputs)   # A: (rows, K)
        w = (self.normal(classes, inputs) / np.sqrt(inputs)).astype(self.dtype)  # W: (C, K)
        b = self.normal(classes)                                                 # b: (C,)
        labels = self.rng.integers(0, classes, rows).astype(np.int32)           # (rows,)
        self.scale = 1.0 / rows
        self.expected = self.reference(self.problem, a=a, w=w, bias=b, labels=labels, scale=self.scale)
        self.a, self.w, self.b, self.labels = (cupy.asarray(x) for x in (a, w, b, labels))
        self.out = {name: cupy.empty(value.shape, dtype=self.dtype)
                    for name, (value, _, _) in self.expected.items() if name != "loss"}
        self.loss_acc = cupy.zeros(1, dtype=self.dtype)

    def launcher(self, cfg: Config):
        from autogemm.ops.elementwise import linear_xent

        out, act = self.out, self.problem.activation
        return lambda: linear_xent(self.a, self.w, self.b, self.labels, out["logits"], out["grad"], self.scale,
                                   self.loss_acc, out.get("grad_in"), act, config=cfg)

    def verify(self, run) -> float:
        for out in self.out.values():
            out.fill(np.nan)
        self.loss_acc.fill(0)
        run()
        error = max(self.check(out, *self.expected[name]) for name, out in self.out.items())
        self.check(self.loss_acc, *self.expected["loss"])
        return error


class LinearBackwardMeasure(KernelMeasure):
    """The output layer's backward pass on random activations, weights and gradients with the one-rank
    step's kind of scalars: the SGD step on dW (starting from W's values, in an array of its own) and
    on db, against NumPy in float64; the input gradient column-major where the key's op says so."""

    STEP = dict(alpha=-0.1, beta=0.999, db_beta=1.0)

    def __init__(self, key: Key, device: DeviceInfo, seed: int = 0):
        import cupy

        super().__init__(key, device, seed)
        rows, classes, inputs = key.sizes
        a = self.saved_output(self.problem.activation, rows, inputs)             # A: (rows, K)
        g = (self.normal(rows, classes) / rows).astype(self.dtype)              # G: (rows, C)
        w = (self.normal(classes, inputs) / np.sqrt(inputs)).astype(self.dtype)  # W: (C, K)
        db = self.normal(inputs)                                                 # (K,)
        self.host = {"w": w, "db": db}
        self.expected = self.reference(self.problem, g=g, w=w, a=a, dw=w, db=db, **self.STEP)
        self.g, self.w, self.a = (cupy.asarray(x) for x in (g, w, a))
        if self.problem.grad_in_transposed:     # G_in: (rows, K), column-major as the trainer's (one row too)
            grad_in = empty_column_major((rows, inputs), self.dtype)
        else:
            grad_in = cupy.empty((rows, inputs), self.dtype)
        self.out = {"grad_in": grad_in, "dw": cupy.empty_like(self.w), "db": cupy.asarray(db)}

    def launcher(self, cfg: Config):
        from autogemm.ops.elementwise import linear_backward

        out, act = self.out, self.problem.activation
        return lambda: linear_backward(self.g, self.w, self.a, out["grad_in"], act, out["dw"], out["db"], **self.STEP,
                                       config=cfg)

    def verify(self, run) -> float:
        self.out["grad_in"].fill(self.POISON)
        self.out["dw"].set(self.host["w"])
        self.out["db"].set(self.host["db"])
        run()
        return max(self.check(out, *self.expected[name]) for name, out in self.out.items())


class ColsumMeasure(KernelMeasure):
    """out = column sums of G (the bias gradient), against NumPy."""

    def __init__(self, key: Key, device: DeviceInfo, seed: int = 0):
        import cupy

        super().__init__(key, device, seed)
        rows, cols = key.sizes
        g = self.normal(rows, cols)                                    # G: (rows, cols)
        self.expected = self.reference(self.problem, g=g)["out"]
        self.g = cupy.asarray(g)
        self.out = cupy.empty(cols, dtype=self.dtype)                  # (cols,)

    def launcher(self, cfg: Config):
        from autogemm.ops.elementwise import column_sums

        return lambda: column_sums(self.g, self.out, config=cfg)


class ConvMeasure(KernelMeasure):
    """One convolution direction (conv2d, conv2d_dgrad, conv2d_wgrad, each by either algorithm) of a
    LeNet-like layer: pixels in [0, 1), filters and gradients random normal; its outputs against the
    family's float64 reference."""

    def __init__(self, key: Key, device: DeviceInfo, seed: int = 0):
        import cupy

        super().__init__(key, device, seed)
        p = self.problem
        self.call = call_of(key.family)                           # the call both algorithms compute
        inputs = {"conv2d": ("x", "w", "b"), "conv2d_dgrad": ("g", "w"), "conv2d_wgrad": ("g", "x")}[self.call]
        make = {"x": lambda: self.rng.uniform(0, 1, (p.n, p.c, p.h, p.w)).astype(self.dtype),   # X: (N, C, H, W)
                "w": lambda: (self.normal(p.f, p.c, p.k, p.k) / p.k).astype(self.dtype),       # W: (F, C, K, K)
                "b": lambda: self.normal(p.f),                                                 # b: (F,)
                "g": lambda: self.normal(p.n, p.f, p.out_h, p.out_w)}                          # G: (N, F, OH, OW)
        host = {name: make[name]() for name in inputs}            # only what the call reads
        self.expected = self.reference(p, **host)
        self.args = {name: cupy.asarray(host[name]) for name in inputs}
        self.out = {name: cupy.empty(value.shape, self.dtype) for name, (value, _, _) in self.expected.items()}

    def launcher(self, cfg: Config):
        from autogemm.ops import conv

        a, out = self.args, self.out
        if self.call == "conv2d":
            return lambda: conv.conv2d(a["x"], a["w"], a["b"], out["z"], config=cfg)
        if self.call == "conv2d_dgrad":
            return lambda: conv.conv2d_backward_data(a["g"], a["w"], out["dx"], config=cfg)
        return lambda: conv.conv2d_backward_weights(a["g"], a["x"], out["dw"], out["db"], config=cfg)

    def verify(self, run) -> float:
        for out in self.out.values():
            out.fill(np.nan)
        run()
        return max(self.check(out, *self.expected[name]) for name, out in self.out.items())


def cudnn_convolution(measure: ConvMeasure):
    """(run, run_into_outputs): `measure`'s convolution call through cuDNN (PyTorch, with
    cudnn.benchmark's algorithm search and TF32 off), the baseline every convolution is compared
    with; the second also copies the result into measure.out, for checking. Both on CuPy's current
    stream. AutogemmError when PyTorch with CUDA is not importable."""
    import cupy

    try:
        import torch
    except Exception as exc:   # not installed, or a build that fails to load its CUDA libraries
        raise AutogemmError(f"cuDNN is timed through PyTorch, which is not importable here ({exc})") from None
    if not torch.cuda.is_available():
        raise AutogemmError("cuDNN is timed through PyTorch, which sees no CUDA device here")
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    p, call = measure.problem, measure.call
    a = {name: torch.from_dlpack(x) for name, x in measure.args.items()}
    out = {name: torch.from_dlpack(x) for name, x in measure.out.items()}
    if "x" not in a:     # backward data reads only the shape of the input
        a["x"] = torch.empty((p.n, p.c, p.h, p.w), dtype=a["g"].dtype, device=a["g"].device)
    if "w" not in a:     # backward weights reads only the shape of the filters
        a["w"] = torch.empty((p.f, p.c, p.k, p.k), dtype=a["g"].dtype, device=a["g"].device)
    backward = dict(stride=[1, 1], padding=[0, 0], dilation=[1, 1], transposed=False, output_padding=[0, 0],
                    groups=1)

    def compute():
        if call == "conv2d":
            return {"z": torch.nn.functional.conv2d(a["x"], a["w"], a["b"])}
        if call == "conv2d_dgrad":
            dx, _, _ = torch.ops.aten.convolution_backward(a["g"], a["x"], a["w"], None, **backward,
                                                           output_mask=[True, False, False])
            return {"dx": dx}
        _, dw, db = torch.ops.aten.convolution_backward(a["g"], a["x"], a["w"], [p.f], **backward,
                                                        output_mask=[False, True, True])
        return {"dw": dw, "db": db}

    def on_cupy_stream(fn):
        def run():
            ptr = cupy.cuda.get_current_stream().ptr
            with torch.cuda.stream(torch.cuda.ExternalStream(ptr) if ptr else torch.cuda.default_stream()):
                return fn()
        return run

    def into_outputs():
        for name, value in compute().items():
            out[name].copy_(value)

    return on_cupy_stream(compute), on_cupy_stream(into_outputs)


class PoolMeasure(KernelMeasure):
    """2 x 2 max-pooling forward (random normal maps) or backward (random gradients at the maxima of
    random positions), against the family's reference."""

    def __init__(self, key: Key, device: DeviceInfo, seed: int = 0):
        import cupy

        super().__init__(key, device, seed)
        p = self.problem
        pooled = (p.n, p.c, p.h // 2, p.w // 2)
        if p.op == "forward":
            host = {"x": self.normal(p.n, p.c, p.h, p.w)}                              # X: (N, C, H, W)
        else:
            host = {"g": self.normal(*pooled), "where": self.rng.integers(0, 4, pooled).astype(np.int8)}
        self.expected = self.reference(p, **host)
        self.args = {name: cupy.asarray(x) for name, x in host.items()}
        self.out = {name: cupy.empty(value.shape, np.int8 if name == "where" else self.dtype)
                    for name, (value, _, _) in self.expected.items()}

    def launcher(self, cfg: Config):
        from autogemm.ops import conv

        a, out = self.args, self.out
        if self.problem.op == "forward":
            return lambda: conv.maxpool2x2(a["x"], out["y"], out["where"], config=cfg)
        return lambda: conv.maxpool2x2_backward(a["g"], a["where"], out["dx"], config=cfg)

    def verify(self, run) -> float:
        for name, out in self.out.items():
            out.fill(-1 if name == "where" else np.nan)
        run()
        return max(self.check(out, *self.expected[name]) for name, out in self.out.items())


class AdamMeasure(KernelMeasure):
    """One Adam step on random parameters, gradients and moments, after 9 steps done."""

    HYPER = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-7)
    DONE = 9

    def __init__(self, key: Key, device: DeviceInfo, seed: int = 0):
        import cupy

        super().__init__(key, device, seed)
        (n,) = key.sizes
        self.host = {"w": self.normal(n), "g": self.normal(n), "m": (self.normal(n) * 0.1).astype(self.dtype),
                     "v": self.rng.uniform(0, 0.1, n).astype(self.dtype)}      # each (n,)
        self.expected = self.reference(self.problem, **self.host, steps=self.DONE, **self.HYPER)
        self.arrays = {name: cupy.asarray(x) for name, x in self.host.items()}
        self.steps = cupy.zeros(1, np.int32)

    def launcher(self, cfg: Config):
        from autogemm.ops.elementwise import adam_update

        a = self.arrays
        return lambda: adam_update(a["w"], a["g"], a["m"], a["v"], self.steps, **self.HYPER, config=cfg)

    def verify(self, run) -> float:
        for name in ("w", "m", "v"):
            self.arrays[name].set(self.host[name])
        self.steps.fill(self.DONE)
        run()
        if int(self.steps.get()[0]) != self.DONE + 1:
            raise Mismatch(f"adam left the step count at {int(self.steps.get()[0])}, not {self.DONE + 1}")
        return max(self.check(self.arrays[name], *self.expected[name]) for name in ("w", "m", "v"))


class ToBf16Measure(KernelMeasure):
    """Random float32 values rounded to bfloat16, checked bit for bit."""

    POISON = 0xFFFF     # a bfloat16 NaN that no rounding of these values gives

    def __init__(self, key: Key, device: DeviceInfo, seed: int = 0):
        import cupy

        super().__init__(key, device, seed)
        (n,) = key.sizes
        host = self.normal(n)                                          # x: (n,) float32
        self.expected = self.reference(self.problem, host)["out"]
        self.x, self.out = cupy.asarray(host), cupy.empty(n, np.uint16)   # out: (n,) bfloat16 bits

    def launcher(self, cfg: Config):
        from autogemm.ops.gemm import to_bf16

        return lambda: to_bf16(self.x, self.out, config=cfg)


class TransposeMeasure(KernelMeasure):
    """A random matrix transposed, checked element for element."""

    def __init__(self, key: Key, device: DeviceInfo, seed: int = 0):
        import cupy

        super().__init__(key, device, seed)
        rows, cols = key.sizes
        host = self.normal(rows, cols)                                 # x: (rows, cols)
        self.expected = self.reference(self.problem, host)["out"]
        self.x, self.out = cupy.asarray(host), cupy.empty((cols, rows), self.dtype)   # out: (cols, rows)

    def launcher(self, cfg: Config):
        from autogemm.ops.gemm import transpose

        return lambda: transpose(self.x, self.out, config=cfg)


MEASURES = {"gemm": GemmMeasure, "gemm_naive": GemmMeasure, "gemm_wgmma": GemmMeasure,
            "elementwise": ElementwiseMeasure,
            "softmax_xent": SoftmaxXentMeasure, "colsum": ColsumMeasure, "linear_xent": LinearXentMeasure,
            "linear_backward": LinearBackwardMeasure,
            "conv2d": ConvMeasure, "conv2d_dgrad": ConvMeasure, "conv2d_wgrad": ConvMeasure,
            "conv2d_direct": ConvMeasure, "conv2d_dgrad_direct": ConvMeasure, "conv2d_wgrad_direct": ConvMeasure,
            "pool2x2": PoolMeasure, "adam": AdamMeasure, "to_bf16": ToBf16Measure,
            "transpose": TransposeMeasure}


def measure_for(key: Key, device: DeviceInfo, seed: int = 0) -> KernelMeasure:
    """The GPU measure of `key`'s family, its operands and reference built now."""
    return MEASURES[key.family](key, device, seed)
