#!/usr/bin/env bash
# Issue 42: the converted MLP's two linear_backward records (800x10x1000, sigmoid_t and sigmoid)
# tuned again in linear_backward's space with narrow tiles, as the shipped ones were, then nn.bench's
# CME 213 epochs with the records before (read first through $AUTOGEMM_TUNED) and after, alternated,
# each in a process of its own. From the repository root:
#   source .device/env.sh && bash benchmarks/issue42-visit18.sh
set -uo pipefail
out=${OUT:-/tmp/issue42r}
work=$out/issue42r
mkdir -p "$work/before"
nvidia-smi -L > "$work/machine.txt" 2>&1
cp tuned/nvidia-h200.json "$work/before/"
for op in sigmoid_t sigmoid; do
    extra=$([ $op = sigmoid_t ] && echo ",grad_in_transposed=true")
    timeout -s INT 150 python -m autogemm.cli tune --family linear_backward \
        --problem "rows=800,classes=10,inputs=1000,activation=sigmoid$extra" --trials 150 --patience 0 --timeout 45 \
        > "$work/tune-$op.txt" 2>&1
    echo "tune $op: exit $?"; tail -4 "$work/tune-$op.txt"
done
cp tuned/nvidia-h200.json "$work/after.json"
rows=torch-epoch-graph-tf32,torch-epoch-graph-autogemm-tf32,torch-graph-tf32,torch-graph-autogemm-tf32,torch-epoch-graph,torch-epoch-graph-autogemm,cupy-tuned,cupy-tuned-tf32
for i in 1 2 3; do
    for tree in before after; do
        if [ $tree = before ]; then export AUTOGEMM_TUNED=$work/before; else unset AUTOGEMM_TUNED; fi
        timeout 150 python -m nn.bench --networks cme213 --epochs 5 --backends $rows --json "$work/bench-$tree-$i.json" \
            > "$work/bench-$tree-$i.txt" 2>&1
        echo "== $tree $i (exit $?)"; grep "ms/epoch" "$work/bench-$tree-$i.txt"
    done
done
(cd "$work" && tar czf bench.tgz bench-*.json bench-*.txt && rm bench-*.json bench-*.txt && rm -r before)
