#!/usr/bin/env bash
# Issue 42: where the converted tf32 MLP's CUDA-graphed epoch spends the time between its kernels:
# nn.bench's epoch-graph rows with programmatic dependent launch and without
# ($AUTOGEMM_DEPENDENT_LAUNCH=0), then an Nsight Systems trace of each model's epochs (graph nodes
# traced) summed per kernel by benchmarks/issue42_gaps.py. From the repository root:
#   source .device/env.sh && [NETWORKS=...] [ROWS=backends] [ORDER="1 0 ..."] bash benchmarks/issue42-visit19.sh
set -uo pipefail
out=${OUT:-/tmp/issue42s}
work=$out/issue42s
mkdir -p "$work"
nvidia-smi -L > "$work/machine.txt" 2>&1
rows=${ROWS:-torch-epoch-graph-tf32,torch-epoch-graph-autogemm-tf32}
for dl in ${ORDER:-1 0 1 0}; do
    AUTOGEMM_DEPENDENT_LAUNCH=$dl timeout 100 python -m nn.bench --networks ${NETWORKS:-cme213} --epochs 5 --backends $rows \
        >> "$work/bench-dl$dl.txt" 2>&1
    echo "== dependent launch $dl"; grep "ms/epoch" "$work/bench-dl$dl.txt" | tail -2
done
if ! command -v nsys > /dev/null; then echo "no nsys"; exit 0; fi
for row in torch-epoch-graph-tf32 torch-epoch-graph-autogemm-tf32; do
    timeout 150 nsys profile --cuda-graph-trace=node --sample=none --cpuctxsw=none -o "$work/$row" -f true \
        python -m nn.bench --networks cme213 --epochs 2 --backends $row > "$work/nsys-$row.txt" 2>&1
    echo "nsys $row: exit $?"
    nsys stats --report cuda_gpu_trace --format csv -o "$work/$row" "$work/$row.nsys-rep" > /dev/null 2>&1
    python benchmarks/issue42_gaps.py "$work/${row}_cuda_gpu_trace.csv" | tee "$work/gaps-$row.txt" | head -30
done
(cd "$work" && tar czf traces.tgz *.nsys-rep *.csv && rm -f *.nsys-rep *.csv *.sqlite)
