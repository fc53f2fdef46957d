#!/usr/bin/env bash
# Issue 42: what bounds the converted tf32 MLP's launches: Nsight Compute (full set, clocks left
# alone) on autogemm's four kernels of one eager step (benchmarks/issue42_profile.py, after three
# steps). From the repository root:
#   source .device/env.sh && bash benchmarks/issue42-visit12.sh
set -uo pipefail
out=${OUT:-/tmp/issue42l}
work=$out/issue42l
mkdir -p "$work"
nvidia-smi -L > "$work/machine.txt" 2>&1
timeout 300 ncu --clock-control none --set full --kernel-name "regex:gemm_wgmma|linear_backward|linear_xent" \
    --launch-skip 12 --launch-count 4 -o "$work/step" \
    python benchmarks/issue42_profile.py --model mlp --precision tf32 > "$work/ncu.txt" 2>&1
echo "ncu: exit $?"; tail -3 "$work/ncu.txt"
ncu --import "$work/step.ncu-rep" --page details > "$work/details.txt" 2>&1
grep -E "^  [a-z_]+.*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|L1/TEX Cache Throughput|Achieved Occupancy|Registers Per|Waves Per SM|Block Limit" "$work/details.txt" | head -80
