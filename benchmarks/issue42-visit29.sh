#!/usr/bin/env bash
# Issue 42, the closing figures: with `checks`, examples/torch_train.py as a user runs it (its
# defaults, then LeNet), the kernels and idle time of the converted MLP a graph a step, eager
# against torch.compile (issue42_gaps.py), and the PyTorch GPU tests; with `rows`, every target's
# nn.bench row twice, then the fp32 kernels and idle time again with the memory copies counted;
# with `compile`, the compile cells against the converted model eager in both orders and each in a
# fresh process, three times. From the repository root:
#   source .device/env.sh && bash benchmarks/issue42-visit29.sh checks|rows|compile
set -uo pipefail
out=${OUT:-/tmp/issue42-close}
mkdir -p "$out"
nvidia-smi -L > "$out/machine.txt" 2>&1
case ${1:-} in
checks)
    for flags in "" "--model lenet"; do
        echo "== python examples/torch_train.py $flags" | tee -a "$out/example.txt"
        timeout 150 python examples/torch_train.py $flags >> "$out/example.txt" 2>&1
        tail -2 "$out/example.txt"
    done
    for precision in "" "-tf32"; do
        timeout 200 python benchmarks/issue42_gaps.py \
            --backends torch-graph-autogemm$precision,torch-graph-compile-autogemm$precision >> "$out/gaps.txt" 2>&1
    done
    grep -E "^==|^a step" "$out/gaps.txt"
    timeout 400 python -m pytest -q -m gpu tests/test_torch_gpu.py tests/test_nn_bench.py > "$out/pytest-gpu.txt" 2>&1
    tail -2 "$out/pytest-gpu.txt"
    ;;
rows)
    all=torch-epoch-graph,torch-epoch-graph-autogemm,torch-epoch-graph-tf32,torch-epoch-graph-autogemm-tf32
    all=$all,torch-graph-autogemm,torch-graph-compile-autogemm,torch-graph-autogemm-tf32,torch-graph-compile-autogemm-tf32
    for i in 1 2; do
        echo "== nn.bench --networks cme213,lenet --backends $all" >> "$out/rows.txt"
        timeout 200 python -m nn.bench --networks cme213,lenet --epochs 5 --backends $all >> "$out/rows.txt" 2>&1
    done
    grep -A3 "^network" "$out/rows.txt"
    timeout 150 python benchmarks/issue42_gaps.py --copies \
        --backends torch-graph-autogemm,torch-graph-compile-autogemm > "$out/gaps-copies.txt" 2>&1
    grep -E "^==|^a step|Memcpy" "$out/gaps-copies.txt"
    ;;
compile)
    for i in 1 2 3; do
        for p in "" "-tf32"; do
            for run in "torch-graph-autogemm$p,torch-graph-compile-autogemm$p" \
                       "torch-graph-compile-autogemm$p,torch-graph-autogemm$p" \
                       "torch-graph-autogemm$p,torch-graph-compile-autogemm$p --isolate"; do
                echo "== nn.bench --networks cme213 --backends $run" >> "$out/compile.txt"
                timeout 120 python -m nn.bench --networks cme213 --epochs 5 --backends $run >> "$out/compile.txt" 2>&1
            done
        done
    done
    grep -E "^==|ms/epoch" "$out/compile.txt" | paste - - - | sed -E 's/ +/ /g'
    ;;
*)
    echo "usage: bash benchmarks/issue42-visit29.sh checks|rows|compile" >&2
    exit 2
    ;;
esac
