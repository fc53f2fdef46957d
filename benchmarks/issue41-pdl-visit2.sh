#!/usr/bin/env bash
# Programmatic dependent launch as built (autogemm/runtime/dependent_launch.py), on one GPU: the GPU
# tests of graphs and of the new path, then each network's epoch with it on and off
# ($AUTOGEMM_DEPENDENT_LAUNCH=1/0), alternating, PyTorch in the same run. From the repository root:
#   source .device/env.sh && bash benchmarks/issue41-pdl-visit2.sh [tests] [bench] [profile]
set -uo pipefail
source benchmarks/entry-points.sh
out=${OUT:-/tmp/pdl2}
work=$out/pdl2
mkdir -p "$work"
{ nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader
  python -c "import cupy; print('cupy', cupy.__version__, 'driver', cupy.cuda.runtime.driverGetVersion())"; } > "$work/machine.txt" 2>&1
stages=" ${*:-tests bench profile} "
if [[ $stages == *" tests "* ]]; then
timeout -s INT 400 python -m pytest -q -m gpu -p no:cacheprovider tests/test_dependent_launch.py tests/test_raw_kernels.py \
    examples/rowsoftmax/tests tests/test_cnn_gpu.py tests/test_cupy_backend_gpu.py tests/test_torch_gpu.py \
    -k "dependent or raw or rowsoftmax or graph or capture or tune_kernel or launch_kernel" > "$work/pytest-gpu.txt" 2>&1
echo "pytest: exit $? $(tail -1 "$work/pytest-gpu.txt")"
fi
bench() {   # label, setting, networks, backends
    AUTOGEMM_DEPENDENT_LAUNCH=$2 timeout -s INT 280 python -m nn.bench --networks "$3" --backends "$4" --epochs 10 \
        --json "$work/bench-$1.json" > "$work/bench-$1.txt" 2>&1
    echo "$1: exit $?"
}
ours=cupy-tuned,cupy-tuned-tf32,cupy-tuned-bf16
if [[ $stages == *" bench "* ]]; then
bench on-1 1 lenet,lenet-b128,cme213 $ours,torch-graph,torch-graph-tf32,torch-graph-autogemm,torch-graph-autogemm-tf32
bench off-1 0 lenet,lenet-b128,cme213 $ours,torch-graph-autogemm,torch-graph-autogemm-tf32
bench on-2 1 lenet,lenet-b128,cme213 $ours,torch-graph-autogemm,torch-graph-autogemm-tf32
bench off-2 0 lenet,lenet-b128,cme213 $ours,torch-graph-autogemm,torch-graph-autogemm-tf32
fi
if [[ $stages == *" profile "* ]]; then
for b in 128 1000; do
    for on in 1 0; do
        AUTOGEMM_DEPENDENT_LAUNCH=$on timeout -s INT 120 python -m nn.profile --backend cupy-tuned --batch $b \
            --layers conv6x3,pool2,conv10x3,pool2,dense128,dense100,dense80 > "$work/profile-lenet-b$b-pdl$on.txt" 2>&1
    done
done
fi
tar czf "$out/pdl2.tar.gz" -C "$out" pdl2
python - "$work" <<'PY'
import json, sys, collections, pathlib
rows = collections.defaultdict(list)
for f in sorted(pathlib.Path(sys.argv[1]).glob("bench-*.json")):
    label = f.stem.split("-")[1]
    for r in json.load(open(f))["results"]:
        rows[(r["network"], r["backend"], label)].append(r["ms_per_epoch"])
keys = sorted({(n, b) for n, b, _ in rows})
print(f"{'network':<12} {'backend':<28} {'off ms':>8} {'on ms':>8} {'on/off':>7}")
for n, b in keys:
    off, on = rows.get((n, b, "off"), []), rows.get((n, b, "on"), [])
    f = lambda v: min(v) if v else float("nan")
    print(f"{n:<12} {b:<28} {f(off):8.2f} {f(on):8.2f} {f(on) / f(off):7.3f}")
PY
for f in "$work"/profile-*.txt; do echo "$(basename $f): $(grep 'whole step' "$f")"; done
