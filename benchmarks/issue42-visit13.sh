#!/usr/bin/env bash
# Issue 42: the two large tf32 GEMMs of the converted MLP with deeper pipelines
# (benchmarks/issue42_stages.py). From the repository root:
#   source .device/env.sh && bash benchmarks/issue42-visit13.sh
set -uo pipefail
out=${OUT:-/tmp/issue42m}
work=$out/issue42m
mkdir -p "$work"
nvidia-smi -L > "$work/machine.txt" 2>&1
timeout -s INT 420 python benchmarks/issue42_stages.py --json "$work/stages.json" > "$work/stages.txt" 2>&1
echo "stages: exit $?"
cat "$work/stages.txt" | grep -v Warning
