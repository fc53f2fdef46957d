#!/usr/bin/env bash
# The dense stack with each forward layer's first loads before its barrier: its GPU tests and
# LeNet's, its records tuned again, LeNet's epochs against the commit before (.device/base,
# `git archive` of it), and the step's parts. From the root:
#   source .device/env.sh && bash benchmarks/issue41-prefetch-visit.sh
set -uo pipefail
source benchmarks/entry-points.sh
w=$OUT/prefetch; mkdir -p "$w"
nvidia-smi -L > "$w/machine.txt"
timeout -s INT 100 python -m autogemm.cli tune --stale --trials 40 --timeout 30 > "$w/tune-stale.txt" 2>&1
echo "tune stale: exit $?"; grep "autogemm tune: \[" "$w/tune-stale.txt"
cp tuned/nvidia-h200.json "$w/"
timeout -s INT 150 python -m pytest -q -m gpu -p no:cacheprovider tests/test_dense_stack.py tests/test_cnn_gpu.py \
    -k "on_the_gpu or bad_arguments or lenet_in_float64 or lenet_graph" > "$w/pytest-gpu.txt" 2>&1
echo "pytest: exit $? $(tail -1 "$w/pytest-gpu.txt")"
for round in 1 2; do
    timeout -s INT 60 python -m nn.bench --networks lenet,lenet-b128 --backends cupy-tuned \
        --epochs 10 --json "$w/bench-new-$round.json" > "$w/bench-new-$round.txt" 2>&1
    (cd .device/base && timeout -s INT 60 python -m nn.bench --networks lenet,lenet-b128 \
        --backends cupy-tuned --epochs 10 --json "$w/bench-old-$round.json") > "$w/bench-old-$round.txt" 2>&1
done
timeout -s INT 60 python -m nn.profile --backend cupy-tuned --batch 1000 \
    --layers conv6x3,pool2,conv10x3,pool2,dense128,dense100,dense80 > "$w/profile-lenet-b1000.txt" 2>&1
timeout -s INT 60 python -m nn.profile --backend cupy-tuned --batch 128 \
    --layers conv6x3,pool2,conv10x3,pool2,dense128,dense100,dense80 > "$w/profile-lenet-b128.txt" 2>&1
tar czf "$OUT/prefetch.tar.gz" -C "$OUT" prefetch
for f in "$w"/bench-*.txt; do echo "$(basename $f)"; grep "ms/epoch" "$f"; done
grep -h "whole step\|dense_stack" "$w"/profile-*.txt
