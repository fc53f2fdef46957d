#!/usr/bin/env bash
# Issue 41: test accuracy by precision on s3 (conv64x3,pool2,conv128x3,pool2,dense256) over seeds
# 0-2, whose single tf32 run (benchmarks/issue41-h100/checks) was 0.9 points above fp32's: `python
# -m nn.train --use-tuned --layers s3 --precision P --seed S`, the default 20 epochs, the three
# precisions of a seed run side by side on the one GPU. From the repository root:
#   source .device/env.sh && bash benchmarks/issue41-seeds-s3-visit.sh
set -uo pipefail
source benchmarks/entry-points.sh
out=${OUT:-/tmp/issue41s3}
work=$out/seeds-s3
mkdir -p "$work"
nvidia-smi -L > "$work/machine.txt" 2>&1
for seed in 0 1 2; do
    for p in fp32 tf32 bf16; do
        timeout -s INT 280 python -m nn.train --use-tuned --layers conv64x3,pool2,conv128x3,pool2,dense256 \
            --precision "$p" --seed "$seed" > "$work/s3-$p-seed$seed.txt" 2>&1 &
    done
    wait
done
tar czf "$out/seeds-s3.tar.gz" -C "$out" seeds-s3
for f in "$work"/s3-*.txt; do echo "$(basename "$f" .txt): $(grep -o 'test accuracy [0-9.]*%' "$f" | tail -1)"; done
