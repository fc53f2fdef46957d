"""The baseline GEMM: cuBLAS through CuPy, in autogemm.gemm's precisions, what every autogemm GEMM is
timed and checked against (autogemm bench, tune) and what nn's cublas backend runs."""
import numpy as np

# cuBLAS's compute types that let it round float32 operands (cublasComputeType_t):
# CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_COMPUTE_32F_FAST_16BF.
CUBLAS_COMPUTE = {"tf32": 77, "bf16": 75}
COMPUTE_32F, R_32F, R_16BF = 68, 0, 14        # CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF


def cublas_gemm(a, b, out, trans_a=False, trans_b=False, precision: str = "fp32", alpha=1.0, beta=0.0):
    """out = alpha op(a) op(b) + beta out: SGEMM or DGEMM (CuPy's); at precision tf32 or bf16,
    cublasGemmEx on the float32 arrays with the compute type that rounds the operands to TF32 or
    bfloat16 (float32 sums), or on bfloat16 ones (uint16 bits, as autogemm.to_bf16 makes them)
    into float32. Rows of every array contiguous."""
    import cupy
    import cupy.cublas
    from cupy_backends.cuda.libs import cublas as libcublas

    if precision == "fp32":
        return cupy.cublas.gemm("T" if trans_a else "N", "T" if trans_b else "N", a, b, out=out, alpha=alpha,
                                beta=beta)
    # Row-major out (M x N) is column-major out^T = op(b)^T op(a)^T: b comes first.
    (m, n), k = out.shape, a.shape[0] if trans_a else a.shape[1]
    ld = lambda x: x.strides[0] // x.itemsize  # noqa: E731
    bf16 = a.dtype == np.uint16
    operand, compute = (R_16BF, COMPUTE_32F) if bf16 else (R_32F, CUBLAS_COMPUTE[precision])
    scalars = np.array([alpha, beta], np.float32)
    handle = cupy.cuda.device.get_cublas_handle()
    mode = libcublas.getPointerMode(handle)
    libcublas.setPointerMode(handle, libcublas.CUBLAS_POINTER_MODE_HOST)
    try:
        op_n, op_t, default_algo = 0, 1, -1               # CUBLAS_OP_N/T, CUBLAS_GEMM_DEFAULT
        libcublas.gemmEx(handle, op_t if trans_b else op_n, op_t if trans_a else op_n, n, m, k,
                         scalars.ctypes.data, b.data.ptr, operand, ld(b), a.data.ptr, operand, ld(a),
                         scalars.ctypes.data + 4, out.data.ptr, R_32F, ld(out), compute, default_algo)
    finally:
        libcublas.setPointerMode(handle, mode)
    return out
