#!/usr/bin/env bash
# Issue 43 (families as plugins) on one GPU, from the repository root:
#   source .device/env.sh && bash benchmarks/issue43-visit.sh [--no-tests]
# The example plugin tuned from its folder (40 trials a shape, timed end to end), its default against
# its tuned config and torch.softmax, its GPU test, and autogemm.torch's GPU tests (the run of Linear
# layers changed since their last visit). Everything lands in $OUT/issue43.tar.gz; a table last.
set -uo pipefail
source benchmarks/entry-points.sh
out=${OUT:-/tmp/issue43}
work=$out/issue43
mkdir -p "$work"
nvidia-smi -L > "$work/machine.txt" 2>&1
for shape in 4096x1024 8192x4096; do
    start=$(date +%s%N)
    python -m autogemm.cli tune --family examples/rowsoftmax/rowsoftmax --problem "rows=${shape%x*},cols=${shape#*x}" \
        --trials 40 --timeout 30 > "$work/tune-$shape.txt" 2>&1
    echo "tune $shape: exit $?, $(( ($(date +%s%N) - start) / 1000000 )) ms wall"
done | tee "$work/tune-wall.txt"
[ "${1:-}" = "--no-tests" ] || {
    python -m pytest -q -m gpu examples/rowsoftmax/tests tests/test_torch_gpu.py > "$work/pytest-gpu.txt" 2>&1
    echo "pytest: exit $? $(tail -1 "$work/pytest-gpu.txt")"
}
cp tuned/*.json "$work/"
python benchmarks/issue43_rowsoftmax.py --shapes 4096x1024,8192x4096 2>&1 | tee "$work/rowsoftmax.txt"
tar czf "$out/issue43.tar.gz" -C "$out" issue43
