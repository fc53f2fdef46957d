#!/usr/bin/env bash
# Issue 42: the converted MLP's two large tf32 GEMMs (forward 800x1000x784 nt+bias_sigmoid, weight
# gradient 1000x784x800 tt) over gemm_wgmma's split-K configs (K in 2, 3 or 4 slices, 3-5 stages),
# then the search on that space and the shipped records, re-timed together, L2 flushed.
# From the repository root:
#   source .device/env.sh && bash benchmarks/issue42-visit11.sh
set -uo pipefail
out=${OUT:-/tmp/issue42k}
work=$out/issue42k
mkdir -p "$work"
nvidia-smi -L > "$work/machine.txt" 2>&1
timeout -s INT 540 python benchmarks/issue42_wgmma_sweep.py --split-k 2,3,4 --json "$work/sweep.json" \
    > "$work/sweep.txt" 2>&1
echo "sweep: exit $?"
grep -v "/[0-9]*$" "$work/sweep.txt" | grep -v "^gemm_wgmma.*: [0-9]*/[0-9]*$" | tail -40
