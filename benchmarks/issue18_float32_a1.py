"""Run a module (nn.bench, nn.profile) as `python -m`, with the output layer's input stored in
float32 as before (no bfloat16 D): at bf16 its GEMM then writes float32, linear_xent and
linear_backward read float32, and the weight GEMM rounds it by to_bf16 first.
Usage: python benchmarks/issue18_float32_a1.py nn.bench --networks cme213 ..."""
import runpy
import sys

from nn.backends import cupy_backend

cupy_backend.CupyBackend.empty_output_layer_input = cupy_backend.CupyBackend.empty
module, sys.argv = sys.argv[1], sys.argv[1:]
runpy.run_module(module, run_name="__main__", alter_sys=True)
