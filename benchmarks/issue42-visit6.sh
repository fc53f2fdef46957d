#!/usr/bin/env bash
# Issue 42 after dependent launch (81e330e): the converted MLP and LeNet against PyTorch at each
# precision, with autogemm's captured launches dependent (the default) and not
# ($AUTOGEMM_DEPENDENT_LAUNCH=0), and the GPU tests of autogemm.torch. From the repository root:
#   source .device/env.sh && bash benchmarks/issue42-visit6.sh
set -uo pipefail
source benchmarks/entry-points.sh
out=${OUT:-/tmp/issue42f}
work=$out/issue42f
mkdir -p "$work"
nvidia-smi -L > "$work/machine.txt" 2>&1
backends=torch-graph,torch-graph-autogemm,torch-graph-tf32,torch-graph-autogemm-tf32,torch-graph-bf16,torch-graph-autogemm-bf16
timeout -s INT 240 python -m nn.bench --networks cme213,lenet --epochs 5 --json "$work/bench.json" \
    --backends $backends > "$work/bench.txt" 2>&1
echo "bench: exit $?"
AUTOGEMM_DEPENDENT_LAUNCH=0 timeout -s INT 120 python -m nn.bench --networks cme213 --epochs 5 \
    --json "$work/bench-no-pdl.json" --backends $backends > "$work/bench-no-pdl.txt" 2>&1
echo "bench, no dependent launch: exit $?"
timeout -s INT 150 python -m pytest -m gpu -q -p no:cacheprovider tests/test_torch_gpu.py > "$work/pytest-torch-gpu.txt" 2>&1
echo "pytest: exit $?"; tail -1 "$work/pytest-torch-gpu.txt"
tar czf "$out/issue42f.tar.gz" -C "$out" issue42f
tail -12 "$work/bench.txt"; tail -8 "$work/bench-no-pdl.txt"
