"""The elementwise family's measure for tuning: random operands, their float64 reference, the launch
(a KernelMeasure: autogemm/tuning/measure.py)."""
import numpy as np

from autogemm.runtime.device import DeviceInfo
from autogemm.runtime.family import Config
from autogemm.store.keys import Key
from autogemm.tuning.measure import KernelMeasure


class Measure(KernelMeasure):
    """One op of the elementwise family over (rows, cols), against NumPy in float64."""

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
