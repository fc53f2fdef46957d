#!/usr/bin/env bash
# Issue 43's second visit, on one GPU, from the repository root:
#   source .device/env.sh && bash benchmarks/issue43-visit2.sh
# The raw-CUDA quick path's GPU tests and example (tune_transpose.py, cold: a fresh CuPy cache), the
# plugin example tuned with a cold cache into a fresh tuned/ (the wall time of 40 trials), `autogemm
# bench --family`, and launch_kernel's host cost. Everything lands in $OUT/issue43b.tar.gz; a table last.
set -uo pipefail
source benchmarks/entry-points.sh
out=${OUT:-/tmp/issue43b}
work=$out/issue43b
mkdir -p "$work"
nvidia-smi -L > "$work/machine.txt" 2>&1
git rev-parse HEAD >> "$work/machine.txt" 2>/dev/null
python -m pytest -q -m gpu tests/test_raw_kernels.py examples/rowsoftmax/tests > "$work/pytest-gpu.txt" 2>&1
echo "pytest quick path + plugin: exit $?, $(tail -1 "$work/pytest-gpu.txt")" | tee "$work/summary.txt"
export CUPY_CACHE_DIR=$(mktemp -d) AUTOGEMM_CACHE=$(mktemp -d) AUTOGEMM_TUNED=$work/tuned-cold
for shape in 4096x1024 8192x4096; do
    start=$(date +%s%N)
    python -m autogemm.cli tune --family examples/rowsoftmax/rowsoftmax --problem "rows=${shape%x*},cols=${shape#*x}" \
        --trials 40 --timeout 30 > "$work/tune-cold-$shape.txt" 2>&1
    echo "tune rowsoftmax $shape cold: exit $?, $(( ($(date +%s%N) - start) / 1000000 )) ms wall"
done | tee -a "$work/summary.txt"
start=$(date +%s%N)
python examples/raw_kernel/tune_transpose.py --rows 8192 --cols 4096 > "$work/tune-transpose.txt" 2>&1
echo "tune_transpose.py 8192x4096 cold: exit $?, $(( ($(date +%s%N) - start) / 1000000 )) ms wall" | tee -a "$work/summary.txt"
python -m autogemm.cli bench --family examples/rowsoftmax/rowsoftmax --problem rows=8192,cols=4096 \
    > "$work/bench-family.txt" 2>&1
echo "bench --family: exit $?" | tee -a "$work/summary.txt"
python benchmarks/issue43_launch_cost.py > "$work/launch-cost.txt" 2>&1
echo "launch cost: exit $?" | tee -a "$work/summary.txt"
tar czf "$out/issue43b.tar.gz" -C "$out" issue43b
echo; cat "$work/tune-transpose.txt" "$work/bench-family.txt" "$work/launch-cost.txt" | tail -40
