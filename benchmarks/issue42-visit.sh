#!/usr/bin/env bash
# Issue 42 (autogemm inside PyTorch) on one GPU. From the repository root:
#   source .device/env.sh && bash benchmarks/issue42-visit.sh check|profile|tune|bench|accuracy [mlp|lenet]
# check: the gpu tests of autogemm.torch (gradcheck, float32 against torch, CUDA graph, torch.compile,
# strides, errors).
# profile: benchmarks/issue42_profile.py, each network's kernels a step, as written and converted.
# tune: `autogemm tune --torch` of the two networks of examples/torch_models.py (fp32, then tf32).
# A second argument, mlp or lenet, keeps a phase to that network.
# bench: nn.bench's CME 213 MLP (batch 800, SGD) and LeNet (batch 1000, Adam) in PyTorch, as written
# and converted by autogemm.torch, each in a CUDA graph, at fp32, tf32 and bf16, eager and through
# torch.compile, in one process.
# accuracy: examples/torch_train.py, 20 epochs of LeNet and the MLP, converted and not.
# Everything lands in $OUT/issue42.tar.gz; a table last.
set -uo pipefail
source benchmarks/entry-points.sh
out=${OUT:-/tmp/issue42}
work=$out/issue42
mkdir -p "$work"
nvidia-smi -L > "$work/machine.txt" 2>&1
head -1 "$work/machine.txt"
nets=${2:-mlp lenet}
case "${1:-check}" in
check)
    timeout -s INT 400 python -m pytest -q -rf -m gpu tests/test_torch_gpu.py > "$work/pytest-torch-gpu.txt" 2>&1
    echo "pytest: exit $?"
    tail -5 "$work/pytest-torch-gpu.txt"
    ;;
profile)
    for net in $nets; do
        for precision in fp32 tf32; do
            for how in "" "--torch-only"; do
                python benchmarks/issue42_profile.py --model "$net" --precision "$precision" $how 2>&1 | head -30
            done
        done
    done > "$work/profile.txt"
    grep "a step" "$work/profile.txt"
    ;;
tune)
    for precision in fp32 tf32; do
        for net in "mlp 784 800" "lenet 1x28x28 1000"; do
            read -r name shape batch <<< "$net"
            [[ " $nets " == *" $name "* ]] || continue
            timeout -s INT 200 python -m autogemm.cli tune --torch "examples/torch_models.py:$name" --input "$shape" \
                --batch "$batch" --precision "$precision" --trials 24 --timeout 8 > "$work/tune-$name-$precision.txt" 2>&1
            echo "tune $name $precision: exit $?"
        done
    done
    mkdir -p "$work/tuned" && cp tuned/*.json "$work/tuned/"
    ;;
tune-chain)     # only the launches that linear_chain added (the rest tuned before); linear_backward's
                # compiles are slow (one trial in 8 s at the first try), so its search has 90 s
    python -m autogemm.cli tune --torch examples/torch_models.py:mlp --input 784 --batch 800 \
        --families linear_backward,colsum --trials 40 --timeout 90 > "$work/tune-chain-mlp.txt" 2>&1
    echo "tune mlp chain: exit $?"
    python -m autogemm.cli tune --torch examples/torch_models.py:lenet --input 1x28x28 --batch 1000 \
        --families linear_backward --trials 24 --timeout 8 > "$work/tune-chain-lenet.txt" 2>&1
    echo "tune lenet chain: exit $?"
    for precision in fp32 tf32; do
        python -m autogemm.cli tune --shapes 1000x100x80:nn+drelu,1000x128x100:nn+drelu --precision $precision \
            --trials 24 --timeout 8 > "$work/tune-chain-lenet-gemm-$precision.txt" 2>&1
        echo "tune lenet chain gemms $precision: exit $?"
    done
    mkdir -p "$work/tuned" && cp tuned/*.json "$work/tuned/"
    ;;
bench)
    timeout -s INT 500 python -m nn.bench --networks "$(echo $nets | sed 's/mlp/cme213/; s/ /,/')" --epochs 5 --json "$work/bench.json" \
        --backends torch-graph,torch-graph-autogemm,torch-graph-compile,torch-graph-compile-autogemm,torch-graph-tf32,torch-graph-autogemm-tf32,torch-graph-compile-autogemm-tf32,torch-graph-bf16,torch-graph-autogemm-bf16 \
        > "$work/bench.txt" 2>&1
    echo "bench: exit $?"
    cat "$work/bench.txt"
    ;;
accuracy)
    for model in $nets; do
        for how in "" "--torch-only"; do
            timeout -s INT 200 python examples/torch_train.py --model "$model" --epochs 19 $how \
                > "$work/accuracy-$model${how:+-torch}.txt" 2>&1
            echo "$model ${how:-autogemm}: exit $? $(tail -1 "$work/accuracy-$model${how:+-torch}.txt")"
        done
    done
    ;;
*)
    echo "unknown phase $1 (check, profile, tune, bench, accuracy)" >&2
    exit 2
    ;;
esac
tar czf "$out/issue42.tar.gz" -C "$out" issue42
