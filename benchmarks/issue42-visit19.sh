#!/usr/bin/env bash
# Issue 42: nn.bench's CUDA-graphed rows with programmatic dependent launch and without
# ($AUTOGEMM_DEPENDENT_LAUNCH=0), in processes alternated. From the repository root:
#   source .device/env.sh && [NETWORKS=...] [ROWS=backends] [ORDER="1 0 ..."] bash benchmarks/issue42-visit19.sh
set -uo pipefail
out=${OUT:-/tmp/issue42s}
work=$out/issue42s
mkdir -p "$work"
nvidia-smi -L > "$work/machine.txt" 2>&1
rows=${ROWS:-torch-epoch-graph-tf32,torch-epoch-graph-autogemm-tf32}
for dl in ${ORDER:-1 0 1 0}; do
    AUTOGEMM_DEPENDENT_LAUNCH=$dl timeout 100 python -m nn.bench --networks ${NETWORKS:-cme213} --epochs 5 --backends $rows \
        >> "$work/bench-dl$dl.txt" 2>&1
    echo "== dependent launch $dl"; grep "ms/epoch" "$work/bench-dl$dl.txt" | tail -2
done
