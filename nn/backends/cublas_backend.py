"""The "cublas" backend, the baseline: cuBLAS GEMMs (in the backend's precision), each epilogue a
separate autogemm elementwise kernel, the output layer unfused (Backend's: cuBLAS's logits GEMM and
input-gradient GEMM around softmax_xent; its backward pass two cuBLAS GEMMs and column sums), every
array plain float32 (cuBLAS rounds float32 operands itself). Run eagerly: CuPy cannot capture cuBLAS
calls into a graph.
"""
import autogemm
from nn.backends.base import EPILOGUES
from nn.backends.gpu import GpuBackend
from nn.errors import NNError


class CublasBackend(GpuBackend):
    """cuBLAS's GEMM on the shared GPU backend (nn/backends/gpu.py)."""

    name = "cublas"
    can_capture = False

    def gemm(self, a, b, out, *, alpha=1.0, beta=0.0, trans_a=False, trans_b=False, c=None,
             epilogue=None, bias=None, aux=None, precision=None):
        if epilogue not in EPILOGUES:
            raise ValueError(f"unknown epilogue {epilogue!r}")
        if c is not None and c is not out and beta != 0:
            out[...] = c
        autogemm.cublas_gemm(a, b, out, trans_a, trans_b, precision or self.precision, alpha, beta)
        if epilogue in ("bias", "bias_sigmoid", "bias_relu"):
            autogemm.bias_activation(out, bias, epilogue[5:] or None, out=out, config=self.config)
        elif epilogue in ("dsigmoid", "drelu"):
            autogemm.activation_grad(out, aux, epilogue[1:], out=out, config=self.config)
        return out

    def capture(self, fn):
        raise NNError("the cublas backend cannot be captured into a CUDA graph (CuPy forbids cuBLAS during capture)")
