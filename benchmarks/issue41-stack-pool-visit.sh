#!/usr/bin/env bash
# The dense stack below LeNet's second pool (its backward pass the stack's): the GPU tests of the op
# and of LeNet in float64 against NumPy and in a graph against eager steps, the pooled keys tuned,
# LeNet's epochs. From the root:
#   source .device/env.sh && bash benchmarks/issue41-stack-pool-visit.sh
set -uo pipefail
source benchmarks/entry-points.sh
OUT=${OUT:-/tmp}
w=$OUT/pool; mkdir -p "$w"
nvidia-smi -L > "$w/machine.txt"
timeout -s INT 150 python -m pytest -q -m gpu -p no:cacheprovider tests/test_dense_stack.py tests/test_cnn_gpu.py \
    -k "on_the_gpu or bad_arguments or lenet_in_float64 or lenet_graph" > "$w/pytest-gpu.txt" 2>&1
echo "pytest: exit $? $(tail -1 "$w/pytest-gpu.txt")"
for batch in 1000 128; do
    timeout -s INT 80 python -m autogemm.cli tune --model lenet --batch $batch --families dense_stack --trials 40 \
        --timeout 30 > "$w/tune-lenet-b$batch.txt" 2>&1
    echo "tune b$batch: exit $?"; grep "autogemm tune: \[" "$w/tune-lenet-b$batch.txt"
done
cp tuned/nvidia-h200.json "$w/"
timeout -s INT 90 python -m nn.bench --networks lenet,lenet-b128 --backends cupy-tuned,cupy-tuned-tf32,cupy-tuned-bf16 \
    --epochs 10 --json "$w/bench.json" > "$w/bench.txt" 2>&1
grep "ms/epoch" "$w/bench.txt"
timeout -s INT 40 python -m nn.profile --backend cupy-tuned --batch 1000 \
    --layers conv6x3,pool2,conv10x3,pool2,dense128,dense100,dense80 > "$w/profile-lenet-b1000.txt" 2>&1
grep "whole step\|dense_stack" "$w/profile-lenet-b1000.txt"
tar czf "$OUT/pool.tar.gz" -C "$OUT" pool
