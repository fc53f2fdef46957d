#!/usr/bin/env bash
# The whole GPU test suite (`pytest -m gpu`) on the stop's tree, in parts that each fit a device call
# (CuPy compiles every kernel from cold): `gemm` (tests/test_gemm_gpu.py), `layers` (the
# elementwise, convolution and CNN files), `rest` (every other file). From the repository root:
#   source .device/env.sh && bash benchmarks/gpu-suite-visit.sh gemm|layers|rest
set -uo pipefail
gemm="tests/test_gemm_gpu.py"
layers="tests/test_elementwise_gpu.py tests/test_conv_gpu.py tests/test_cnn_gpu.py"
case ${1:-} in
gemm) files=$gemm ;;
layers) files=$layers ;;
rest) files=$(ls tests/test_*.py examples/rowsoftmax/tests/test_*.py | grep -vxF -f <(tr ' ' '\n' <<< "$gemm $layers")) ;;
*) echo "usage: bash benchmarks/gpu-suite-visit.sh gemm|layers|rest" >&2; exit 2 ;;
esac
source benchmarks/entry-points.sh
w=${OUT:-/tmp/gpu-suite}; mkdir -p "$w"
nvidia-smi -L > "$w/machine.txt"
timeout -s INT 560 python -m pytest -m gpu -q -p no:cacheprovider --durations=10 $files > "$w/pytest-gpu-$1.txt" 2>&1
echo "pytest -m gpu ($1): exit $? $(tail -1 "$w/pytest-gpu-$1.txt")"
grep -E "^FAILED|^ERROR" "$w/pytest-gpu-$1.txt" | head -20
