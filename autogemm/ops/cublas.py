"""The baseline GEMM: cuBLAS through CuPy, in autogemm.gemm's precisions, what every autogemm GEMM is
timed and checked against (autogemm bench, tune) and what nn's cublas backend runs."""
import numpy as np

from autogemm.errors import BadArguments
from kernels.gemm.call import PRECISIONS

# cuBLAS's compute types that let it round float32 operands (cublasComputeType_t):
# CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_COMPUTE_32F_FAST_16BF.
CUBLAS_COMPUTE = {"tf32": 77, "bf16": 75}
COMPUTE_32F, R_32F, R_16BF = 68, 0, 14        # CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF


def cublas_gemm(a, b, out, trans_a=False, trans_b=False, precision: str = "fp32", alpha=1.0, beta=0.0):
    """out = alpha op(a) op(b) + beta out: SGEMM or DGEMM (CuPy's); at precision tf32 or bf16,
    cublasGemmEx on the float32 arrays with the compute type that rounds the operands to TF32 or
    bfloat16 (float32 sums), or on bfloat16 ones (uint16 bits, as autogemm.to_bf16 makes them)
    into float32. Rows of every array contiguous; BadArguments otherwise."""
    import cupy
    import cupy.cublas
    from cupy_backends.cuda.libs import cublas as libcublas

    (lda, ldb, ldo), (m, n, k) = _check(cupy, a, b, out, trans_a, trans_b, precision)
    if precision == "fp32":
        return cupy.cublas.gemm("T" if trans_a else "N", "T" if trans_b else "N", a, b, out=out, alpha=alpha,
                                beta=beta)
    # Row-major out (M x N) is column-major out^T = op(b)^T op(a)^T: b comes first.
    bf16 = a.dtype == np.uint16
    operand, compute = (R_16BF, COMPUTE_32F) if bf16 else (R_32F, CUBLAS_COMPUTE[precision])
    scalars = np.array([alpha, beta], np.float32)
    handle = cupy.cuda.device.get_cublas_handle()
    mode = libcublas.getPointerMode(handle)
    libcublas.setPointerMode(handle, libcublas.CUBLAS_POINTER_MODE_HOST)
    try:
        op_n, op_t, default_algo = 0, 1, -1               # CUBLAS_OP_N/T, CUBLAS_GEMM_DEFAULT
        libcublas.gemmEx(handle, op_t if trans_b else op_n, op_t if trans_a else op_n, n, m, k,
                         scalars.ctypes.data, b.data.ptr, operand, ldb, a.data.ptr, operand, lda,
                         scalars.ctypes.data + 4, out.data.ptr, R_32F, ldo, compute, default_algo)
    finally:
        libcublas.setPointerMode(handle, mode)
    return out


def _check(cupy, a, b, out, trans_a, trans_b, precision):
    """((lda, ldb, ldo), (m, n, k)) of checked arguments; BadArguments naming what is wrong."""
    from autogemm.ops.gemm import leading_dim, overlaps

    if precision not in PRECISIONS:
        raise BadArguments(f"cublas_gemm: precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    for name, x in (("a", a), ("b", b), ("out", out)):
        if not isinstance(x, cupy.ndarray):
            raise BadArguments(f"cublas_gemm: {name} must be a cupy.ndarray, got {type(x).__name__}")
    operands = {"fp32": ("float32", "float64"), "tf32": ("float32",), "bf16": ("float32", "uint16")}[precision]
    if a.dtype != b.dtype or a.dtype.name not in operands:
        bits = " (uint16: bfloat16 bits)" if precision == "bf16" else ""
        raise BadArguments(f"cublas_gemm: at precision {precision} a and b must both be "
                           f"{' or both '.join(operands)}{bits}, got {a.dtype} and {b.dtype}")
    out_dtype = np.float32 if a.dtype == np.uint16 else a.dtype
    if out.dtype != out_dtype:
        raise BadArguments(f"cublas_gemm: out must be {np.dtype(out_dtype).name} for {a.dtype} operands, got {out.dtype}")
    lds = tuple(leading_dim(x, name, "cublas_gemm") for name, x in (("a", a), ("b", b), ("out", out)))
    (m, k), (k2, n) = a.shape[::-1] if trans_a else a.shape, b.shape[::-1] if trans_b else b.shape
    if k != k2 or out.shape != (m, n):
        raise BadArguments(f"cublas_gemm: op(a) is {m}x{k}, op(b) {k2}x{n} and out {out.shape[0]}x{out.shape[1]}: "
                           f"the sizes do not chain")
    if any(overlaps(out, x) for x in (a, b)):
        raise BadArguments("cublas_gemm: out overlaps a or b")
    return lds, (m, n, k)
