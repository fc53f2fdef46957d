#!/usr/bin/env bash
# LeNet's test accuracy after the default 20 epochs at each precision for seeds 1 and 2 (seed 0 in
# halving/), and its step with the side branches' lanes merged. From the root:
#   source .device/env.sh && bash benchmarks/issue41-seeds-visit.sh
set -uo pipefail
source benchmarks/entry-points.sh
w=$OUT/seeds; mkdir -p "$w"
nvidia-smi -L > "$w/machine.txt"
timeout -s INT 60 python benchmarks/issue41_step_parts.py > "$w/parts-b1000.txt" 2>&1
timeout -s INT 60 python benchmarks/issue41_step_parts.py --batch 128 > "$w/parts-b128.txt" 2>&1
for seed in 1 2; do
    for precision in fp32 tf32 bf16; do
        timeout -s INT 60 python -m nn.train --model lenet --use-tuned --precision $precision --seed $seed \
            --log "$w/run-lenet-$precision-s$seed.json" > "$w/train-lenet-$precision-s$seed.txt" 2>&1
        echo "seed $seed $precision: exit $? $(grep -i "test acc" "$w/train-lenet-$precision-s$seed.txt" | tail -1)"
    done
done
tar czf "$OUT/seeds.tar.gz" -C "$OUT" seeds
cat "$w"/parts-b*.txt
