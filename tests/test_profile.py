"""nn.profile: the operations of one step, each timed alone, on the NumPy backend (the same code
times them in a CUDA graph on a GPU)."""
import json

import numpy as np
import pytest

from nn import profile


def test_the_step_of_the_grading_network_is_its_six_operations(tmp_path, capsys):
    out = tmp_path / "profile.json"
    assert profile.main(["--network", "grading", "--backend", "numpy", "--reps", "2", "--replays", "2",
                         "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [t["operation"] for t in doc["operations"]] == [
        "gemm 800x100x784:nt bias_sigmoid",          # Z1 and A1
        "linear_xent 800x10x100 sigmoid",            # Z2, the loss, G2 and G1 in one
        "gemm 10x100x800:tn in place",               # the W2 update (side branch)
        "column_sums 800x100", "column_sums 800x10",  # the bias updates (side branch)
        "gemm 100x784x800:tn in place"]              # the W1 update
    assert all(0 < t["p10_us"] <= t["median_us"] <= t["p90_us"] for t in doc["operations"] + [doc["step"]])
    printed = capsys.readouterr().out
    assert "whole step" in printed and "67.5 steps an epoch" in printed


def test_any_cnn_of_a_layers_spec_at_its_batch(tmp_path, capsys):
    """--layers SPEC --batch N: the step of the CNN nn.train --layers would train, its forward,
    backward and Adam operations, named by its spec in the JSON."""
    out = tmp_path / "profile.json"
    assert profile.main(["--layers", "conv4x3, pool2,dense16", "--batch", "50", "--backend", "numpy", "--reps", "1",
                         "--replays", "1", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert (doc["network"], doc["batch"]) == ("conv4x3,pool2,dense16", 50)
    operations = [t["operation"] for t in doc["operations"]]
    assert operations[0].startswith("conv2d 50x1x28x28 by 4x1x3x3") and operations[-1] == "adam_update 11042"
    assert "maxpool2x2_backward 50x4x13x13" in operations
    assert "CNN (conv4x3,pool2,dense16, batch 50) on numpy" in capsys.readouterr().out


def test_composed_operations_count_once():
    """The NumPy backend's linear_xent calls its own gemm and softmax_xent: one operation recorded."""
    from nn.bench import make_backend
    from nn.mlp import MLP, Step, init_params

    backend = make_backend("numpy")
    model = MLP(backend, (6, 5, 4, 3), "relu", init_params((6, 5, 4, 3)))
    step = Step(model, 7, 7, 0.1, 0.0)
    x, labels = backend.asarray(np.ones((7, 6))), backend.asarray([0, 1, 2, 0, 1, 2, 0])
    names = [what.split()[0] for what, _ in profile.record_step(step, x, labels)]
    assert names == ["gemm", "gemm", "linear_xent", "gemm", "gemm", "gemm", "column_sums", "column_sums",
                     "column_sums", "gemm"]
    assert "gemm" not in vars(backend)          # the recording is undone


def test_a_large_output_layer_input_gets_a_backward_pass_of_its_own(monkeypatch):
    """Past OUTPUT_BACKWARD_APART_BYTES the output layer goes back in linear_backward, which steps W2
    and b1 in place: the W2 update's GEMM and b1's column sums are gone from the step."""
    from nn import mlp
    from nn.bench import make_backend

    monkeypatch.setattr(mlp, "OUTPUT_BACKWARD_APART_BYTES", 7 * 5 * 4 - 1)     # 7 rows of 5 inputs, float32
    backend = make_backend("numpy")
    model = mlp.MLP(backend, (6, 5, 3), "relu", mlp.init_params((6, 5, 3)))
    step = mlp.Step(model, 7, 7, 0.1, 0.0)
    x, labels = backend.asarray(np.ones((7, 6))), backend.asarray([0, 1, 2, 0, 1, 2, 0])
    assert [what for what, _ in profile.record_step(step, x, labels)] == [
        "gemm 7x5x6:nt bias_relu", "linear_xent 7x3x5", "linear_backward 7x3x5 relu in place", "column_sums 7x3",
        "gemm 5x6x7:tn in place"]


def test_bad_arguments_are_one_line_errors(capsys):
    assert profile.main(["--network", "huge", "--backend", "numpy"]) == 2
    assert capsys.readouterr().err.startswith("error: --network: unknown huge")
    assert profile.main(["--backend", "torch-graph"]) == 2
    assert profile.main(["--reps", "0", "--backend", "numpy"]) == 2
    capsys.readouterr()
    for args, message in ((["--network", "lenet", "--layers", "conv2x3"], "--network and --layers both name"),
                          (["--batch", "3"], "--batch is the --layers CNN's"),
                          (["--layers", "conv2x30"], "--layers: layer 1 ('conv2x30'): a 30x30 filter does not fit"),
                          (["--layers", "conv2x3", "--batch", "60000"], "--batch 60000: give 1 to 54000"),
                          (["--layers", "conv2x3", "--parallel", "model", "--ranks", "2"], "--parallel model splits")):
        assert profile.main([*args, "--backend", "numpy"]) == 2
        assert capsys.readouterr().err.startswith(f"error: {message}")


def test_json_never_replaces_a_file_of_another_kind(tmp_path, capsys):
    (tmp_path / "ck.npz").write_bytes(b"weights")
    assert profile.main(["--network", "grading", "--backend", "numpy", "--json", str(tmp_path / "ck.npz")]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --json {tmp_path / 'ck.npz'}: cannot be written: exists and is not an earlier output of this command\n"
    assert (tmp_path / "ck.npz").read_bytes() == b"weights"


def test_a_gemm_reading_a_column_major_copy_is_named_by_the_op_it_launches():
    """At tf32 the GPU backend's W1 update reads X's rows from its column-major copy: G1^T X is
    launched as tt (G1 row-major) and named so; without the copy, or for a GEMM reading X K-major,
    the op stays the one the step asks for."""
    import autogemm

    x = np.empty((1000, 784), np.float32)                       # X: (rows, inputs), its column-major copy beside it
    copies = [(x, autogemm.empty_column_major(x.shape, x.dtype, np))]
    g, w = np.empty((800, 100), np.float32), np.empty((100, 784), np.float32)     # G1: (rows, H), W1: (H, inputs)
    update = (g, x[200:1000], w)
    assert profile.describe("gemm", update, {"trans_a": True, "c": w}, copies) == "gemm 100x784x800:tt in place"
    assert profile.describe("gemm", update, {"trans_a": True, "c": w}) == "gemm 100x784x800:tn in place"
    assert profile.describe("gemm", (x[:800], w), {"trans_b": True}, copies) == "gemm 800x100x784:nt"


def test_rank_zero_of_each_split(tmp_path):
    """--ranks: rank 0's step of the split, its all-reduce left out: a quarter of the rows whose
    gradients are formed then applied (data), or a quarter of the hidden units on every row (model)."""
    out = tmp_path / "profile.json"
    common = ["--network", "grading", "--backend", "numpy", "--reps", "1", "--replays", "1", "--ranks", "4"]
    assert profile.main([*common, "--json", str(out)]) == 0
    data = [t["operation"] for t in json.loads(out.read_text())["operations"]]
    assert data[:2] == ["gemm 200x100x784:nt bias_sigmoid", "linear_xent 200x10x100 sigmoid"]
    assert "gemm 100x784x200:tn" in data and "sgd_update 100x784" in data
    out.unlink()
    assert profile.main([*common, "--parallel", "model", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert (doc["ranks"], doc["parallel"]) == (4, "model")
    model = [t["operation"] for t in doc["operations"]]
    assert model[:3] == ["gemm 800x25x784:nt bias_sigmoid", "gemm 800x10x25:nt bias", "softmax_xent 800x10"]
    assert "gemm 25x784x800:tn in place" in model


def test_a_split_that_cannot_be_made_is_one_line(capsys):
    assert profile.main(["--network", "grading", "--backend", "numpy", "--ranks", "200", "--parallel", "model"]) == 2
    assert profile.main(["--network", "lenet", "--backend", "numpy", "--ranks", "2", "--parallel", "model"]) == 2
    assert profile.main(["--network", "grading", "--backend", "numpy", "--ranks", "0"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("error: ") for line in lines)


def test_one_rank_of_a_model_split_is_the_whole_step(tmp_path):
    """--parallel model on one rank (the default --ranks) splits nothing, as in nn.train: the one-rank
    step, not a traceback from a sharded step with no all-reduce."""
    out = tmp_path / "profile.json"
    assert profile.main(["--network", "grading", "--backend", "numpy", "--reps", "1", "--replays", "1",
                         "--parallel", "model", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert (doc["ranks"], doc["parallel"]) == (1, "data")
    assert doc["operations"][0]["operation"] == "gemm 800x100x784:nt bias_sigmoid"


@pytest.mark.parametrize("flag", ["--ranks", "--reps", "--replays"])
@pytest.mark.parametrize("value", ["\u0663", "1_0", "-2"])
def test_counts_are_ascii_integers_above_zero(capsys, flag, value):
    """int() would take '٣' (an Arabic-Indic 3) and '1_0' (10): nn.train's counts refuse them."""
    assert profile.main(["--network", "grading", "--backend", "numpy", flag, value]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: argument {flag}: ") and err.count("\n") == 1, err
