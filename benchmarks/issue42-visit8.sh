#!/usr/bin/env bash
# Issue 42: the converted MLP's logits (linear_xent without its loss) tuned with no early end now
# that --problem reads loss=false, the MLP against PyTorch before and after in one visit; and the
# GPU tests of lookup's callers after the twin fallback (the trainer's cost model reads the GPU's
# DeviceInfo). From the repository root:
#   source .device/env.sh && bash benchmarks/issue42-visit8.sh
set -uo pipefail
source benchmarks/entry-points.sh
out=${OUT:-/tmp/issue42h}
work=$out/issue42h
mkdir -p "$work"
nvidia-smi -L > "$work/machine.txt" 2>&1
bench() {
    timeout -s INT 150 python -m nn.bench --networks cme213 --epochs 5 --json "$work/bench-$1.json" --backends \
        torch-graph-tf32,torch-graph-autogemm-tf32,torch-graph,torch-graph-autogemm > "$work/bench-$1.txt" 2>&1
    echo "bench $1: exit $?"
}
bench before
python -m autogemm.cli tune --family linear_xent --problem rows=800,classes=10,inputs=1000,loss=false \
    --trials 150 --patience 0 --timeout 45 > "$work/tune.txt" 2>&1
echo "tune: exit $?"; grep "autogemm tune: \[" "$work/tune.txt"
cp tuned/nvidia-h200.json "$out/nvidia-h200.json"
bench after
timeout -s INT 120 python -m nn.train --use-tuned --epochs 2 > "$work/train.txt" 2>&1
echo "train: exit $?"; tail -1 "$work/train.txt"
timeout -s INT 200 python -m pytest -m gpu -q -p no:cacheprovider tests/test_search_gpu.py > "$work/pytest.txt" 2>&1
echo "pytest: exit $?"; tail -1 "$work/pytest.txt"
tar czf "$out/issue42h.tar.gz" -C "$out" issue42h
tail -2 "$work/bench-before.txt"; tail -2 "$work/bench-after.txt"
