"""The convolution calls' measure for tuning, each direction's by either algorithm: random operands,
their float64 reference, the launch (a KernelMeasure: autogemm/tuning/measure.py); and cuDNN's
convolution (through PyTorch), their baseline."""
import numpy as np

from autogemm.errors import AutogemmError
from autogemm.runtime.device import DeviceInfo
from autogemm.runtime.family import Config
from autogemm.store.keys import Key
from autogemm.tuning.measure import KernelMeasure
from kernels import call_of
from kernels.conv2d import pool_windows


class Measure(KernelMeasure):
    """One convolution direction (conv2d, conv2d_dgrad, conv2d_wgrad, each by either algorithm) of a
    LeNet-like layer: pixels in [0, 1), filters and gradients random normal; its outputs against the
    family's float64 reference."""

    def __init__(self, key: Key, device: DeviceInfo, seed: int = 0):
        import cupy

        super().__init__(key, device, seed)
        p = self.problem
        self.call = call_of(key.family)                           # the call both algorithms compute
        inputs = {"conv2d": ("x", "w", "b"), "conv2d_dgrad": ("g", "w"), "conv2d_wgrad": ("g", "x")}[self.call]
        inputs += ("where",) if p.pool and self.call == "conv2d_dgrad" else ()
        make = {"x": lambda: self.rng.uniform(0, 1, (p.n, p.c, p.h, p.w)).astype(self.dtype),   # X: (N, C, H, W)
                "w": lambda: (self.normal(p.f, p.c, p.k, p.k) / p.k).astype(self.dtype),       # W: (F, C, K, K)
                "b": lambda: self.normal(p.f),                                                 # b: (F,)
                "g": lambda: self.normal(p.n, p.f, p.out_h, p.out_w),                          # G: (N, F, OH, OW)
                "where": lambda: self.rng.integers(0, 4, (p.n, p.c, p.h, p.w)).astype(np.int8)}   # a pool's maxima
        host = {name: make[name]() for name in inputs}            # only what the call reads
        self.expected = self.reference(p, **host)
        self.args = {name: cupy.asarray(host[name]) for name in inputs}
        self.out = {name: cupy.empty(value.shape, self.dtype) for name, (value, _, _) in self.expected.items()}
        if "where" in self.expected:         # a fused pool's positions of the maxima: int8, pooled
            self.out["where"] = cupy.empty(self.out["z"].shape, np.int8)
        self._windows = None                 # the reference's unpooled z by window, on the device

    def launcher(self, cfg: Config):
        from autogemm.ops import conv

        a, out, precision = self.args, self.out, self.precision
        if self.call == "conv2d":
            return lambda: conv.conv2d(a["x"], a["w"], a["b"], out["z"], config=cfg, precision=precision,
                                       where=out.get("where"))
        if self.call == "conv2d_dgrad":
            return lambda: conv.conv2d_backward_data(a["g"], a["w"], out["dx"], config=cfg, precision=precision,
                                                     where=a.get("where"))
        return lambda: conv.conv2d_backward_weights(a["g"], a["x"], out["dw"], out["db"], config=cfg,
                                                    precision=precision)

    def verify(self, run) -> float:
        for name, out in self.out.items():
            out.fill(np.nan if name != "where" else -1)
        run()
        checked = {name: (out, name) if name != "where" else (self.picked(), "z") for name, out in self.out.items()}
        return max(self.check(out, *self.expected[of]) for out, of in checked.values())

    def picked(self):
        """The reference's unpooled z at the positions a fused pool's kernel chose (NaN where one is
        not 0..3): within the bound of each window's maximum where it is the maximum or a near tie."""
        import cupy

        if self._windows is None:
            self._windows = cupy.asarray(pool_windows(self.expected["where"][0]))   # (N, F, OH/2, OW/2, 4)
        where = self.out["where"]
        chosen = cupy.take_along_axis(self._windows, cupy.clip(where, 0, 3).astype(np.intp)[..., None], axis=-1)
        return cupy.where((where >= 0) & (where <= 3), chosen[..., 0], np.nan)


def cudnn_convolution(measure: Measure):
    """(run, run_into_outputs): `measure`'s convolution call through cuDNN (PyTorch, with
    cudnn.benchmark's algorithm search; TF32 allowed for a call at precision tf32 or bf16, else
    off), the baseline every convolution is compared
    with; the second also copies the result into measure.out, for checking. Both on CuPy's current
    stream. AutogemmError when PyTorch with CUDA is not importable."""
    import cupy

    try:
        import torch
    except Exception as exc:   # not installed, or a build that fails to load its CUDA libraries
        raise AutogemmError(f"cuDNN is timed through PyTorch, which is not importable here ({exc})") from None
    if not torch.cuda.is_available():
        raise AutogemmError("cuDNN is timed through PyTorch, which sees no CUDA device here")
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = measure.precision != "fp32"
    p, call = measure.problem, measure.call
    a = {name: torch.from_dlpack(x) for name, x in measure.args.items()}
    out = {name: torch.from_dlpack(x) for name, x in measure.out.items()}
    if "x" not in a:     # backward data reads only the shape of the input
        a["x"] = torch.empty((p.n, p.c, p.h, p.w), dtype=a["g"].dtype, device=a["g"].device)
    if "w" not in a:     # backward weights reads only the shape of the filters
        a["w"] = torch.empty((p.f, p.c, p.k, p.k), dtype=a["g"].dtype, device=a["g"].device)
    backward = dict(stride=[1, 1], padding=[0, 0], dilation=[1, 1], transposed=False, output_padding=[0, 0],
                    groups=1)

    def compute():
        if call == "conv2d":
            z = torch.nn.functional.conv2d(a["x"], a["w"], a["b"])
            if not p.pool:
                return {"z": z}
            pooled, at = torch.nn.functional.max_pool2d(z, 2, return_indices=True)    # at: flat in OH x OW
            return {"z": pooled, "where": (at // p.out_w % 2 * 2 + at % 2).to(torch.int8)}
        if call == "conv2d_dgrad":
            dx, _, _ = torch.ops.aten.convolution_backward(a["g"], a["x"], a["w"], None, **backward,
                                                           output_mask=[True, False, False])
            if p.pool:      # each gradient to its window's maximum in the (N, C, 2H, 2W) maps
                picks = torch.nn.functional.one_hot(a["where"].long(), 4).to(dx.dtype) * dx[..., None]
                dx = picks.reshape(p.n, p.c, p.h, p.w, 2, 2).permute(0, 1, 2, 4, 3, 5).reshape(p.n, p.c, 2 * p.h,
                                                                                              2 * p.w)
            return {"dx": dx}
        _, dw, db = torch.ops.aten.convolution_backward(a["g"], a["x"], a["w"], [p.f], **backward,
                                                        output_mask=[False, True, True])
        return {"dw": dw, "db": db}

    def on_cupy_stream(fn):
        def run():
            ptr = cupy.cuda.get_current_stream().ptr
            with torch.cuda.stream(torch.cuda.ExternalStream(ptr) if ptr else torch.cuda.default_stream()):
                return fn()
        return run

    def into_outputs():
        for name, value in compute().items():
            out[name].copy_(value)

    return on_cupy_stream(compute), on_cupy_stream(into_outputs)
