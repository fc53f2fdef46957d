#!/usr/bin/env bash
# The dense stack after its review (one H200): its GPU tests and the CNN trainer's (LeNet and the
# public stacks in float64 against NumPy, four ranks against one), its H200 records tuned again
# (the review changed its shared-memory layout: `autogemm tune --stale`), LeNet's test accuracy after
# the default 20 epochs at each precision, and the epochs. From the root:
#   source .device/env.sh && bash benchmarks/issue41-stack-final.sh
set -uo pipefail
source benchmarks/entry-points.sh
OUT=${OUT:-/tmp}
w=$OUT/final; mkdir -p "$w"
nvidia-smi -L > "$w/machine.txt"
timeout -s INT 240 python -m pytest -q -m gpu -p no:cacheprovider tests/test_dense_stack.py tests/test_cnn_gpu.py \
    -k "op_on_the_gpu or bad_arguments or lenet_in_float64 or public" > "$w/pytest-gpu.txt" 2>&1
echo "pytest: exit $? $(tail -1 "$w/pytest-gpu.txt")"
timeout -s INT 150 python -m autogemm.cli tune --stale --trials 40 --timeout 30 > "$w/tune-stale.txt" 2>&1
echo "tune --stale: exit $?"; grep "autogemm tune: \[" "$w/tune-stale.txt"
cp tuned/nvidia-h200.json "$w/"
for precision in fp32 tf32 bf16; do
    timeout -s INT 90 python -m nn.train --model lenet --use-tuned --precision $precision --log "$w/run-lenet-$precision.json" \
        > "$w/train-lenet-$precision.txt" 2>&1
    echo "train $precision: exit $? $(grep -i "test acc" "$w/train-lenet-$precision.txt" | tail -1)"
done
timeout -s INT 120 python -m nn.bench --networks lenet,lenet-b128 --backends cupy-tuned,cupy-tuned-tf32,cupy-tuned-bf16 \
    --epochs 10 --json "$w/bench.json" > "$w/bench.txt" 2>&1
grep "ms/epoch" "$w/bench.txt"
tar czf "$OUT/final.tar.gz" -C "$OUT" final
