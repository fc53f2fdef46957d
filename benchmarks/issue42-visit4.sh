#!/usr/bin/env bash
# Issue 42, a fourth visit to one GPU: the GPU tests of what changed (autogemm.torch, frozen layers
# of a run, the logits alone, linear_backward's own bias), the records their template changes made
# stale re-tuned, nn's own trainer on the CME 213 MLP (its output layer is linear_xent's kernel)
# against PyTorch, and the sampled-config tests of the two changed families. From the repository root:
#   source .device/env.sh && bash benchmarks/issue42-visit4.sh
# Everything lands in $OUT/issue42d.tar.gz; a table last.
set -uo pipefail
source benchmarks/entry-points.sh
out=${OUT:-/tmp/issue42d}
work=$out/issue42d
mkdir -p "$work/tuned"
nvidia-smi -L > "$work/machine.txt" 2>&1
timeout -s INT 150 python -m pytest -q -rf -m gpu tests/test_torch_gpu.py tests/test_elementwise_gpu.py -k \
    "torch or own_bias or (linear_xent and logits)" > "$work/pytest-gpu.txt" 2>&1
echo "pytest torch, own bias, logits: exit $?, $(tail -1 "$work/pytest-gpu.txt")" | tee "$work/summary.txt"
timeout -s INT 150 python -m autogemm.cli tune --stale --trials 16 --timeout 8 > "$work/tune-stale.txt" 2>&1
echo "tune --stale: exit $?" | tee -a "$work/summary.txt"
cp tuned/*.json "$work/tuned/"
timeout -s INT 120 python -m nn.bench --networks cme213 --epochs 5 --json "$work/bench.json" --backends \
    cupy-tuned,cupy-tuned-tf32,cupy-tuned-bf16,torch-graph,torch-graph-tf32,torch-graph-bf16 > "$work/bench.txt" 2>&1
echo "bench: exit $?" | tee -a "$work/summary.txt"
timeout -s INT 150 python -m pytest -q -rf -m gpu tests/test_elementwise_gpu.py -k \
    "linear_xent_every or linear_backward_every or bfloat16" > "$work/pytest-families.txt" 2>&1
echo "pytest linear_xent, linear_backward: exit $?, $(tail -1 "$work/pytest-families.txt")" | tee -a "$work/summary.txt"
tar czf "$out/issue42d.tar.gz" -C "$out" issue42d
grep -h "best\|failed\|stale" "$work"/tune-stale.txt | cut -c1-150 | tail -30
tail -3 "$work/bench.txt"
