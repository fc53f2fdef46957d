"""The pool2x2 family's measure for tuning: random operands, their float64 reference, the launch
(a KernelMeasure: autogemm/tuning/measure.py)."""
import numpy as np

from autogemm.runtime.device import DeviceInfo
from autogemm.runtime.family import Config
from autogemm.store.keys import Key
from autogemm.tuning.measure import KernelMeasure


class Measure(KernelMeasure):
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
