"""rowsoftmax's measure for `autogemm tune`: random rows, their float64 softmax, the launch."""
from autogemm.tuning.measure import KernelMeasure


class Measure(KernelMeasure):
    """out = the softmax of each row of X (random normal), against NumPy in float64."""

    def __init__(self, key, device, seed: int = 0):
        import cupy

        super().__init__(key, device, seed)
        rows, cols = key.sizes
        x = self.normal(rows, cols)                                    # X: (rows, cols)
        self.expected = self.reference(self.problem, x=x)["out"]
        self.x = cupy.asarray(x)
        self.out = cupy.empty_like(self.x)                             # (rows, cols)

    def launcher(self, cfg):
        import autogemm

        return lambda: autogemm.launch("rowsoftmax", config=cfg, x=self.x, out=self.out)
