#!/usr/bin/env bash
# The dense stack (kernels/dense_stack: a CNN's top dense layers forward, loss and back in one kernel)
# on one GPU: its GPU tests and the CNN trainer's, its tuning for LeNet (batch 1000 and 128) and
# LeNet-5, then the epochs against the commit before it (.device/base: `git archive dcf20e0 autogemm
# kernels nn pyproject.toml`) and PyTorch in the same visit, and the step's profile. From the root:
#   source .device/env.sh && bash benchmarks/issue41-stack-visit.sh [tests] [tune] [bench] [profile]
set -uo pipefail
source benchmarks/entry-points.sh
out=${OUT:-/tmp/stack}
work=$out/stack
mkdir -p "$work"
nvidia-smi -L > "$work/machine.txt"
stages=" ${*:-tests tune bench profile} "
lenet5=conv6x5,pool2,conv16x5,pool2,dense120,dense84
if [[ $stages == *" tests "* ]]; then
    timeout -s INT 420 python -m pytest -q -m gpu -p no:cacheprovider tests/test_dense_stack.py tests/test_cnn_gpu.py \
        tests/test_cupy_backend_gpu.py -k "op_on_the_gpu or lenet_in_float64 or lenet_graph or side_branch or all_reduce" \
        > "$work/pytest-gpu.txt" 2>&1
    echo "pytest: exit $? $(tail -1 "$work/pytest-gpu.txt")"
fi
if [[ $stages == *" tune "* ]]; then
    for batch in 1000 128; do
        timeout -s INT 150 python -m autogemm.cli tune --model lenet --batch $batch --families dense_stack --trials 40 \
            --timeout 8 > "$work/tune-lenet-b$batch.txt" 2>&1
        echo "tune lenet b$batch: exit $?"
    done
    timeout -s INT 100 python -m autogemm.cli tune --layers $lenet5 --families dense_stack --trials 40 --timeout 8 \
        > "$work/tune-lenet5.txt" 2>&1
    echo "tune lenet-5: exit $?"
    cp tuned/nvidia-h200.json "$work/" 2>/dev/null
fi
bench() {   # label, directory, networks, backends, extra
    (cd "$2" && timeout -s INT 250 python -m nn.bench --networks "$3" --backends "$4" --epochs 10 ${5:-} \
        --json "$work/bench-$1.json") > "$work/bench-$1.txt" 2>&1
    echo "$1: exit $?"
}
ours=cupy-tuned,cupy-tuned-tf32,cupy-tuned-bf16
if [[ $stages == *" bench "* ]]; then
    base=$PWD/.device/base
    bench new-1 . lenet,lenet-b128 $ours,torch-graph,torch-graph-tf32,torch-graph-bf16
    bench old-1 "$base" lenet,lenet-b128 $ours
    bench new-2 . lenet,lenet-b128 $ours
    bench old-2 "$base" lenet,lenet-b128 $ours
    bench new-s4 . "" $ours,torch-graph,torch-graph-tf32,torch-graph-bf16 "--layers $lenet5"
    bench old-s4 "$base" "" $ours "--layers $lenet5"
fi
if [[ $stages == *" profile "* ]]; then
    for b in 128 1000; do
        timeout -s INT 100 python -m nn.profile --backend cupy-tuned --batch $b \
            --layers conv6x3,pool2,conv10x3,pool2,dense128,dense100,dense80 > "$work/profile-lenet-b$b.txt" 2>&1
    done
fi
tar czf "$out/stack.tar.gz" -C "$out" stack
python - "$work" <<'PY'
import json, sys, collections, pathlib
rows = collections.defaultdict(list)
for f in sorted(pathlib.Path(sys.argv[1]).glob("bench-*.json")):
    label = f.stem.split("-")[1]
    for r in json.load(open(f))["results"]:
        rows[(r["network"], r["backend"], label)].append(r["ms_per_epoch"])
keys = sorted({(n, b) for n, b, _ in rows})
print(f"{'network':<14} {'backend':<22} {'old ms':>8} {'new ms':>8} {'new/old':>8}")
for n, b in keys:
    old, new = rows.get((n, b, "old"), []), rows.get((n, b, "new"), [])
    f = lambda v: min(v) if v else float("nan")
    print(f"{n[:14]:<14} {b:<22} {f(old):8.2f} {f(new):8.2f} {f(new) / f(old):8.3f}")
PY
for f in "$work"/profile-*.txt; do echo "$(basename $f): $(grep 'whole step' "$f")"; done
grep -h "dense_stack" "$work"/profile-*.txt
