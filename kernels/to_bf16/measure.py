"""The to_bf16 family's measure for tuning: random operands, their float64 reference, the launch
(a KernelMeasure: autogemm/tuning/measure.py)."""
import numpy as np

from autogemm.runtime.device import DeviceInfo
from autogemm.runtime.family import Config
from autogemm.store.keys import Key
from autogemm.tuning.measure import KernelMeasure


class Measure(KernelMeasure):
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
