#!/usr/bin/env bash
# Issue 42: nn.bench with every PyTorch row on one stream (nn.bench.one_stream): whether a row's
# time still depends on its place in the process, both orders of the tf32 MLP's rows against
# --isolate, and fp32's rows before them; then nn.bench's GPU tests. From the repository root:
#   source .device/env.sh && bash benchmarks/issue42-visit26.sh
set -uo pipefail
out=${OUT:-/tmp/issue42z}
work=$out/issue42z
mkdir -p "$work"
nvidia-smi -L > "$work/machine.txt" 2>&1
rows=torch-epoch-graph-tf32,torch-epoch-graph-autogemm-tf32
swapped=torch-epoch-graph-autogemm-tf32,torch-epoch-graph-tf32
four=torch-epoch-graph,torch-epoch-graph-autogemm,$rows
for i in 1 2; do
    for run in "$rows" "$swapped" "$rows --isolate" "$four"; do
        echo "== nn.bench --backends $run" | tee -a "$work/bench.txt"
        timeout 150 python -m nn.bench --networks cme213 --epochs 5 --backends $run >> "$work/bench.txt" 2>&1
        grep "ms/epoch" "$work/bench.txt" | tail -4
    done
done
timeout 300 python -m pytest -q -m gpu tests/test_nn_bench.py > "$work/pytest.txt" 2>&1
tail -2 "$work/pytest.txt"
