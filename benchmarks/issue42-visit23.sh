#!/usr/bin/env bash
# Issue 42: what, after a first CUDA graph is timed, makes it replay slower (visit22: not the clock;
# a second epoch graph's capture does, the first graph freed or not): a graph of one small kernel
# (kept or freed), a fresh model's epoch run eagerly, 2 GiB allocated. From the repository root:
#   source .device/env.sh && bash benchmarks/issue42-visit23.sh
set -uo pipefail
out=${OUT:-/tmp/issue42w}
work=$out/issue42w
mkdir -p "$work"
for between in graph tiny-graph tiny-graph-freed eager alloc; do
    for flags in "" "--tf32"; do
        echo "== issue42_first_graph.py --rounds 3 --between $between $flags" | tee -a "$work/first-graph.txt"
        timeout 150 python benchmarks/issue42_first_graph.py --rounds 3 --between $between $flags \
            >> "$work/first-graph.txt" 2>&1
        tail -4 "$work/first-graph.txt" | grep -v "^=="
    done
done
