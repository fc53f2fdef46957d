"""`python -m nn.train` as a user runs it: settings, output, the run log, and one-line errors."""
import json
import os
import re
import shlex
import signal
import subprocess
import sys

import numpy as np
import pytest

from fake_idx import write_dataset
from nn import checkpoint
from nn.errors import NNError
from nn.train import DEFAULTS, build_parser, resolve
from run_train import MPIRUN, env, run_train


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


def test_help_is_in_groups_and_says_each_models_default():
    """`--help` was 99 lines under one heading, its defaults the MLP's alone (a CNN runs lr 0.001, reg 0)."""
    text = build_parser().format_help()
    groups = re.findall(r"^(\S[^:\n]*):\n", text, re.M)
    assert groups == ["options", "model", "data", "optimisation", "GPU", "distributed", "outputs"]
    sections = dict(zip(groups, re.split(r"^\S[^:\n]*:\n", text, flags=re.M)[1:]))
    for group, flags in {"model": ("--model", "--layers", "--hidden", "--activation", "--init", "--preset"),
                         "data": ("--dataset", "--data-dir", "--scale", "--train-size"),
                         "optimisation": ("--optimizer", "--batch", "--epochs", "--lr", "--reg", "--dtype"),
                         "GPU": ("--backend", "--use-tuned", "--precision", "--no-graph"),
                         "distributed": ("--parallel", "--allreduce", "--no-overlap"),
                         "outputs": ("--checkpoint", "--resume", "--log", "--no-log", "--quiet")}.items():
        assert all(f"  {flag} " in sections[group] for flag in flags), (group, sections[group])
    flat = " ".join(text.split())
    assert "Train an MLP (784-1000-10 by default: --hidden) or a CNN" in flat
    mlp, cnn = config(), config("--model", "lenet")
    entries = [" ".join(entry.split()) for entry in re.split(r"\n  (?=-)", text)]       # one flag and its help each
    both = {entry.split()[0][2:]: m[1] for entry in entries
            if (m := re.search(r"\(default: (\S+ for an MLP, \S+ for a CNN)\)", entry))}
    assert set(both) == {"activation", "init", "optimizer", "batch", "epochs", "lr", "reg"}
    for flag, said in both.items():              # what --help says is what each model runs with
        assert said == f"{getattr(mlp, flag)} for an MLP, {getattr(cnn, flag)} for a CNN", flag
    assert "(default: 1.0 for an MLP, 0.001 for a CNN)" in flat and "(default: 800 for an MLP, 1000 for a CNN)" in flat


def test_use_tuned_falls_back_to_numpy_without_a_device(tmp_path, fake_dir):
    from nn.backends import cuda_available

    if cuda_available():
        pytest.skip("a CUDA device is present")
    result = run_train(tmp_path, "--use-tuned", "--data-dir", fake_dir, "--dataset", "mnist", "--hidden", "8",
                       "--epochs", "1", "--no-log", "--quiet")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].startswith("--use-tuned: no CUDA device")
    result = run_train(tmp_path, "--use-tuned", "--precision", "bf16", "--data-dir", fake_dir, "--dataset", "mnist",
                       "--hidden", "8", "--epochs", "1", "--no-log")
    assert result.returncode == 0, result.stderr
    assert "(--precision bf16 ignored: the NumPy backend is float32)" in result.stdout.splitlines()[1]
    result = run_train(tmp_path, "--use-tuned", "--backend", "cupy", "--data-dir", fake_dir, "--dataset", "mnist",
                       "--hidden", "8", "--epochs", "1", "--no-log")     # a GPU backend named: no fallback
    assert result.returncode == 2 and result.stderr.startswith("error: the cupy backend needs CuPy and a CUDA device")


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
    assert log["environment"]["precision"] == "fp32"                  # what ran, whatever --precision asked


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
    (["--lr", "nan"], "--lr: 'nan' is not a finite number"),
    (["--lr", "1e400"], "--lr: '1e400' is not a finite number"),      # inf: not 'must be > 0'
    (["--reg=-1e400"], "--reg: '-1e400' is not a finite number"),
    (["--epochs", "x"], "'x' is not an integer"),
    (["--dataset", "nope"], "invalid choice: 'nope'"),
    (["--train-size", "100000"], "train_size must be an integer in 1..54000"),
    (["--dataset", "mnist", "--data-dir", "/nonexistent"], "/nonexistent lacks"),
    (["--dataset", "mnist"], "mnist is not on this machine"),
    (["--preset", "cme213", "--grading-mode", "1"], "not allowed with argument"),
    (["--log", "a.json", "--no-log"], "contradict"),
    (["--hidden", *["4"] * 1100], "--hidden: 1100 hidden layers; at most 1023"),
    (["--hidden", "٣"], "--hidden: '٣' is not an integer"),
    (["--checkpoint", "", "--epochs", "1"], "--checkpoint '': an empty path"),     # trained without one
    (["--log", ""], "--log '': an empty path"),                           # wrote the default log
    (["--data-dir", " "], "--data-dir ' ': an empty path"),
    (["--batch", "9" * 5000], "--batch: 999999999999... (5000 digits) is too large"),   # not 'not an integer'
    (["--preset", "cme213", "--precision", "tf32"], "this run is float64 (--preset cme213 sets it: add --dtype float32"),
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


# ---------------------------------------------------------------- nothing the user has is lost

def fake_run(fake_dir, *args):
    return ["--data-dir", fake_dir, "--dataset", "mnist", "--hidden", "8", "--quiet", *map(str, args)]


def test_log_and_checkpoint_on_one_path_is_refused_before_anything_is_written(tmp_path, fake_dir):
    """The seen data loss: the run log replaced the checkpoint, and --resume found it 'corrupted'."""
    result = run_train(tmp_path, *fake_run(fake_dir, "--epochs", 2, "--checkpoint", "c.npz", "--log", "./c.npz"))
    assert result.returncode == 2 and "are the same file" in result.stderr and result.stderr.count("\n") == 1
    assert not (tmp_path / "c.npz").exists()


def test_a_run_log_never_replaces_another_file_nor_another_runs_log(tmp_path, fake_dir):
    (tmp_path / "notes.txt").write_text("my notes")
    result = run_train(tmp_path, *fake_run(fake_dir, "--epochs", 1, "--log", "notes.txt"))
    assert result.returncode == 2 and "exists and is not a run log of nn.train" in result.stderr
    assert (tmp_path / "notes.txt").read_text() == "my notes"
    assert run_train(tmp_path, *fake_run(fake_dir, "--epochs", 1, "--checkpoint", "c.npz",
                                         "--log", "run.json")).returncode == 0
    before = (tmp_path / "run.json").read_bytes()
    again = run_train(tmp_path, *fake_run(fake_dir, "--epochs", 1, "--log", "run.json"))
    assert again.returncode == 2 and "pass --resume to continue its run" in again.stderr
    assert (tmp_path / "run.json").read_bytes() == before
    resumed = run_train(tmp_path, *fake_run(fake_dir, "--epochs", 2, "--checkpoint", "c.npz", "--resume",
                                            "--log", "run.json"))
    assert resumed.returncode == 0, resumed.stderr
    assert [e["epoch"] for e in json.loads((tmp_path / "run.json").read_text())["epochs"]] == [1, 2]


def test_a_resumed_run_continues_its_own_log_alone(tmp_path, fake_dir):
    """Issue 38: run B, resumed with --log of run A (same settings), replaced A's finished log."""
    assert run_train(tmp_path, *fake_run(fake_dir, "--epochs", 3, "--log", "runA.json")).returncode == 0
    finished = (tmp_path / "runA.json").read_bytes()
    assert run_train(tmp_path, *fake_run(fake_dir, "--epochs", 1, "--no-log", "--checkpoint", "B.npz")).returncode == 0
    b = run_train(tmp_path, *fake_run(fake_dir, "--epochs", 2, "--checkpoint", "B.npz", "--resume", "--log", "runA.json"))
    assert b.returncode == 2 and b.stderr.count("\n") == 1, b.stderr
    assert b.stderr.startswith("error: --log runA.json is the log of another run than the one in --checkpoint B.npz")
    assert (tmp_path / "runA.json").read_bytes() == finished
    run_id = json.loads(finished)["run"]
    assert re.fullmatch(r"[0-9a-f]{16}", run_id) and checkpoint.load(tmp_path / "B.npz").run != run_id


def test_unwritable_outputs_are_found_before_the_first_epoch(tmp_path, fake_dir):
    """An unwritable --log used to surface after epoch 1, with the checkpoint already written, so
    that the corrected command was refused."""
    (tmp_path / "file").write_text("x")
    result = run_train(tmp_path, *fake_run(fake_dir, "--epochs", 1, "--checkpoint", "c.npz", "--log", "file/run.json"))
    assert result.returncode == 2 and "--log file/run.json: cannot be written: file is not a folder" in result.stderr
    assert not (tmp_path / "c.npz").exists()
    os.mkfifo(tmp_path / "fifo")
    result = run_train(tmp_path, *fake_run(fake_dir, "--epochs", 1, "--checkpoint", "c.npz", "--log", "fifo"))
    assert result.returncode == 2 and "--log fifo: cannot be written: exists and cannot be read back (a FIFO" in result.stderr


def test_a_network_too_large_for_memory_is_one_line(tmp_path, fake_dir):
    result = run_train(tmp_path, *fake_run(fake_dir, "--hidden", 100_000_000_000))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "the network 784-100000000000-10 in float32 with batch 800 needs about" in result.stderr
    assert "PB of host memory" in result.stderr and "choose a smaller --hidden or --batch" in result.stderr


@pytest.mark.parametrize("spec, words", [
    ("conv65536x3", "the network conv65536x3 in float32 with batch 1000 needs about 365.1 GB of host memory"),
    ("dense65536,dense65536", "the network dense65536,dense65536 in float32 with batch 1000 needs about 105.4 GB"),
])
def test_a_cnn_too_large_for_memory_is_refused_before_its_weights_exist(monkeypatch, capsys, fake_dir, spec, words):
    """The check ran after init_cnn_params: 3.5 GB and 14 s of weights for conv65536x3's dense layer, a
    32 GiB allocation for dense65536,dense65536 (then a message naming --hidden)."""
    from nn import cnn, train, trainer

    def allocate(*args):
        raise AssertionError("weights allocated before the memory check")

    monkeypatch.setattr(cnn, "init_cnn_params", allocate)
    monkeypatch.setattr(trainer, "host_free_bytes", lambda: 16 << 30)
    assert train.main(["--data-dir", fake_dir, "--dataset", "mnist", "--layers", spec, "--no-log"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {words}") and err.count("\n") == 1, err
    assert err.endswith("is free; choose a smaller --layers or --batch\n"), err


def test_a_cnn_out_of_memory_names_its_flags(monkeypatch, capsys, fake_dir):
    from nn import cnn, train

    def allocate(*args):
        raise MemoryError("Unable to allocate 32.0 GiB")

    monkeypatch.setattr(cnn, "init_cnn_params", allocate)
    assert train.main(["--data-dir", fake_dir, "--dataset", "mnist", "--layers", "dense8", "--no-log"]) == 2
    assert capsys.readouterr().err == ("error: out of memory: Unable to allocate 32.0 GiB; "
                                       "choose a smaller --layers or --batch\n")


def test_a_launcher_variable_that_is_not_a_count_is_ignored(tmp_path, fake_dir):
    result = subprocess.run([sys.executable, "-m", "nn.train", *fake_run(fake_dir, "--epochs", 1, "--no-log")],
                            cwd=tmp_path, env={**env(tmp_path), "MPI_LOCALNRANKS": "abc"}, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_any_non_negative_seed_is_a_seed():
    assert config("--seed", "99999999999999999999999").seed == 99999999999999999999999


@pytest.mark.usefixtures("default_handlers")
def test_ctrl_c_is_one_line_exit_130_and_the_resume_it_names_works(tmp_path, fake_dir):
    """SIGINT as a terminal sends it, mid-run: the finished epochs are in the checkpoint, and the
    command the message gives continues to the weights of an uninterrupted run."""
    args = fake_run(fake_dir, "--epochs", 4000, "--batch", 10, "--checkpoint", "ck.npz", "--no-log")
    args.remove("--quiet")
    proc = subprocess.Popen([sys.executable, "-m", "nn.train", *args], cwd=tmp_path, env=env(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    while not proc.stdout.readline().startswith("epoch   2/"):
        pass
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and err.count("\n") == 1 and "Traceback" not in err, err
    done = checkpoint.load(tmp_path / "ck.npz").epoch
    assert re.fullmatch(rf"interrupted (in epoch {done + 1}|after epoch {done}); epochs 1\.\.{done} are in ck\.npz; "
                        r"resume with: python -m nn\.train .* --resume\n", err), err
    command = shlex.split(err.split("resume with: ")[1])
    command[command.index("4000")] = str(done + 1)         # one more epoch, not 4000
    resumed = subprocess.run([sys.executable, *command[1:]], cwd=tmp_path, env=env(tmp_path), capture_output=True,
                             text=True, timeout=60)
    assert resumed.returncode == 0 and checkpoint.load(tmp_path / "ck.npz").epoch == done + 1, resumed.stderr


def test_a_path_with_a_newline_stays_on_one_line(tmp_path, fake_dir):
    """The interrupt message named --checkpoint as it was: a newline in it made three lines. Its
    resume command, pasted into bash, names the same file."""
    from nn.outputs import ResumeHint

    path = "ck\npt\t'1'.npz"
    hint = ResumeHint(path, ["--checkpoint", path, "--epochs", "3"], 2, 1)
    said = hint.say()
    assert "\n" not in said and said.startswith(f"epochs 1..1 are in {path!r}; resume with: mpirun")
    echo = subprocess.run(["bash", "-c", "printf %s " + said.split("--checkpoint ")[1].split(" --epochs")[0]],
                          capture_output=True, text=True)
    assert echo.stdout == path
    (tmp_path / "a\nb.json").write_text("my notes")            # a one-line error names it escaped too
    result = run_train(tmp_path, *fake_run(fake_dir, "--epochs", 1, "--log", "a\nb.json"))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: --log 'a\\nb.json' exists and is not a run log")


# ---------------------------------------------------------------- the CNN (issue 15: NumPy backend)

def test_cnn_settings_and_what_does_not_apply():
    c = config("--model", "lenet")
    assert (c.model, c.layers, c.activation, c.optimizer, c.batch, c.epochs, c.lr, c.init) == (
        "cnn", "conv6x3,pool2,conv10x3,pool2,dense128,dense100,dense80", "relu", "adam", 1000, 20, 1e-3, "he")
    c = config("--layers", "conv4x5,pool2,dense32", "--optimizer", "sgd", "--lr", "0.1")
    assert (c.model, c.layers, c.optimizer, c.lr) == ("cnn", "conv4x5,pool2,dense32", "sgd", 0.1)
    assert config().model == "mlp" and config().optimizer == "sgd"
    assert config().precision == "fp32" and config("--precision", "tf32").precision == "tf32"
    assert config("--precision", "bf16").precision == "bf16"


@pytest.mark.parametrize("args, words", [
    (["--model", "lenet", "--layers", "dense8"], "--model lenet and --layers both name the layers"),
    (["--model", "mlp", "--layers", "dense8"], "--layers builds a CNN; it cannot be combined with --model mlp"),
    (["--model", "lenet", "--hidden", "10"], "--hidden is for the MLP"),
    (["--model", "lenet", "--preset", "cme213", "--init", "cme213"], "--preset, --init cme213 are for the MLP"),
    (["--optimizer", "adam"], "--optimizer adam is for CNNs"),
    (["--model", "lenet", "--parallel", "model"], "--parallel model splits the MLP's hidden layer"),
    (["--no-overlap"], "--no-overlap is for --parallel data on a GPU backend"),
    (["--precision", "tf32", "--dtype", "float64"], "--precision tf32 rounds float32 GEMM and convolution operands; "
                                                    "this run is float64"),
    (["--model", "lenet", "--precision", "tf32", "--dtype", "float64"], "--precision tf32 rounds float32 GEMM and "
                                                                        "convolution operands; this run is float64"),
    (["--precision", "bf16", "--dtype", "float64"], "--precision bf16 rounds float32 GEMM and convolution operands; "
                                                    "this run is float64"),
    (["--no-overlap", "--allreduce", "nccl", "--parallel", "model"], "--no-overlap is for --parallel data"),
    (["--layers", ""], "--layers '': empty layer"),                  # not LeNet
    (["--layers", "dense" + "9" * 5000], "every size must be in 1..65536"),
])
def test_cnn_flags_that_cannot_apply_are_one_line(args, words):
    with pytest.raises(NNError, match=re.escape(words)):
        config(*args)


def test_a_layers_spec_that_does_not_fit_is_one_line(tmp_path, fake_dir):
    r = run_train(tmp_path, "--data-dir", fake_dir, "--dataset", "mnist", "--quiet",
                  "--layers", "conv4x3,pool2,pool2,pool2,pool2,pool2", "--checkpoint", tmp_path / "c.npz")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, r.stderr
    assert "--layers: layer 6 ('pool2'): its 1x1 input is smaller than the 2x2 window" in r.stderr
    assert not (tmp_path / "c.npz").exists()


def test_a_spec_resumes_whatever_its_spacing(tmp_path, fake_dir):
    common = ["--data-dir", fake_dir, "--dataset", "mnist", "--batch", "50", "--quiet", "--checkpoint", "c.npz"]
    first = run_train(tmp_path, *common, "--layers", " conv2x3 , dense8 ", "--epochs", "1", "--log", "run.json")
    assert first.returncode == 0, first.stderr
    assert json.loads((tmp_path / "run.json").read_text())["config"]["layers"] == "conv2x3,dense8"
    second = run_train(tmp_path, *common, "--layers", "conv2x3,dense8", "--epochs", "2", "--resume", "--log", "run.json")
    assert second.returncode == 0, second.stderr
    assert checkpoint.load(tmp_path / "c.npz").epoch == 2


def test_a_network_the_model_split_does_not_split_is_one_line(tmp_path, fake_dir):
    r = run_train(tmp_path, "--data-dir", fake_dir, "--dataset", "mnist", "--quiet", "--hidden", "8", "4",
                  "--parallel", "model", "--checkpoint", tmp_path / "c.npz")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, r.stderr
    assert "--parallel model splits one hidden layer; this network has 2 (use --parallel data)" in r.stderr
    assert not (tmp_path / "c.npz").exists()


def test_lenet_trains_and_resumes_bit_for_bit(tmp_path, fake_dir):
    """Two epochs in one run equal one epoch, then --resume for the second: weights and Adam's state."""
    common = ["--data-dir", fake_dir, "--dataset", "mnist", "--model", "lenet", "--dtype", "float64",
              "--batch", "40", "--no-log", "--quiet"]
    straight = run_train(tmp_path, *common, "--epochs", "2", "--checkpoint", tmp_path / "straight.npz")
    assert straight.returncode == 0, straight.stderr
    assert re.search(r"test accuracy [0-9.]+%", straight.stdout)
    first = run_train(tmp_path, *common, "--epochs", "1", "--checkpoint", tmp_path / "split.npz")
    second = run_train(tmp_path, *common, "--epochs", "2", "--checkpoint", tmp_path / "split.npz", "--resume")
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    with np.load(tmp_path / "straight.npz") as a, np.load(tmp_path / "split.npz") as b:
        assert sorted(a.files) == sorted(b.files) and {"m0", "v0", "W4"} <= set(a.files)
        for name in a.files:
            if name not in ("meta", "digest"):   # meta: another run id; digest: over it
                assert np.array_equal(a[name], b[name]), name


@pytest.mark.skipif(MPIRUN is None, reason="no mpirun (pip install mpich)")
@pytest.mark.parametrize("model", [["--hidden", "8"], ["--layers", "conv2x3,pool2,dense4"]])
@pytest.mark.parametrize("parallel", ["data", "none"])
def test_more_ranks_than_test_images(tmp_path, model, parallel):
    """Each rank counts its share of the test set right; a rank whose share is no image counts none
    (it raised range()'s ValueError on 3 of 4 ranks)."""
    data = write_dataset(tmp_path / "data", n_train=6_010, n_test=1)
    r = run_train(tmp_path, "--data-dir", data, "--dataset", "mnist", "--epochs", "1", "--no-log", "--quiet",
                  *model, "--parallel", parallel, ranks=4, timeout=120)
    assert r.returncode == 0 and not r.stderr, r.stderr
    assert re.fullmatch(r"test accuracy [0-9.]+% \([01]/1\)\n", r.stdout), r.stdout


# choose_split on 2 ranks of a GPU backend (faked: its name alone is read) whose tuned file rank 0 alone reads
SPLIT_ON_RANK_0_FAILS = """
from types import SimpleNamespace
import autogemm
from nn import train, trainer
from nn.dist import maybe_init_dist

dist = maybe_init_dist()
def unreadable(gpu):
    raise autogemm.AutogemmError("tuned/h100.json: not JSON")
autogemm.has_records = unreadable if dist.rank == 0 else None     # the other ranks never read it
args = train.build_parser().parse_args(["--use-tuned"])
backend = SimpleNamespace(name="cupy", device_name="NVIDIA H100 80GB HBM3")
try:
    trainer.agreed(dist, lambda: trainer.choose_split(train.run_config(args), dist, backend, (784, 1000, 10), "nccl"))
except train.RanksFailed as e:
    open(f"rank{dist.rank}.txt", "w").write(str(e))      # a file each: the ranks' prints may interleave
"""


@pytest.mark.skipif(MPIRUN is None, reason="no mpirun (pip install mpich)")
def test_a_cost_model_that_fails_on_rank_0_ends_every_rank(tmp_path):
    """--parallel auto predicts on rank 0 and broadcasts: a tuned file rank 0 cannot read is every
    rank's one error (the other ranks waited in the broadcast for ever)."""
    r = subprocess.run([MPIRUN, "-n", "2", sys.executable, "-c", SPLIT_ON_RANK_0_FAILS], cwd=tmp_path,
                       env=env(tmp_path), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for rank in (0, 1):
        assert (tmp_path / f"rank{rank}.txt").read_text() == "rank 0 of 2: tuned/h100.json: not JSON"
