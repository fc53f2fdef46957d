"""nn.bench on the CPU: the NumPy backend's row, the table and JSON, and argument errors."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from nn.bench import (BACKEND_NAMES, NUMPY_CNN_IMAGES, TORCH_BACKENDS, Result, available_backends, cnn_networks, main,
                      networks, table, time_torch, torch_backend_name, torch_options)
from nn.layers import LENET
from nn.data import SYSTEM_DIRS
from nn.errors import NNError
from run_train import ROOT

needs_data = pytest.mark.skipif(not (SYSTEM_DIRS["fashion-mnist"] / "train-images-idx3-ubyte.gz").exists(),
                                reason="Debian's dataset-fashion-mnist is not installed")


def test_the_networks_of_the_issue():
    nets = networks()
    assert (nets["cme213"].hidden, nets["cme213"].batch, nets["cme213"].images) == (1000, 800, 54000)
    assert (nets["large"].hidden, nets["large"].batch) == (4096, 8192)
    grid = [n for n in nets.values() if n.activation == "relu"]
    assert sorted((n.hidden, n.batch) for n in grid) == sorted((h, b) for h in (32, 64, 128, 256) for b in (32, 64, 128))
    assert {n.images for n in grid} == {37800}


def test_the_cnn_networks_are_lenet_at_both_batches_of_the_issue():
    assert {(n.name, n.layers, n.batch, n.images) for n in cnn_networks().values()} == {
        ("lenet", LENET, 1000, 54000), ("lenet-b128", LENET, 128, 54000)}


def test_table_lines_up_backends_per_network():
    rows = [Result("a", "numpy", 1.5, 1, 0.5, 9), Result("a", "cupy-tuned", 0.25, 3, 0.5, 9),
            Result("b", "cupy-tuned", 2, 3, 0.5, 9)]
    lines = table(rows).splitlines()
    assert lines[0].split() == ["network", "numpy", "cupy-tuned"]
    assert lines[1].split() == ["a", "1.50", "0.25"] and lines[2].split() == ["b", "-", "2.00"]


def test_each_pytorch_row_is_named_as_its_options_ask():
    """The options run() reads from each torch-* name make that name again (the name time_torch
    reports for them)."""
    for name in TORCH_BACKENDS:
        assert torch_backend_name(**torch_options(name)) == name
    assert torch_options("torch-epoch-graph-autogemm-tf32") == dict(
        graph=True, precision="tf32", convert=True, compile=False, fused=False, whole_epoch=True)
    assert not torch_options("torch-eager")["graph"]


def test_available_backends_without_a_gpu_is_numpy():
    assert available_backends()[0] == "numpy" and set(available_backends()) <= set(BACKEND_NAMES)


@needs_data
def test_numpy_run_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    assert main(["--networks", "relu-h32-b128", "--backends", "numpy", "--epochs", "1", "--json", str(out)]) == 0
    (result,) = json.loads(out.read_text())["results"]
    assert result["backend"] == "numpy" and result["ms_per_epoch"] > 0 and result["accuracy"] > 0.5


@needs_data
def test_the_numpy_cnn_row_times_a_slice_and_scales_it_to_the_epoch(tmp_path):
    out = tmp_path / "bench.json"
    assert main(["--networks", "lenet", "--backends", "numpy", "--epochs", "1", "--json", str(out)]) == 0
    (result,) = json.loads(out.read_text())["results"]
    assert (result["network"], result["images"]) == ("lenet", NUMPY_CNN_IMAGES)
    assert result["ms_per_epoch"] > 0 and 0 < result["accuracy"] <= 1


@needs_data
def test_isolate_times_each_backend_in_a_process_of_its_own(tmp_path, monkeypatch):
    """--isolate: each row from a child nn.bench (this process's timers would fail), in order."""
    import nn.bench

    def here(*args, **kwargs):
        raise AssertionError("timed in the parent process")
    monkeypatch.setattr(nn.bench, "time_backend", here)
    out = tmp_path / "bench.json"
    assert main(["--networks", "relu-h32-b128", "--backends", "numpy,numpy", "--epochs", "1", "--isolate",
                 "--json", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    assert [(r["network"], r["backend"]) for r in results] == [("relu-h32-b128", "numpy")] * 2
    assert all(r["ms_per_epoch"] > 0 and r["accuracy"] > 0.5 for r in results)


def test_a_row_that_fails_in_its_own_process_is_one_line_naming_it():
    from nn.bench import time_in_own_process
    from nn.networks import Network

    with pytest.raises(NNError, match=r"^numpy on nope, timed in a process of its own: --networks: unknown 'nope'"):
        time_in_own_process(Network("nope", 32, 128, 1000), "numpy", 1)


def test_memory_that_cannot_be_had_is_one_line(capsys):
    """A network too large for the host (NumPy) or the GPU (CuPy): one line naming what to shrink."""
    from nn.errors import exit_status

    def too_large():
        raise MemoryError("Unable to allocate 191. GiB for an array with shape (1000, 65536, 28, 28)")
    assert exit_status(too_large) == 2
    assert capsys.readouterr().err == ("error: out of memory: Unable to allocate 191. GiB for an array with shape "
                                       "(1000, 65536, 28, 28); choose a smaller network or batch\n")


@needs_data
def test_any_cnn_of_a_layers_spec_alone_or_beside_named_networks(tmp_path):
    """--layers SPEC --batch N times the CNN nn.train --layers trains, named by its spec; alone
    unless --networks names others too."""
    out = tmp_path / "bench.json"
    assert main(["--layers", "conv2x3,pool2,dense8", "--batch", "500", "--backends", "numpy", "--epochs", "1",
                 "--json", str(out)]) == 0
    (result,) = json.loads(out.read_text())["results"]
    assert (result["network"], result["images"]) == ("conv2x3,pool2,dense8", NUMPY_CNN_IMAGES)
    assert main(["--networks", "relu-h32-b128", "--layers", "conv2x3,dense8", "--backends", "numpy", "--epochs", "1",
                 "--json", str(out)]) == 0
    assert [r["network"] for r in json.loads(out.read_text())["results"]] == ["relu-h32-b128", "conv2x3,dense8"]
    assert main(["--layers", "conv2x3,dense8", "--batch", "2500", "--backends", "numpy", "--epochs", "1",
                 "--json", str(out)]) == 0          # NumPy's slice holds a batch at least
    (result,) = json.loads(out.read_text())["results"]
    assert (result["batch"], result["images"]) == (2500, 2500)


@pytest.mark.parametrize("args,message", [
    (["--networks", "nope"], "--networks: unknown 'nope'"),
    (["--networks", "grading,"], "--networks: unknown ''"),
    (["--backends", "cupy-fast"], "--backends: unknown 'cupy-fast'"),
    (["--backends", ""], "--backends: unknown ''"),
    (["--epochs", "0"], "--epochs must be >= 1"),
    (["--epochs", "x"], "argument --epochs: invalid int value: 'x'"),
    (["--batch", "5"], "--batch is the --layers CNN's"),
    (["--layers", "conv2x30"], "--layers: layer 1 ('conv2x30'): a 30x30 filter does not fit"),
    (["--layers", "conv2x3,nope"], "--layers: layer 2 ('nope') is not convCxK"),
    (["--layers", "conv2x3", "--batch", "0"], "--batch 0: give 1 to 54000"),
    (["--json", ""], "--json: an empty path; give a file name"),
])
def test_bad_arguments_are_one_line(args, message):
    result = subprocess.run([sys.executable, "-m", "nn.bench", *args], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and message in line


def test_outputs_replace_only_earlier_outputs_and_are_claimed_before_the_work(tmp_path, monkeypatch):
    """--json onto a checkpoint or notes, --png onto anything but a PNG: refused before a network
    runs, the file untouched; an earlier JSON of nn.bench is replaced."""
    import nn.bench

    ran = []
    monkeypatch.setattr(nn.bench, "run", lambda *a: ran.append(a) or [Result("grading", "numpy", 1.0, 1, 0.5, 54000)])
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "old.json").write_text(json.dumps({"command": "python -m nn.bench --epochs 1", "results": []}))
    for flag, name in (("--json", "notes.txt"), ("--png", "notes.txt")):
        assert main(["--networks", "grading", "--backends", "numpy", flag, str(tmp_path / name)]) == 2
    assert (tmp_path / "notes.txt").read_text() == "mine" and not ran
    assert main(["--networks", "grading", "--backends", "numpy", "--json", str(tmp_path / "old.json")]) == 0
    assert json.loads((tmp_path / "old.json").read_text())["results"][0]["ms_per_epoch"] == 1.0


CHART_ON_A_FULL_DISK = """
import resource, signal, sys, warnings
import nn.bench
from nn.bench import Result
warnings.simplefilter("error")                      # the chart's UserWarning (an empty legend) fails
nn.bench.run = lambda *a: [Result("grading", "numpy", 1.0, 1, 0.5, 54000)]
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)       # a write past the limit fails with EFBIG, like a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]),) * 2)
sys.exit(nn.bench.main(["--networks", "grading", "--backends", "numpy", "--png", sys.argv[1]]))
"""


def test_a_chart_that_cannot_be_written_leaves_the_earlier_one(tmp_path):
    """Issue 38 #1: --png wrote in place, so a failed write (disk full) truncated the earlier chart;
    and every run warned that the legend had nothing in it."""
    pytest.importorskip("matplotlib")
    chart = tmp_path / "chart.png"
    earlier = b"\x89PNG\r\n\x1a\n" + bytes(4000)  # an earlier chart: claimed by its signature
    chart.write_bytes(earlier)
    run = [sys.executable, "-c", CHART_ON_A_FULL_DISK, str(chart)]
    full = subprocess.run([*run, "2000"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert full.returncode == 2 and full.stderr.startswith(f"error: --png {chart}: cannot be written"), full.stderr
    assert full.stderr.count("\n") == 1 and chart.read_bytes() == earlier
    assert [p.name for p in tmp_path.iterdir()] == ["chart.png"]               # no temporary file left
    ok = subprocess.run([*run, str(1 << 30)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and not ok.stderr and chart.read_bytes() != earlier, ok.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
@pytest.mark.usefixtures("default_handlers")
def test_a_stop_signal_is_one_line_naming_it_and_leaves_the_earlier_json(tmp_path, monkeypatch, capsys, sig):
    """SIGTERM and SIGHUP ended nn.bench with 143/129 and no line."""
    import nn.bench

    earlier = json.dumps({"command": "python -m nn.bench --epochs 1", "results": []})
    (tmp_path / "old.json").write_text(earlier)
    monkeypatch.setattr(nn.bench, "run", lambda *a: os.kill(os.getpid(), sig) or time.sleep(5))
    status = main(["--networks", "grading", "--backends", "numpy", "--json", str(tmp_path / "old.json")])
    words = "interrupted" if sig == signal.SIGINT else f"interrupted by {signal.Signals(sig).name}"
    assert (status, capsys.readouterr().err) == (128 + sig, words + "\n")
    assert (tmp_path / "old.json").read_text() == earlier


@pytest.fixture
def torch_on_a_gpu():
    """PyTorch, where it has a CUDA device; else the test skips."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs PyTorch with CUDA")
    return torch


@pytest.mark.gpu
def test_pytorchs_graphed_cnn_row_warms_every_batch_size_before_capture(torch_on_a_gpu):
    """lenet-b128 on 300 images: batches of 128 and a last one of 44. cuDNN's algorithm search
    cannot run inside a CUDA graph capture, so each size is warmed first (the last one once crashed
    the row: FIND was unable to find an engine)."""
    rng = np.random.default_rng(0)
    x = rng.random((300, 784), dtype=np.float32)
    y = rng.integers(0, 10, 300)
    result = time_torch(cnn_networks()["lenet-b128"], x, y, epochs=1, graph=True)
    assert result.backend == "torch-graph" and result.ms_per_epoch > 0 and result.images == 300
    result = time_torch(cnn_networks()["lenet-b128"], x, y, epochs=1, graph=True, whole_epoch=True)
    assert result.backend == "torch-epoch-graph" and result.ms_per_epoch > 0


@pytest.mark.gpu
@pytest.mark.parametrize("convert", [False, True])
def test_the_epoch_as_one_graph_trains_as_a_graph_a_step_does(torch_on_a_gpu, convert):
    """The same initial weights and batches (800, 800, 400 rows) trained for four epochs with a graph
    a step and with the epoch one graph end at the same weights, so the same training accuracy: the
    epoch's graph sets the gradients to None before each step rather than adding to them."""
    rng = np.random.default_rng(1)
    x = rng.random((2000, 784), dtype=np.float32)
    y = rng.integers(0, 10, 2000)
    runs = [time_torch(networks()["cme213"], x, y, epochs=3, graph=True, convert=convert, whole_epoch=whole, seed=0)
            for whole in (False, True)]
    assert runs[0].accuracy == runs[1].accuracy and runs[1].backend.startswith("torch-epoch-graph")
