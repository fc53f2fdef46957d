#!/usr/bin/env bash
# Issue 15 on a GPU: the CNN's gpu tests, then LeNet's epoch time on the cupy backend (one CUDA graph
# an epoch) at batch 1000 and 128. Run from the repository root:
#   source .device/env.sh && bash benchmarks/issue15-visit.sh tests [PYTEST -k EXPRESSION] | time [tuned] |
#       accuracy | profile [BACKEND] | tune [BATCHES] | stale | bench | nnbench | float64 |
#       torch-accuracy
set -uo pipefail
out=${OUT:-/tmp/issue15}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
data=${AUTOGEMM_DATA_DIR:-.device/data}/fashion-mnist
case "${1:-tests}" in
tests)
    python -m pytest -q -m gpu -p no:cacheprovider tests/test_cnn_gpu.py tests/test_conv_gpu.py ${2:+-k "$2"} 2>&1 |
        tee "$out/gpu-tests.log" | tail -25
    ;;
time)      # ${2:-untuned}: a tag; with "tuned", the trainer looks up the tuned file
    flag=$([ "${2:-}" = tuned ] && echo --use-tuned || echo "--backend cupy")
    for batch in 1000 128; do
        python -m nn.train --model lenet $flag --batch "$batch" --epochs 4 --data-dir "$data" \
            --log "$out/lenet-b$batch-${2:-untuned}.json" 2>&1 | tee "$out/lenet-b$batch-${2:-untuned}.txt" |
            grep -v "^\s*$" | tail -3
    done
    ;;
accuracy)  # the default 20 epochs in float32: the tuned GPU run, then the NumPy trainer's
    python -m nn.train --model lenet --use-tuned --data-dir "$data" --log "$out/lenet-20-epochs-cupy.json" 2>&1 |
        tail -2
    timeout ${NUMPY_LIMIT:-540} python -m nn.train --model lenet --backend numpy --data-dir "$data" \
        --log "$out/lenet-20-epochs-numpy.json" 2>&1 | tail -2
    ;;
profile)   # ${2:-cupy-default} or cupy-tuned: each operation of one LeNet step at batch 1000
    python -m nn.profile --network lenet --backend "${2:-cupy-default}" --json "$out/profile-${2:-cupy-default}.json" |
        tee "$out/profile-${2:-cupy-default}.txt"
    ;;
tune)      # LeNet's step at batch ${2:-1000 128}, the families $FAMILIES (default: the CNN's own), into tuned/
    t0=$(date +%s)
    cnn=conv2d,conv2d_dgrad,conv2d_wgrad,conv2d_direct,conv2d_dgrad_direct,conv2d_wgrad_direct,pool2x2,adam
    for batch in ${2:-1000 128}; do
        python -m autogemm.cli tune --model lenet --batch "$batch" --families ${FAMILIES:-$cnn} \
            --trials ${TRIALS:-40} --timeout ${TIMEOUT:-15} >> "$out/tune-lenet.log" 2>&1
        echo "tune lenet batch $batch rc=$? $(( $(date +%s) - t0 )) s"
    done
    cp tuned/*.json "$out/"
    ;;
bench)     # LeNet's GEMMs against cuBLAS and convolutions against cuDNN, L2 flushed and warm
    for l2 in flush warm; do
        python -m autogemm.cli bench --shapes lenet --l2 $l2 --json "$out/bench-lenet-b1000-l2-$l2.json" \
            > "$out/bench-lenet-b1000-l2-$l2.txt" 2>&1
        echo "bench l2 $l2 rc=$?"
    done
    grep -A40 "convolutions" "$out/bench-lenet-b1000-l2-warm.txt"
    ;;
nnbench)   # nn.bench's LeNet rows: numpy (a slice), cupy-default, cupy-tuned, torch eager, torch graph
    python -m nn.bench --networks lenet,lenet-b128 --data-dir "$data" --json "$out/nn-bench-lenet.json" \
        --png "$out/nn-bench-lenet.png" 2>&1 | tee "$out/nn-bench-lenet.txt" | tail -4
    ;;
float64)   # LeNet in float64 for 2 epochs on all 54,000 images: the GPU against the NumPy trainer
    for backend in numpy cupy; do
        python -m nn.train --model lenet --dtype float64 --epochs 2 --backend $backend --data-dir "$data" --quiet \
            --checkpoint "$out/lenet-float64-$backend.npz" --log "$out/lenet-float64-$backend.json" | tail -1
    done
    python -c "import sys; sys.path.insert(0, 'tests'); from run_train import max_rel_diff, weights
print('max-norm relative difference, GPU vs NumPy, every parameter and Adam moment:',
      max_rel_diff(weights('$out/lenet-float64-cupy.npz'), weights('$out/lenet-float64-numpy.npz')))" |
        tee "$out/lenet-float64-difference.txt"
    ;;
torch-accuracy)  # PyTorch on the default recipe (20 epochs, batch 1000, Adam, He-normal init, batches
                 # in order as nn.train takes them): test accuracy, beside the trainer's
    python - "$data" <<'PY' | tee "$out/lenet-20-epochs-torch.txt"
import sys, numpy as np, torch
from nn.bench import ConvNetwork, torch_cnn
from nn.backends.numpy_cnn import ADAM
from nn.data import load_dataset
from nn.layers import LENET
torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
torch.manual_seed(0)
ds = load_dataset("fashion-mnist", data_dir=sys.argv[1], scale="unit", dtype=np.float32)
dev = torch.device("cuda")
model = torch_cnn(ConvNetwork("lenet", LENET, 1000), torch).to(dev)
for m in model.modules():
    if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)):
        torch.nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
        torch.nn.init.zeros_(m.bias)
opt = torch.optim.Adam(model.parameters(), lr=ADAM["lr"], betas=(ADAM["beta1"], ADAM["beta2"]), eps=ADAM["eps"])
x, y = torch.from_numpy(ds.train.x).to(dev), torch.from_numpy(ds.train.y.astype(np.int64)).to(dev)
for epoch in range(20):
    for s in range(0, len(y), 1000):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[s:s + 1000]), y[s:s + 1000]).backward()
        opt.step()
with torch.no_grad():
    guess = model(torch.from_numpy(ds.test.x).to(dev)).argmax(1).cpu().numpy()
print(f"PyTorch {torch.__version__}, LeNet, 20 epochs, batch 1000, Adam: test accuracy "
      f"{100 * np.mean(guess == ds.test.y):.2f}%")
PY
    ;;
stale)     # re-tune this GPU's stale records (their templates changed since)
    python -m autogemm.cli tune --stale --trials ${TRIALS:-40} --timeout ${TIMEOUT:-15} > "$out/tune-stale.log" 2>&1
    echo "tune --stale rc=$?"; tail -4 "$out/tune-stale.log"
    cp tuned/*.json "$out/"
    ;;
esac
