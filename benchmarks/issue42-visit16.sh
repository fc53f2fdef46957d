#!/usr/bin/env bash
# Issue 42: how the converted MLP's two large tf32 GEMMs copy their stages (TMA, cp.async from a
# producer warpgroup or from every thread) and narrower tiles, three blocks an SM
# (benchmarks/issue42_copies.py). From the repository root:
#   source .device/env.sh && bash benchmarks/issue42-visit16.sh
set -uo pipefail
out=${OUT:-/tmp/issue42p}
work=$out/issue42p
mkdir -p "$work"
nvidia-smi -L > "$work/machine.txt" 2>&1
timeout -s INT 400 python benchmarks/issue42_copies.py --json "$work/copies.json" > "$work/copies.txt" 2>&1
echo "copies: exit $?"
grep -v Warning "$work/copies.txt"
