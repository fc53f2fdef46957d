#!/usr/bin/env bash
# The dense stack with the halving warp sums: its GPU tests and LeNet's in float64, its H200 records
# tuned again (the template changed), then LeNet's epochs against the commit before (.device/base,
# `git archive e2d81b8`), and the step without each kind of operation. From the root:
#   source .device/env.sh && bash benchmarks/issue41-stack-shuffle-visit.sh
set -uo pipefail
source benchmarks/entry-points.sh
w=$OUT/shuffle; mkdir -p "$w"
nvidia-smi -L > "$w/machine.txt"
timeout -s INT 150 python -m pytest -q -m gpu -p no:cacheprovider tests/test_dense_stack.py tests/test_cnn_gpu.py \
    -k "on_the_gpu or bad_arguments or lenet_in_float64 or lenet_graph" > "$w/pytest-gpu.txt" 2>&1
echo "pytest: exit $? $(tail -1 "$w/pytest-gpu.txt")"
timeout -s INT 150 python -m autogemm.cli tune --stale --trials 40 --timeout 30 > "$w/tune-stale.txt" 2>&1
echo "tune stale: exit $?"; grep "autogemm tune: \[" "$w/tune-stale.txt"
timeout -s INT 60 python -m autogemm.cli tune --layers conv6x5,pool2,conv16x5,pool2,dense120,dense84 --batch 1000 \
    --families dense_stack --trials 40 --timeout 30 > "$w/tune-lenet5.txt" 2>&1
echo "tune lenet5: exit $?"; grep "autogemm tune: \[" "$w/tune-lenet5.txt"
cp tuned/nvidia-h200.json "$w/"
for round in 1 2; do
    timeout -s INT 80 python -m nn.bench --networks lenet,lenet-b128 --backends cupy-tuned,cupy-tuned-tf32 \
        --epochs 10 --json "$w/bench-new-$round.json" > "$w/bench-new-$round.txt" 2>&1
    (cd .device/base && timeout -s INT 80 python -m nn.bench --networks lenet,lenet-b128 \
        --backends cupy-tuned,cupy-tuned-tf32 --epochs 10 --json "$w/bench-old-$round.json") > "$w/bench-old-$round.txt" 2>&1
done
timeout -s INT 60 python benchmarks/issue41_step_parts.py > "$w/parts-b1000.txt" 2>&1
timeout -s INT 40 python -m nn.profile --backend cupy-tuned --batch 1000 \
    --layers conv6x3,pool2,conv10x3,pool2,dense128,dense100,dense80 > "$w/profile-lenet-b1000.txt" 2>&1
tar czf "$OUT/shuffle.tar.gz" -C "$OUT" shuffle
for f in "$w"/bench-*.txt; do echo "$(basename $f)"; grep "ms/epoch" "$f"; done
cat "$w/parts-b1000.txt"; grep "whole step\|dense_stack" "$w/profile-lenet-b1000.txt"
