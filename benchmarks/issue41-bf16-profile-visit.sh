#!/usr/bin/env bash
# Why LeNet's bf16 epoch is slower than its fp32 one: nn.profile at each, batch 1000 and 128. From the root:
#   source .device/env.sh && bash benchmarks/issue41-bf16-profile-visit.sh
set -uo pipefail
source benchmarks/entry-points.sh
w=$OUT/bf16; mkdir -p "$w"
nvidia-smi -L > "$w/machine.txt"
for batch in 1000 128; do
    for backend in cupy-tuned cupy-tuned-bf16; do
        timeout -s INT 60 python -m nn.profile --backend $backend --batch $batch \
            --layers conv6x3,pool2,conv10x3,pool2,dense128,dense100,dense80 > "$w/profile-$backend-b$batch.txt" 2>&1
    done
done
tar czf "$OUT/bf16.tar.gz" -C "$OUT" bf16
cat "$w"/profile-*.txt
