// The GEMM family's fused epilogue, applied to v = alpha * op(A) op(B) + beta * C at D[m][n]:
// bias, bias_sigmoid, bias_relu add bias[n], then the activation (forward layers); dsigmoid, drelu
// multiply by the activation's derivative from its saved output aux[m][n] (backward). Needs
// common.cuh and the preamble's EPILOGUE.
__device__ __forceinline__ T epilogue(T v, int m, int n, const T* __restrict__ bias,
                                      const T* __restrict__ aux, int ldaux) {
    if constexpr (adds_bias(EPILOGUE))
        return activate<EPILOGUE>(v + bias[n]);
    else if constexpr (EPILOGUE == Pointwise::dsigmoid || EPILOGUE == Pointwise::drelu)
        return activation_grad<EPILOGUE>(v, aux[(size_t)m * ldaux + n]);
    else
        return v;
}
