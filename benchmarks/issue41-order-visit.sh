#!/usr/bin/env bash
# Side work enqueued after the critical path's next operation (from a branch point before it): the
# GPU tests of branches and LeNet's step, LeNet's epochs against the commit before (.device/base,
# `git archive 99f5bd7`), and the step without each kind of operation. From the root:
#   source .device/env.sh && bash benchmarks/issue41-order-visit.sh
set -uo pipefail
source benchmarks/entry-points.sh
w=$OUT/order; mkdir -p "$w"
nvidia-smi -L > "$w/machine.txt"
timeout -s INT 200 python -m pytest -q -m gpu -p no:cacheprovider tests/test_cnn_gpu.py tests/test_cupy_backend_gpu.py \
    -k "branch or lenet or graph_replay or overlapped" > "$w/pytest-gpu.txt" 2>&1
echo "pytest: exit $? $(tail -1 "$w/pytest-gpu.txt")"
for round in 1 2; do
    timeout -s INT 80 python -m nn.bench --networks lenet,lenet-b128 --backends cupy-tuned,cupy-tuned-tf32 \
        --epochs 10 --json "$w/bench-new-$round.json" > "$w/bench-new-$round.txt" 2>&1
    (cd .device/base && timeout -s INT 80 python -m nn.bench --networks lenet,lenet-b128 \
        --backends cupy-tuned,cupy-tuned-tf32 --epochs 10 --json "$w/bench-old-$round.json") > "$w/bench-old-$round.txt" 2>&1
done
timeout -s INT 60 python benchmarks/issue41_step_parts.py > "$w/parts-b1000.txt" 2>&1
tar czf "$OUT/order.tar.gz" -C "$OUT" order
for f in "$w"/bench-*.txt; do echo "$(basename $f)"; grep "ms/epoch" "$f"; done
cat "$w/parts-b1000.txt"
