#!/bin/bash
# One GPU visit of issue 14, in phases (each one run call): before | tune-a | tune-b | after
# (run from the repository root: bash benchmarks/issue14-visit.sh PHASE)
#   before: the old tree benched with its own tuned files: `.before`, made in the repository root
#           by `git archive c8dd7a3 --prefix=.before/ | tar -x` and carried to the GPU machine
#   tune-a/tune-b: `make tune`'s commands in this tree; after: benches again, then the gpu suite
set -u
source .device/env.sh
phase=$1; gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr ' ' '-' | tr A-Z a-z)
SHAPES=800x1000x784:nt,10x1000x800:tn,1000x784x800:tn,800x100x784:nt,10x100x800:tn,100x784x800:tn,8192x4096x784:nt,4096x784x8192:tn,10x4096x8192:tn,4096x4096x4096
bench() {   # $1: tag; run from the tree to measure
  python -m autogemm.cli bench --shapes $SHAPES --reps 50 --json $OUT/$1-gemm.json > $OUT/$1-gemm.log 2>&1
  python -m nn.bench --networks ${NETS:-cme213,grading,large} --backends cupy-tuned --json $OUT/$1-train.json > $OUT/$1-train.log 2>&1
  tail -5 $OUT/$1-train.log
}
t0=$(date +%s)
case $phase in
  before)
    (cd .before && export PYTHONPATH=/tmp/site:$PWD && bench before) ;;
  tune-a)
    python -m autogemm.cli tune --shapes nn --ranks 1,4 > $OUT/tune-a.log 2>&1; echo "tune nn rc=$? $(( $(date +%s) - t0 )) s"
    python -m autogemm.cli tune --shapes nn --hidden 100 --ranks 1,4 >> $OUT/tune-a.log 2>&1; echo "tune grading rc=$? $(( $(date +%s) - t0 )) s"
    cp tuned/*.json $OUT/ ;;
  tune-b)
    python -m autogemm.cli tune --shapes nn --hidden 4096 --batch 8192 --timeout 25 > $OUT/tune-b.log 2>&1; echo "tune large rc=$? $(( $(date +%s) - t0 )) s"
    python -m autogemm.cli tune --stale >> $OUT/tune-b.log 2>&1; echo "tune stale rc=$? $(( $(date +%s) - t0 )) s"
    cp tuned/*.json $OUT/ ;;
  after)
    bench after
    echo "benches $(( $(date +%s) - t0 )) s"
    if [ "${GPU_TESTS:-1}" = 1 ]; then
      python -m pytest -q -m gpu -p no:cacheprovider > $OUT/pytest-gpu.log 2>&1; echo "pytest rc=$?"; tail -3 $OUT/pytest-gpu.log
    fi ;;
esac
echo "phase $phase on $gpu: $(( $(date +%s) - t0 )) s"
for f in $OUT/*-gemm.json; do
  python -c "import json,sys; [print(f\"{sys.argv[1].split('/')[-1][:6]} {r['shape']:>22} {r['variant']:>8} {r['median_us']:9.1f} us\") for r in json.load(open(sys.argv[1]))['results'] if r['variant'] in ('tuned','cublas') and r['median_us']]" $f
done 2>/dev/null
