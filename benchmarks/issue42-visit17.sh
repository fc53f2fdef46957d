#!/usr/bin/env bash
# Issue 42: linear_backward's narrow column tiles for the converted MLP's output
# layer (benchmarks/issue42_backward.py), then nn.bench's MLP epochs with the shipped records and with
# the fastest narrow ones ($AUTOGEMM_TUNED), alternated, each in a process of its own. From the
# repository root:
#   source .device/env.sh && bash benchmarks/issue42-visit17.sh [sweep|bench]
set -uo pipefail
out=${OUT:-/tmp/issue42q}
work=$out/issue42q
mkdir -p "$work"
nvidia-smi -L > "$work/machine.txt" 2>&1
phase=${1:-sweep}
if [ "$phase" = sweep ]; then
    timeout -s INT 380 python benchmarks/issue42_backward.py --json "$work/backward.json" --store "$work/store" \
        > "$work/backward.txt" 2>&1
    echo "backward: exit $?"; grep -v "Warning\|failed:" "$work/backward.txt"; grep -c "failed:" "$work/backward.txt"
    timeout -s INT 180 python -m pytest -m gpu -q -p no:cacheprovider tests/test_elementwise_gpu.py -k linear_backward \
        > "$work/pytest-gpu.txt" 2>&1
    echo "pytest: exit $?"; tail -2 "$work/pytest-gpu.txt"
fi
if [ "$phase" = bench ]; then
    store=${STORE:?STORE: the folder issue42_backward.py --store wrote}
    rows=torch-epoch-graph-tf32,torch-epoch-graph-autogemm-tf32,torch-graph-tf32,torch-graph-autogemm-tf32,torch-epoch-graph,torch-epoch-graph-autogemm
    for i in 1 2 3; do
        for tree in shipped new; do
            if [ $tree = new ]; then export AUTOGEMM_TUNED=$store; else unset AUTOGEMM_TUNED; fi
            timeout 150 python -m nn.bench --networks cme213 --epochs 5 --backends $rows --json "$work/bench-$tree-$i.json" \
                > "$work/bench-$tree-$i.txt" 2>&1
            echo "== $tree $i (exit $?)"; grep "ms/epoch" "$work/bench-$tree-$i.txt"
        done
    done
    (cd "$work" && tar czf bench.tgz bench-*.json bench-*.txt && rm bench-*.json bench-*.txt)
fi
