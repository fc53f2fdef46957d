#!/usr/bin/env bash
set -uo pipefail
# LeNet at batch 1000: the step with each kind of operation left out, and Nsight Compute on one step.
# From the root: source .device/env.sh && bash benchmarks/issue41-parts-visit.sh
source benchmarks/entry-points.sh
w=$OUT/parts; mkdir -p "$w"
nvidia-smi -L > "$w/machine.txt"
timeout -s INT 120 python benchmarks/issue41_step_parts.py > "$w/parts-b1000.txt" 2>&1; echo "parts: $?"
timeout -s INT 200 ncu --profile-from-start off --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis \
   --section Occupancy --section LaunchStats --section SchedulerStats python benchmarks/issue41_step_parts.py --ncu > "$w/ncu-b1000.txt" 2>&1; echo "ncu: $?"
tar czf "$OUT/parts.tar.gz" -C "$OUT" parts
cat "$w/parts-b1000.txt"
grep -E "^  [a-z_]+.*\(|Duration|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|Achieved Occupancy|Stall Long|Registers Per" "$w/ncu-b1000.txt" | head -150
