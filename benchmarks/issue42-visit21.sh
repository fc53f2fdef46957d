#!/usr/bin/env bash
# Issue 42: the first-graph effect (benchmarks/issue42-h200, order/) in PyTorch alone
# (benchmarks/issue42_first_graph.py: a first and a second graph of the MLP's epoch, the first kept or
# freed), then nn.bench --isolate beside nn.bench in one process, both orders. From the repository
# root (a part alone: first-graph, or bench ROUNDS):
#   source .device/env.sh && bash benchmarks/issue42-visit21.sh [first-graph | bench [ROUNDS]]
set -uo pipefail
out=${OUT:-/tmp/issue42u}
work=$out/issue42u
mkdir -p "$work"
nvidia-smi -L > "$work/machine.txt" 2>&1
part=${1:-all}
if [[ $part == all || $part == first-graph ]]; then
for flags in "" "--drop" "--tf32" "--tf32 --drop"; do
    echo "== issue42_first_graph.py $flags" | tee -a "$work/first-graph.txt"
    timeout 120 python benchmarks/issue42_first_graph.py $flags >> "$work/first-graph.txt" 2>&1
    tail -3 "$work/first-graph.txt"
done
fi
[[ $part == all || $part == bench ]] || exit 0
rows=torch-epoch-graph-tf32,torch-epoch-graph-autogemm-tf32
swapped=torch-epoch-graph-autogemm-tf32,torch-epoch-graph-tf32
for i in $(seq "${2:-2}"); do
    for run in "$rows" "$swapped" "$rows --isolate"; do
        echo "== nn.bench --backends $run" | tee -a "$work/bench.txt"
        timeout 150 python -m nn.bench --networks cme213 --epochs 5 --backends $run >> "$work/bench.txt" 2>&1
        grep "ms/epoch" "$work/bench.txt" | tail -2
    done
done
