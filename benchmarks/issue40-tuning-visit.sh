#!/usr/bin/env bash
# Issue 40, item 3 (tuning in seconds), on a GPU machine. From the repository root:
#   source .device/env.sh && bash benchmarks/issue40-tuning-visit.sh check|fp32|tf32|base|layers|gpus|gpus-warm
# check: the gpu tests of what the tuning change touched (the GEMM kernels and their measure, the
#   search on the GPU, the checks on the device).
# fp32: `autogemm tune` of issue 40's twelve public shapes (the tiled family: the FP32-accurate one),
#   40 trials, an empty store and a cold CuPy kernel cache (CUPY_CACHE_DIR under $OUT), then again
#   with the cache warm. tf32: the same at --precision tf32 (gemm_wgmma), cold. base: fp32 cold on
#   the tree at $BASE (default .device/base: a `git archive` of the commit before), the same visit.
# fp32-layers: fp32's cold run, then layers.
# layers: `autogemm tune --layers conv32x3,conv32x3,pool2,conv64x3,pool2,dense128`, cold cache.
# gpus: the twelve shapes at fp32 with --gpus 0, then --gpus all (run on a machine of several GPUs).
# gpus-warm: the same, each run with a copy of one CuPy kernel cache warmed by a small tune (the
#   kernels CuPy compiles for any tune, once a machine; not autogemm's, each run compiles its own).
# TUNE_TIMEOUT: seconds a tune may run (560).
# Each line of tune's output is stamped with the time it came; a table of seconds a shape last.
# Everything lands in $OUT/issue40-tuning.tar.gz.
set -uo pipefail
source benchmarks/entry-points.sh
out=${OUT:-/tmp/issue40-tuning}
work=$out/issue40-tuning
mkdir -p "$work"
nvidia-smi -L > "$work/machine.txt" 2>&1
nvidia-smi topo -m >> "$work/machine.txt" 2>&1
head -1 "$work/machine.txt"
export NCCL_NVLS_ENABLE=0
SHAPES=1024x1024x1024:nn,2048x2048x2048:nt,4096x4096x4096:nn,512x4096x1024:tn,4096x512x1024:nt,256x256x8192:tn,8192x8192x256:nn,1000x1000x1000:tt,777x555x333:nt,96x3072x768:nt,3072x96x768:tn,1023x1025x1027:nn

stamped() {   # NAME DIR ARGS...: `autogemm tune ARGS` run in DIR, each output line stamped, into NAME.log
    local name=$1 dir=$2
    shift 2
    local start
    start=$(date +%s.%N)
    (cd "$dir" && timeout "${TUNE_TIMEOUT:-560}" python -m autogemm.cli tune "$@" < /dev/null 2>&1) |
        while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done > "$work/$name.log"
    echo "$name: $(python3 -c "import time; print(f'{time.time() - $start:.1f} s')")"
}

phase=${1:-fp32}
case $phase in
check)
    timeout -s INT 580 python -m pytest -q --durations=15 -m gpu tests/test_gemm_gpu.py tests/test_search_gpu.py \
        > "$work/pytest-gpu.txt" 2>&1
    tail -5 "$work/pytest-gpu.txt"
    ;;
fp32)
    CUPY_CACHE_DIR=$work/cupy AUTOGEMM_CACHE=$work/cache \
        stamped fp32-cold . --shapes "$SHAPES" --trials 40 --out "$work/store"
    CUPY_CACHE_DIR=$work/cupy AUTOGEMM_CACHE=$work/cache-2 \
        stamped fp32-warm . --shapes "$SHAPES" --trials 40 --out "$work/store-2"
    ;;
fp32-layers)
    CUPY_CACHE_DIR=$work/cupy AUTOGEMM_CACHE=$work/cache \
        stamped fp32-cold . --shapes "$SHAPES" --trials 40 --out "$work/store"
    CUPY_CACHE_DIR=$work/cupy-layers AUTOGEMM_CACHE=$work/cache-layers \
        stamped layers . --layers conv32x3,conv32x3,pool2,conv64x3,pool2,dense128 --trials 40 --out "$work/store-layers"
    ;;
tf32)
    CUPY_CACHE_DIR=$work/cupy-tf32 AUTOGEMM_CACHE=$work/cache-tf32 \
        stamped tf32-cold . --shapes "$SHAPES" --trials 40 --precision tf32 --out "$work/store-tf32"
    ;;
base)
    CUPY_CACHE_DIR=$work/cupy-base AUTOGEMM_CACHE=$work/cache-base \
        stamped base-fp32-cold "${BASE:-.device/base}" --shapes "$SHAPES" --trials 40 --out "$work/store-base"
    ;;
layers)
    CUPY_CACHE_DIR=$work/cupy-layers AUTOGEMM_CACHE=$work/cache-layers \
        stamped layers . --layers conv32x3,conv32x3,pool2,conv64x3,pool2,dense128 --trials 40 --out "$work/store-layers"
    ;;
gpus)
    CUPY_CACHE_DIR=$work/cupy-g1 AUTOGEMM_CACHE=$work/cache-g1 \
        stamped gpus-one . --shapes "$SHAPES" --trials 40 --gpus 0 --out "$work/store-g1"
    CUPY_CACHE_DIR=$work/cupy-gall AUTOGEMM_CACHE=$work/cache-gall \
        stamped gpus-all . --shapes "$SHAPES" --trials 40 --gpus all --out "$work/store-gall"
    ;;
gpus-warm)
    CUPY_CACHE_DIR=$work/cupy-warm AUTOGEMM_CACHE=$work/cache-warm \
        stamped warm-up . --shapes 640x640x640:nt --trials 4 --out "$work/store-warm"
    cp -r "$work/cupy-warm" "$work/cupy-g1" && cp -r "$work/cupy-warm" "$work/cupy-gall"
    CUPY_CACHE_DIR=$work/cupy-g1 AUTOGEMM_CACHE=$work/cache-g1 \
        stamped gpus-one-warm . --shapes "$SHAPES" --trials 40 --gpus 0 --out "$work/store-g1"
    CUPY_CACHE_DIR=$work/cupy-gall AUTOGEMM_CACHE=$work/cache-gall \
        stamped gpus-all-warm . --shapes "$SHAPES" --trials 40 --gpus all --out "$work/store-gall"
    ;;
esac
rm -rf "$work"/cupy* "$work"/cache*
tar czf "$out/issue40-tuning.tar.gz" -C "$out" issue40-tuning
python3 - "$work" <<'PY'
import pathlib, re, statistics, sys
for log in sorted(pathlib.Path(sys.argv[1]).glob("*.log")):
    lines = [l.split(" ", 1) for l in log.read_text().splitlines() if " " in l]
    start = next((float(t) for t, text in lines if text.startswith("autogemm tune: ") and " shapes on " in text), None)
    done = [(float(t), text) for t, text in lines if re.match(r"autogemm tune: \[\d+/\d+\]", text)]
    if start is None or not done:
        print(f"{log.stem}: no finished targets ({lines[-1][1][:100] if lines else 'no output'})")
        continue
    walls = [b - a for a, b in zip([start] + [t for t, _ in done[:-1]], [t for t, _ in done])]
    print(f"{log.stem}: {len(done)} targets in {done[-1][0] - start:.1f} s, median {statistics.median(walls):.1f} s "
          f"a target (max {max(walls):.1f})")
    for wall, (_, text) in zip(walls, done):
        print(f"  {wall:6.1f} s  {text[15:][:150]}")
PY
