#!/usr/bin/env bash
# The dense stack's backward with two output columns a thread (pcols): its records tuned again (the
# new parameter), its GPU tests and LeNet's, LeNet's epochs against the commit before (.device/base).
# From the root:  source .device/env.sh && bash benchmarks/issue41-pcols-visit.sh
set -uo pipefail
source benchmarks/entry-points.sh
w=$OUT/pcols; mkdir -p "$w"
nvidia-smi -L > "$w/machine.txt"
timeout -s INT 80 python -m autogemm.cli tune --stale --trials 40 --timeout 30 > "$w/tune-stale.txt" 2>&1
echo "tune stale: exit $?"; grep "autogemm tune: \[" "$w/tune-stale.txt"
cp tuned/nvidia-h200.json "$w/"
timeout -s INT 50 python -m nn.bench --networks lenet,lenet-b128 --backends cupy-tuned --epochs 10 \
    --json "$w/bench-new.json" > "$w/bench-new.txt" 2>&1
(cd .device/base && timeout -s INT 50 python -m nn.bench --networks lenet,lenet-b128 --backends cupy-tuned \
    --epochs 10 --json "$w/bench-old.json") > "$w/bench-old.txt" 2>&1
timeout -s INT 90 python -m pytest -q -m gpu -p no:cacheprovider tests/test_dense_stack.py tests/test_cnn_gpu.py \
    -k "on_the_gpu or bad_arguments or lenet_in_float64" > "$w/pytest-gpu.txt" 2>&1
echo "pytest: exit $? $(tail -1 "$w/pytest-gpu.txt")"
tar czf "$OUT/pcols.tar.gz" -C "$OUT" pcols
for f in "$w"/bench-*.txt; do echo "$(basename $f)"; grep "ms/epoch" "$f"; done
