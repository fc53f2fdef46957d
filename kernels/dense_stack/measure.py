"""The dense_stack family's measure for tuning: random inputs, weights and labels, their float64
reference, the launch (a KernelMeasure: autogemm/tuning/measure.py)."""
import numpy as np

from autogemm.runtime.device import DeviceInfo
from autogemm.runtime.family import Config
from autogemm.store.keys import Key
from autogemm.tuning.measure import KernelMeasure
from kernels import dense_stack


class Measure(KernelMeasure):
    """The stack on random rows, He-scaled weights and labels: every activation, the logits, every
    gradient, the summed loss (and the input's gradient where the op asks for it, below the pool on
    random maxima where the input is a pool's), against NumPy in float64."""

    def __init__(self, key: Key, device: DeviceInfo, seed: int = 0):
        import cupy

        super().__init__(key, device, seed)
        p = self.problem
        x = self.normal(p.rows, p.widths[0]).astype(self.dtype)                     # X: (rows, W_0)
        where = None
        if p.pool:                                    # a pooled activation, and its maxima (rows, C, H/2, W/2)
            x = self.saved_output(p.activation, p.rows, p.widths[0])
            c, h, w = p.pool
            where = self.rng.integers(0, 4, (p.rows, c, h // 2, w // 2)).astype(np.int8)
        weights, biases = dense_stack.parameters(p, self.rng)
        labels = self.rng.integers(0, p.widths[-1], p.rows).astype(np.int32)        # (rows,)
        self.scale = 1.0 / p.rows
        self.expected = self.reference(p, x=x, weights=weights, biases=biases, labels=labels, scale=self.scale,
                                       where=where)
        self.x, self.labels = cupy.asarray(x), cupy.asarray(labels)
        self.where = None if where is None else cupy.asarray(where)
        self.weights = [cupy.asarray(w) for w in weights]
        self.biases = [cupy.asarray(b) for b in biases]
        self.out = {name: cupy.empty(value.shape, dtype=self.dtype)
                    for name, (value, _, _) in self.expected.items() if name != "loss"}
        self.loss_acc = cupy.zeros(1, dtype=self.dtype)

    def launcher(self, cfg: Config):
        from autogemm.ops.elementwise import dense_stack as run

        layers = self.problem.layers
        outs = [self.out[f"out{l}"] for l in range(1, layers + 1)]
        grads = [self.out[f"grad{l}"] for l in range(1, layers + 1)]
        return lambda: run(self.x, self.weights, self.biases, self.labels, outs, grads, self.scale, self.loss_acc,
                           self.problem.activation, self.out.get("grad_in"), self.where, config=cfg)

    def verify(self, run) -> float:
        return self.verify_named(run, self.loss_acc)
