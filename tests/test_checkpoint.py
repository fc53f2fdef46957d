"""nn.checkpoint and --checkpoint/--resume: resumed runs equal uninterrupted ones; bad files are one-line errors."""
import json
import os

import numpy as np
import pytest

from fake_idx import write_dataset
from nn import checkpoint
from nn.errors import NNError
from nn.train import main


@pytest.fixture(scope="module")
def fake_dir(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("data"), n_train=6_100, n_test=40)  # 100 train rows


def train(fake_dir, *args):
    """nn.train in this process on the fake data set (100 rows, batch 30: the last batch is partial)."""
    argv = ["--data-dir", str(fake_dir), "--dataset", "mnist", "--hidden", "16", "8", "--batch", "30",
            "--scale", "unit", "--lr", "0.5", "--quiet", *map(str, args)]
    return main(argv)


def history(epochs: int) -> list:
    """Per-epoch records as nn.train writes them."""
    return [{"epoch": e, "loss": 0.5, "val_accuracy": 0.9} for e in range(1, epochs + 1)]


def fail(capsys, fake_dir, *args) -> str:
    """The one line a failing run prints; it must exit with status 2."""
    assert train(fake_dir, *args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_resume_equals_uninterrupted_run(fake_dir, tmp_path, dtype):
    whole, part = tmp_path / "whole.npz", tmp_path / "part.npz"
    assert train(fake_dir, "--dtype", dtype, "--epochs", 3, "--checkpoint", whole,
                 "--log", tmp_path / "whole.json") == 0
    assert train(fake_dir, "--dtype", dtype, "--epochs", 1, "--checkpoint", part, "--no-log") == 0
    assert checkpoint.load(part).epoch == 1
    assert train(fake_dir, "--dtype", dtype, "--epochs", 3, "--checkpoint", part, "--resume",
                 "--log", tmp_path / "part.json") == 0
    a, b = checkpoint.load(whole), checkpoint.load(part)
    assert a.epoch == b.epoch == 3
    for (wa, ba), (wb, bb) in zip(a.params, b.params, strict=True):
        assert wa.dtype == np.dtype(dtype) and np.array_equal(wa, wb) and np.array_equal(ba, bb)
    logs = [json.loads((tmp_path / f"{name}.json").read_text()) for name in ("whole", "part")]
    assert [e["loss"] for e in logs[0]["epochs"]] == [e["loss"] for e in logs[1]["epochs"]]
    assert logs[1]["resumed_from_epoch"] == 1 and logs[0]["final"] == logs[1]["final"]


def test_fresh_run_never_overwrites_a_checkpoint(capsys, fake_dir, tmp_path):
    path = tmp_path / "ck.npz"
    path.write_bytes(b"someone's weights")
    assert "pass --resume" in fail(capsys, fake_dir, "--epochs", 1, "--checkpoint", path, "--no-log")
    assert path.read_bytes() == b"someone's weights"


@pytest.mark.parametrize("damage", ["garbage", "truncated", "no-meta"])
def test_corrupted_checkpoint_is_one_line_error(capsys, fake_dir, tmp_path, damage):
    path = tmp_path / "ck.npz"
    assert train(fake_dir, "--epochs", 1, "--checkpoint", path, "--no-log") == 0
    data = path.read_bytes()
    if damage == "garbage":
        path.write_bytes(os.urandom(len(data)))
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    else:
        np.savez(path, W0=np.zeros((16, 784)))
    err = fail(capsys, fake_dir, "--epochs", 2, "--checkpoint", path, "--resume", "--no-log")
    assert f"checkpoint {path} is corrupted" in err


def test_resume_with_other_settings_is_refused(capsys, fake_dir, tmp_path):
    path = tmp_path / "ck.npz"
    assert train(fake_dir, "--epochs", 1, "--checkpoint", path, "--no-log", "--dtype", "float64") == 0
    err = fail(capsys, fake_dir, "--epochs", 2, "--checkpoint", path, "--resume", "--no-log",
               "--hidden", "32", "--dtype", "float32")
    assert "sizes [784, 16, 8, 10] there, [784, 32, 10] here" in err and "dtype 'float64' there, 'float32' here" in err


def test_resume_needs_an_existing_checkpoint(capsys, fake_dir, tmp_path):
    assert "no checkpoint at" in fail(capsys, fake_dir, "--checkpoint", tmp_path / "none.npz", "--resume")
    assert "--resume needs --checkpoint" in fail(capsys, fake_dir, "--resume")


def test_save_load_round_trip(tmp_path):
    params = [(np.arange(6.0).reshape(2, 3), np.ones(2)), (np.ones((4, 2), np.float32), np.zeros(4, np.float32))]
    ckpt = checkpoint.Checkpoint(params, 5, {"hidden": [2]}, history(5))
    checkpoint.save(tmp_path / "ck.npz", ckpt)
    back = checkpoint.load(tmp_path / "ck.npz")
    assert (back.epoch, back.fingerprint, back.history) == (5, ckpt.fingerprint, ckpt.history)
    assert all(np.array_equal(x, y) and x.dtype == y.dtype for p, q in zip(params, back.params) for x, y in zip(p, q))
    checkpoint.save(tmp_path / "bad.npz", checkpoint.Checkpoint([params[0], (np.ones((4, 3)), np.ones(4))], 1,
                                                                {}, history(1)))
    with pytest.raises(NNError, match="layer 1 has W"):
        checkpoint.load(tmp_path / "bad.npz")


# ---------------------------------------------------------------- checkpoints that look right but are not

def edited(path, out, meta=None, digest="new", drop=(), **arrays):
    """A copy of checkpoint `path` at `out` with its meta block updated by `meta` (None: removed), arrays replaced
    and those named in `drop` removed; its digest made anew ("new", so that the checks behind it
    are reached), kept ("kept") or left out (None: a checkpoint from before digests)."""
    with np.load(path) as z:
        contents = {k: z[k] for k in z.files}
    kept = contents.pop("digest")
    stored = json.loads(str(contents["meta"]))
    stored.update(meta or {})
    stored = {k: v for k, v in stored.items() if v is not None}
    contents.update(meta=np.array(json.dumps(stored)), **arrays)
    for name in drop:
        del contents[name]
    if digest is not None:
        contents["digest"] = np.array(checkpoint.digest(contents)) if digest == "new" else kept
    np.savez(out, **contents)
    return out


@pytest.mark.parametrize("change, words", [
    (dict(W1=np.zeros((8, 17))), "layer 1 has W (8, 17)"),                       # settings match, shapes do not
    (dict(W0=np.zeros((16, 784), np.float64)), "W0 is float64, the run computes in float32"),
    (dict(b1=np.full(8, np.nan, np.float32)), "holds nan in b1 at index 0"),
    (dict(meta=dict(epoch=-1)), "epoch -1 with 1 epochs of history"),
    (dict(meta=dict(epoch=10**18)), "epoch 1000000000000000000 with 1 epochs of history"),
    (dict(meta=dict(layers=10**9)), "corrupted or not a checkpoint"),
    (dict(meta=dict(history=[{"epoch": 1}])), "its history of epoch 1 is not one nn.train writes"),
])
def test_a_checkpoint_that_does_not_fit_the_run_is_refused(capsys, fake_dir, tmp_path, change, words):
    good = tmp_path / "good.npz"
    assert train(fake_dir, "--epochs", 1, "--checkpoint", good, "--no-log") == 0
    bad = edited(good, tmp_path / "bad.npz", change.pop("meta", None), **change)
    err = fail(capsys, fake_dir, "--epochs", 2, "--checkpoint", bad, "--resume", "--no-log")
    assert words in err and str(bad) in err


@pytest.mark.parametrize("steps", [2**40, -1, 1.5])
def test_adam_steps_out_of_range_are_refused(capsys, fake_dir, tmp_path, steps):
    """Adam's steps are an int32 on the backend: 2**40 raised OverflowError in load_state."""
    cnn = ["--data-dir", str(fake_dir), "--dataset", "mnist", "--layers", "conv2x3,dense8", "--batch", "50",
           "--quiet", "--no-log", "--checkpoint", str(tmp_path / "good.npz")]
    assert main([*cnn, "--epochs", "1"]) == 0
    with np.load(tmp_path / "good.npz") as z:
        optimizer = json.loads(str(z["meta"]))["optimizer"]
    bad = edited(tmp_path / "good.npz", tmp_path / "bad.npz", dict(optimizer=dict(optimizer, steps=steps)))
    cnn[-1] = str(bad)
    assert main([*cnn, "--epochs", "2", "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: checkpoint {bad} is corrupted") and err.count("\n") == 1, err
    assert f"after {steps!r} steps" in err


def test_hostile_checkpoints_fail_fast(capsys, fake_dir, tmp_path):
    """A FIFO, a compressed member (which could inflate without bound), JSON nested too deeply."""
    os.mkfifo(tmp_path / "fifo.npz")
    assert "a FIFO, not a regular file" in fail(capsys, fake_dir, "--checkpoint", tmp_path / "fifo.npz", "--resume")
    good = tmp_path / "good.npz"
    assert train(fake_dir, "--epochs", 1, "--checkpoint", good, "--no-log") == 0
    with np.load(good) as z:
        np.savez_compressed(tmp_path / "zipped.npz", **{k: z[k] for k in z.files})
    assert "compressed members" in fail(capsys, fake_dir, "--checkpoint", tmp_path / "zipped.npz", "--resume")
    np.savez(tmp_path / "deep.npz", meta=np.array("[" * 100_000 + "]" * 100_000))
    assert "nested too deeply" in fail(capsys, fake_dir, "--checkpoint", tmp_path / "deep.npz", "--resume")


def test_a_diverging_run_stops_and_keeps_the_last_good_checkpoint(capsys, fake_dir, tmp_path, monkeypatch):
    from nn import mlp

    err = fail(capsys, fake_dir, "--epochs", 2, "--lr", "1e300", "--checkpoint", tmp_path / "nan.npz", "--no-log")
    assert "diverged in epoch 1 (loss nan" in err and "try a smaller --lr (now 1e+300) or --reg (now 0.0001)" in err
    assert not (tmp_path / "nan.npz").exists()
    calls = []
    monkeypatch.setattr(mlp.MLP, "finite", lambda self: calls.append(1) or len(calls) < 2)   # epoch 2 diverges
    path = tmp_path / "ck.npz"
    err = fail(capsys, fake_dir, "--epochs", 5, "--checkpoint", path, "--no-log")
    assert err.startswith("error: training diverged in epoch 2 (loss ") and "epochs 1..1 are in" in err
    assert checkpoint.load(path).epoch == 1


# ---------------------------------------------------------------- one consistent state (issue 38 #14)

def cnn_run(fake_dir, path, *args):
    """A small Adam CNN in this process, checkpointing to `path`."""
    return main(["--data-dir", str(fake_dir), "--dataset", "mnist", "--layers", "conv2x3,dense8", "--batch", "50",
                 "--quiet", "--no-log", "--checkpoint", str(path), *map(str, args)])


def refused(capsys, status, path) -> str:
    err = capsys.readouterr().err
    assert status == 2 and err.startswith(f"error: checkpoint {path} is corrupted or not one consistent state "
                                          "of nn.train") and err.count("\n") == 1, err
    return err


@pytest.fixture
def adam_pair(fake_dir, tmp_path):
    """Two Adam checkpoints of the same settings after 1 and 2 epochs."""
    one, two = tmp_path / "one.npz", tmp_path / "two.npz"
    assert cnn_run(fake_dir, one, "--epochs", 1) == 0
    assert cnn_run(fake_dir, two, "--epochs", 1) == 0 and cnn_run(fake_dir, two, "--epochs", 2, "--resume") == 0
    return one, two


def test_arrays_from_another_checkpoint_are_refused(capsys, fake_dir, tmp_path):
    """Weights from another seed (MLP) or another epoch (CNN: weights and Adam moments), one at a time."""
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    assert train(fake_dir, "--epochs", 1, "--checkpoint", a, "--no-log") == 0
    assert train(fake_dir, "--epochs", 1, "--checkpoint", b, "--no-log", "--seed", "7") == 0
    with np.load(b) as z:
        bad = edited(a, tmp_path / "bad.npz", digest="kept", W1=z["W1"])
    refused(capsys, train(fake_dir, "--epochs", 2, "--checkpoint", bad, "--resume", "--no-log"), bad)


@pytest.mark.parametrize("name", ["W0", "b1", "m0", "v3"])
def test_an_adam_checkpoint_mixed_from_two_epochs_is_refused(capsys, fake_dir, tmp_path, adam_pair, name):
    one, two = adam_pair
    with np.load(two) as z:
        bad = edited(one, tmp_path / "bad.npz", digest="kept", **{name: z[name]})
    refused(capsys, cnn_run(fake_dir, bad, "--epochs", 3, "--resume"), bad)


def test_adam_moments_m_and_v_swapped_are_refused(capsys, fake_dir, tmp_path, adam_pair):
    """Once reported as divergence, blaming --lr."""
    one, _ = adam_pair
    with np.load(one) as z:
        bad = edited(one, tmp_path / "bad.npz", digest="kept", **{f"{x}{i}": z[f"{y}{i}"]
                                                                  for i in range(4) for x, y in ("mv", "vm")})
    refused(capsys, cnn_run(fake_dir, bad, "--epochs", 2, "--resume"), bad)


@pytest.mark.parametrize("digest", ["kept", "new", None])
def test_an_adam_checkpoint_without_its_adam_state_is_refused(capsys, fake_dir, tmp_path, adam_pair, digest):
    """Kept: the digest does not match; made anew or absent (a file from before digests): the run
    trains with adam and the file holds no Adam state, which would restart from zero moments."""
    bad = edited(adam_pair[0], tmp_path / "bad.npz", dict(optimizer=None), digest,
                 drop=[f"{x}{i}" for i in range(4) for x in "mv"])
    err = refused(capsys, cnn_run(fake_dir, bad, "--epochs", 2, "--resume"), bad)
    assert ("do not match its digest" if digest == "kept" else "holds no Adam state") in err


@pytest.mark.parametrize("meta", [dict(epoch=2, history=history(2)), dict(history=[dict(history(1)[0], loss=0.25)]),
                                  dict(run="0123456789abcdef")])
def test_an_edited_meta_is_refused(capsys, fake_dir, tmp_path, meta):
    good = tmp_path / "good.npz"
    assert train(fake_dir, "--epochs", 1, "--checkpoint", good, "--no-log") == 0
    bad = edited(good, tmp_path / "bad.npz", meta, digest="kept")
    err = refused(capsys, train(fake_dir, "--epochs", 3, "--checkpoint", bad, "--resume", "--no-log"), bad)
    assert "do not match its digest" in err


def test_a_checkpoint_from_before_digests_is_resumed_and_gains_one(fake_dir, tmp_path):
    """Refusing it would strand an older run's work; its next save writes a digest."""
    good, old = tmp_path / "good.npz", tmp_path / "old.npz"
    assert train(fake_dir, "--epochs", 1, "--checkpoint", good, "--no-log") == 0
    edited(good, old, digest=None)
    assert checkpoint.load(old).epoch == 1
    assert train(fake_dir, "--epochs", 2, "--checkpoint", old, "--resume", "--no-log") == 0
    with np.load(old) as z:
        assert z.files[-1] == "digest"
    assert checkpoint.load(old).epoch == 2
