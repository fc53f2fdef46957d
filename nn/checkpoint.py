"""Checkpoints: all weights, the last finished epoch and the settings that produced them, written atomically.

A checkpoint is one .npz (arrays W0, b0, W1, ...; `meta`, a JSON string) readable without pickle.
"""
import io
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nn.errors import NNError

FORMAT = 1


@dataclass
class Checkpoint:
    params: list  # [(W_l (n_out, n_in), b_l (n_out,)), ...] host arrays
    epoch: int  # epochs finished
    fingerprint: dict  # the settings that determine the weights (see nn.train)
    history: list = field(default_factory=list)  # per-epoch records of the run so far


def write_atomic(path, data: bytes):
    """Write `data` to a temp file beside `path`, fsync, rename over it: readers see old or new, never half."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save(path, ckpt: Checkpoint):
    meta = {"format": FORMAT, "epoch": ckpt.epoch, "layers": len(ckpt.params),
            "fingerprint": ckpt.fingerprint, "history": ckpt.history}
    arrays = {}
    for l, (w, b) in enumerate(ckpt.params):
        arrays[f"W{l}"], arrays[f"b{l}"] = w, b
    buf = io.BytesIO()
    np.savez(buf, meta=np.array(json.dumps(meta)), **arrays)
    try:
        write_atomic(path, buf.getvalue())
    except OSError as e:
        raise NNError(f"cannot write checkpoint {path}: {e.strerror or e}") from None


def load(path) -> Checkpoint:
    """Read and check a checkpoint; anything unreadable or inconsistent is an NNError naming the file."""
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            if meta.get("format") != FORMAT:
                raise NNError(f"checkpoint {path} has format {meta.get('format')!r}, this trainer reads {FORMAT}")
            params = [(z[f"W{l}"], z[f"b{l}"]) for l in range(int(meta["layers"]))]
            ckpt = Checkpoint(params, int(meta["epoch"]), dict(meta["fingerprint"]), list(meta["history"]))
    except FileNotFoundError:
        raise NNError(f"no checkpoint at {path}") from None
    except NNError:
        raise
    except Exception as e:  # zip, npy, JSON and key errors all mean the same: not a readable checkpoint
        raise NNError(f"checkpoint {path} is corrupted or not a checkpoint of nn.train ({type(e).__name__}: {e})") from None
    for l, (w, b) in enumerate(ckpt.params):
        if w.ndim != 2 or b.shape != w.shape[:1] or (l and w.shape[1] != ckpt.params[l - 1][0].shape[0]):
            raise NNError(f"checkpoint {path} is corrupted: layer {l} has W {w.shape} and b {b.shape}")
    return ckpt


def check_compatible(ckpt: Checkpoint, fingerprint: dict, path):
    """Raise an NNError naming every setting in which this run differs from the checkpoint's run."""
    fingerprint = json.loads(json.dumps(fingerprint))  # tuples -> lists, as stored
    diffs = [f"{k} {ckpt.fingerprint.get(k)!r} there, {fingerprint.get(k)!r} here"
             for k in sorted(set(ckpt.fingerprint) | set(fingerprint)) if ckpt.fingerprint.get(k) != fingerprint.get(k)]
    if diffs:
        raise NNError(f"checkpoint {path} was written by a different configuration ({'; '.join(diffs)}); "
                      "resume with the same settings, or choose another --checkpoint path")
