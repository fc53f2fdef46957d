"""The colsum family's measure for tuning: random operands, their float64 reference, the launch
(a KernelMeasure: autogemm/tuning/measure.py)."""
from autogemm.runtime.device import DeviceInfo
from autogemm.runtime.family import Config
from autogemm.store.keys import Key
from autogemm.tuning.measure import KernelMeasure


class Measure(KernelMeasure):
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
