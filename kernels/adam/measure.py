"""The adam family's measure for tuning: random operands, their float64 reference, the launch
(a KernelMeasure: autogemm/tuning/measure.py)."""
import numpy as np

from autogemm.runtime.device import DeviceInfo
from autogemm.runtime.family import Config
from autogemm.store.keys import Key
from autogemm.tuning.measure import KernelMeasure, Mismatch


class Measure(KernelMeasure):
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
