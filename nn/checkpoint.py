"""Checkpoints: all weights, the last finished epoch and the settings that produced them, written atomically.

A checkpoint is one uncompressed .npz (arrays W0, b0, W1, ...; `meta`, a JSON string) read without
pickle. Reading checks everything before the weights are used: the file is a regular file, no
member is compressed (so nothing inflates past the file's own size), the settings match the run's,
and every array has the run's shape and dtype and finite values.
"""
import errno
import io
import json
import math
import zipfile
from dataclasses import dataclass, field

import numpy as np

from autogemm import files
from nn.errors import NNError

FORMAT = 1
MAX_LAYERS = 1024
MAX_META_BYTES = 64 << 20


@dataclass
class Checkpoint:
    params: list  # [(W_l (n_out, n_in), b_l (n_out,)), ...] host arrays
    epoch: int  # epochs finished
    fingerprint: dict  # the settings that determine the weights (see nn.train)
    history: list = field(default_factory=list)  # per-epoch records of the run so far, one per epoch


def save(path, ckpt: Checkpoint, replace: bool = True):
    """Write `ckpt` to `path` atomically; without `replace`, only if no file is there."""
    meta = {"format": FORMAT, "epoch": ckpt.epoch, "layers": len(ckpt.params),
            "fingerprint": ckpt.fingerprint, "history": ckpt.history}
    arrays = {}
    for l, (w, b) in enumerate(ckpt.params):
        arrays[f"W{l}"], arrays[f"b{l}"] = w, b
    buf = io.BytesIO()
    np.savez(buf, meta=np.array(json.dumps(meta)), **arrays)
    try:
        files.write_atomic(path, buf.getvalue(), replace)
    except files.FileError as e:
        raise NNError(f"cannot write checkpoint {path}: {e}") from None


def load(path, fingerprint: dict | None = None, dtype=None) -> Checkpoint:
    """Read and check a checkpoint: with `fingerprint`, one written by the same settings (its
    "sizes" give every array's shape), with `dtype`, of that dtype. Anything unreadable,
    inconsistent or different is an NNError naming the file."""
    try:
        with files.open_regular(path) as f:
            with zipfile.ZipFile(f) as z:
                meta = _meta(z, path)
                ckpt = Checkpoint([], meta["epoch"], meta["fingerprint"], meta["history"])
                if fingerprint is not None:
                    _check_compatible(ckpt, fingerprint, path)
                ckpt.params = [(_array(z, f"W{l}"), _array(z, f"b{l}")) for l in range(meta["layers"])]
    except files.FileError as e:
        raise NNError(f"no checkpoint at {path}" if e.errno == errno.ENOENT
                      else f"cannot read checkpoint {path}: {e}") from None
    except NNError:
        raise
    except Exception as e:  # zip, npy, JSON and key errors all mean the same: not a readable checkpoint
        raise NNError(f"checkpoint {path} is corrupted or not a checkpoint of nn.train ({type(e).__name__}: {e})") from None
    _check_params(ckpt.params, path, fingerprint["sizes"] if fingerprint is not None else None, dtype)
    return ckpt


def _meta(z: zipfile.ZipFile, path) -> dict:
    """The checked `meta` block; every member must be stored uncompressed, as np.savez stores it.
    ValueError for what only a damaged or foreign file holds, NNError for what a user may meet
    (another format, a history that does not add up)."""
    if any(info.compress_type != zipfile.ZIP_STORED for info in z.infolist()):
        raise ValueError("compressed members, which np.savez never writes")
    if z.getinfo("meta.npy").file_size > MAX_META_BYTES:
        raise ValueError(f"a meta block over {MAX_META_BYTES >> 20} MiB")
    meta = files.parse_json(str(_array(z, "meta")))
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise NNError(f"checkpoint {path} has format {found!r}, this trainer reads {FORMAT}")
    epoch, layers, history = meta["epoch"], meta["layers"], meta["history"]
    if type(layers) is not int or not 1 <= layers <= MAX_LAYERS or not isinstance(meta["fingerprint"], dict):
        raise ValueError(f"layers {layers!r} or a fingerprint of the wrong type")
    if type(epoch) is not int or epoch < 0 or not isinstance(history, list) or len(history) != epoch:
        raise NNError(f"checkpoint {path} is corrupted: epoch {epoch!r} with "
                      f"{len(history) if isinstance(history, list) else 'no'} epochs of history")
    for i, record in enumerate(history, start=1):
        if not (isinstance(record, dict) and record.get("epoch") == i
                and all(type(record.get(k)) in (int, float) and math.isfinite(record[k]) for k in ("loss", "val_accuracy"))):
            raise NNError(f"checkpoint {path} is corrupted: its history of epoch {i} is not one nn.train writes")
    return meta


def _array(z: zipfile.ZipFile, name: str) -> np.ndarray:
    with z.open(f"{name}.npy") as member:
        return np.lib.format.read_array(member, allow_pickle=False)


def _check_params(params, path, sizes=None, dtype=None):
    """NNError unless every layer's W (n_out, n_in) and b (n_out,) chain, match `sizes` and
    `dtype` where given, and hold finite numbers."""
    dtype = np.dtype(dtype) if dtype is not None else None
    if sizes is not None and len(params) != len(sizes) - 1:
        raise NNError(f"checkpoint {path} holds {len(params)} layers, the run has {len(sizes) - 1}")
    for l, (w, b) in enumerate(params):
        if w.ndim != 2 or b.shape != w.shape[:1] or (l and w.shape[1] != params[l - 1][0].shape[0]):
            raise NNError(f"checkpoint {path} is corrupted: layer {l} has W {w.shape} and b {b.shape}")
        if sizes is not None and w.shape != (sizes[l + 1], sizes[l]):
            raise NNError(f"checkpoint {path} is corrupted: layer {l} has W {w.shape}, the run's sizes "
                          f"{'-'.join(map(str, sizes))} need {(sizes[l + 1], sizes[l])}")
        for name, x in ((f"W{l}", w), (f"b{l}", b)):
            if x.dtype.kind != "f" or (dtype is not None and x.dtype != dtype):
                raise NNError(f"checkpoint {path} is corrupted: {name} is {x.dtype}, the run computes in "
                              f"{dtype or 'floating point'}")
            if not np.isfinite(x).all():
                bad = np.flatnonzero(~np.isfinite(x))[0]
                raise NNError(f"checkpoint {path} holds {x.flat[bad]} in {name} at index {bad}: "
                              "resume from a checkpoint of a run that had not diverged")


def _check_compatible(ckpt: Checkpoint, fingerprint: dict, path):
    """Raise an NNError naming every setting in which this run differs from the checkpoint's run."""
    fingerprint = json.loads(json.dumps(fingerprint))  # tuples -> lists, as stored
    diffs = [f"{k} {ckpt.fingerprint.get(k)!r} there, {fingerprint.get(k)!r} here"
             for k in sorted(set(ckpt.fingerprint) | set(fingerprint)) if ckpt.fingerprint.get(k) != fingerprint.get(k)]
    if diffs:
        raise NNError(f"checkpoint {path} was written by a different configuration ({'; '.join(diffs)}); "
                      "resume with the same settings, or choose another --checkpoint path")
