#!/usr/bin/env bash
# Issue 39 (the house's second pass) and issue 40's baseline on one GPU. From the repository root:
#   source .device/env.sh && bash benchmarks/issue39-visit.sh check|rest TEST...|first-calls [ARITHMETIC...]
# check: the gpu-marked tests of what the pass moved (the measures, the trainer's backends, storage
# policy and cuBLAS baseline), then the trainer's ms an epoch on this tree against the tree before
# the pass (.device/base: `git archive 572928c kernels nn autogemm tuned`), the same visit.
# rest: the gpu-marked tests of the files given (what check's time left).
# first-calls: issue 40's public set of GEMM shapes untuned (an empty store) at each precision and
# on bfloat16 arrays against cuBLAS, times and errors (`autogemm bench --untuned`).
# Everything lands in $OUT/issue39.tar.gz; a table last.
set -uo pipefail
source benchmarks/entry-points.sh
out=${OUT:-/tmp/issue39}
work=$out/issue39
mkdir -p "$work"
{ nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; } > "$work/machine.txt" 2>&1
head -1 "$work/machine.txt"
SHAPES=1024x1024x1024:nn,2048x2048x2048:nt,4096x4096x4096:nn,512x4096x1024:tn,4096x512x1024:nt,256x256x8192:tn,8192x8192x256:nn,1000x1000x1000:tt,777x555x333:nt,96x3072x768:nt,3072x96x768:tn,1023x1025x1027:nn

check() {
    timeout 330 python -m pytest -q -m gpu tests/test_cupy_backend_gpu.py tests/test_cnn_gpu.py \
        tests/test_elementwise_gpu.py tests/test_search_gpu.py tests/test_conv_gpu.py tests/test_dist.py \
        > "$work/pytest-gpu.txt" 2>&1
    tail -3 "$work/pytest-gpu.txt"
    local nets=cme213,large,lenet backends=cublas,cupy-tuned,cupy-tuned-tf32,cupy-tuned-bf16
    (cd .device/base && timeout 110 python -m nn.bench --networks $nets --backends $backends --epochs 5 \
        --json "$work/train-before.json" > "$work/train-before.txt" 2>&1)
    timeout 110 python -m nn.bench --networks $nets --backends $backends --epochs 5 \
        --json "$work/train-after.json" > "$work/train-after.txt" 2>&1
    python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
def rows(name):
    try:
        return {(r["network"], r["backend"]): r["ms_per_epoch"] for r in json.load(open(f"{work}/{name}"))["results"]}
    except Exception as exc:
        print(f"{name}: {exc}")
        return {}
before, after = rows("train-before.json"), rows("train-after.json")
print(f"{'network':10} {'backend':18} {'before ms':>10} {'after ms':>10} {'after/before':>12}")
for key in sorted(set(before) | set(after)):
    b, a = before.get(key), after.get(key)
    ratio = f"{a / b:.3f}" if a and b else ""
    print(f"{key[0]:10} {key[1]:18} {b or '':>10} {a or '':>10} {ratio:>12}")
PY
}

first_calls() {   # [arithmetic...]: fp32, tf32, bf16 (precisions of float32 arrays), bfloat16 (arrays)
    local list=("$@")
    [ ${#list[@]} -eq 0 ] && list=(fp32 tf32 bf16 bfloat16)
    for a in "${list[@]}"; do
        local how=(--precision "$a")
        [ "$a" = bfloat16 ] && how=(--dtype bfloat16)
        timeout 170 python -m autogemm.cli bench --untuned --shapes $SHAPES "${how[@]}" --reps 30 \
            --json "$work/untuned-$a.json" > "$work/untuned-$a.txt" 2>&1 || echo "bench $a: exit $?"
    done
    python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
print(f"{'arith':9} {'shape':22} {'call runs':28} {'vs cuBLAS':>9} {'err/cuBLAS':>10} {'best family':>24} {'vs cuBLAS':>9}")
for name in ("fp32", "tf32", "bf16", "bfloat16"):
    if not __import__("os").path.exists(f"{work}/untuned-{name}.json"):
        continue
    try:
        results = json.load(open(f"{work}/untuned-{name}.json"))["results"]
    except Exception as exc:
        print(f"{name}: {exc}")
        continue
    for shape in dict.fromkeys(r["shape"] for r in results):
        rows = [r for r in results if r["shape"] == shape and r["variant"] != "cublas"]
        call = next((r for r in rows if r["runs_the_call"]), None)
        timed = [r for r in rows if r["time_vs_baseline"]]
        best = min(timed, key=lambda r: r["time_vs_baseline"], default=None)
        fmt = lambda v: f"{v:.2f}x" if v else ""
        print(f"{name:9} {shape:22} {(call or {}).get('variant', '-'):28} {fmt((call or {}).get('time_vs_baseline')):>9} "
              f"{fmt((call or {}).get('error_vs_baseline')):>10} {(best or {}).get('variant', '-'):>24} "
              f"{fmt((best or {}).get('time_vs_baseline')):>9}")
PY
}

case "${1:-check}" in
    check) check ;;
    rest) timeout 250 python -m pytest -q -m gpu "${@:2}" > "$work/pytest-gpu-rest.txt" 2>&1
          tail -3 "$work/pytest-gpu-rest.txt" ;;
    first-calls) first_calls "${@:2}" ;;
    *) echo "usage: $0 check|rest TEST...|first-calls [ARITHMETIC...]" >&2; exit 2 ;;
esac
tar -czf "$out/issue39.tar.gz" -C "$out" issue39
