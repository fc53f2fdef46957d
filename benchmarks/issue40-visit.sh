#!/usr/bin/env bash
# Issue 40, item 2 (FP32-accurate is FP32's error) on one GPU. From the repository root:
#   source .device/env.sh && bash benchmarks/issue40-visit.sh variants [VARIANT...]|retune|bench|wgmma-parts|profile-misses|wgmma-fp32|pretranspose|tiled-tf32|reg-a|retune-stale|swap
# variants: each variant of kernels/gemm/3xtf32.cuh (chunk16u1: the tree's, 16 k summed apart, the
# steps not unrolled; base, chunk16, chunk8: the tree's with benchmarks/issue40-fp32-error/3xtf32-
# <variant>.patch applied: all of K summed on the tensor cores, 16 k apart unrolled, 8 k apart) runs
# benchmarks/issue40_fp32_error.py (SHAPES: its --shapes) in its own process, the tree's file put
# back after; a table last.
# retune: the gpu tests of the error bound, then `autogemm tune --stale` of the shipped file of this
# GPU (the records the template change staled), the file copied out.
# wgmma-parts: gemm_wgmma's 3xTF32 summed a stage at a time: the gpu tests of gemm_wgmma and of the
# FP32 bound, then the variants' table of the tree as it is (chunk16u1: both families' error and time).
# wgmma-fp32: gemm_wgmma serving fp32 calls: the gpu tests the wgmma-parts visit failed or did not
# reach, then its fp32 records of the networks' GEMMs (cme213 and large, one rank), tuned into a copy
# of tuned/ at $TUNED_FP32 (default /tmp/tuned-fp32, kept on the machine for bench), the file copied out.
# pretranspose: gemm_wgmma's TF32 on M/N-major operands, copied K-major first or transposed in
# shared memory, against cuBLAS TF32 (benchmarks/issue40_pretranspose.py).
# profile-misses: Nsight Compute on issue 40's missed first calls at tf32 and on bfloat16 arrays, each
# kernel of the untuned call (copies and transposes too) and cuBLAS's on the same arrays
# (benchmarks/issue40_first_calls_profile.py), the speed-of-light, launch, occupancy and warp-state
# sections; a table of each kernel's time and throughputs last.
# tiled-tf32: the tiled family's tensor-core fragment reads (ldmatrix, vectors of rows): its gpu
# tests, then benchmarks/issue40_tiled_tf32.py at tf32 (the public set and the CME 213 shapes) and at
# fp32 (where the tiled 3xTF32 serves) on this tree and on .device/base, the same visit.
# reg-a: gemm_wgmma reading an M-major op(A) into registers: its gpu tests and the untuned ones,
# then benchmarks/issue40_reg_a.py at tf32 and fp32 (the default against reg_a's first candidates).
# swap: gemm_wgmma computing D^T (an N-major op(B) read into registers): its gpu tests, then
# benchmarks/issue40_swap.py at tf32 and fp32, then issue 40's first calls at fp32 and tf32.
# retune-stale: `autogemm tune --stale` of this GPU's file at each arithmetic into a copy of tuned/ at
# $TUNED_STALE (default /tmp/tuned-stale, kept on the machine: a second call goes on where a first
# one stopped, SIGTERM at 540 s in all), the file copied out.
# bench: nn.bench of the trainer on this tree against .device/base (`git archive <commit before>
# kernels nn autogemm tuned`), before, after, before again, the same visit; after with $AUTOGEMM_TUNED
# at $AFTER_TUNED where that is set (wgmma-fp32's store).
# Everything lands in $OUT/issue40.tar.gz.
set -uo pipefail
source benchmarks/entry-points.sh
out=${OUT:-/tmp/issue40}
work=$out/issue40
mkdir -p "$work"
nvidia-smi -L > "$work/machine.txt" 2>&1
head -1 "$work/machine.txt"
phase=${1:-variants}
shift || true

if [ "$phase" = retune ]; then
    timeout 150 python -m pytest -q -m gpu tests/test_gemm_gpu.py -k "3xtf32 or refuses" > "$work/pytest-gpu.txt" 2>&1
    tail -3 "$work/pytest-gpu.txt"
    file=$(python -c "from autogemm.runtime.device import this_device; print(this_device().slug)").json
    cp "tuned/$file" "$work/before-$file"
    timeout 400 python -m autogemm.cli tune --stale --out tuned > "$work/tune-stale.txt" 2>&1
    echo "tune --stale: exit $?"
    tail -25 "$work/tune-stale.txt"
    cp "tuned/$file" "$work/$file"
    tar czf "$out/issue40.tar.gz" -C "$out" issue40
    exit 0
fi

if [ "$phase" = wgmma-parts ]; then
    timeout -s INT 330 python -m pytest -q -rf -m gpu tests/test_gemm_gpu.py -k "wgmma or 3xtf32 or refuses" \
        > "$work/pytest-wgmma.txt" 2>&1
    tail -8 "$work/pytest-wgmma.txt"
    set -- chunk16u1
    phase=variants
fi

if [ "$phase" = wgmma-fp32 ]; then
    timeout -s INT 200 python -m pytest -q -rf -m gpu tests/test_gemm_gpu.py \
        -k "persistent or bf16_products or bfloat16_operands or writes_bfloat16 or untuned" > "$work/pytest-wgmma-fp32.txt" 2>&1
    tail -4 "$work/pytest-wgmma-fp32.txt"
    store=${TUNED_FP32:-/tmp/tuned-fp32}
    rm -rf "$store" && cp -r tuned "$store"
    file=$(python -c "from autogemm.runtime.device import this_device; print(this_device().slug)").json
    timeout 150 python -m autogemm.cli tune --shapes nn --families gemm_wgmma --trials 30 --timeout 10 --out "$store" \
        < /dev/null > "$work/tune-cme213.txt" 2>&1
    echo "tune cme213: exit $?"
    timeout 200 python -m autogemm.cli tune --shapes nn --hidden 4096 --batch 8192 --families gemm_wgmma --trials 30 \
        --timeout 15 --out "$store" < /dev/null > "$work/tune-large.txt" 2>&1
    echo "tune large: exit $?"
    cp "$store/$file" "$work/$file"
    tar czf "$out/issue40.tar.gz" -C "$out" issue40
    grep -h "autogemm tune: \[" "$work"/tune-*.txt
    exit 0
fi

if [ "$phase" = pretranspose ]; then
    timeout 300 python benchmarks/issue40_pretranspose.py --json "$work/pretranspose.json" > "$work/pretranspose.txt" 2>&1
    echo "pretranspose: exit $?"
    tar czf "$out/issue40.tar.gz" -C "$out" issue40
    cat "$work/pretranspose.txt"
    exit 0
fi

if [ "$phase" = tiled-tf32 ]; then
    timeout -s INT 120 python -m pytest -q -rf -m gpu tests/test_gemm_gpu.py -k "not wgmma" > "$work/pytest-tiled.txt" 2>&1
    tail -4 "$work/pytest-tiled.txt"
    fp32_shapes=777x555x333:nt,1023x1025x1027:nn,1000x784x800:tn,800x784x1000:nn,256x256x8192:tn,3072x96x768:tn
    for tree in after before; do   # before: .device/base's packages first on the path
        dir=$PWD; [ $tree = before ] && dir=$PWD/.device/base
        PYTHONPATH="$dir:$PYTHONPATH" timeout 140 python benchmarks/issue40_tiled_tf32.py --precision tf32 \
            --json "$work/tiled-tf32-$tree.json" > "$work/tiled-tf32-$tree.txt" 2>&1
        PYTHONPATH="$dir:$PYTHONPATH" timeout 60 python benchmarks/issue40_tiled_tf32.py --precision fp32 \
            --shapes $fp32_shapes --json "$work/tiled-fp32-$tree.json" > "$work/tiled-fp32-$tree.txt" 2>&1
    done
    tar czf "$out/issue40.tar.gz" -C "$out" issue40
    for f in "$work"/tiled-*.txt; do echo "== $(basename $f)"; cat "$f"; done
    exit 0
fi

# reg-a, swap: the GEMM gpu tests matching $2, then benchmarks/issue40_<phase>.py at tf32 and fp32
# ($3 seconds each), the tables last.
compare() {   # NAME TESTS SECONDS
    timeout -s INT 150 python -m pytest -q -rf -m gpu tests/test_gemm_gpu.py -k "$2" > "$work/pytest-$1.txt" 2>&1
    tail -4 "$work/pytest-$1.txt"
    for precision in tf32 fp32; do
        timeout "$3" python "benchmarks/issue40_${1//-/_}.py" --precision $precision --json "$work/$1-$precision.json" \
            > "$work/$1-$precision.txt" 2>&1
    done
    tar czf "$out/issue40.tar.gz" -C "$out" issue40
    for f in "$work/$1"-*.txt; do echo "== $(basename "$f")"; cat "$f"; done
}
if [ "$phase" = reg-a ]; then
    compare reg-a "register_a or untuned or as_accurate or refuses" 170
    exit 0
fi
if [ "$phase" = swap ]; then
    compare swap "swap or register_a or untuned" 150
    exit 0
fi

if [ "$phase" = retune-stale ]; then
    store=${TUNED_STALE:-/tmp/tuned-stale}
    [ -d "$store" ] || cp -r tuned "$store"
    file=$(python -c "from autogemm.runtime.device import this_device; print(this_device().slug)").json
    end=$((SECONDS + 540))
    for arithmetic in "--precision fp32" "--precision tf32" "--precision bf16" "--dtype bfloat16"; do
        log="$work/tune-stale-${arithmetic##* }.txt"
        [ $SECONDS -lt $end ] && timeout -s TERM $((end - SECONDS)) python -m autogemm.cli tune --stale $arithmetic \
            --trials 30 --timeout 20 --out "$store" < /dev/null > "$log" 2>&1
        echo "tune --stale $arithmetic: exit $?"
        grep -h "autogemm tune: \[" "$log" | tail -3
    done
    cp "$store/$file" "$work/$file"
    tar czf "$out/issue40.tar.gz" -C "$out" issue40
    exit 0
fi

if [ "$phase" = profile-misses ]; then
    timeout 500 ncu --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
        --csv --page details python benchmarks/issue40_first_calls_profile.py > "$work/ncu-misses.csv" 2> "$work/ncu-misses.err"
    echo "ncu: exit $?"
    tar czf "$out/issue40.tar.gz" -C "$out" issue40
    python3 - "$work/ncu-misses.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows:
    sys.exit("no ncu rows")
head, body = rows[0], rows[1:]
at = {name: head.index(name) for name in ("ID", "Kernel Name", "Metric Name", "Metric Value")}
want = ("Duration", "Compute (SM) Throughput", "Memory Throughput", "Achieved Occupancy", "Registers Per Thread")
kernels = {}
for r in body:
    if r[at["Metric Name"]] in want:
        kernels.setdefault((int(r[at["ID"]]), r[at["Kernel Name"]][:60]), {})[r[at["Metric Name"]]] = r[at["Metric Value"]]
print(f"{'id':>3} {'kernel':60} " + " ".join(f"{w[:12]:>12}" for w in want))
for (i, name), m in sorted(kernels.items()):
    print(f"{i:>3} {name:60} " + " ".join(f"{m.get(w, ''):>12}" for w in want))
PY
    exit 0
fi

if [ "$phase" = bench ]; then
    nets=cme213,large backends=cublas,cupy-tuned,cupy-tuned-tf32
    bench() {   # DIR NAME [TUNED]
        (cd "$1" && { [ -z "${3:-}" ] || export AUTOGEMM_TUNED=$3; } && timeout 140 python -m nn.bench --networks $nets --backends $backends --epochs 5 \
            --json "$work/$2.json" > "$work/$2.txt" 2>&1)
    }
    bench .device/base train-before
    bench . train-after "${AFTER_TUNED:-}"
    bench .device/base train-before-2
    tar czf "$out/issue40.tar.gz" -C "$out" issue40
    python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
def rows(name):
    try:
        return {(r["network"], r["backend"]): r["ms_per_epoch"] for r in json.load(open(f"{work}/{name}.json"))["results"]}
    except Exception as exc:
        print(f"{name}: {exc}")
        return {}
before, after, again = rows("train-before"), rows("train-after"), rows("train-before-2")
print(f"{'network':10} {'backend':12} {'before ms':>10} {'after ms':>10} {'before again':>12}")
for key in sorted(set(before) | set(after)):
    print(f"{key[0]:10} {key[1]:12} {before.get(key, ''):>10} {after.get(key, ''):>10} {again.get(key, ''):>12}")
PY
    exit 0
fi

variants=("$@")
[ ${#variants[@]} -eq 0 ] && variants=(base chunk16 chunk16u1)
tree=$(mktemp)
cp kernels/gemm/3xtf32.cuh "$tree"
for v in "${variants[@]}"; do
    [ "$v" != chunk16u1 ] && git apply -p1 "benchmarks/issue40-fp32-error/3xtf32-$v.patch"
    timeout 180 python benchmarks/issue40_fp32_error.py ${SHAPES:+--shapes "$SHAPES"} --reps 60 --label "$v" \
        --json "$work/$v.json" > "$work/$v.txt" 2>&1
    echo "$v: exit $?"
    cp "$tree" kernels/gemm/3xtf32.cuh
done
tar czf "$out/issue40.tar.gz" -C "$out" issue40
python3 - "$work" "${variants[@]}" <<'PY'
import json, sys
work, labels = sys.argv[1], sys.argv[2:]
rows = []
for label in labels:
    try:
        rows += json.load(open(f"{work}/{label}.json"))
    except Exception as exc:
        print(label, exc)
print(f"{'shape':20} {'kernel':8} " + " ".join(f"{l + ' err/time':>18}" for l in labels))
shapes = list(dict.fromkeys(r["shape"] for r in rows))
for shape in shapes:
    kinds = list(dict.fromkeys((r["family"], r["math"], r["kernel"]) for r in rows if r["shape"] == shape))
    for i, (fam, math, kernel) in enumerate(kinds):
        cells = []
        for label in labels:
            r = next((r for r in rows if r["label"] == label and r["shape"] == shape and r["kernel"] == kernel), None)
            cells.append(f"{r['error_vs_cublas']:6.2f}x {r['time_vs_cublas']:5.2f}x" if r and "error_vs_cublas" in r else "-")
        tag = {"gemm": "t", "gemm_wgmma": "w", "cublas": "c"}[fam] + ("3x" if math == "3xtf32" else "f")
        print(f"{shape if i == 0 else '':20} {tag + str(i):8} " + " ".join(f"{c:>18}" for c in cells))
PY
