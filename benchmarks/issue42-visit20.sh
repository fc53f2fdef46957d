#!/usr/bin/env bash
# Issue 42: the kernels of the CME 213 MLP's CUDA-graphed epochs and the idle time between them, as
# written and converted, at tf32 (benchmarks/issue42_gaps.py). From the repository root:
#   source .device/env.sh && [DL=0|1: dependent launch] [ROWS=backends] bash benchmarks/issue42-visit20.sh
set -uo pipefail
out=${OUT:-/tmp/issue42t}
work=$out/issue42t
mkdir -p "$work"
nvidia-smi -L > "$work/machine.txt" 2>&1
AUTOGEMM_DEPENDENT_LAUNCH=${DL:-1} timeout 240 python benchmarks/issue42_gaps.py \
    --backends ${ROWS:-torch-epoch-graph-tf32,torch-epoch-graph-autogemm-tf32,torch-graph-tf32,torch-graph-autogemm-tf32} \
    > "$work/gaps-dl${DL:-1}.txt" 2>&1
echo "gaps: exit $?"; grep -v "Warning\|warn" "$work/gaps-dl${DL:-1}.txt"
