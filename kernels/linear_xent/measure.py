"""The linear_xent family's measure for tuning: random operands, their float64 reference, the launch
(a KernelMeasure: autogemm/tuning/measure.py)."""
import numpy as np

from autogemm.runtime.device import DeviceInfo
from autogemm.runtime.family import Config
from autogemm.store.keys import Key
from autogemm.tuning.measure import KernelMeasure


class Measure(KernelMeasure):
    """The output layer on random activations, weights and labels: logits, G = (P - Y) / rows,
    the summed loss and (with an activation) the input gradient, or the logits alone (op "logits"),
    against NumPy in float64."""

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
        from autogemm.ops.elementwise import linear_logits, linear_xent

        out, act = self.out, self.problem.activation
        if not self.problem.loss:
            return lambda: linear_logits(self.a, self.w, self.b, out["logits"], config=cfg)
        return lambda: linear_xent(self.a, self.w, self.b, self.labels, out["logits"], out["grad"], self.scale,
                                   self.loss_acc, out.get("grad_in"), act, config=cfg)

    def verify(self, run) -> float:
        return self.verify_named(run, self.loss_acc if self.problem.loss else None)
