"""autogemm: Jinja-templated CUDA GEMM and elementwise kernels, compiled with CuPy and tuned with Optuna.

    import autogemm
    d = autogemm.gemm(a, b, trans_b=True, epilogue="bias_sigmoid", bias=b1)

CuPy is imported lazily: the templates, spaces and CLI work on machines without a GPU. The layers
below this package's public names (runtime, store, ops, tuning, cli) are described in
docs/ARCHITECTURE.md; a user of autogemm (nn, the trainer, is one) needs only the names here.
"""
from autogemm import arguments, files
from autogemm.errors import AutogemmError, BadArguments, CompileError, InvalidConfig, StoreError
from autogemm.ops.cublas import cublas_gemm
from autogemm.ops.conv import conv2d, conv2d_backward_data, conv2d_backward_weights, maxpool2x2, maxpool2x2_backward
from autogemm.ops.elementwise import (activation_grad, adam_update, bias_activation, column_sums, elementwise,
                                      linear_backward, linear_xent, sgd_update, softmax_xent)
from autogemm.ops.gemm import GemmCall, empty_column_major, gemm, plan_gemm, row_major_operand, to_bf16, transpose
from autogemm.store.keys import Target, dtypes as key_dtypes
from autogemm.store.lookup import Measured, has_records, measured
from autogemm.store.locations import cache_dir
from autogemm.version import __version__
from kernels import IMPLEMENTATIONS
from kernels.contract import NO_OP
from kernels.gemm import EPILOGUES as GEMM_EPILOGUES
from kernels.gemm import PRECISIONS as GEMM_PRECISIONS
from kernels.gemm import key_op as gemm_key_op
from kernels.linear_backward import MAX_CLASSES as LINEAR_BACKWARD_MAX_CLASSES
from kernels.linear_backward import TRANSPOSED as LINEAR_BACKWARD_TRANSPOSED
from kernels.linear_xent import MAX_CLASSES as LINEAR_XENT_MAX_CLASSES

__all__ = [
    "__version__",
    # the operations
    "gemm", "plan_gemm", "GemmCall", "GEMM_EPILOGUES", "GEMM_PRECISIONS", "row_major_operand",
    "empty_column_major", "to_bf16", "transpose",
    "elementwise", "bias_activation", "activation_grad",
    "sgd_update", "adam_update", "softmax_xent", "linear_xent", "LINEAR_XENT_MAX_CLASSES",
    "linear_backward", "LINEAR_BACKWARD_MAX_CLASSES", "LINEAR_BACKWARD_TRANSPOSED", "column_sums",
    # the baseline: cuBLAS's GEMM in the same precisions
    "cublas_gemm",
    # the CNN's: NCHW images, (F, C, K, K) filters
    "conv2d", "conv2d_backward_data", "conv2d_backward_weights", "maxpool2x2", "maxpool2x2_backward",
    # errors: every one is a one-line message for the user
    "AutogemmError", "BadArguments", "CompileError", "InvalidConfig", "StoreError",
    # the user's files: read only if regular, written atomically; and autogemm's cache folder
    "files", "cache_dir",
    # the conventions of autogemm's and nn's command lines (one syntax for a list of sizes)
    "arguments",
    # a kernel launch to tune, as a network's `autogemm.targets` entry point lists its step's; the
    # op of a launch whose family has none, a GEMM launch's (layout and epilogue); the families that
    # compute one call (all tuned, the fastest runs)
    "Target", "NO_OP", "gemm_key_op", "IMPLEMENTATIONS",
    # what the tuned records say of a launch's time (cost models), the arithmetics a family's keys name
    "measured", "Measured", "has_records", "key_dtypes",
]
