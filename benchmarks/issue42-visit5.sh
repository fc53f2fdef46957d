#!/usr/bin/env bash
# Issue 42's last visit of the stop, on one GPU: the converted MLP against PyTorch once more on the
# final code (fp32, tf32; default and fused SGD), and test accuracy after 20 epochs at tf32, the MLP
# once and LeNet for seeds 0-2, converted and as written. From the repository root:
#   source .device/env.sh && bash benchmarks/issue42-visit5.sh
set -uo pipefail
source benchmarks/entry-points.sh
out=${OUT:-/tmp/issue42e}
work=$out/issue42e
mkdir -p "$work"
nvidia-smi -L > "$work/machine.txt" 2>&1
timeout -s INT 200 python -m nn.bench --networks cme213 --epochs 5 --json "$work/bench.json" --backends \
    torch-graph,torch-graph-autogemm,torch-graph-tf32,torch-graph-autogemm-tf32,torch-graph-fused,torch-graph-fused-autogemm,torch-graph-fused-tf32,torch-graph-fused-autogemm-tf32 \
    > "$work/bench.txt" 2>&1
echo "bench: exit $?"
for run in "mlp 0" "lenet 0" "lenet 1" "lenet 2"; do
    read -r model seed <<< "$run"
    for how in "" "--torch-only"; do
        timeout -s INT 60 python examples/torch_train.py --model "$model" --epochs 19 --precision tf32 --seed "$seed" \
            $how 2>&1 | tail -1 | sed "s/^/seed $seed: /"
    done
done | tee "$work/accuracy-tf32.txt"
tar czf "$out/issue42e.tar.gz" -C "$out" issue42e
tail -2 "$work/bench.txt"
