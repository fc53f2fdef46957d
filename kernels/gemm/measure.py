"""The GEMM call's measure for tuning, every GEMM family's: random operands, their float64
reference, the launch, and cuBLAS as the baseline (a KernelMeasure: autogemm/tuning/measure.py)."""
import functools

import numpy as np

from autogemm.ops.cublas import cublas_gemm
from autogemm.runtime.device import DeviceInfo
from autogemm.runtime.family import Config
from autogemm.store.keys import Key
from autogemm.tuning.measure import Inaccurate, KernelMeasure
from autogemm.tuning.timing import Timing, time_gpu
from autogemm.tuning.verify import FP32_ERROR_BOUND, fp32_error_ratio, within_fp32_bound
from kernels.bf16 import bf16_bits
from kernels.elementwise import ROW_OPS


class Measure(KernelMeasure):
    """D = epi(op(A) op(B)) on random A, B (and the epilogue's bias or saved activation); cuBLAS, with
    autogemm's elementwise pass for the epilogue, as the baseline on the same arrays. An
    FP32-accurate candidate (precision fp32, float32 arrays) must also be about as accurate as
    cuBLAS FP32 on them (verify.FP32_ERROR_BOUND)."""

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

    def admit(self, error: float) -> float:
        reference = self.cublas_error if self.dtype is np.float32 and self.precision == "fp32" else None
        if reference is not None and not within_fp32_bound(error, reference):
            raise Inaccurate(f"max-norm relative error {error:.2e} is {fp32_error_ratio(error, reference):.1f}x cuBLAS "
                             f"FP32's {reference:.2e} on the same operands (FP32-accurate allows {FP32_ERROR_BOUND:g}x)")
        return error

    @functools.cached_property
    def cublas_error(self) -> float:
        """cuBLAS's max-norm relative error on these operands, at the call's precision."""
        return self.verify(self.cublas_launcher())

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
