#!/usr/bin/env bash
# The dense stack's weight gradients in float32 at every precision: the GPU tests of the backend's
# GEMMs and LeNet's, LeNet's epochs at fp32 and bf16 against the commit before (.device/base,
# `git archive 9dc7cd1`), and the bf16 step's profile. From the root:
#   source .device/env.sh && bash benchmarks/issue41-stack-grads-fp32-visit.sh
set -uo pipefail
source benchmarks/entry-points.sh
w=$OUT/grads-fp32; mkdir -p "$w"
nvidia-smi -L > "$w/machine.txt"
timeout -s INT 150 python -m pytest -q -m gpu -p no:cacheprovider tests/test_cupy_backend_gpu.py tests/test_cnn_gpu.py \
    -k "bf16 or precision or lenet_in_float64 or lenet_graph" > "$w/pytest-gpu.txt" 2>&1
echo "pytest: exit $? $(tail -1 "$w/pytest-gpu.txt")"
for round in 1 2; do
    timeout -s INT 60 python -m nn.bench --networks lenet,lenet-b128 --backends cupy-tuned,cupy-tuned-bf16 \
        --epochs 10 --json "$w/bench-new-$round.json" > "$w/bench-new-$round.txt" 2>&1
    (cd .device/base && timeout -s INT 60 python -m nn.bench --networks lenet,lenet-b128 \
        --backends cupy-tuned,cupy-tuned-bf16 --epochs 10 --json "$w/bench-old-$round.json") > "$w/bench-old-$round.txt" 2>&1
done
timeout -s INT 60 python -m nn.profile --backend cupy-tuned-bf16 --batch 128 \
    --layers conv6x3,pool2,conv10x3,pool2,dense128,dense100,dense80 > "$w/profile-bf16-b128.txt" 2>&1
tar czf "$OUT/grads-fp32.tar.gz" -C "$OUT" grads-fp32
for f in "$w"/bench-*.txt; do echo "$(basename $f)"; grep "ms/epoch" "$f"; done
grep "gemm\|whole" "$w/profile-bf16-b128.txt"
