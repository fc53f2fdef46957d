#!/usr/bin/env bash
# Issue 42: the converted MLP's logits summed in the epilogue of its hidden layer's GEMM (a head,
# gemm_wgmma), one launch fewer a step. Phase `checks`: the GPU tests of the head and of
# autogemm.torch, and the step's kernels (benchmarks/issue42_profile.py) on this tree and on
# .device/base (`git archive <the commit before> autogemm kernels nn pyproject.toml tuned`).
# Phase `bench`: the step's kernels on this tree, then nn.bench's converted MLP against PyTorch,
# base and this tree alternated, each in its own process. It ran on the trees of a0d16f4 (checks)
# and 94f5571 (bench); the head was reverted after (benchmarks/issue42-h200/README.md, head/).
# From the repository root:
#   source .device/env.sh && bash benchmarks/issue42-visit9.sh checks|bench
set -uo pipefail
source benchmarks/entry-points.sh
phase=$1
out=${OUT:-/tmp/issue42i}
work=$out/issue42i-$phase
mkdir -p "$work"
nvidia-smi -L > "$work/machine.txt" 2>&1
tree() { [ "$1" = before ] && echo "$PWD/.device/base" || echo "$PWD"; }
if [ "$phase" = checks ]; then
    timeout -s INT 60 python -m pytest -m gpu -q -p no:cacheprovider tests/test_gemm_gpu.py -k head \
        > "$work/pytest-head.txt" 2>&1
    echo "pytest head: exit $?"; tail -1 "$work/pytest-head.txt"
    timeout -s INT 200 python -m pytest -m gpu -q -p no:cacheprovider tests/test_torch_gpu.py > "$work/pytest-torch.txt" 2>&1
    echo "pytest torch: exit $?"; tail -1 "$work/pytest-torch.txt"
    for t in before after; do
        for precision in tf32 fp32; do
            PYTHONPATH="$(tree $t):${PYTHONPATH:-}" timeout 90 python benchmarks/issue42_profile.py --model mlp \
                --precision $precision > "$work/profile-$precision-$t.txt" 2>&1
            echo "profile $precision $t: exit $?"; grep "µs of kernels" "$work/profile-$precision-$t.txt"
        done
    done
    grep -h "head\|linear_xent\|gemm_wgmma" "$work"/profile-tf32-*.txt
else
    timeout 90 python benchmarks/issue42_profile.py --model mlp --precision tf32 > "$work/profile-tf32-after.txt" 2>&1
    grep -E "µs of kernels|head" "$work/profile-tf32-after.txt"
    for t in before after before after; do
        PYTHONPATH="$(tree $t):${PYTHONPATH:-}" timeout -s INT 130 python -m nn.bench --networks cme213 --epochs 5 \
            --json "$work/bench-$t-$SECONDS.json" --backends \
            torch-graph-tf32,torch-graph-autogemm-tf32,torch-graph,torch-graph-autogemm > "$work/bench-$t-$SECONDS.txt" 2>&1
        echo "bench $t: exit $?"
        [ $SECONDS -gt 420 ] && break
    done
    for f in "$work"/bench-*.txt; do echo "== $(basename "$f")"; grep -E "torch-graph" "$f" | tail -4; done
fi
tar czf "$out/issue42i-$phase.tar.gz" -C "$out" "issue42i-$phase"
