#!/usr/bin/env bash
# Issue 42: examples/torch_train.py with everything on one stream, beside the same script as it was
# (103ea58's: warmed up on a side stream, replayed on the default one; written to
# examples/torch_train_old.py for the visit and removed after), tf32, twice each. From the
# repository root:
#   source .device/env.sh && bash benchmarks/issue42-visit27.sh
set -uo pipefail
out=${OUT:-/tmp/issue42-example}
mkdir -p "$out"
git show 103ea58:examples/torch_train.py > examples/torch_train_old.py
trap 'rm -f examples/torch_train_old.py' EXIT
for i in 1 2; do
    for script in examples/torch_train_old.py examples/torch_train.py; do
        for flags in "--model mlp" "--model mlp --torch-only" "--model lenet" "--model lenet --torch-only"; do
            echo "== $script $flags --precision tf32" | tee -a "$out/example.txt"
            timeout 120 python "$script" $flags --precision tf32 --epochs 5 >> "$out/example.txt" 2>&1
            tail -1 "$out/example.txt"
        done
    done
done
