"""autogemm inside PyTorch: tuned kernels on torch tensors, and drop-in layers with autograd.

    import autogemm.torch as agt
    model = agt.convert(model)                   # its Linear, Conv2d (+ ReLU, + MaxPool2d) swapped,
                                                 # runs of Linear layers fused into one op
    y = agt.linear(x, w, b, activation="relu")   # one call on CUDA tensors, differentiable

Every call is a torch custom op (`torch.ops.autogemm.*`, autogemm/torch/ops.py) with a fake
implementation, so torch.compile traces through it, on torch's current stream, so CUDA graphs
capture it. Needs PyTorch (pip install 'autogemm[torch]'); nothing else in autogemm imports this.
"""
from autogemm.torch.tensors import require_torch

require_torch()

from autogemm.torch.functional import conv2d, gemm, linear, linear_cross_entropy, precision_now  # noqa: E402
from autogemm.torch.layers import Conv2d, Linear, Sequential, convert  # noqa: E402
from autogemm.torch.tune import tune  # noqa: E402

__all__ = ["Conv2d", "Linear", "Sequential", "conv2d", "convert", "gemm", "linear", "linear_cross_entropy", "precision_now", "tune"]
