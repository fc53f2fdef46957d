#!/usr/bin/env bash
# Issue 18 on a Hopper GPU: the wgmma path's GPU tests, then its configs against cuBLAS FP32/TF32 and
# the tuned mma.sync path. Run from the repository root:
#   source .device/env.sh && bash tuned/bench/issue18-visit.sh [wgmma]
set -uo pipefail
out=${OUT:-/tmp/issue18}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
case "${1:-wgmma}" in
wgmma)
    python -m pytest -q -m gpu tests/test_gemm_gpu.py -k wgmma > "$out/pytest-wgmma.txt" 2>&1
    tail -3 "$out/pytest-wgmma.txt"
    python tuned/bench/issue18_wgmma.py --sample 24 --json "$out/wgmma-bench.json" 2>&1 | tee "$out/wgmma-bench.txt"
    ;;
esac
