#!/usr/bin/env bash
# Issue 42: which eager work slows a process's first CUDA graph (visit23: a fresh model's eager
# epoch does; a small graph, kept or freed, and 2 GiB allocated do not): one eager step, forward
# passes alone, the first model's own epoch, one matrix product, on the current or a new stream;
# and the same with CUDA's modules loaded eagerly (run with the probe's --side, since renamed
# --stream new). From the repository root:
#   source .device/env.sh && bash benchmarks/issue42-visit24.sh
set -uo pipefail
out=${OUT:-/tmp/issue42x}
work=$out/issue42x
mkdir -p "$work"
for between in eager-step eager-forward eager-same mm; do
    for side in "" "--stream new"; do
        echo "== --between $between $side" | tee -a "$work/first-graph.txt"
        timeout 150 python benchmarks/issue42_first_graph.py --rounds 2 --tf32 --between $between $side \
            >> "$work/first-graph.txt" 2>&1
        tail -3 "$work/first-graph.txt" | grep -v "^=="
    done
done
for between in graph eager; do
    echo "== CUDA_MODULE_LOADING=EAGER --between $between" | tee -a "$work/first-graph.txt"
    CUDA_MODULE_LOADING=EAGER timeout 150 python benchmarks/issue42_first_graph.py --rounds 2 --tf32 \
        --between $between >> "$work/first-graph.txt" 2>&1
    tail -3 "$work/first-graph.txt" | grep -v "^=="
done
