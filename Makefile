# autogemm: `make train` (virtual environment, install, data, train) and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
FASHION = /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz

.PHONY: train test test-gpu bench tune tune-cnn gpu-check scaling data install clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed  ## virtual environment with autogemm, nn and the test tools

data: install  ## the default data set: Debian's Fashion-MNIST where apt works, else a verified download
	@if [ ! -f $(FASHION) ] && command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	  (apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist) >/dev/null 2>&1 || true; fi
	$(PY) -m nn.data --dataset fashion-mnist

train: data  ## train the default MLP (784-1000-10) on Fashion-MNIST
	$(PY) -m nn.train $(ARGS)

test: data  ## the CPU test suite on two pytest-xdist workers (GPU tests skip without a device)
	$(PY) -m pytest -q -n 2

test-gpu:  ## on a GPU machine: the gpu-marked tests
	$(PYTHON) -m pytest -q -m gpu

bench:  ## on a GPU machine: the MLP's GEMMs and 4096^3 against cuBLAS
	$(PYTHON) -m autogemm.cli bench --shapes nn,4096x4096x4096

tune:  ## on a GPU: tune the kernels of the default, grading and large networks' steps (one rank and 4) into tuned/<gpu>.json, then any stale record left
	$(PYTHON) -m autogemm.cli tune --shapes nn --ranks 1,4
	$(PYTHON) -m autogemm.cli tune --shapes nn --hidden 100 --ranks 1,4
	$(PYTHON) -m autogemm.cli tune --shapes nn --hidden 4096 --batch 8192 --timeout 25
	$(PYTHON) -m autogemm.cli tune --stale

# Issue 41's public CNN stacks: TensorFlow's MNIST network, two 3 x 3 stacks, LeNet-5
CNN_STACKS ?= conv32x5,pool2,conv64x5,pool2,dense1024 conv16x3,conv16x3,pool2,conv32x3,conv32x3,pool2,dense256 \
  conv64x3,pool2,conv128x3,pool2,dense256 conv6x5,pool2,conv16x5,pool2,dense120,dense84
CONV_FAMILIES = conv2d,conv2d_dgrad,conv2d_wgrad,conv2d_direct,conv2d_dgrad_direct,conv2d_wgrad_direct
tune-cnn:  ## on a GPU: tune every convolution of the CNN_STACKS' steps, fp32 and tf32 (bf16 calls run the tf32 records' tiles on BF16 MMAs)
	for stack in $(CNN_STACKS); do for precision in fp32 tf32; do \
	  $(PYTHON) -m autogemm.cli tune --layers $$stack --families $(CONV_FAMILIES) --precision $$precision \
	    --trials 24 --timeout 8 || exit 1; done; done

OUT ?= gpu-check
gpu-check:  ## on a GPU machine, one visit: gpu tests, GEMMs vs cuBLAS, the step's operations, epochs vs PyTorch; logs in $(OUT)/
	mkdir -p $(OUT)
	$(PYTHON) -m pytest -q -m gpu -p no:cacheprovider > $(OUT)/pytest-gpu.log 2>&1; tail -3 $(OUT)/pytest-gpu.log
	$(PYTHON) -m autogemm.cli bench --shapes nn,4096x4096x4096 --json $(OUT)/gemm-bench.json > $(OUT)/gemm-bench.log 2>&1
	$(PYTHON) -m nn.profile --json $(OUT)/profile-cme213.json > $(OUT)/profile-cme213.log; cat $(OUT)/profile-cme213.log
	$(PYTHON) -m nn.bench --networks cme213,grading,large --backends cupy-default,cupy-tuned,torch-graph \
	  --json $(OUT)/train-bench.json | tail -4
	$(PYTHON) -c "import json; [print(f\"{r['shape']:>22} {r['variant']:>8} {r['median_us']:9.1f} us\") \
	  for r in json.load(open('$(OUT)/gemm-bench.json'))['results'] if r['median_us']]"

scaling:  ## on a 4-GPU machine: cme213, large and lenet on 1, 2, 4 GPUs, nn.train's auto split and all-reduce (SCALING_ARGS="--allreduce mpi,nccl", "--weak", ...; lenet refuses --parallel model); summaries and logs in $(OUT)/
	-$(PYTHON) -m nn.scaling --network cme213 --out $(OUT) $(SCALING_ARGS)
	-$(PYTHON) -m nn.scaling --network large --out $(OUT) $(SCALING_ARGS)
	-$(PYTHON) -m nn.scaling --network lenet --out $(OUT) $(SCALING_ARGS)

clean:
	rm -rf $(VENV) runs .pytest_cache
