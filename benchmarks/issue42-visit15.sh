#!/usr/bin/env bash
# Issue 42: the converted MLP's linear_backward and logits configs ranked with L2 warm
# (benchmarks/issue42_warm.py). From the repository root:
#   source .device/env.sh && bash benchmarks/issue42-visit15.sh
set -uo pipefail
out=${OUT:-/tmp/issue42o}
work=$out/issue42o
mkdir -p "$work"
nvidia-smi -L > "$work/machine.txt" 2>&1
timeout -s INT 500 python benchmarks/issue42_warm.py --json "$work/warm.json" > "$work/warm.txt" 2>&1
echo "warm: exit $?"
grep -v "Warning\|failed:" "$work/warm.txt"; grep -c "failed:" "$work/warm.txt"
