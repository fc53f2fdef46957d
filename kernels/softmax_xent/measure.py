"""The softmax_xent family's measure for tuning: random operands, their float64 reference, the launch
(a KernelMeasure: autogemm/tuning/measure.py)."""
import numpy as np

from autogemm.runtime.device import DeviceInfo
from autogemm.runtime.family import Config
from autogemm.store.keys import Key
from autogemm.tuning.measure import KernelMeasure


class Measure(KernelMeasure):
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
