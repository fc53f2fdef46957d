#!/usr/bin/env bash
# LeNet batch 1000: dense_stack tuned with a longer budget (the first shape of a process spent --timeout 8
# compiling: one trial), then the epochs against .device/base (dcf20e0) twice, and the profile. From the root:
#   source .device/env.sh && bash benchmarks/issue41-stack-b1000.sh
set -uo pipefail
source benchmarks/entry-points.sh
OUT=${OUT:-/tmp}
w=$OUT/b1000; mkdir -p $w
timeout -s INT 200 python -m autogemm.cli tune --model lenet --batch 1000 --families dense_stack --trials 60 --timeout 90 > $w/tune-lenet-b1000.txt 2>&1
grep "autogemm tune: \[" $w/tune-lenet-b1000.txt
cp tuned/nvidia-h200.json $w/
for i in 1 2; do
  timeout -s INT 100 python -m nn.bench --networks lenet --backends cupy-tuned,cupy-tuned-tf32,cupy-tuned-bf16 --epochs 10 --json $w/bench-new-$i.json > $w/bench-new-$i.txt 2>&1
  (cd .device/base && timeout -s INT 100 python -m nn.bench --networks lenet --backends cupy-tuned,cupy-tuned-tf32,cupy-tuned-bf16 --epochs 10 --json $w/bench-old-$i.json) > $w/bench-old-$i.txt 2>&1
done
timeout -s INT 100 python -m nn.profile --backend cupy-tuned --batch 1000 --layers conv6x3,pool2,conv10x3,pool2,dense128,dense100,dense80 > $w/profile-lenet-b1000.txt 2>&1
tar czf $OUT/b1000.tar.gz -C $OUT b1000
grep -h "ms/epoch" $w/bench-*.txt; grep "whole step\|dense_stack" $w/profile-lenet-b1000.txt
