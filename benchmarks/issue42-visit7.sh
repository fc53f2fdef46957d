#!/usr/bin/env bash
# Issue 42: the converted MLP's small launches tuned deeper (--patience 0: no early end), then the
# converted MLP against PyTorch before and after, in one visit. From the repository root:
#   source .device/env.sh && bash benchmarks/issue42-visit7.sh
set -uo pipefail
source benchmarks/entry-points.sh
out=${OUT:-/tmp/issue42g}
work=$out/issue42g
mkdir -p "$work"
nvidia-smi -L > "$work/machine.txt" 2>&1
bench() {
    timeout -s INT 150 python -m nn.bench --networks cme213 --epochs 5 --json "$work/bench-$1.json" --backends \
        torch-graph,torch-graph-autogemm,torch-graph-tf32,torch-graph-autogemm-tf32,cupy-tuned-tf32 > "$work/bench-$1.txt" 2>&1
    echo "bench $1: exit $?"
}
bench before
deep="--trials 150 --patience 0 --timeout 45"
{
    python -m autogemm.cli tune --shapes 800x1000x784:nt+bias_sigmoid --precision tf32 --families gemm_wgmma $deep; echo "exit $?"
    python -m autogemm.cli tune --family linear_backward --problem rows=800,classes=10,inputs=1000,activation=sigmoid,grad_in_transposed=true $deep; echo "exit $?"
    python -m autogemm.cli tune --family linear_backward --problem rows=800,classes=10,inputs=1000,activation=sigmoid $deep; echo "exit $?"
    python -m autogemm.cli tune --family linear_xent --problem rows=800,classes=10,inputs=1000,loss=false $deep; echo "exit $?"
} > "$work/tune.txt" 2>&1
grep -E "^exit|best .* µs" "$work/tune.txt"
cp tuned/nvidia-h200.json "$out/nvidia-h200.json"
bench after
tar czf "$out/issue42g.tar.gz" -C "$out" issue42g
tail -3 "$work/bench-before.txt"; tail -3 "$work/bench-after.txt"
