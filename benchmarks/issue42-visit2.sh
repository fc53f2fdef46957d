#!/usr/bin/env bash
# Issue 42's MLP on one GPU, after the chain's backward pass took the output bias's gradient into
# linear_backward and, at tf32, stored the input gradient transposed. From the repository root:
#   source .device/env.sh && bash benchmarks/issue42-visit2.sh
# The GPU tests of autogemm.torch and of linear_backward; the MLP's launches tuned (fp32: every
# precision's layouts, then tf32); nn.bench's CME 213 MLP as written and converted at fp32 and tf32
# in one process; the converted step's kernels. Everything lands in $OUT/issue42b.tar.gz; a table last.
set -uo pipefail
source benchmarks/entry-points.sh
out=${OUT:-/tmp/issue42b}
work=$out/issue42b
mkdir -p "$work/tuned"
nvidia-smi -L > "$work/machine.txt" 2>&1
timeout -s INT 150 python -m pytest -q -rf -m gpu tests/test_torch_gpu.py tests/test_elementwise_gpu.py -k \
    "torch or linear_backward" > "$work/pytest-gpu.txt" 2>&1
echo "pytest: exit $?, $(tail -1 "$work/pytest-gpu.txt")" | tee "$work/summary.txt"
for precision in fp32 tf32; do
    timeout -s INT 170 python -m autogemm.cli tune --torch examples/torch_models.py:mlp --input 784 --batch 800 \
        --precision $precision --trials 16 --timeout 12 > "$work/tune-mlp-$precision.txt" 2>&1
    echo "tune mlp $precision: exit $?" | tee -a "$work/summary.txt"
done
cp tuned/*.json "$work/tuned/"
timeout -s INT 150 python -m nn.bench --networks cme213 --epochs 5 --json "$work/bench.json" \
    --backends torch-graph,torch-graph-autogemm,torch-graph-tf32,torch-graph-autogemm-tf32 > "$work/bench.txt" 2>&1
echo "bench: exit $?" | tee -a "$work/summary.txt"
for precision in fp32 tf32; do
    timeout -s INT 60 python benchmarks/issue42_profile.py --model mlp --precision $precision 2>&1 | head -20
done > "$work/profile.txt"
tar czf "$out/issue42b.tar.gz" -C "$out" issue42b
grep -h "best\|failed" "$work"/tune-mlp-*.txt | cut -c1-150
cat "$work/bench.txt" | tail -15
grep -A14 "a step" "$work/profile.txt"
