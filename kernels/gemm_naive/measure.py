"""The naive GEMM is timed as every GEMM family is: the GEMM call's measure."""
from kernels.gemm.measure import Measure  # noqa: F401
