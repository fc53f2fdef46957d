#!/usr/bin/env bash
# Issue 42: examples/torch_train.py with everything on one stream, beside the same script as it was
# (warmed up on a side stream, replayed on the default one; copied to examples/torch_train_old.py
# for the visit, not kept), tf32, twice each. From the repository root:
#   source .device/env.sh && bash benchmarks/issue42-visit27.sh
set -uo pipefail
out=${OUT:-/tmp/issue42-example}
mkdir -p "$out"
for i in 1 2; do
    for script in examples/torch_train_old.py examples/torch_train.py; do
        for flags in "--model mlp" "--model mlp --torch-only" "--model lenet" "--model lenet --torch-only"; do
            echo "== $script $flags --precision tf32" | tee -a "$out/example.txt"
            timeout 120 python "$script" $flags --precision tf32 --epochs 5 >> "$out/example.txt" 2>&1
            tail -1 "$out/example.txt"
        done
    done
done
