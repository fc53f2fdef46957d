#!/usr/bin/env bash
# Issue 42's MLP on one GPU, after the output layer's forward moved to linear_xent's logits alone and
# linear_backward's own-bias sums spread over its column tiles. From the repository root:
#   source .device/env.sh && bash benchmarks/issue42-visit3.sh
# The new GPU tests (the logits alone and the own-bias sums against float64, every sampled config;
# autogemm.torch's), the new launches tuned, nn.bench's CME 213 MLP as written and converted at fp32
# and tf32 with PyTorch's default (foreach) and fused SGD, in one process, and the converted step's
# kernels. Everything lands in $OUT/issue42c.tar.gz; a table last.
set -uo pipefail
source benchmarks/entry-points.sh
out=${OUT:-/tmp/issue42c}
work=$out/issue42c
mkdir -p "$work/tuned"
nvidia-smi -L > "$work/machine.txt" 2>&1
timeout -s INT 200 python -m pytest -q -rf -m gpu tests/test_torch_gpu.py tests/test_elementwise_gpu.py -k \
    "torch or own_bias or (linear_xent and logits)" > "$work/pytest-gpu.txt" 2>&1
echo "pytest: exit $?, $(tail -1 "$work/pytest-gpu.txt")" | tee "$work/summary.txt"
timeout -s INT 120 python -m autogemm.cli tune --torch examples/torch_models.py:mlp --input 784 --batch 800 \
    --families linear_xent --trials 24 --timeout 30 > "$work/tune-mlp-logits.txt" 2>&1
echo "tune mlp logits: exit $?" | tee -a "$work/summary.txt"
cp tuned/*.json "$work/tuned/"
timeout -s INT 240 python -m nn.bench --networks cme213 --epochs 5 --json "$work/bench.json" --backends \
    torch-graph,torch-graph-autogemm,torch-graph-tf32,torch-graph-autogemm-tf32,torch-graph-fused,torch-graph-fused-autogemm,torch-graph-fused-tf32,torch-graph-fused-autogemm-tf32 \
    > "$work/bench.txt" 2>&1
echo "bench: exit $?" | tee -a "$work/summary.txt"
for precision in fp32 tf32; do
    timeout -s INT 60 python benchmarks/issue42_profile.py --model mlp --precision $precision 2>&1 | head -20
done > "$work/profile.txt"
tar czf "$out/issue42c.tar.gz" -C "$out" issue42c
grep -h "best\|failed" "$work"/tune-*.txt | cut -c1-150
tail -3 "$work/bench.txt"
grep -A12 "a step" "$work/profile.txt"
