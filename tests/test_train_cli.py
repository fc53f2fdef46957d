"""`python -m nn.train` as a user runs it: settings, output, the run log, and one-line errors."""
import json

import pytest

from fake_idx import write_dataset
from nn.train import DEFAULTS, build_parser, resolve
from run_train import run_train


@pytest.fixture(scope="module")
def fake_dir(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("data"), n_train=6_100, n_test=40)  # 100 train rows


def config(*argv):
    return resolve(build_parser().parse_args(list(argv)))


def test_defaults_presets_and_explicit_flags():
    assert config().hidden == DEFAULTS["hidden"] and config().lr == DEFAULTS["lr"]
    c = config("--preset", "cme213", "--lr", "0.5")
    assert (c.hidden, c.reg, c.lr, c.epochs, c.batch, c.scale, c.dtype) == ((1000,), 1e-4, 0.5, 20, 800, "raw", "float64")
    for mode, lr, epochs in ((1, 0.001, 40), (2, 0.01, 10), (3, 0.025, 1)):
        c = config("--grading-mode", str(mode))
        assert (c.hidden, c.batch, c.reg, c.lr, c.epochs) == ((100,), 800, 1e-4, lr, epochs)
    assert config("--grading-mode", "2", "--hidden", "30", "20").hidden == (30, 20)


def test_use_tuned_falls_back_to_numpy_without_a_device(tmp_path, fake_dir):
    from nn.backends import cuda_available

    if cuda_available():
        pytest.skip("a CUDA device is present")
    result = run_train(tmp_path, "--use-tuned", "--data-dir", fake_dir, "--dataset", "mnist", "--hidden", "8",
                       "--epochs", "1", "--no-log", "--quiet")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].startswith("--use-tuned: no CUDA device")


def test_output_and_run_log(tmp_path, fake_dir):
    result = run_train(tmp_path, "--data-dir", fake_dir, "--dataset", "mnist", "--hidden", "8", "--epochs", "2",
                       "--batch", "30", "--log", "logs/run.json")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("784-8-10 sigmoid, float32, numpy backend, 1 rank; mnist 100/6000/40")
    assert lines[1].startswith("epoch   1/2  loss ") and "fwd" in lines[1] and "comm" in lines[1]
    assert lines[-1].startswith("test accuracy ") and lines[-1].endswith("log logs/run.json")
    log = json.loads((tmp_path / "logs" / "run.json").read_text())
    assert log["config"]["hidden"] == [8] and log["sizes"] == [784, 8, 10]
    assert [e["epoch"] for e in log["epochs"]] == [1, 2]
    assert set(log["epochs"][0]["ms"]) == {"forward", "backward", "comm", "update", "train", "eval"}
    assert set(log["final"]) == {"val_accuracy", "test_accuracy"}
    assert log["environment"]["ranks"] == 1 and log["environment"]["backend"] == "numpy"


def test_default_log_goes_to_runs(tmp_path, fake_dir):
    result = run_train(tmp_path, "--data-dir", fake_dir, "--dataset", "mnist", "--hidden", "8", "--epochs", "1",
                       "--quiet")
    assert result.returncode == 0, result.stderr
    [log] = (tmp_path / "runs").glob("train-*.json")
    assert result.stdout.startswith("test accuracy ") and result.stdout.endswith(f"/40); log runs/{log.name}\n")
    assert result.stdout.count("\n") == 1  # --quiet: the result line alone


@pytest.mark.parametrize("args,words", [
    (["--batch", "0"], "--batch: 0 must be > 0"),
    (["--hidden", "-5"], "--hidden: -5 must be > 0"),
    (["--hidden", "100", "0"], "--hidden: 0 must be > 0"),
    (["--lr", "-1"], "--lr: -1 must be > 0"),
    (["--lr", "nan"], "--lr: nan must be > 0"),
    (["--epochs", "x"], "'x' is not an integer"),
    (["--dataset", "nope"], "invalid choice: 'nope'"),
    (["--train-size", "100000"], "train_size must be an integer in 1..54000"),
    (["--dataset", "mnist", "--data-dir", "/nonexistent"], "/nonexistent lacks"),
    (["--dataset", "mnist"], "mnist is not on this machine"),
    (["--preset", "cme213", "--grading-mode", "1"], "not allowed with argument"),
    (["--log", "a.json", "--no-log"], "contradict"),
])
def test_bad_input_is_one_line_error(tmp_path, args, words):
    result = run_train(tmp_path, *args)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert words in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists()


def test_an_autogemm_error_is_one_line(monkeypatch, capsys):
    """A corrupted tuned/ file surfaces as autogemm's StoreError: one line, exit 2, as for bad flags."""
    from autogemm.errors import StoreError
    from nn import train

    def broken(*args, **kwargs):
        raise StoreError("tuned/x.json: record 3 (gemm 800x1000x784:nt float32): unknown key 'evil'")

    monkeypatch.setattr(train, "run", broken)
    assert train.main(["--no-log"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "error: tuned/x.json: record 3 (gemm 800x1000x784:nt float32): unknown key 'evil'"
