#!/usr/bin/env bash
# Issue 42: whether the first-graph effect (visit21: PyTorch alone, a second graph 3-6% slower than
# the first, and the first slower too once the second exists) follows the clock or the capture: the
# first graph timed in rounds before the second is captured, with the GPU's clocks, power and
# throttle reasons logged every 100 ms. From the repository root:
#   source .device/env.sh && bash benchmarks/issue42-visit22.sh
set -uo pipefail
out=${OUT:-/tmp/issue42v}
work=$out/issue42v
mkdir -p "$work"
nvidia-smi -q -d CLOCK,PERFORMANCE,POWER,TEMPERATURE > "$work/before.txt" 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
    --format=csv -lms 100 > "$work/clocks.csv" 2>&1 &
logger=$!
trap 'kill $logger 2>/dev/null' EXIT
for flags in "--rounds 8" "--rounds 5 --pause 3" "--tf32 --rounds 8" "--tf32 --rounds 5 --pause 3"; do
    echo "== $(date +%T.%N) issue42_first_graph.py $flags" | tee -a "$work/first-graph.txt"
    timeout 150 python benchmarks/issue42_first_graph.py $flags >> "$work/first-graph.txt" 2>&1
    echo "== $(date +%T.%N) done" >> "$work/first-graph.txt"
    grep -A12 -- "== .*$flags\$" "$work/first-graph.txt" | grep graph
done
kill $logger
nvidia-smi -q -d CLOCK,PERFORMANCE,POWER,TEMPERATURE > "$work/after.txt" 2>&1
