#!/usr/bin/env bash
# The direct backward-data convolution with each image's gradients in shared memory (`tile`), on one
# GPU (at 8e1a625, since reverted): its GPU tests, LeNet's backward-data keys tuned again with it in the space, LeNet's epochs
# before and after in one visit; the tuned file copied to $OUT. From the repository root:
#   source .device/env.sh && bash benchmarks/issue41-dgrad-tile-visit.sh
set -uo pipefail
source benchmarks/entry-points.sh
out=${OUT:-/tmp/dtile}
work=$out/dtile
mkdir -p "$work"
nvidia-smi -L > "$work/machine.txt"
timeout -s INT 200 python -m pytest -q -m gpu -p no:cacheprovider tests/test_conv_gpu.py \
    -k "dgrad_configs or fused_pool" > "$work/pytest-gpu.txt" 2>&1
echo "pytest: exit $? $(tail -1 "$work/pytest-gpu.txt")"
backends=cupy-tuned,cupy-tuned-tf32
timeout -s INT 120 python -m nn.bench --networks lenet,lenet-b128 --backends $backends --epochs 10 \
    --json "$work/bench-before.json" > "$work/bench-before.txt" 2>&1
echo "before: exit $?"
for batch in 1000 128; do
    timeout -s INT 120 python -m autogemm.cli tune --model lenet --batch $batch --families conv2d_dgrad_direct \
        --trials 24 --timeout 8 > "$work/tune-lenet-b$batch.txt" 2>&1
    echo "tune b$batch: exit $?"
done
timeout -s INT 120 python -m nn.bench --networks lenet,lenet-b128 --backends $backends --epochs 10 \
    --json "$work/bench-after.json" > "$work/bench-after.txt" 2>&1
echo "after: exit $?"
for b in 128 1000; do
    timeout -s INT 100 python -m nn.profile --backend cupy-tuned --batch $b \
        --layers conv6x3,pool2,conv10x3,pool2,dense128,dense100,dense80 > "$work/profile-lenet-b$b.txt" 2>&1
done
cp tuned/nvidia-h200.json "$work/"
tar czf "$out/dtile.tar.gz" -C "$out" dtile
grep ms/epoch "$work"/bench-*.txt
grep -h "dgrad" "$work"/tune-lenet-b*.txt | cut -c1-170
grep -h "backward_data\|whole step" "$work"/profile-*.txt
