#!/usr/bin/env bash
# Issue 41 (CNNs on tensor cores) on one GPU. From the repository root:
#   source .device/env.sh && bash benchmarks/issue41-visit.sh check|layers|train [STACK...]
# check: the gpu tests of the convolutions (every direction on tensor cores) and of the CNN trainer.
# layers: `autogemm bench --layers STACK` at fp32 and tf32: each convolution call of the step (the
# default and best-known configs of each algorithm) against cuDNN at the same precision, L2 warm.
# train: nn.bench of each stack (and LeNet at batch 1000 and 128, unless LENET=0): the tuned trainer
# at fp32, tf32 and bf16 against PyTorch + cuDNN in a CUDA graph at the same precision, the same visit.
# STACK: issue 41's public stacks by default (s1..s4 below), or given specs (numbered s1.. in order).
# Everything lands in $OUT/issue41.tar.gz; a table last.
set -uo pipefail
source benchmarks/entry-points.sh
out=${OUT:-/tmp/issue41}
work=$out/issue41
mkdir -p "$work"
nvidia-smi -L > "$work/machine.txt" 2>&1
head -1 "$work/machine.txt"
phase=${1:-check}
shift || true
stacks=("$@")
if [ ${#stacks[@]} -eq 0 ]; then
    stacks=(conv32x5,pool2,conv64x5,pool2,dense1024                     # s1: TensorFlow's MNIST tutorial
            conv16x3,conv16x3,pool2,conv32x3,conv32x3,pool2,dense256   # s2
            conv64x3,pool2,conv128x3,pool2,dense256                   # s3
            conv6x5,pool2,conv16x5,pool2,dense120,dense84)            # s4: LeNet-5
fi

case "$phase" in
check)
    timeout -s INT 420 python -m pytest -q -rf -m gpu tests/test_conv_gpu.py tests/test_cnn_gpu.py \
        > "$work/pytest-gpu.txt" 2>&1
    echo "pytest: exit $?"
    tail -5 "$work/pytest-gpu.txt"
    ;;
layers)
    i=0
    for stack in "${stacks[@]}"; do
        i=$((i + 1))
        for precision in fp32 tf32; do
            timeout -s INT 240 python -m autogemm.cli bench --layers "$stack" --precision "$precision" --reps 30 \
                --l2 warm --json "$work/layers-s$i-$precision.json" > "$work/layers-s$i-$precision.txt" 2>&1
            echo "s$i $precision: exit $?"
        done
    done
    python3 - "$work" <<'PY'
import json, pathlib, sys
work = pathlib.Path(sys.argv[1])
print(f"{'stack':5} {'prec':4} {'call':40} {'runs':>16} {'us':>8} {'cuDNN':>8} {'ratio':>6}")
for path in sorted(work.glob("layers-*.json")):
    stack, precision = path.stem.split("-")[1:]
    rows = json.loads(path.read_text())["results"]
    for shape in dict.fromkeys(r["shape"] for r in rows if r["variant"] == "cudnn"):
        mine = [r for r in rows if r["shape"] == shape]
        now = next((r for r in mine if r["runs_the_call"]), None)
        base = next(r for r in mine if r["variant"] == "cudnn")
        if now and now["median_us"] and base["median_us"]:
            print(f"{stack:5} {precision:4} {shape:40} {now['variant'][:16]:>16} {now['median_us']:8.1f} "
                  f"{base['median_us']:8.1f} {now['median_us'] / base['median_us']:6.2f}")
PY
    ;;
train)
    i=0
    for stack in "${stacks[@]}"; do
        i=$((i + 1))
        timeout -s INT 300 python -m nn.bench --layers "$stack" --epochs 3 --json "$work/train-s$i.json" \
            --backends cupy-tuned,torch-graph,cupy-tuned-tf32,torch-graph-tf32,cupy-tuned-bf16,torch-graph-bf16 \
            > "$work/train-s$i.txt" 2>&1
        echo "s$i: exit $?"
    done
    if [ "${LENET:-1}" = 1 ]; then
        timeout -s INT 300 python -m nn.bench --networks lenet,lenet-b128 --epochs 3 --json "$work/train-lenet.json" \
            --backends cupy-tuned,torch-graph,cupy-tuned-tf32,torch-graph-tf32,cupy-tuned-bf16,torch-graph-bf16 \
            > "$work/train-lenet.txt" 2>&1
        echo "lenet: exit $?"
    fi
    cat "$work"/train-*.txt | grep "ms/epoch\|skipped\|rror" | sort -k1,1 -s
    ;;
*)
    echo "unknown phase $phase (check, layers, train)" >&2
    exit 2
    ;;
esac
tar czf "$out/issue41.tar.gz" -C "$out" issue41
