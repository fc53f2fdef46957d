#!/usr/bin/env bash
# Issue 37 on a machine of several GPUs. Run from the repository root:
#   source .device/env.sh && bash tuned/bench/issue37-visit.sh diagnose
# diagnose: the topology, the all-reduces' cost by size (tuned/bench/issue37_comm.py), the per-rank
# kernels of both splits tuned on the GPUs at once, then 1 against 4 ranks of each network and split.
# Everything lands in $OUT/issue37.tar.gz (the device tool returns at most 8 files); a table last.
set -uo pipefail
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . > /dev/null 2>&1 ||
    echo "pip install -e . failed: autogemm tune --shapes nn will not know the networks"
out=${OUT:-/tmp/issue37}
work=$out/issue37
mkdir -p "$work"
export NCCL_NVLS_ENABLE=0
gpus=$(nvidia-smi -L | wc -l)
{ nvidia-smi -L; nvidia-smi topo -m; git rev-parse HEAD; git status --porcelain | head; } > "$work/machine.txt" 2>&1
head -1 "$work/machine.txt"

comm() {   # the all-reduces by size on 2 and 4 ranks, NCCL's protocols left to it and forced to LL
    for r in 2 4; do
        timeout 120 mpirun -n $r python tuned/bench/issue37_comm.py --json "$work/comm-r$r.json" > "$work/comm-r$r.txt" 2>&1
    done
    NCCL_PROTO=LL timeout 120 mpirun -n 4 python tuned/bench/issue37_comm.py --kinds nccl \
        --json "$work/comm-r4-ll.json" > "$work/comm-r4-ll.txt" 2>&1
}

tune_ranks() {   # the per-rank kernels of both splits, one GPU a tuning run, at fp32 then tf32
    local args=("--shapes nn --ranks 4 --parallel model"
                "--shapes nn --hidden 4096 --batch 8192 --ranks 4 --parallel model"
                "--shapes nn --hidden 100 --ranks 4 --parallel model"
                "--model lenet --ranks 4")
    for i in 0 1 2 3; do
        (
            export CUDA_VISIBLE_DEVICES=$((i % gpus))
            timeout 150 python -m autogemm.cli tune ${args[$i]} --trials 14 --timeout 4 > "$work/tune-$i.txt" 2>&1
            [ $i -lt 2 ] && timeout 90 python -m autogemm.cli tune ${args[$i]} --precision tf32 --trials 10 --timeout 4 \
                >> "$work/tune-$i.txt" 2>&1
        ) &
    done
    wait
    cp tuned/*.json "$work/"
}

train() {   # name ranks flags...: one nn.train run, its log in $work/<name>.json
    local name=$1 ranks=$2
    shift 2
    timeout 150 mpirun -n "$ranks" python -m nn.train --use-tuned --quiet --log "$work/$name.json" "$@" \
        > "$work/$name.txt" 2>&1 || echo "$name: exit $?" >> "$work/failed.txt"
}

runs() {   # 1 rank against 4 of each split (NCCL, and the model split's staged MPI)
    for net in "cme213" "large --hidden 4096 --batch 8192" "lenet --model lenet"; do
        set -- $net
        name=$1
        shift
        [ "$name" = cme213 ] && set -- --hidden 1000
        epochs=$([ "$name" = lenet ] && echo 4 || echo 8)
        train "$name-r1" 1 "$@" --epochs $epochs
        train "$name-r4-data-nccl" 4 "$@" --epochs $epochs --allreduce nccl
        if [ "$name" != lenet ]; then
            train "$name-r4-model-nccl" 4 "$@" --epochs $epochs --allreduce nccl --parallel model
            train "$name-r4-model-mpi" 4 "$@" --epochs $epochs --parallel model
            train "$name-r1-tf32" 1 "$@" --epochs $epochs --precision tf32
            train "$name-r4-model-nccl-tf32" 4 "$@" --epochs $epochs --allreduce nccl --parallel model --precision tf32
            train "$name-r4-data-nccl-tf32" 4 "$@" --epochs $epochs --allreduce nccl --precision tf32
        fi
    done
}

profile_split() {   # one GPU: rank 0's step of 4 ranks' splits, before and after tuning its kernels
    for net in cme213 large; do
        for split in data model; do
            python -m nn.profile --network $net --ranks 4 --parallel $split --json "$work/profile-$net-$split.json" \
                > "$work/profile-$net-$split.txt" 2>&1
        done
    done
    timeout 200 python -m autogemm.cli tune --shapes nn --ranks 4 --parallel model --trials 14 --timeout 4 \
        > "$work/tune-cme213-model.txt" 2>&1
    timeout 240 python -m autogemm.cli tune --shapes nn --hidden 4096 --batch 8192 --ranks 4 --parallel model \
        --trials 10 --timeout 5 > "$work/tune-large-model.txt" 2>&1
    cp tuned/*.json "$work/"
    for net in cme213 large; do
        python -m nn.profile --network $net --ranks 4 --parallel model --json "$work/profile-$net-model-tuned.json" \
            > "$work/profile-$net-model-tuned.txt" 2>&1
    done
    cat "$work"/profile-*.txt
}

table() {
    cat "$work"/comm-r*.txt
    grep -h "tuned\|error" "$work"/tune-*.txt | tail -8
    python - "$work" <<'PY'
import json, statistics, sys
from pathlib import Path
for path in sorted(Path(sys.argv[1]).glob("*-r*.json")):
    if path.name.startswith("comm"):
        continue
    try:
        log = json.loads(path.read_text())
        ms = [e["ms"]["train"] for e in log["epochs"]][1:]
        print(f"{path.stem:32} {statistics.median(ms):8.2f} ms/epoch  {log['environment']['allreduce']}")
    except Exception as e:
        print(f"{path.stem:32} no result: {e}")
PY
    cat "$work/failed.txt" 2>/dev/null
}

case "${1:-diagnose}" in
diagnose) comm; tune_ranks; runs ;;
profile-split) profile_split ;;
esac
table | tee "$work/table.txt"
tar -czf "$out/issue37.tar.gz" -C "$out" issue37
