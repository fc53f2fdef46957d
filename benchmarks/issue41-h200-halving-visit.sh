#!/usr/bin/env bash
# LeNet with the halving warp sums, measured for the record: the convolution records that had one
# trial tuned again, LeNet (batch 1000 and 128) and LeNet-5 against PyTorch + cuDNN at each
# precision in one visit, LeNet's test accuracy after the default 20 epochs at each precision, the
# step without each kind of operation, and Nsight Compute on the dense stack. From the root:
#   source .device/env.sh && bash benchmarks/issue41-h200-halving-visit.sh
set -uo pipefail
source benchmarks/entry-points.sh
w=$OUT/halving; mkdir -p "$w"
nvidia-smi -L > "$w/machine.txt"
timeout -s INT 100 python -m autogemm.cli tune --model lenet --batch 1000 \
    --families conv2d_direct,conv2d_wgrad_direct,conv2d_dgrad_direct --trials 40 --timeout 15 > "$w/tune-conv-b1000.txt" 2>&1
echo "tune: exit $?"; grep "autogemm tune: \[" "$w/tune-conv-b1000.txt"
cp tuned/nvidia-h200.json "$w/"
for precision in fp32 tf32 bf16; do
    timeout -s INT 60 python -m nn.train --model lenet --use-tuned --precision $precision --log "$w/run-lenet-$precision.json" \
        > "$w/train-lenet-$precision.txt" 2>&1
    echo "train $precision: exit $? $(grep -i "test acc" "$w/train-lenet-$precision.txt" | tail -1)"
done
backends=cupy-tuned,cupy-tuned-tf32,cupy-tuned-bf16,torch-graph,torch-graph-tf32,torch-graph-bf16
timeout -s INT 150 python -m nn.bench --networks lenet,lenet-b128 --backends $backends --epochs 10 \
    --json "$w/bench-lenet.json" > "$w/bench-lenet.txt" 2>&1
timeout -s INT 100 python -m nn.bench --layers conv6x5,pool2,conv16x5,pool2,dense120,dense84 --backends $backends \
    --epochs 10 --json "$w/bench-lenet5.json" > "$w/bench-lenet5.txt" 2>&1
timeout -s INT 60 python benchmarks/issue41_step_parts.py > "$w/parts-b1000.txt" 2>&1
timeout -s INT 100 ncu --profile-from-start off -k regex:dense_stack --set full \
    python benchmarks/issue41_step_parts.py --ncu > "$w/ncu-stack-b1000.txt" 2>&1
tar czf "$OUT/halving.tar.gz" -C "$OUT" halving
grep -h "ms/epoch" "$w"/bench-*.txt
cat "$w/parts-b1000.txt"
grep -E "Duration|L2 Cache Throughput|L1/TEX Cache Throughput|Compute \(SM\) Throughput|Issued Warp|Stall|Achieved Occ" "$w/ncu-stack-b1000.txt" | head -30
