#!/usr/bin/env bash
# Issue 37 on a machine of several GPUs. Run from the repository root:
#   source .device/env.sh && bash benchmarks/issue37-visit.sh diagnose
# diagnose: the topology, the all-reduces' cost by size (benchmarks/issue37_comm.py), the per-rank
# kernels of both splits tuned on the GPUs at once, then 1 against 4 ranks of each network and split.
# final: the float32 runs of 4 ranks with dW1 in one block and in 4 MB blocks, then every nn.scaling
# table: strong (1, 2, 4 GPUs) and weak, cme213, large, lenet, grading, fp32 and tf32, NCCL and MPI.
# close-tune: each rank's kernels of 4 ranks, never tuned on this GPU before (the large network at fp32,
# tf32 and bf16, LeNet at fp32), one GPU each; close-runs: then 1 against 4 ranks, default flags,
# strong and weak, and LeNet's step profiled.
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
        timeout 120 mpirun -n $r python benchmarks/issue37_comm.py --json "$work/comm-r$r.json" > "$work/comm-r$r.txt" 2>&1
    done
    NCCL_PROTO=LL timeout 120 mpirun -n 4 python benchmarks/issue37_comm.py --kinds nccl \
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

scale() {   # name, then nn.scaling flags: one scaling table, its logs in $work/<name>/ (no checkpoints kept);
            # none starts past 520 s of the visit (the device call ends at 600)
    local name=$1
    shift
    if [ $SECONDS -gt 520 ]; then echo "$name: skipped, out of time" | tee -a "$work/failed.txt"; return; fi
    timeout 300 python -m nn.scaling --out "$work/$name" --epochs 6 --exit-grace 15 "$@" > "$work/$name.txt" 2>&1
    rm -f "$work/$name"/*.npz
    tail -16 "$work/$name.txt"
}

blocks() {   # the large network on 4 ranks: dW1 in one block against blocks of 4 MB (nn.mlp.FIRST_LAYER_BLOCK_BYTES)
    for precision in fp32 tf32; do
        for mb in 64 4; do
            timeout 120 mpirun -n 4 python benchmarks/issue37_blocks.py --block-mb $mb -- --use-tuned --quiet \
                --hidden 4096 --batch 8192 --epochs 8 --precision $precision \
                --log "$work/blocks-$precision-$mb-r4.json" > "$work/blocks-$precision-$mb.txt" 2>&1
        done
    done
}

final() {   # every table of issue 37, the headline first; each nn.scaling bounded by --time-limit
    blocks
    scale large --network large --ranks 1,2,4 --parallel auto,data,model --allreduce auto --time-limit 110
    scale cme213 --network cme213 --ranks 1,4 --parallel auto,data,model --allreduce auto --time-limit 60
    scale lenet --network lenet --ranks 1,4 --parallel auto,data --allreduce auto --time-limit 60
    for net in large cme213 lenet; do
        scale $net-weak --network $net --weak --ranks 1,4 --parallel auto --allreduce auto --time-limit 40
    done
    for net in large cme213; do
        scale $net-tf32 --network $net --ranks 1,4 --parallel auto,data,model --allreduce auto --f64-epochs 1 \
            --extra-args "--precision tf32" --time-limit 45
    done
    scale grading --network grading --ranks 1,4 --parallel auto --allreduce auto --time-limit 30
    scale large-mpi --network large --ranks 1,4 --parallel auto,data,model --allreduce mpi --time-limit 45
}

after_fix() {   # after the buckets' least size and the blocks' revert: 1 against 4 ranks, default flags
    train lenet-r1 1 --model lenet --epochs 6
    train lenet-r4 4 --model lenet --epochs 6
    train lenet-weak-r4 4 --model lenet --epochs 6 --batch 4000
    train large-r1 1 --hidden 4096 --batch 8192 --epochs 8
    train large-r4 4 --hidden 4096 --batch 8192 --epochs 8
    train large-weak-r4 4 --hidden 4096 --batch 32768 --epochs 8
    train large-r1-tf32 1 --hidden 4096 --batch 8192 --epochs 8 --precision tf32
    train large-r4-tf32 4 --hidden 4096 --batch 8192 --epochs 8 --precision tf32
    train cme213-r1 1 --epochs 8
    train cme213-weak-r4 4 --epochs 8 --batch 3200
}

close_tune() {   # each rank's kernels of a 4-rank data split, one tuning run a GPU
    local args=("--shapes nn --hidden 4096 --batch 8192 --ranks 4"
                "--shapes nn --hidden 4096 --batch 8192 --ranks 4 --precision tf32"
                "--shapes nn --hidden 4096 --batch 8192 --ranks 4 --precision bf16"
                "--model lenet --ranks 4")
    for i in 0 1 2 3; do
        CUDA_VISIBLE_DEVICES=$((i % gpus)) timeout 230 python -m autogemm.cli tune ${args[$i]} --trials 12 --timeout 6 \
            > "$work/tune-close-$i.txt" 2>&1 &
    done
    wait
    cp tuned/*.json "$work/"
    tail -3 "$work"/tune-close-*.txt
}

close_runs() {   # 1 against 4 ranks, default flags; weak: 4 ranks at 4x the batch; LeNet's step profiled
    for precision in fp32 tf32 bf16; do
        train large-r1-$precision 1 --hidden 4096 --batch 8192 --epochs 8 --precision $precision
        train large-r4-$precision 4 --hidden 4096 --batch 8192 --epochs 8 --precision $precision
        train large-weak-r4-$precision 4 --hidden 4096 --batch 32768 --epochs 8 --precision $precision
    done
    train lenet-r1 1 --model lenet --epochs 6
    train lenet-r4 4 --model lenet --epochs 6
    train lenet-weak-r4 4 --model lenet --epochs 6 --batch 4000
    train cme213-r4-data 4 --epochs 8 --parallel data
    for ranks in 1 4; do
        timeout 60 python -m nn.profile --network lenet --ranks $ranks --parallel data \
            --json "$work/profile-lenet-r$ranks.json" > "$work/profile-lenet-r$ranks.txt" 2>&1
    done
    cat "$work"/profile-lenet-r*.txt
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
final) final ;;
after-fix) after_fix ;;
close-tune) close_tune ;;
close-runs) close_runs ;;
esac
table | tee "$work/table.txt"
tar -czf "$out/issue37.tar.gz" -C "$out" issue37
