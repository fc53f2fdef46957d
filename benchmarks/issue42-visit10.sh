#!/usr/bin/env bash
# Issue 42: the converted models against PyTorch with the whole epoch one CUDA graph (nn.bench's
# torch-epoch-graph*, both models' steps reading their batches where they lie) beside a graph a
# step (torch-graph*, each batch copied into the graph's inputs), each network's rows from one
# process, the MLP's processes run three times. From the repository root:
#   source .device/env.sh && bash benchmarks/issue42-visit10.sh
set -uo pipefail
source benchmarks/entry-points.sh
out=${OUT:-/tmp/issue42j}
work=$out/issue42j
mkdir -p "$work"
nvidia-smi -L > "$work/machine.txt" 2>&1
mlp=torch-graph-tf32,torch-graph-autogemm-tf32,torch-epoch-graph-tf32,torch-epoch-graph-autogemm-tf32
mlp=$mlp,torch-graph,torch-graph-autogemm,torch-epoch-graph,torch-epoch-graph-autogemm
for run in 1 2 3; do
    timeout -s INT 150 python -m nn.bench --networks cme213 --epochs 5 --json "$work/mlp-$run.json" \
        --backends $mlp > "$work/mlp-$run.txt" 2>&1
    echo "mlp $run: exit $?"
done
lenet=torch-graph,torch-graph-autogemm,torch-epoch-graph,torch-epoch-graph-autogemm,torch-graph-tf32
lenet=$lenet,torch-graph-autogemm-tf32,torch-epoch-graph-tf32,torch-epoch-graph-autogemm-tf32
lenet=$lenet,torch-epoch-graph-bf16,torch-epoch-graph-autogemm-bf16
timeout -s INT 240 python -m nn.bench --networks lenet --epochs 5 --json "$work/lenet.json" \
    --backends $lenet > "$work/lenet.txt" 2>&1
echo "lenet: exit $?"
timeout -s INT 60 python -m nn.bench --networks cme213 --epochs 5 --backends cupy-tuned,cupy-tuned-tf32 \
    > "$work/nn.txt" 2>&1
echo "nn: exit $?"
for f in "$work"/mlp-*.txt "$work"/lenet.txt "$work"/nn.txt; do echo "== $(basename "$f")"; grep "ms/epoch\|rror" "$f"; done
tar czf "$out/issue42j.tar.gz" -C "$out" issue42j
