#!/usr/bin/env bash
# Issue 42: whether a CUDA graph replays slower once its kernels have run eagerly on more than one
# stream (visit24: eager work after the capture slows it on the current stream or a new one; a
# single cuBLAS product does not): the first model's epoch run eagerly again on its own warm-up
# stream, and graphs warmed up on two streams before their capture. From the repository root:
#   source .device/env.sh && bash benchmarks/issue42-visit25.sh
set -uo pipefail
out=${OUT:-/tmp/issue42y}
work=$out/issue42y
mkdir -p "$work"
for flags in "--between eager-same --stream warmup" "--between eager-forward --stream warmup" \
             "--between eager-same --stream new" "--warm-twice" "--warm-twice --between tiny-graph"; do
    for precision in "" "--tf32"; do
        echo "== issue42_first_graph.py $flags $precision" | tee -a "$work/first-graph.txt"
        timeout 150 python benchmarks/issue42_first_graph.py --rounds 2 $flags $precision \
            >> "$work/first-graph.txt" 2>&1
        tail -4 "$work/first-graph.txt" | grep -v "^=="
    done
done
