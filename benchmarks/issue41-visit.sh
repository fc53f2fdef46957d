#!/usr/bin/env bash
# Issue 41 (CNNs on tensor cores) on one GPU. From the repository root:
#   source .device/env.sh && bash benchmarks/issue41-visit.sh check|gather|layers|accuracy|train|profile|tune [STACK...]
# check: the gpu tests of the convolutions (every direction on tensor cores) and of the CNN trainer.
# gather: benchmarks/issue41_gather.py on the wide layers (GATHER_LAYERS), and the same in the tree
# at $BASE (an older commit's files) where given, for a before/after of the implicit GEMMs.
# layers: `autogemm bench --layers STACK` at fp32 and tf32: each convolution call of the step (the
# default and best-known configs of each algorithm) against cuDNN at the same precision, L2 warm.
# accuracy: `nn.train --use-tuned --layers STACK` for the default 20 epochs at fp32, tf32 and bf16:
# each one's test accuracy (tf32 and bf16 should stay within 0.3 points of fp32).
# train: nn.bench of each stack (and LeNet at batch 1000 and 128, unless LENET=0): the tuned trainer
# at fp32, tf32 and bf16 against PyTorch + cuDNN in a CUDA graph at the same precision, the same visit.
# profile: nn.profile of LeNet (nn.layers.LENET) at batch 1000 and 128 and of each stack at batch
# 1000, on the tuned backend at fp32 and bf16: each launch of the step alone, and the whole step.
# tune: `autogemm tune` of LeNet (batch 1000 and 128) and of each stack at fp32, the families in
# $FAMILIES (default: the direct convolutions, whose records serve every precision); the tuned file
# is copied to $OUT/issue41/tuned/.
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
gather)
    layers=${GATHER_LAYERS:-1000x32x12x12x64x5,1000x64x13x13x128x3,1000x16x26x26x16x3}
    timeout -s INT 400 python benchmarks/issue41_gather.py --layers "$layers" --json "$work/gather.json" \
        > "$work/gather.txt" 2>&1
    echo "gather: exit $?"
    if [ -n "${BASE:-}" ]; then
        (cd "$BASE" && PYTHONPATH="/tmp/site:$BASE" timeout -s INT 400 python benchmarks/issue41_gather.py \
            --layers "$layers" --json "$work/gather-base.json" > "$work/gather-base.txt" 2>&1)
        echo "gather at $BASE: exit $?"
    fi
    python3 - "$work" <<'PY'
import json, pathlib, sys
work = pathlib.Path(sys.argv[1])
def best(path):
    """{(layer, precision, direction): (best two-stage candidate's µs, cuDNN's µs)}"""
    if not path.exists():
        return {}
    out = {}
    for r in json.loads(path.read_text())["rows"]:
        key = (r["layer"], r["precision"], r["direction"])
        mine, cudnn = out.get(key, (None, None))
        if r["variant"] == "cudnn":
            cudnn = r.get("median_us")
        elif r["variant"].startswith("cand") and "stage" not in r["variant"] and r.get("median_us"):
            mine = min(mine or 1e30, r["median_us"])
        out[key] = (mine, cudnn)
    return out
new, base = best(work / "gather.json"), best(work / "gather-base.json")
print(f"{'layer':22} {'prec':4} {'direction':13} {'base':>8} {'now':>8} {'cuDNN':>8} {'now/cuDNN':>9}")
for key, (mine, cudnn) in new.items():
    before = base.get(key, (None, None))[0]
    cells = [f"{v:8.1f}" if v else f"{'-':>8}" for v in (before, mine, cudnn)]
    ratio = f"{mine / cudnn:9.2f}" if mine and cudnn else ""
    print(f"{key[0]:22} {key[1]:4} {key[2]:13} {' '.join(cells)} {ratio}")
PY
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
accuracy)
    i=0
    for stack in "${stacks[@]}"; do
        i=$((i + 1))
        for precision in fp32 tf32 bf16; do
            timeout -s INT 200 python -m nn.train --use-tuned --layers "$stack" --precision "$precision" --no-log \
                > "$work/accuracy-s$i-$precision.txt" 2>&1
            echo "s$i $precision: exit $? $(grep -o 'test accuracy [0-9.]*%' "$work/accuracy-s$i-$precision.txt")"
        done
    done
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
profile)
    lenet=$(python -c "from nn.layers import LENET; print(LENET)")
    runs=("lenet-b1000 $lenet 1000" "lenet-b128 $lenet 128")
    i=0
    for stack in "${stacks[@]}"; do
        i=$((i + 1))
        runs+=("s$i $stack 1000")
    done
    for run in "${runs[@]}"; do
        read -r name spec batch <<< "$run"
        for backend in cupy-tuned cupy-tuned-bf16; do
            timeout -s INT 120 python -m nn.profile --layers "$spec" --batch "$batch" --backend "$backend" \
                --json "$work/profile-$name-$backend.json" > "$work/profile-$name-$backend.txt" 2>&1
            echo "$name $backend: exit $? $(grep -o 'whole step.*' "$work/profile-$name-$backend.txt")"
        done
    done
    cat "$work"/profile-lenet-b*.txt
    ;;
tune)
    families=${FAMILIES:-conv2d_direct,conv2d_dgrad_direct,conv2d_wgrad_direct}
    timeout -s INT 150 python -m autogemm.cli tune --model lenet --families "$families" --trials 24 --timeout 8 \
        > "$work/tune-lenet.txt" 2>&1
    echo "lenet: exit $?"
    timeout -s INT 150 python -m autogemm.cli tune --model lenet --batch 128 --families "$families" --trials 24 \
        --timeout 8 > "$work/tune-lenet-b128.txt" 2>&1
    echo "lenet b128: exit $?"
    i=0
    for stack in "${stacks[@]}"; do
        i=$((i + 1))
        timeout -s INT 150 python -m autogemm.cli tune --layers "$stack" --families "$families" --trials 24 \
            --timeout 8 > "$work/tune-s$i.txt" 2>&1
        echo "s$i: exit $?"
    done
    mkdir -p "$work/tuned" && cp tuned/*.json "$work/tuned/"
    ;;
*)
    echo "unknown phase $phase (check, gather, layers, accuracy, train, profile, tune)" >&2
    exit 2
    ;;
esac
tar czf "$out/issue41.tar.gz" -C "$out" issue41
