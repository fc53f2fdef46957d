#!/usr/bin/env bash
# Issue 18 on a Hopper GPU: the wgmma path's GPU tests, then its configs against cuBLAS FP32/TF32 and
# the tuned mma.sync path. Run from the repository root:
#   source .device/env.sh && bash benchmarks/issue18-visit.sh [wgmma | tune | retune | profile | tf32 | inflight | gpu-file | smoke | bfloat16 | stale | epochs | bf16-train | h200 | h200-tune | profile-bf16 | split-k | split-k-2 | producer | pipeline | producer-tune | producer-tune-2 | h200-producer | tma | profile-tma | tma-check | neighbours | pretranspose | pretranspose-2 | h200-pretranspose | pretranspose-rest | pretranspose-stale | pretranspose-retune | profile-step | bf16-grad-in | h200-bf16-grad-in | lb-tests | lb-tune | lb-steps | lb-epochs | h200-lb | lb-bf16 | h200-lb-bf16 | gt-tests | gt-prefetch | gt-epochs | h200-gt | ncu-lb | lb-runs | cluster | cluster-2 | persistent | persistent-2 | persistent-3 | epilogue-large | epilogue-cme | epilogue-epochs | epilogue-cme-2 | widths | widths-tune | widths-cme | widths-final | h200-widths | search-retune | x-column | profile-targets | bf16-out | bf16-out-stale | bf16-out-epochs | h200-bf16-out | profile-forward]
set -uo pipefail
out=${OUT:-/tmp/issue18}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"

# tune_stale LOG ARITHMETIC...: every stale record of this GPU's file measured again, in each
# arithmetic given ("--precision tf32", "--dtype bfloat16"), a short search from its config.
tune_stale() {
    local log=$1; shift
    for arithmetic in "$@"; do
        python -m autogemm.cli tune --stale $arithmetic --trials 6 --timeout 6
    done > "$out/$log" 2>&1; grep -E "│ (gemm|linear)|rror" "$out/$log" | tail -80
}

# bf16_epochs SUFFIX: the epochs at bf16 with A1 in bfloat16, then in float32 (issue18_float32_a1.py),
# into nn-bench-a16SUFFIX and nn-bench-a32SUFFIX.
bf16_epochs() {
    local networks=(--networks cme213,grading,large --backends cupy-tuned-bf16)
    python -m nn.bench "${networks[@]}" --json "$out/nn-bench-a16$1.json" > "$out/nn-bench-a16$1.txt" 2>&1
    python benchmarks/issue18_float32_a1.py nn.bench "${networks[@]}" --json "$out/nn-bench-a32$1.json" \
        > "$out/nn-bench-a32$1.txt" 2>&1
}
case "${1:-wgmma}" in
bf16-out)   # gemm_wgmma writing D in bfloat16, the output layer's kernels reading A in bfloat16, the
            # step at bf16 storing A1 so: their GPU tests; then the tf32 records staled by the template
            # change measured again (their config first: a short search)
    python -m pytest -q -m gpu tests/test_gemm_gpu.py tests/test_elementwise_gpu.py tests/test_cupy_backend_gpu.py \
        -k "bfloat16 or linear or bf16 or reduced_precisions" > "$out/pytest-bf16-out.txt" 2>&1
    tail -3 "$out/pytest-bf16-out.txt"
    tune_stale tune-stale-tf32.txt "--precision tf32"
    cp tuned/*.json "$out/"
    ;;
bf16-out-stale)   # the step's A1 in bfloat16 where its backward pass goes apart alone (the GPU tests of
                  # it), then the rest of the records staled by bf16.cuh's and the templates' change
    python -m pytest -q -m gpu tests/test_cupy_backend_gpu.py -k "output_layer_input" \
        > "$out/pytest-a1.txt" 2>&1; tail -3 "$out/pytest-a1.txt"
    tune_stale tune-stale-rest.txt "--precision fp32" "--precision bf16" "--dtype bfloat16"
    cp tuned/*.json "$out/"
    ;;
bf16-out-epochs)   # at bf16, A1 stored in bfloat16 against float32 (issue18_float32_a1.py): each step's
                   # profile, then the epochs, twice each
    for net in cme213 large; do
        python -m nn.profile --network $net --backend cupy-tuned-bf16 > "$out/profile-$net-a16.txt" 2>&1
        python benchmarks/issue18_float32_a1.py nn.profile --network $net --backend cupy-tuned-bf16 \
            > "$out/profile-$net-a32.txt" 2>&1
    done
    grep -E "==>|gemm|linear|whole" "$out"/profile-*.txt
    bf16_epochs -1
    bf16_epochs -2
    for f in "$out"/nn-bench-*.txt; do echo "$(basename $f)"; tail -n 3 "$f"; done
    ;;
h200-bf16-out)   # the H200: the GPU tests of A1 and the output layer's input in bfloat16, every record
                 # staled by the change measured again, the bf16 epochs with A1 in bfloat16 and float32
    python -m pytest -q -m gpu tests/test_cupy_backend_gpu.py tests/test_elementwise_gpu.py -k "output_layer" \
        > "$out/pytest-a1.txt" 2>&1; tail -3 "$out/pytest-a1.txt"
    tune_stale tune-stale.txt "--precision tf32" "--precision fp32" "--precision bf16" "--dtype bfloat16"
    cp tuned/*.json "$out/"
    bf16_epochs ""
    for f in "$out"/nn-bench-*.txt; do echo "$(basename $f)"; tail -n 3 "$f"; done
    ;;
x-column)   # at tf32 the data's column-major copy, so that W1's update reads X K-major: the GPU tests,
            # the tf32 updates tuned in their new layouts (tt; nt where G1 is column-major), then each
            # step's profile and the epochs with the copy and without (issue18_without_copy.py), twice
    python -m pytest -q -m gpu tests/test_cupy_backend_gpu.py -k "column_major or reduced_precisions" \
        > "$out/pytest-x-column.txt" 2>&1; tail -1 "$out/pytest-x-column.txt"
    shapes=1000x784x800:tt,1000x784x400:tt,4096x784x8192:nt,4096x784x4848:nt,100x784x800:tt,100x784x400:tt
    shapes=$shapes,1000x784x200:tt,1000x784x100:tt,100x784x200:tt,100x784x100:tt
    python -m autogemm.cli tune --precision tf32 --shapes $shapes --trials 40 --timeout 20 > "$out/tune-x-column.txt" 2>&1
    grep -E "│ gemm|rror" "$out/tune-x-column.txt" | tail -24
    for net in cme213 large; do
        python -m nn.profile --network $net --backend cupy-tuned-tf32 > "$out/profile-$net-copy.txt" 2>&1
        python benchmarks/issue18_without_copy.py nn.profile --network $net --backend cupy-tuned-tf32 \
            > "$out/profile-$net-no-copy.txt" 2>&1
    done
    grep -E "==>|gemm|whole" "$out"/profile-*.txt
    for run in 1 2; do
        python -m nn.bench --networks cme213,grading,large --backends cupy-tuned-tf32 --json "$out/nn-bench-copy-$run.json" \
            > "$out/nn-bench-copy-$run.txt" 2>&1
        python benchmarks/issue18_without_copy.py nn.bench --networks cme213,grading,large --backends cupy-tuned-tf32 \
            --json "$out/nn-bench-no-copy-$run.json" > "$out/nn-bench-no-copy-$run.txt" 2>&1
    done
    for f in "$out"/nn-bench-*.txt; do echo "$(basename $f)"; tail -n 3 "$f"; done
    cp tuned/*.json "$out/"
    ;;
tma)   # the producer copying by TMA: one call first (the tensor maps reach the kernel), the wgmma GPU
       # tests, then the pipelines on the records of the networks' large and small GEMMs
    python - <<'PY' 2>&1 | tee "$out/probe.txt" || exit 1
import cupy, numpy as np, autogemm
a, b = (cupy.asarray(np.random.default_rng(s).standard_normal((256, 512)), np.float32) for s in (1, 2))
cfg = dict(bm=128, bn=128, warpgroups=2, stages=4, math="tf32", inflight=1, split_k=1, producer=1, tma=1)
d = autogemm.gemm(a, b, trans_b=True, config=cfg, kernel_family="gemm_wgmma", precision="tf32")
want = cupy.asnumpy(a).astype(np.float64) @ cupy.asnumpy(b).astype(np.float64).T
err = float(np.abs(cupy.asnumpy(d) - want).max() / np.abs(want).max())
print(f"probe: tma tf32 256x256x512 max-norm relative error {err:.2e}")
assert err < 1e-2
PY
    python -m pytest -q -m gpu tests/test_gemm_gpu.py -k "wgmma" > "$out/pytest-wgmma.txt" 2>&1; tail -3 "$out/pytest-wgmma.txt"
    python benchmarks/issue18_pipeline.py --json "$out/pipeline.json" \
        --shapes 8192x4096x784:nt,4096x4096x4096:nt,4096x784x8192:tn,800x1000x784:nt,100x100x784:nt \
        > "$out/pipeline.txt" 2>&1
    grep -vE "^ *$" "$out/pipeline.txt" | tail -30
    ;;
producer)   # the warp-specialized pipeline (producer = 1): the wgmma GPU tests
    python -m pytest -q -m gpu tests/test_gemm_gpu.py -k "wgmma" > "$out/pytest-wgmma.txt" 2>&1; tail -3 "$out/pytest-wgmma.txt"
    ;;
h200-producer)   # the H200's file after the producer joined the space: its GPU tests, every stale
                 # wgmma record re-tuned in each precision and for bfloat16 arrays, the epochs
    python -m pytest -q -m gpu tests/test_gemm_gpu.py -k "producer" > "$out/pytest-producer.txt" 2>&1; tail -1 "$out/pytest-producer.txt"
    for arithmetic in "--precision fp32" "--precision tf32" "--precision bf16" "--dtype bfloat16"; do
        python -m autogemm.cli tune --stale $arithmetic --trials 24 --timeout 12
    done > "$out/tune-stale.txt" 2>&1; grep -E "│ gemm|rror" "$out/tune-stale.txt" | tail -40
    python -m nn.bench --networks cme213,large --backends cupy-tuned,cupy-tuned-tf32,cupy-tuned-bf16 \
        --json "$out/nn-bench.json" > "$out/nn-bench.txt" 2>&1; tail -3 "$out/nn-bench.txt"
    cp tuned/nvidia-h200.json "$out/"
    ;;
pipeline)   # producer variants of every record's config timed against it, cuBLAS beside them
    python benchmarks/issue18_pipeline.py --json "$out/pipeline.json" > "$out/pipeline.txt" 2>&1
    grep -vE "^ *$" "$out/pipeline.txt" | tail -40
    ;;
bfloat16)   # bfloat16 operands: their GPU tests and to_bf16's, what rounding to bfloat16 costs, the
            # kernels tuned and timed against cuBLAS's GemmEx on the same arrays
    python -m pytest -q -m gpu tests/test_gemm_gpu.py -k "bf16 or bfloat16 or cublas_baseline" \
        > "$out/pytest-bfloat16.txt" 2>&1; tail -3 "$out/pytest-bfloat16.txt"
    python benchmarks/issue18_to_bf16.py --json "$out/to-bf16.json" 2>&1 | tee "$out/to-bf16.txt"
    shapes=4096x4096x4096:nt,8192x4096x784:nt,800x1000x784:nt,4096x784x8192:tn,1000x784x800:tn
    python -m autogemm.cli tune --dtype bfloat16 --shapes $shapes --trials 24 --timeout 15 > "$out/tune-bfloat16.txt" 2>&1
    grep -E "│ gemm|rror" "$out/tune-bfloat16.txt" | tail -6
    python -m autogemm.cli bench --dtype bfloat16 --reps 50 --shapes $shapes > "$out/bench-bfloat16.txt" 2>&1
    grep -E "│|rror" "$out/bench-bfloat16.txt" | tail -22
    cp tuned/nvidia-h100-80gb-hbm3.json "$out/"
    ;;
split-k|producer-tune)   # after split-K (producer-tune: the producer) joined gemm_wgmma's space: the wgmma
                         # GPU tests (producer-tune: the producer's), then the stale records re-tuned in
                         # fp32 and tf32 (split-k-2, producer-tune-2: the rest, and the epochs)
    tests=$([ "$1" = split-k ] && echo wgmma || echo producer)
    python -m pytest -q -m gpu tests/test_gemm_gpu.py -k "$tests" > "$out/pytest-$tests.txt" 2>&1; tail -1 "$out/pytest-$tests.txt"
    for precision in fp32 tf32; do
        python -m autogemm.cli tune --stale --precision $precision --trials 30 --timeout 12
    done > "$out/tune-stale.txt" 2>&1; grep -E "│ gemm|rror" "$out/tune-stale.txt" | tail -30
    cp tuned/nvidia-h100-80gb-hbm3.json "$out/"
    ;;
split-k-2|producer-tune-2)
    { python -m autogemm.cli tune --stale --precision bf16 --trials 30 --timeout 12
      python -m autogemm.cli tune --stale --dtype bfloat16 --trials 24 --timeout 15
    } > "$out/tune-stale-2.txt" 2>&1; grep -E "│ gemm|rror" "$out/tune-stale-2.txt" | tail -12
    if [ "$1" = split-k-2 ]; then
        python -m autogemm.cli bench --reps 30 --shapes 200x1000x784:nt,100x1000x784:nt,800x1000x784:nt > "$out/bench-fp32.txt" 2>&1
        grep -E "│|rror" "$out/bench-fp32.txt" | tail -16
    fi
    python -m nn.bench --networks cme213,large --backends cupy-tuned,cupy-tuned-tf32,cupy-tuned-bf16 \
        --json "$out/nn-bench.json" > "$out/nn-bench.txt" 2>&1; tail -3 "$out/nn-bench.txt"
    cp tuned/nvidia-h100-80gb-hbm3.json "$out/"
    ;;
tma-check)   # the producer's GPU tests and TMA on views of padded arrays, that test under
             # compute-sanitizer (memcheck, synccheck, racecheck), then producer-tune's re-tune
    python -m pytest -q -m gpu tests/test_gemm_gpu.py -k "producer or tma_reads" > "$out/pytest-tma.txt" 2>&1
    tail -1 "$out/pytest-tma.txt"
    for tool in memcheck synccheck racecheck; do
        timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 python -m pytest -q -m gpu tests/test_gemm_gpu.py \
            -k "tma_reads and True-False" > "$out/sanitizer-$tool.txt" 2>&1
        echo "compute-sanitizer $tool: exit $? | $(grep -E "ERROR SUMMARY|passed|failed" "$out/sanitizer-$tool.txt" | tr '\n' ' ')"
    done
    bash "$0" producer-tune
    ;;
neighbours)   # the records that kept the one loop, tuned again now that the local search reaches
              # the TMA producer from them (two steps), then the epochs in fp32 and tf32
    { python -m autogemm.cli tune --precision tf32 --shapes 4096x784x8192:tn,1000x784x800:tn --trials 30 --timeout 12
      python -m autogemm.cli tune --shapes 4096x784x8192:tn,800x1000x784:nt --trials 30 --timeout 12
    } > "$out/tune-one-loop.txt" 2>&1; grep -E "│ gemm|rror" "$out/tune-one-loop.txt"
    python -m nn.bench --networks cme213,large --backends cupy-tuned,cupy-tuned-tf32 \
        --json "$out/nn-bench.json" > "$out/nn-bench.txt" 2>&1; tail -3 "$out/nn-bench.txt"
    cp tuned/nvidia-h100-80gb-hbm3.json "$out/"
    ;;
pretranspose)   # M/N-major operands staged K-major first (pretranspose): its GPU tests, the transpose
                # kernel's configs, the records of the weight updates (tn) timed with and without
                # it, then their tf32 records tuned again (pretranspose-2: fp32, the epochs)
    python -m pytest -q -m gpu tests/test_gemm_gpu.py -k "pretransposed or transpose_views" \
        > "$out/pytest-pretranspose.txt" 2>&1; tail -1 "$out/pytest-pretranspose.txt"
    python benchmarks/issue18_transpose.py --json "$out/transpose.json" > "$out/transpose.txt" 2>&1
    cut -c1-220 "$out/transpose.txt"
    python benchmarks/issue18_pipeline.py --json "$out/pipeline.json" --shapes 4096x784x8192:tn,1000x784x800:tn \
        > "$out/pipeline.txt" 2>&1
    grep -vE "^ *$" "$out/pipeline.txt" | tail -12
    python -m autogemm.cli tune --precision tf32 --shapes 4096x784x8192:tn,1000x784x800:tn --trials 30 --timeout 12 \
        > "$out/tune-tf32.txt" 2>&1; grep -E "│ gemm|rror" "$out/tune-tf32.txt"
    cp tuned/nvidia-h100-80gb-hbm3.json "$out/"
    ;;
pretranspose-2)
    python -m autogemm.cli tune --shapes 4096x784x8192:tn,1000x784x800:tn --trials 30 --timeout 12 \
        > "$out/tune-fp32.txt" 2>&1; grep -E "│ gemm|rror" "$out/tune-fp32.txt"
    python -m nn.bench --networks cme213,large --backends cupy-tuned,cupy-tuned-tf32 \
        --json "$out/nn-bench.json" > "$out/nn-bench.txt" 2>&1; tail -3 "$out/nn-bench.txt"
    cp tuned/nvidia-h100-80gb-hbm3.json "$out/"
    ;;
pretranspose-rest)   # the other weight updates' tf32 records tuned again with pretranspose in the
                     # space (the grading network's, and each of 4 ranks'), the epochs in tf32
    python -m autogemm.cli tune --precision tf32 --shapes 100x784x800:tn,1000x784x200:tn,100x784x200:tn \
        --trials 30 --timeout 12 > "$out/tune-tf32.txt" 2>&1; grep -E "│ gemm|rror" "$out/tune-tf32.txt"
    python -m nn.bench --networks cme213,grading,large --backends cupy-tuned-tf32 \
        --json "$out/nn-bench.json" > "$out/nn-bench.txt" 2>&1; tail -4 "$out/nn-bench.txt"
    cp tuned/nvidia-h100-80gb-hbm3.json "$out/"
    ;;
pretranspose-stale)   # after the transpose kernel's change (its blocks step down the rows, and a
                      # pretransposed record's hash now covers it): its GPU tests and configs, the
                      # stale records tuned again (this GPU's file), the epochs
    python -m pytest -q -m gpu tests/test_gemm_gpu.py -k "pretransposed or transpose_views" \
        > "$out/pytest-pretranspose.txt" 2>&1; tail -1 "$out/pytest-pretranspose.txt"
    python benchmarks/issue18_transpose.py --json "$out/transpose.json" > "$out/transpose.txt" 2>&1
    cut -c1-160 "$out/transpose.txt"
    for precision in fp32 tf32; do
        python -m autogemm.cli tune --stale --precision $precision --trials 30 --timeout 12
    done > "$out/tune-stale.txt" 2>&1; grep -E "│ gemm|rror" "$out/tune-stale.txt"
    python -m nn.bench --networks cme213,large --backends cupy-tuned,cupy-tuned-tf32 \
        --json "$out/nn-bench.json" > "$out/nn-bench.txt" 2>&1; tail -3 "$out/nn-bench.txt"
    cp tuned/nvidia-h*.json "$out/"
    ;;
pretranspose-retune)   # the pretransposed records tuned again with the transpose kernel's new default
    { python -m autogemm.cli tune --precision tf32 --shapes 4096x784x8192:tn,1000x784x800:tn,1000x784x200:tn \
          --trials 30 --timeout 12
      python -m autogemm.cli tune --shapes 1000x784x800:tn --trials 30 --timeout 12
    } > "$out/tune.txt" 2>&1; grep -E "│ gemm|rror" "$out/tune.txt"
    python -m nn.bench --networks cme213,large --backends cupy-tuned,cupy-tuned-tf32 \
        --json "$out/nn-bench.json" > "$out/nn-bench.txt" 2>&1; tail -3 "$out/nn-bench.txt"
    cp tuned/nvidia-h*.json "$out/"
    ;;
profile-step)   # where a training step's time goes: each operation of the CME 213 and the large
                # network's step, alone and in the step, at each precision
    for network in cme213 large; do
        for backend in cupy-tuned cupy-tuned-tf32 cupy-tuned-bf16; do
            python -m nn.profile --network $network --backend $backend --json "$out/profile-$network-$backend.json"
        done
    done > "$out/profile-step.txt" 2>&1; cat "$out/profile-step.txt"
    ;;
bf16-grad-in|h200-bf16-grad-in)   # at bf16 the output layer writes its input gradient's bfloat16 copy
                                  # (no rounding pass before the weight update): its GPU tests, the
                                  # stale (linear_xent) records tuned again, the epochs, the steps profiled
    python -m pytest -q -m gpu tests/test_elementwise_gpu.py tests/test_cupy_backend_gpu.py \
        -k "linear_xent or bf16 or reduced" > "$out/pytest-bf16-grad-in.txt" 2>&1; tail -1 "$out/pytest-bf16-grad-in.txt"
    python -m autogemm.cli tune --stale --trials 24 --timeout 12 > "$out/tune-stale.log" 2>&1
    grep -E "│ linear_xent|rror" "$out/tune-stale.log" | cut -c1-150 | tail -20
    python -m nn.bench --networks cme213,large --backends cupy-tuned,cupy-tuned-tf32,cupy-tuned-bf16 \
        --json "$out/nn-bench.json" > "$out/nn-bench.txt" 2>&1; tail -3 "$out/nn-bench.txt"
    for network in cme213 large; do
        python -m nn.profile --network $network --backend cupy-tuned-bf16 --json "$out/profile-$network-bf16.json"
    done > "$out/profile-step.txt" 2>&1; cat "$out/profile-step.txt"
    (cd "$out" && tar czf logs.tgz pytest-*.txt tune-stale.log profile-*.json && rm pytest-*.txt tune-stale.log profile-*.json)
    cp tuned/nvidia-h*.json "$out/"
    ;;
lb-tests)   # the output layer's backward pass in one kernel (linear_backward): the GPU tests of the
            # output layer's families, the GPU backends against NumPy (training runs included), tuning it
    python -m pytest -q -m gpu tests/test_elementwise_gpu.py tests/test_cupy_backend_gpu.py tests/test_search_gpu.py \
        -k "not two_gemm_shapes and not resume_after and not the_timer" > "$out/pytest-lb.txt" 2>&1
    grep -E "passed|failed|FAILED|Error" "$out/pytest-lb.txt" | tail -12
    ;;
lb-steps)   # the one-rank steps with the output layer's backward pass either way against NumPy, the
            # stale records (linear_xent's, the bfloat16 rounding include) tuned again
    python -m pytest -q -m gpu tests/test_cupy_backend_gpu.py -k "either_way or operations_match" \
        > "$out/pytest-steps.txt" 2>&1; tail -1 "$out/pytest-steps.txt"
    python -m autogemm.cli tune --stale --trials 24 --timeout 12 > "$out/tune-stale.log" 2>&1
    grep -E "│ linear|rror" "$out/tune-stale.log" | cut -c1-160
    cp tuned/nvidia-h*.json "$out/"
    ;;
lb-tune)   # linear_backward's records and the forward-only linear_xent's for the MLPs' steps (1 and 4
           # ranks; the large network's), then the stale (the CNN's linear_xent) tuned again
    { for hidden in 1000 100; do
          python -m autogemm.cli tune --shapes nn --hidden $hidden --ranks 1,4 --families linear_xent,linear_backward \
              --trials 24 --timeout 10
      done
      python -m autogemm.cli tune --shapes nn --hidden 4096 --batch 8192 --families linear_xent,linear_backward \
          --trials 30 --timeout 20
      python -m autogemm.cli tune --stale --trials 24 --timeout 12
    } > "$out/tune.log" 2>&1
    grep -E "│ linear|rror" "$out/tune.log" | cut -c1-160
    cp tuned/nvidia-h*.json "$out/"
    ;;
h200-lb)   # the H200's file after linear_backward: its and the output layer's GPU tests, the one-rank
           # steps either way against NumPy, the large network's output-layer records tuned, the stale
           # ones (linear_xent's) again (then lb-epochs)
    python -m pytest -q -m gpu tests/test_elementwise_gpu.py tests/test_cupy_backend_gpu.py \
        -k "linear or either_way or operations_match or bf16" > "$out/pytest-h200-lb.txt" 2>&1
    grep -E "passed|failed|FAILED|Error" "$out/pytest-h200-lb.txt" | tail -8
    { python -m autogemm.cli tune --shapes nn --hidden 4096 --batch 8192 --families linear_xent,linear_backward \
          --trials 30 --timeout 20
      python -m autogemm.cli tune --stale --trials 24 --timeout 12
    } > "$out/tune.log" 2>&1
    grep -E "│ linear|rror" "$out/tune.log" | cut -c1-160
    cp tuned/nvidia-h200.json "$out/"
    ;;
lb-bf16|h200-lb-bf16)   # at bf16 linear_backward writes the input gradient in bfloat16 alone: its GPU tests,
                        # the stale (linear_backward) records tuned again, the epochs, the bf16 steps
    python -m pytest -q -m gpu tests/test_elementwise_gpu.py tests/test_cupy_backend_gpu.py \
        -k "linear_backward or either_way or operations_match or bf16 or reduced" > "$out/pytest-lb-bf16.txt" 2>&1
    grep -E "passed|failed|FAILED|Error" "$out/pytest-lb-bf16.txt" | tail -8
    python -m autogemm.cli tune --stale --trials 30 --timeout 20 > "$out/tune-stale.log" 2>&1
    grep -E "│ linear|rror" "$out/tune-stale.log" | cut -c1-160
    python -m nn.bench --networks cme213,large --backends cupy-tuned,cupy-tuned-tf32,cupy-tuned-bf16 \
        --json "$out/nn-bench.json" > "$out/nn-bench.txt" 2>&1; tail -4 "$out/nn-bench.txt"
    python -m nn.profile --network large --backend cupy-tuned-bf16 --json "$out/profile-large-bf16.json" \
        > "$out/profile-step.txt" 2>&1; grep -vE "^ *$" "$out/profile-step.txt"
    cp tuned/nvidia-h*.json "$out/"
    ;;
gt-tests)   # linear_backward stores G1 column-major for W1's GEMM (fp32, tf32): its GPU tests, the GEMM
            # on column-major operands, the steps either way; then its records and W1's GEMM (now nn)
            # for the large network's steps tuned
    python -m pytest -q -m gpu tests/test_elementwise_gpu.py tests/test_cupy_backend_gpu.py tests/test_gemm_gpu.py \
        -k "linear_backward or column_major or either_way or operations_match" > "$out/pytest-gt.txt" 2>&1
    grep -E "passed|failed|FAILED|Error" "$out/pytest-gt.txt" | tail -8
    { python -m autogemm.cli tune --shapes nn --hidden 4096 --batch 8192 --families linear_backward --trials 30 --timeout 20
      for precision in tf32 fp32; do
          python -m autogemm.cli tune --precision $precision --shapes 4096x784x8192:nn,4096x784x4848:nn \
              --trials 30 --timeout 15
      done
    } > "$out/tune.log" 2>&1
    grep -E "│ (linear|gemm)|rror" "$out/tune.log" | cut -c1-160
    cp tuned/nvidia-h*.json "$out/"
    ;;
gt-prefetch)   # linear_backward may load the next pass's rows during this one (prefetch): its GPU tests,
               # the steps with G1 either way, its records for the large network's steps tuned again
    python -m pytest -q -m gpu tests/test_elementwise_gpu.py tests/test_cupy_backend_gpu.py \
        -k "linear_backward or column_major or either_way" > "$out/pytest-prefetch.txt" 2>&1
    grep -E "passed|failed|FAILED|Error" "$out/pytest-prefetch.txt" | tail -8
    python -m autogemm.cli tune --shapes nn --hidden 4096 --batch 8192 --families linear_backward --trials 40 \
        --timeout 25 > "$out/tune.log" 2>&1
    grep -E "│ linear|rror" "$out/tune.log" | cut -c1-160
    cp tuned/nvidia-h*.json "$out/"
    ;;
h200-gt)   # the H200's file after G1 went column-major at tf32: the GPU tests of the steps, linear_backward's
           # records (stale: prefetch) and W1's tf32 GEMM (now nn) tuned for the large network, the epochs
    python -m pytest -q -m gpu tests/test_cupy_backend_gpu.py -k "column_major or either_way" > "$out/pytest-h200-gt.txt" 2>&1
    tail -1 "$out/pytest-h200-gt.txt"
    { python -m autogemm.cli tune --shapes nn --hidden 4096 --batch 8192 --families linear_backward --trials 40 --timeout 25
      python -m autogemm.cli tune --precision tf32 --shapes 4096x784x8192:nn,4096x784x4848:nn --trials 30 --timeout 15
    } > "$out/tune.log" 2>&1
    grep -E "│ (linear|gemm)|rror" "$out/tune.log" | cut -c1-160
    python -m nn.bench --networks cme213,large --backends cupy-tuned,cupy-tuned-tf32,cupy-tuned-bf16 \
        --json "$out/nn-bench.json" > "$out/nn-bench.txt" 2>&1; tail -3 "$out/nn-bench.txt"
    cp tuned/nvidia-h200.json "$out/"
    ;;
lb-runs)   # linear_backward's transposed store as each thread's runs, unrolled (no index division, no
           # 64-bit multiply an element): its GPU tests, its records for the large network's steps
           # tuned again (every one stale), the large network's epochs
    python -m pytest -q -m gpu tests/test_elementwise_gpu.py tests/test_cupy_backend_gpu.py \
        -k "column_major or (linear_backward and (sigmoid_t or relu_t))" > "$out/pytest-lb-runs.txt" 2>&1
    grep -E "passed|failed|FAILED|Error" "$out/pytest-lb-runs.txt" | tail -6
    python -m autogemm.cli tune --shapes nn --hidden 4096 --batch 8192 --families linear_backward --trials 40 \
        --timeout 25 > "$out/tune.log" 2>&1
    grep -E "│ linear|rror" "$out/tune.log" | cut -c1-160
    python -m nn.bench --networks large --backends cupy-tuned,cupy-tuned-tf32,cupy-tuned-bf16 \
        --json "$out/nn-bench.json" > "$out/nn-bench.txt" 2>&1; tail -2 "$out/nn-bench.txt"
    cp tuned/nvidia-h*.json "$out/"
    ;;
cluster)   # thread-block clusters sharing tiles by multicast: their GPU tests and the last session's
           # untested mends (G1 column-major), then the large GEMMs' records in clusters against cuBLAS
    python -m pytest -q -m gpu tests/test_gemm_gpu.py -k "clusters or column_major" > "$out/pytest-gemm.txt" 2>&1
    tail -1 "$out/pytest-gemm.txt"
    python -m pytest -q -m gpu tests/test_elementwise_gpu.py tests/test_cupy_backend_gpu.py \
        -k "column_major or either_way or (linear_backward and (sigmoid_t or relu_t))" > "$out/pytest-mends.txt" 2>&1
    tail -1 "$out/pytest-mends.txt"
    python benchmarks/issue18_variants.py --vary cluster --json "$out/cluster.json" \
        --shapes 8192x4096x784:nt,4096x784x8192:nn,4096x784x8192:tn,4096x4096x4096:nt,800x1000x784:nt \
        > "$out/cluster.txt" 2>&1; cut -c1-170 "$out/cluster.txt"
    ;;
cluster-2)   # clusters again, their remote arrivals at the block's scope: their GPU tests, the records'
             # configs in clusters, Nsight Compute on 8192x4096x784 TF32 alone and in a 2 x 1 cluster
    python -m pytest -q -m gpu tests/test_gemm_gpu.py -k "clusters" > "$out/pytest-clusters.txt" 2>&1
    tail -1 "$out/pytest-clusters.txt"
    python benchmarks/issue18_variants.py --vary cluster --json "$out/cluster.json" --shapes 8192x4096x784:nt,800x1000x784:nt \
        > "$out/cluster.txt" 2>&1; cut -c1-170 "$out/cluster.txt"
    ncu --kernel-name regex:gemm_wgmma --launch-skip 1 --launch-count 3 --section SpeedOfLight --section LaunchStats \
        --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
        python benchmarks/issue18_profile.py --cluster > "$out/ncu-cluster.txt" 2>&1
    grep -E "  gemm_wgmma|Duration|Cluster|Memory Throughput|L2 Cache Throughput|Compute \(SM\)|Waves Per SM|Achieved Occ|Stall" \
        "$out/ncu-cluster.txt" | head -60
    ;;
persistent)   # persistent blocks whose warpgroups take tiles in turn: their GPU tests, then the large
              # GEMMs' records against persistent variants and cuBLAS
    python -m pytest -q -m gpu tests/test_gemm_gpu.py -k "persistent or clusters or wgmma_producer" \
        > "$out/pytest-persistent.txt" 2>&1; tail -1 "$out/pytest-persistent.txt"
    python benchmarks/issue18_variants.py --vary persistent --json "$out/persistent.json" \
        --shapes 8192x4096x784:nt,4096x784x8192:nn,4096x784x8192:tn,4096x4096x4096:nt,800x1000x784:nt \
        > "$out/persistent.txt" 2>&1; cut -c1-400 "$out/persistent.txt"
    ;;
persistent-2)   # persistent blocks in clusters (cluster tiles, multicast): the GPU tests, then the largest
                # GEMMs' records against persistent variants alone and clustered
    python -m pytest -q -m gpu tests/test_gemm_gpu.py -k "persistent" > "$out/pytest-persistent.txt" 2>&1
    tail -1 "$out/pytest-persistent.txt"
    python benchmarks/issue18_variants.py --vary persistent --json "$out/persistent.json" \
        --shapes 8192x4096x784:nt,4096x784x8192:nn,4096x784x8192:tn,4096x4096x4096:nt \
        > "$out/persistent.txt" 2>&1; cut -c1-700 "$out/persistent.txt"
    ;;
persistent-3)   # the forward GEMM (8192x4096x784, nt) with and without its bias_sigmoid epilogue: the
                # record's config against persistent variants, alone and clustered
    python benchmarks/issue18_variants.py --vary persistent --epilogue bias_sigmoid --json "$out/persistent-epilogue.json" \
        --shapes 8192x4096x784:nt > "$out/persistent-epilogue.txt" 2>&1; tr -s ' ' < "$out/persistent-epilogue.txt" | cut -c1-1500
    ;;
epilogue-large|epilogue-cme)   # GEMMs tuned with their fused epilogue (ops nt+bias_sigmoid): its GPU test,
                               # then gemm_wgmma's launches of a network's step in each arithmetic
                               # (epilogue-large: the forward GEMMs timed against cuBLAS + elementwise)
    python -m pytest -q -m gpu tests/test_search_gpu.py -k "epilogue" > "$out/pytest-epilogue.txt" 2>&1
    tail -1 "$out/pytest-epilogue.txt"
    network=$([ "$1" = epilogue-large ] && echo "--hidden 4096 --batch 8192")
    for arithmetic in "--precision tf32" "--dtype bfloat16" "--precision fp32"; do
        python -m autogemm.cli tune --shapes nn $network --families gemm_wgmma $arithmetic --trials 40 --timeout 15
    done > "$out/tune-$1.txt" 2>&1; grep -E "│ gemm|rror" "$out/tune-$1.txt" | tail -40
    cp tuned/*.json "$out/"
    ;;
widths)   # tiles 112 and 224 wide: their GPU test, then the weight updates' records (N = 784) against
          # variants of those widths (one wave of blocks where 128 x 128 tiles take 1.7)
    python -m pytest -q -m gpu tests/test_gemm_gpu.py -k "112_and_224" > "$out/pytest-widths.txt" 2>&1
    tail -1 "$out/pytest-widths.txt"
    python benchmarks/issue18_variants.py --vary width --json "$out/widths.json" \
        --shapes 4096x784x8192:nn,4096x784x8192:tn,1000x784x800:tn > "$out/widths.txt" 2>&1
    tr -s ' ' < "$out/widths.txt" | cut -c1-1200
    ;;
widths-tune)   # the weight updates (N = 784) tuned again with tiles 112 and 224 wide in the space, the
               # default ordered by whole waves and the search's seeds capped at half its trials; the epochs
    for arithmetic in tf32 fp32 bfloat16; do
        flag=$([ "$arithmetic" = bfloat16 ] && echo "--dtype bfloat16" || echo "--precision $arithmetic")
        op=$([ "$arithmetic" = tf32 ] && echo nn || echo tn)
        python -m autogemm.cli tune --shapes 4096x784x8192:$op,4096x784x4848:$op,1000x784x800:tn,1000x784x400:tn \
            $flag --trials 40 --timeout 20
    done > "$out/tune-widths.txt" 2>&1; grep -E "│ gemm|rror" "$out/tune-widths.txt" | tail -40
    cp tuned/*.json "$out/"
    python -m nn.bench --networks cme213,large --backends cupy-tuned,cupy-tuned-tf32,cupy-tuned-bf16 \
        --json "$out/nn-bench.json" > "$out/nn-bench.txt" 2>&1; tail -4 "$out/nn-bench.txt"
    ;;
widths-cme)   # the CME 213 epochs with the records of widths-tune and with the ones before it (in
             # .device/tuned-old), interleaved; where the fp32 step's time goes under each
    for round in 1 2; do
        for records in tuned .device/tuned-old; do
            echo "records $records, round $round"
            AUTOGEMM_TUNED=$records python -m nn.bench --networks cme213 --backends cupy-tuned,cupy-tuned-tf32 | tail -2
        done
    done > "$out/nn-bench-cme.txt" 2>&1; cat "$out/nn-bench-cme.txt"
    for records in tuned .device/tuned-old; do
        AUTOGEMM_TUNED=$records python -m nn.profile --network cme213 --backend cupy-tuned
    done > "$out/profile-cme.txt" 2>&1; grep -E "gemm|step" "$out/profile-cme.txt"
    ;;
widths-final)   # the search's GPU tests, gemm_wgmma's untuned defaults now and before, the epochs
    python -m pytest -q -m gpu tests/test_search_gpu.py > "$out/pytest-search.txt" 2>&1; tail -1 "$out/pytest-search.txt"
    python benchmarks/issue18_defaults.py --before benchmarks/issue18-h100/widths/defaults-08670fe.json \
        --json "$out/defaults.json" > "$out/defaults.txt" 2>&1; tr -s ' ' < "$out/defaults.txt" | cut -c1-160
    python -m nn.bench --networks cme213,large --backends cupy-tuned,cupy-tuned-tf32,cupy-tuned-bf16 \
        --json "$out/nn-bench-final.json" > "$out/nn-bench-final.txt" 2>&1; tail -3 "$out/nn-bench-final.txt"
    ;;
h200-widths)   # on the H200: the search's and the widths' GPU tests, the weight updates tuned as in
               # widths-tune, then the epochs with these records and with the ones before (.device/tuned-old)
    python -m pytest -q -m gpu tests/test_search_gpu.py tests/test_gemm_gpu.py -k "search_gpu or 112_and_224" \
        > "$out/pytest.txt" 2>&1; tail -1 "$out/pytest.txt"
    bash "$0" widths-tune > /dev/null 2>&1; grep -E "│ gemm|rror" "$out/tune-widths.txt" | tail -40
    for records in tuned .device/tuned-old; do
        echo "records $records"
        AUTOGEMM_TUNED=$records python -m nn.bench --networks cme213,large \
            --backends cupy-tuned,cupy-tuned-tf32,cupy-tuned-bf16 | tail -3
    done > "$out/nn-bench-new-old.txt" 2>&1; cat "$out/nn-bench-new-old.txt"
    ;;
search-retune)   # the GEMMs behind issue 18's targets tuned again now that the search leaves trials to
                 # TPE and its local phase (50 trials, 30 s), then the epochs with these records and
                 # with the ones before (.device/tuned-old)
    for arithmetic in tf32 bfloat16 fp32; do
        flag=$([ "$arithmetic" = bfloat16 ] && echo "--dtype bfloat16" || echo "--precision $arithmetic")
        shapes=$([ "$arithmetic" = fp32 ] && echo 8192x4096x784:nt+bias_sigmoid \
            || echo 4096x4096x4096:nt,800x1000x784:nt,800x1000x784:nt+bias_sigmoid,8192x4096x784:nt+bias_sigmoid)
        python -m autogemm.cli tune --shapes $shapes $flag --trials 50 --timeout 30
    done > "$out/tune-search.txt" 2>&1; grep -E "│ gemm|rror" "$out/tune-search.txt" | tail -40
    cp tuned/*.json "$out/"
    for records in tuned .device/tuned-old; do
        echo "records $records"
        AUTOGEMM_TUNED=$records python -m nn.bench --networks cme213,large \
            --backends cupy-tuned,cupy-tuned-tf32,cupy-tuned-bf16 | tail -3
    done > "$out/nn-bench-new-old.txt" 2>&1; cat "$out/nn-bench-new-old.txt"
    ;;
epilogue-epochs)   # after the forward GEMMs were tuned with their epilogue: those GEMMs against cuBLAS +
                   # elementwise, the epochs in each precision
    for arithmetic in "--precision tf32" "--dtype bfloat16" "--precision fp32"; do
        python -m autogemm.cli bench --shapes 8192x4096x784:nt+bias_sigmoid,800x1000x784:nt+bias_sigmoid $arithmetic --reps 50
    done > "$out/bench-epilogue.txt" 2>&1; grep -E "│|rror" "$out/bench-epilogue.txt" | cut -c1-160 | tail -40
    python -m nn.bench --networks cme213,large --backends cupy-tuned,cupy-tuned-tf32,cupy-tuned-bf16 \
        --json "$out/nn-bench.json" > "$out/nn-bench.txt" 2>&1; tail -4 "$out/nn-bench.txt"
    ;;
epilogue-cme-2)   # the CME 213 forward GEMMs tuned again with their epilogue, both families (the tiled
                  # one's FP32-accurate kernel beat gemm_wgmma's there), each search starting from the
                  # configs that served the call before; then the epochs
    for arithmetic in "--precision tf32" "--dtype bfloat16" "--precision fp32"; do
        python -m autogemm.cli tune --shapes 800x1000x784:nt+bias_sigmoid,400x1000x784:nt+bias_sigmoid $arithmetic \
            --trials 40 --timeout 15
    done > "$out/tune-$1.txt" 2>&1; grep -E "│ gemm|rror" "$out/tune-$1.txt" | tail -40
    cp tuned/*.json "$out/"
    python -m nn.bench --networks cme213,large --backends cupy-tuned,cupy-tuned-tf32,cupy-tuned-bf16 \
        --json "$out/nn-bench.json" > "$out/nn-bench.txt" 2>&1; tail -4 "$out/nn-bench.txt"
    ;;
ncu-lb)   # Nsight Compute on linear_backward 8192x10x4096, G_in row-major and transposed (tuned configs)
    ncu --kernel-name regex:linear_backward --launch-skip 2 --launch-count 4 --section SpeedOfLight \
        --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats \
        python benchmarks/issue18_lb_profile.py > "$out/ncu-lb.txt" 2>&1
    grep -E "linear_backward_|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Theoretical Occ|Stall|Block Limit|Issued Warp" "$out/ncu-lb.txt" | head -70
    ;;
gt-epochs)   # G1 column-major at tf32 alone: its GPU test, the epochs in each precision, the large
             # network's tf32 step profiled
    python -m pytest -q -m gpu tests/test_cupy_backend_gpu.py -k "column_major" > "$out/pytest-column-major.txt" 2>&1
    tail -1 "$out/pytest-column-major.txt"
    python -m nn.bench --networks cme213,large --backends cupy-tuned,cupy-tuned-tf32,cupy-tuned-bf16 \
        --json "$out/nn-bench.json" > "$out/nn-bench.txt" 2>&1; tail -4 "$out/nn-bench.txt"
    python -m nn.profile --network large --backend cupy-tuned-tf32 --json "$out/profile-large-tf32.json" \
        > "$out/profile-step.txt" 2>&1; grep -vE "^ *$" "$out/profile-step.txt"
    ;;
lb-epochs)   # the epochs in each precision, and where the steps' time goes now
    python -m nn.bench --networks cme213,large --backends cupy-tuned,cupy-tuned-tf32,cupy-tuned-bf16 \
        --json "$out/nn-bench.json" > "$out/nn-bench.txt" 2>&1; tail -4 "$out/nn-bench.txt"
    for network in large cme213; do
        for backend in cupy-tuned cupy-tuned-tf32 cupy-tuned-bf16; do
            python -m nn.profile --network $network --backend $backend --json "$out/profile-$network-$backend.json"
        done
    done > "$out/profile-step.txt" 2>&1; grep -vE "^ *$" "$out/profile-step.txt"
    (cd "$out" && tar czf profiles.tgz profile-*.json && rm profile-*.json)
    ;;
h200-pretranspose)   # the H200's file after pretranspose joined the space: its GPU tests, the weight
                     # updates' (tn) records tuned again in tf32 and fp32, the epochs
    python -m pytest -q -m gpu tests/test_gemm_gpu.py -k "pretransposed or transpose_views" \
        > "$out/pytest-pretranspose.txt" 2>&1; tail -1 "$out/pytest-pretranspose.txt"
    for precision in tf32 fp32; do
        python -m autogemm.cli tune --precision $precision --shapes 4096x784x8192:tn,1000x784x800:tn --trials 30 --timeout 12
    done > "$out/tune.txt" 2>&1; grep -E "│ gemm|rror" "$out/tune.txt"
    python -m nn.bench --networks cme213,large --backends cupy-tuned,cupy-tuned-tf32 \
        --json "$out/nn-bench.json" > "$out/nn-bench.txt" 2>&1; tail -3 "$out/nn-bench.txt"
    cp tuned/nvidia-h200.json "$out/"
    ;;
profile-targets)   # Nsight Compute on the missed targets' GEMMs as a call runs them (issue18_profile.py --targets)
    ncu --kernel-name regex:^gemm --launch-count 8 --section SpeedOfLight --section ComputeWorkloadAnalysis \
        --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy \
        python benchmarks/issue18_profile.py --targets > "$out/ncu-targets.txt" 2>&1
    grep -E "^  gemm|Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Executed Ipc A|highest-utilized|Stall|Registers Per|Dynamic Shared|Waves Per SM" "$out/ncu-targets.txt" | head -120
    ;;
profile-forward)   # Nsight Compute on the large network's forward GEMM at bf16 (issue18_profile.py --forward):
                   # fused epilogue into bfloat16, into float32, no epilogue
    ncu --kernel-name regex:^gemm --launch-count 6 --section SpeedOfLight --section ComputeWorkloadAnalysis \
        --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy \
        python benchmarks/issue18_profile.py --forward > "$out/ncu-forward.txt" 2>&1
    grep -E "^  gemm|Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Issue Slots Busy|Executed Ipc A|highest-utilized|Stall|Registers Per|Waves Per SM" "$out/ncu-forward.txt" | head -80
    ;;
profile-tma)   # Nsight Compute on the TMA producer's kernels (benchmarks/issue18_profile.py --tma)
    ncu --kernel-name regex:gemm_wgmma --launch-count 6 --section SpeedOfLight --section ComputeWorkloadAnalysis \
        --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy \
        python benchmarks/issue18_profile.py --tma > "$out/ncu-tma.txt" 2>&1
    grep -E "  gemm_wgmma|Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Executed Ipc A|highest-utilized|Stall|Registers Per|Dynamic Shared|Waves Per SM" "$out/ncu-tma.txt" | head -90
    ;;
profile-bf16)   # Nsight Compute on the GEMMs of bfloat16 arrays (nt and tn, tuned configs)
    ncu --kernel-name regex:gemm_wgmma --launch-skip 2 --launch-count 4 --section SpeedOfLight \
        --section ComputeWorkloadAnalysis --section WarpStateStats --section MemoryWorkloadAnalysis \
        --section LaunchStats --section Occupancy python benchmarks/issue18_profile.py --bfloat16 > "$out/ncu-bfloat16.txt" 2>&1
    grep -E "gemm_wgmma_bf16|Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Executed Ipc A|Stall|Achieved Occupancy|Registers Per|Dynamic Shared" "$out/ncu-bfloat16.txt" | head -60
    ;;
h200)   # another Hopper GPU's file after the template changes: the bfloat16 tests, the stale wgmma
        # records re-tuned (then h200-tune)
    python -m pytest -q -m gpu tests/test_gemm_gpu.py tests/test_cupy_backend_gpu.py \
        -k "bfloat16 or to_bf16 or cublas_baseline or bf16_gemms" > "$out/pytest.txt" 2>&1; tail -1 "$out/pytest.txt"
    for arithmetic in "--precision fp32" "--precision tf32" "--dtype bfloat16"; do
        python -m autogemm.cli tune --stale $arithmetic --trials 30 --timeout 12
    done > "$out/tune-stale.txt" 2>&1; grep -E "│ gemm|rror" "$out/tune-stale.txt" | tail -30
    cp tuned/nvidia-h200.json "$out/"
    ;;
h200-tune)   # the weight updates' tf32 records and the networks' bfloat16 ones tuned, the epochs
    { python -m autogemm.cli tune --precision tf32 --shapes 1000x784x800:tn,4096x784x8192:tn --trials 30 --timeout 20
      python -m autogemm.cli tune --dtype bfloat16 --trials 24 --timeout 15 \
          --shapes 800x1000x784:nt,1000x784x800:tn,8192x4096x784:nt,4096x784x8192:tn
    } > "$out/tune.txt" 2>&1; grep -E "│ gemm|rror" "$out/tune.txt"
    python -m nn.bench --networks cme213,large --backends cupy-tuned,cupy-tuned-tf32,cupy-tuned-bf16 \
        --json "$out/nn-bench.json" > "$out/nn-bench.txt" 2>&1; tail -3 "$out/nn-bench.txt"
    cp tuned/nvidia-h200.json "$out/"
    ;;
bf16-train)   # the trainer at bf16 on bfloat16 copies of its GEMM operands: its GPU tests, the epochs
              # against tf32 and PyTorch's BF16 graph, the default run's test accuracy in fp32 and bf16
    python -m pytest -q -m gpu tests/test_cupy_backend_gpu.py -k "bf16 or reduced_precisions" \
        > "$out/pytest-bf16-train.txt" 2>&1; tail -3 "$out/pytest-bf16-train.txt"
    python -m nn.bench --networks cme213,large --backends cupy-tuned-tf32,cupy-tuned-bf16,torch-graph-bf16 \
        --json "$out/nn-bench.json" > "$out/nn-bench.txt" 2>&1; tail -3 "$out/nn-bench.txt"
    for precision in fp32 bf16; do
        python -m nn.train --use-tuned --precision $precision --no-log --quiet | tail -1 | sed "s/^/$precision: /"
    done | tee "$out/accuracy.txt"
    ;;
epochs)   # after a template change: the stale records re-tuned in each precision, the tf32 records
          # of the networks' update GEMMs (tn), then the epochs in each precision against PyTorch's BF16
    for precision in fp32 tf32 bf16; do
        python -m autogemm.cli tune --stale --precision $precision --trials 30 --timeout 12
    done > "$out/tune-stale.txt" 2>&1; grep -E "│ gemm|rror" "$out/tune-stale.txt" | tail -30
    python -m autogemm.cli tune --precision tf32 --shapes 1000x784x800:tn,4096x784x8192:tn --trials 30 --timeout 20 \
        > "$out/tune-tf32-tn.txt" 2>&1; grep -E "│ gemm|rror" "$out/tune-tf32-tn.txt"
    python -m nn.bench --networks cme213,large --backends cupy-tuned,cupy-tuned-tf32,cupy-tuned-bf16,torch-graph-bf16 \
        --json "$out/nn-bench.json" > "$out/nn-bench.txt" 2>&1; tail -3 "$out/nn-bench.txt"
    cp tuned/nvidia-h100-80gb-hbm3.json "$out/"
    ;;
stale)   # every stale record re-tuned (after a template change) in the arithmetics given as the second
         # argument (default "fp32 tf32 bf16 bfloat16"; bfloat16: --dtype bfloat16)
    for arithmetic in ${2:-fp32 tf32 bf16 bfloat16}; do
        flag=$([ "$arithmetic" = bfloat16 ] && echo "--dtype bfloat16" || echo "--precision $arithmetic")
        python -m autogemm.cli tune --stale $flag --trials 30 --timeout 12
    done > "$out/tune-stale.txt" 2>&1; grep -E "│ gemm|rror" "$out/tune-stale.txt" | tail -30
    cp tuned/*.json "$out/"
    ;;
smoke)   # a few minutes: every op and bf16 once on hardware, cuBLAS at reduced precision, and the
         # defaults of the new paths timed against cuBLAS
    python -m pytest -q -m gpu tests/test_gemm_gpu.py -k "cublas_baseline or wgmma_bf16_products_every_epilogue[None] \
        or wgmma_default_every_epilogue[None]" > "$out/pytest-smoke.txt" 2>&1; tail -3 "$out/pytest-smoke.txt"
    python -m autogemm.cli bench --precision bf16 --reps 30 --shapes 4096x4096x4096:nt,8192x4096x784:nt,800x1000x784:nt \
        > "$out/bench-bf16.txt" 2>&1; grep -E "│|error" "$out/bench-bf16.txt" | tail -14
    python -m autogemm.cli bench --reps 30 --shapes 4096x784x8192:tn,1000x784x800:tn \
        > "$out/bench-tn.txt" 2>&1; grep -E "│|error" "$out/bench-tn.txt" | tail -10
    ;;
wgmma)
    python -m pytest -q -m gpu tests/test_gemm_gpu.py -k wgmma > "$out/pytest-wgmma.txt" 2>&1
    tail -3 "$out/pytest-wgmma.txt"
    python benchmarks/issue18_wgmma.py --sample 24 --json "$out/wgmma-bench.json" 2>&1 | tee "$out/wgmma-bench.txt"
    ;;
profile)   # the wgmma tests, Nsight Compute on its two reference kernels, then the stale records re-tuned
    python -m pytest -q -m gpu tests/test_gemm_gpu.py -k wgmma > "$out/pytest-wgmma.txt" 2>&1; tail -1 "$out/pytest-wgmma.txt"
    ncu --kernel-name regex:gemm_wgmma --launch-skip 2 --launch-count 4 --section SpeedOfLight \
        --section ComputeWorkloadAnalysis --section WarpStateStats --section MemoryWorkloadAnalysis \
        --section LaunchStats --section Occupancy python benchmarks/issue18_profile.py > "$out/ncu-wgmma.txt" 2>&1
    grep -E "gemm_wgmma_f32|Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Executed Ipc A|Stall|Achieved Occupancy|Registers Per|Shared Memory Configuration Size" "$out/ncu-wgmma.txt" | head -60
    python -m autogemm.cli tune --stale > "$out/tune-stale.txt" 2>&1; grep "│ gemm" "$out/tune-stale.txt"
    cp tuned/nvidia-h100-80gb-hbm3.json "$out/"
    ;;
tf32)   # precision tf32: its GPU tests and the trainer's, the stale wgmma records re-tuned, the tf32
        # records tuned for make tune's networks, then kernels and epochs against cuBLAS and PyTorch
        # in TF32, and the default run's test accuracy in fp32 and tf32
    python -m pytest -q -m gpu tests/test_gemm_gpu.py -k wgmma tests/test_cupy_backend_gpu.py > "$out/pytest.txt" 2>&1
    tail -1 "$out/pytest.txt"
    { python -m autogemm.cli tune --stale
      python -m autogemm.cli tune --shapes nn --ranks 1,4 --precision tf32
      python -m autogemm.cli tune --shapes nn --hidden 100 --ranks 1,4 --precision tf32
      python -m autogemm.cli tune --shapes nn --hidden 4096 --batch 8192 --timeout 25 --precision tf32
    } > "$out/tune.txt" 2>&1; grep "│ gemm" "$out/tune.txt"
    python -m autogemm.cli bench --precision tf32 --shapes 4096x4096x4096:nt,8192x4096x784:nt,800x1000x784:nt \
        > "$out/bench-tf32.txt" 2>&1; tail -22 "$out/bench-tf32.txt"
    python -m nn.bench --networks cme213,grading,large --backends cupy-tuned,cupy-tuned-tf32,torch-graph,torch-graph-tf32 \
        > "$out/nn-bench.txt" 2>&1; tail -5 "$out/nn-bench.txt"
    for precision in fp32 tf32; do
        python -m nn.train --use-tuned --precision $precision --no-log --quiet | tail -1 | sed "s/^/$precision: /"
    done | tee "$out/accuracy.txt"
    cp tuned/nvidia-h100-80gb-hbm3.json "$out/"
    ;;
inflight)   # after a template change: the wgmma GPU tests, every stale record re-tuned, the tf32
            # kernels against cuBLAS and the epochs in both precisions
    python -m pytest -q -m gpu tests/test_gemm_gpu.py -k wgmma > "$out/pytest.txt" 2>&1; tail -1 "$out/pytest.txt"
    python -m autogemm.cli tune --stale > "$out/tune-stale.txt" 2>&1
    python -m autogemm.cli tune --stale --precision tf32 >> "$out/tune-stale.txt" 2>&1; grep "│ gemm" "$out/tune-stale.txt"
    python -m autogemm.cli bench --precision tf32 --shapes 4096x4096x4096:nt,8192x4096x784:nt,800x1000x784:nt \
        > "$out/bench-tf32.txt" 2>&1; tail -22 "$out/bench-tf32.txt"
    python -m nn.bench --networks cme213,grading,large --backends cupy-tuned,cupy-tuned-tf32 > "$out/nn-bench.txt" 2>&1
    tail -4 "$out/nn-bench.txt"
    cp tuned/nvidia-h100-80gb-hbm3.json "$out/"
    ;;
gpu-file)   # another Hopper GPU's tuned file: the wgmma tests, gemm_wgmma tuned for make tune's networks
            # in both precisions, the epochs in both
    python -m pytest -q -m gpu tests/test_gemm_gpu.py -k wgmma > "$out/pytest.txt" 2>&1; tail -1 "$out/pytest.txt"
    for precision in fp32 tf32; do
        python -m autogemm.cli tune --shapes nn --ranks 1,4 --families gemm_wgmma --precision $precision
        python -m autogemm.cli tune --shapes nn --hidden 100 --ranks 1,4 --families gemm_wgmma --precision $precision
        python -m autogemm.cli tune --shapes nn --hidden 4096 --batch 8192 --timeout 25 --families gemm_wgmma \
            --precision $precision
    done > "$out/tune.txt" 2>&1; grep "│ gemm" "$out/tune.txt"
    python -m nn.bench --networks cme213,grading,large --backends cupy-tuned,cupy-tuned-tf32 > "$out/nn-bench.txt" 2>&1
    tail -4 "$out/nn-bench.txt"
    cp tuned/*.json "$out/"
    ;;
tune|retune)   # the GEMM suite, then gemm_wgmma tuned into the GPU's file for the networks' steps
               # (make tune's shapes), with the networks' epochs timed before and after (retune:
               # the tuning and the after only)
    if [ "$1" = tune ]; then
        python -m pytest -q -m gpu tests/test_gemm_gpu.py > "$out/pytest-gemm.txt" 2>&1; tail -1 "$out/pytest-gemm.txt"
        python -m nn.bench --networks cme213,grading,large --backends cupy-tuned > "$out/nn-bench-before.txt" 2>&1
        tail -6 "$out/nn-bench-before.txt"
    fi
    { python -m autogemm.cli tune --shapes nn --ranks 1,4 --families gemm_wgmma
      python -m autogemm.cli tune --shapes nn --hidden 100 --ranks 1,4 --families gemm_wgmma
      python -m autogemm.cli tune --shapes nn --hidden 4096 --batch 8192 --timeout 25 --families gemm_wgmma
    } > "$out/tune.txt" 2>&1; grep -E "gemm_wgmma [0-9]|autogemm tune:|error" "$out/tune.txt" | tail -30
    python -m nn.bench --networks cme213,grading,large --backends cupy-tuned > "$out/nn-bench-after.txt" 2>&1; tail -6 "$out/nn-bench-after.txt"
    python -m autogemm.cli bench --shapes 800x1000x784:nt,8192x4096x784:nt,4096x4096x4096:nt,200x1000x784:nt \
        > "$out/bench-after.txt" 2>&1; tail -30 "$out/bench-after.txt"
    cp tuned/*.json "$out/"
    ;;
esac
