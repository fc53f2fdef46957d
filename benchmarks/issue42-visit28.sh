#!/usr/bin/env bash
# Issue 42: test accuracy of the converted models against PyTorch's after the same 20 epochs
# (examples/torch_train.py, one stream), seeds 0-2, fp32 and tf32, MLP and LeNet; prints one line a
# run. From the repository root:
#   source .device/env.sh && bash benchmarks/issue42-visit28.sh
set -uo pipefail
out=${OUT:-/tmp/issue42-accuracy}
mkdir -p "$out"
for model in lenet mlp; do
    for precision in fp32 tf32; do
        for seed in 0 1 2; do
            for layers in "" "--torch-only"; do
                echo "== --model $model --precision $precision --seed $seed $layers" >> "$out/accuracy.txt"
                timeout 100 python examples/torch_train.py --model $model --precision $precision --seed $seed \
                    --epochs 19 $layers >> "$out/accuracy.txt" 2>&1
                echo "seed $seed: $(tail -1 "$out/accuracy.txt")"
            done
        done
    done
done
