"""autogemm: Jinja-templated CUDA GEMM and elementwise kernels, compiled with CuPy and tuned with Optuna.

    import autogemm
    d = autogemm.gemm(a, b, trans_b=True, epilogue="bias_sigmoid", bias=b1)

CuPy is imported lazily: the templates, spaces and CLI work on machines without a GPU.
"""
from autogemm.elementwise import (activation_grad, bias_activation, column_sums, elementwise,
                                  linear_xent, sgd_update, softmax_xent)
from autogemm.errors import AutogemmError, BadArguments, CompileError, InvalidConfig
from autogemm.gemm import gemm

__all__ = [
    "gemm", "elementwise", "bias_activation", "activation_grad", "sgd_update", "softmax_xent",
    "linear_xent", "column_sums", "AutogemmError", "BadArguments", "CompileError", "InvalidConfig",
]
