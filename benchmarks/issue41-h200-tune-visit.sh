#!/usr/bin/env bash
# LeNet's direct convolutions tuned on an H200 (the pooled keys had no H200 records): LeNet's epochs
# at batch 1000 and 128 before and after, in one visit; the tuned file copied to $OUT. From the root:
#   source .device/env.sh && bash benchmarks/issue41-h200-tune-visit.sh
set -uo pipefail
source benchmarks/entry-points.sh
out=${OUT:-/tmp/h200tune}
work=$out/tune
mkdir -p "$work"
nvidia-smi -L > "$work/machine.txt"
backends=cupy-tuned,cupy-tuned-tf32,cupy-tuned-bf16
timeout -s INT 150 python -m nn.bench --networks lenet,lenet-b128 --backends $backends --epochs 10 \
    --json "$work/bench-before.json" > "$work/bench-before.txt" 2>&1
echo "before: exit $?"
families=conv2d_direct,conv2d_dgrad_direct,conv2d_wgrad_direct
for batch in 1000 128; do
    timeout -s INT 170 python -m autogemm.cli tune --model lenet --batch $batch --families $families --trials 24 \
        --timeout 8 > "$work/tune-lenet-b$batch.txt" 2>&1
    echo "tune b$batch: exit $?"
done
timeout -s INT 150 python -m nn.bench --networks lenet,lenet-b128 --backends $backends --epochs 10 \
    --json "$work/bench-after.json" > "$work/bench-after.txt" 2>&1
echo "after: exit $?"
cp tuned/nvidia-h200.json "$work/"
tar czf "$out/tune.tar.gz" -C "$out" tune
grep ms/epoch "$work"/bench-*.txt
