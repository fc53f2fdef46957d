#!/usr/bin/env bash
# The dense stack's forward: a warp stops at its first round whose outputs all lie past N (layers
# of 100, 80 and 10 outputs left most warps computing zeros in their last round), and the warp sums'
# fixed-bound loop the only form. Its records tuned again, its GPU tests and LeNet's, LeNet's
# epochs against the commit before (.device/base), old and new alternated. From the root:
#   source .device/env.sh && bash benchmarks/issue41-skip-rounds-visit.sh
set -uo pipefail
source benchmarks/entry-points.sh
w=$OUT/skip-rounds; mkdir -p "$w"
nvidia-smi -L > "$w/machine.txt"
timeout -s INT 100 python -m autogemm.cli tune --stale --trials 40 --timeout 30 > "$w/tune-stale.txt" 2>&1
echo "tune stale: exit $?"; grep "autogemm tune: \[" "$w/tune-stale.txt"
cp tuned/nvidia-h200.json "$w/"
nets="--networks lenet,lenet-b128 --backends cupy-tuned,cupy-tuned-bf16 --epochs 10"
for turn in 1 2; do
    (cd .device/base && timeout -s INT 60 python -m nn.bench $nets --json "$w/bench-old-$turn.json") > "$w/bench-old-$turn.txt" 2>&1
    timeout -s INT 60 python -m nn.bench $nets --json "$w/bench-new-$turn.json" > "$w/bench-new-$turn.txt" 2>&1
done
timeout -s INT 100 python -m nn.bench --layers conv6x5,pool2,conv16x5,pool2,dense120,dense84 --backends cupy-tuned \
    --epochs 10 --json "$w/bench-lenet5-new.json" > "$w/bench-lenet5-new.txt" 2>&1
(cd .device/base && timeout -s INT 100 python -m nn.bench --layers conv6x5,pool2,conv16x5,pool2,dense120,dense84 \
    --backends cupy-tuned --epochs 10 --json "$w/bench-lenet5-old.json") > "$w/bench-lenet5-old.txt" 2>&1
timeout -s INT 120 python -m pytest -q -m gpu -p no:cacheprovider tests/test_dense_stack.py tests/test_cnn_gpu.py \
    tests/test_search_gpu.py -k "on_the_gpu or bad_arguments or lenet_in_float64 or search_gpu" > "$w/pytest-gpu.txt" 2>&1
echo "pytest: exit $? $(tail -1 "$w/pytest-gpu.txt")"
tar czf "$OUT/skip-rounds.tar.gz" -C "$OUT" skip-rounds
for f in "$w"/bench-*.txt; do echo "$(basename $f)"; grep "ms/epoch" "$f"; done
