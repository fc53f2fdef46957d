#!/usr/bin/env bash
# Issue 15 on a GPU: the CNN's gpu tests, then LeNet's epoch time on the cupy backend (one CUDA graph
# an epoch) at batch 1000 and 128. Run from the repository root:
#   source .device/env.sh && bash tuned/bench/issue15-visit.sh tests [PYTEST -k EXPRESSION] | time
set -uo pipefail
out=${OUT:-/tmp/issue15}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
data=${AUTOGEMM_DATA_DIR:-.device/data}/fashion-mnist
case "${1:-tests}" in
tests)
    python -m pytest -q -m gpu -p no:cacheprovider tests/test_cnn_gpu.py tests/test_conv_gpu.py ${2:+-k "$2"} 2>&1 |
        tee "$out/gpu-tests.log" | tail -25
    ;;
time)
    for batch in 1000 128; do
        python -m nn.train --model lenet --backend cupy --batch "$batch" --epochs 4 --data-dir "$data" \
            --log "$out/lenet-b$batch.json" 2>&1 | tee "$out/lenet-b$batch.txt" | grep -v "^\s*$" | tail -6
    done
    ;;
esac
