#!/usr/bin/env bash
# The stop's last GPU checks: the search tests (tune, store, lookup on a GPU) and autogemm.torch's
# GPU tests on the final tree. From the repository root:
#   source .device/env.sh && bash benchmarks/final-checks-visit.sh
set -uo pipefail
source benchmarks/entry-points.sh
w=${OUT:-/tmp/final}/final-checks; mkdir -p "$w"
nvidia-smi -L > "$w/machine.txt"
timeout -s INT 200 python -m pytest -m gpu -q -p no:cacheprovider tests/test_search_gpu.py tests/test_torch_gpu.py \
    > "$w/pytest-gpu.txt" 2>&1
echo "pytest: exit $? $(tail -1 "$w/pytest-gpu.txt")"
grep -E "^FAILED|Error" "$w/pytest-gpu.txt" | head -20
