"""The transpose family's measure for tuning: random operands, their float64 reference, the launch
(a KernelMeasure: autogemm/tuning/measure.py)."""
from autogemm.runtime.device import DeviceInfo
from autogemm.runtime.family import Config
from autogemm.store.keys import Key
from autogemm.tuning.measure import KernelMeasure


class Measure(KernelMeasure):
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
