"""The linear_backward family's measure for tuning: random operands, their float64 reference, the launch
(a KernelMeasure: autogemm/tuning/measure.py)."""
import numpy as np

from autogemm.ops.gemm import empty_column_major
from autogemm.runtime.device import DeviceInfo
from autogemm.runtime.family import Config
from autogemm.store.keys import Key
from autogemm.tuning.measure import KernelMeasure


class Measure(KernelMeasure):
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
