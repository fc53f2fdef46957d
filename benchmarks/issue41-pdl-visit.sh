#!/usr/bin/env bash
# Programmatic dependent launch between the step's kernels (benchmarks/issue41_pdl.py), on one GPU:
# a chain of small kernels in a graph, then LeNet (batch 1000 and 128) and the CME 213 MLP, each
# network's epoch without PDL and with it (the next grid let in at each block's start, `start`, or
# as its blocks exit, `exit`), alternating, in one visit. From the repository root:
#   source .device/env.sh && bash benchmarks/issue41-pdl-visit.sh
set -uo pipefail
source benchmarks/entry-points.sh
out=${OUT:-/tmp/pdl}
work=$out/pdl
mkdir -p "$work"
{ nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader
  python -c "import cupy; print('cupy', cupy.__version__, 'runtime', cupy.cuda.runtime.runtimeGetVersion(), 'driver', cupy.cuda.runtime.driverGetVersion())"; } > "$work/machine.txt" 2>&1
for trigger in start exit; do
    PDL_TRIGGER=$trigger timeout 120 python benchmarks/issue41_pdl.py micro > "$work/micro-$trigger.txt" 2>&1
done
bench() {   # label, flags, networks, backends
    timeout -s INT 240 python benchmarks/issue41_pdl.py $2 nn.bench --networks "$3" --backends "$4" --epochs 10 \
        --json "$work/bench-$1.json" > "$work/bench-$1.txt" 2>&1
    echo "$1: exit $?"; grep "ms/epoch" "$work/bench-$1.txt"
}
nets=${NETS:-lenet,lenet-b128,cme213}
for round in 1 2; do
    bench plain-$round "" $nets cupy-tuned,cupy-tuned-tf32
    PDL_TRIGGER=exit bench exit-$round --pdl $nets cupy-tuned,cupy-tuned-tf32
    PDL_TRIGGER=start bench start-$round --pdl $nets cupy-tuned,cupy-tuned-tf32
done
for b in 128 1000; do
    for how in plain exit start; do
        flag=$([ $how = plain ] || echo --pdl)
        PDL_TRIGGER=$how timeout -s INT 120 python benchmarks/issue41_pdl.py $flag nn.profile --backend cupy-tuned --batch $b \
            --layers conv6x3,pool2,conv10x3,pool2,dense128,dense100,dense80 > "$work/profile-lenet-$how-b$b.txt" 2>&1
    done
done
tar czf "$out/pdl.tar.gz" -C "$out" pdl
cat "$work"/micro-*.txt
for f in "$work"/profile-*.txt; do echo "$f: $(grep 'whole step' "$f")"; done
