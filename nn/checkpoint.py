"""Checkpoints: all weights, the last finished epoch and the settings that produced them, written atomically.

A checkpoint is one uncompressed .npz (arrays W0, b0, W1, ...; an optimizer's state m0, v0, m1, ...
for Adam; `meta`, a JSON string; written last, `digest`: a SHA-256 over every other member, see
digest()) read without pickle. Reading checks everything before the weights are used: the file is a
regular file, no member is compressed (so nothing inflates past the file's own size), the digest
matches (the arrays and meta are one save's, not mixed from several or edited), the settings match
the run's, an Adam run's checkpoint holds Adam's state, and every array has the run's shape and
dtype and finite values.

A checkpoint without a digest was written before digests existed: it is read as before (refusing
it would leave an older run's work unresumable), and the next save writes one.
"""
import errno
import hashlib
import io
import json
import math
import re
import secrets
import zipfile
from dataclasses import dataclass, field

import numpy as np

from autogemm import files
from nn.errors import NNError

FORMAT = 1
MAX_LAYERS = 1024
MAX_META_BYTES = 64 << 20
MAX_STEPS = 2**31 - 1            # Adam's steps: an int32 on the backend
RUN_ID = re.compile(r"[0-9a-f]{16}")   # a run's identity: new_run_id()


@dataclass
class Checkpoint:
    params: list  # [(W_l (n_out, n_in) or (F, C, K, K), b_l (n_out,)), ...] host arrays
    epoch: int  # epochs finished
    fingerprint: dict  # the settings that determine the weights (see nn.train)
    history: list = field(default_factory=list)  # per-epoch records of the run so far, one per epoch
    state: dict | None = None  # the optimizer's: {"steps": n, "moments": [(m, v) per parameter]} (Adam)
    run: str | None = None  # the run's identity (nn.train: random), in its run log too: a log is continued by its run


def new_run_id() -> str:
    """A fresh run's identity, stored in its checkpoint and run log."""
    return secrets.token_hex(8)


def digest(arrays: dict) -> str:
    """SHA-256 over `arrays` ({name: array}, meta included, the digest itself not) in name order,
    each as its name, dtype, shape and C-order bytes: any array or meta from another save changes it."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        x = np.asarray(arrays[name])
        h.update(json.dumps([name, x.dtype.str, list(x.shape)]).encode() + b"\0")
        h.update(x.tobytes(order="C"))
    return h.hexdigest()


def save(path, ckpt: Checkpoint, replace: bool = True):
    """Write `ckpt` to `path` atomically; without `replace`, only if no file is there."""
    meta = {"format": FORMAT, "epoch": ckpt.epoch, "layers": len(ckpt.params),
            "fingerprint": ckpt.fingerprint, "history": ckpt.history, **({"run": ckpt.run} if ckpt.run else {})}
    arrays = {}
    for l, (w, b) in enumerate(ckpt.params):
        arrays[f"W{l}"], arrays[f"b{l}"] = w, b
    if ckpt.state is not None:
        meta["optimizer"] = {"steps": ckpt.state["steps"], "moments": len(ckpt.state["moments"])}
        for i, (m, v) in enumerate(ckpt.state["moments"]):
            arrays[f"m{i}"], arrays[f"v{i}"] = m, v
    arrays = {"meta": np.array(json.dumps(meta)), **arrays}
    buf = io.BytesIO()
    np.savez(buf, **arrays, digest=np.array(digest(arrays)))    # the digest last
    try:
        files.write_atomic(path, buf.getvalue(), replace)
    except files.FileError as e:
        raise NNError(f"cannot write checkpoint {path}: {e}") from None


def load(path, fingerprint: dict | None = None, dtype=None, shapes=None) -> Checkpoint:
    """Read and check a checkpoint: with `fingerprint`, one written by the same settings, whose
    arrays have `shapes` ([(W shape, b shape), ...]; by default the MLP's of the fingerprint's
    "sizes"), with `dtype`, of that dtype. Anything unreadable, inconsistent or different is an
    NNError naming the file."""
    try:
        with files.open_regular(path) as f:
            with zipfile.ZipFile(f) as z:
                meta = _meta(z, path)
                _check_digest(z, path)
                ckpt = Checkpoint([], meta["epoch"], meta["fingerprint"], meta["history"], run=meta.get("run"))
                if fingerprint is not None:
                    _check_compatible(ckpt, fingerprint, path)
                    if fingerprint.get("optimizer") == "adam" and ckpt.epoch > 0 and "optimizer" not in meta:
                        raise NNError(f"checkpoint {path} is corrupted or not one consistent state of nn.train: "
                                      "its run trains with adam and it holds no Adam state (steps and moments); "
                                      "resuming would restart Adam from zero moments")
                ckpt.params = [(_array(z, f"W{l}"), _array(z, f"b{l}")) for l in range(meta["layers"])]
                if "optimizer" in meta:
                    steps, count = meta["optimizer"]["steps"], meta["optimizer"]["moments"]
                    if type(steps) is not int or not 0 <= steps <= MAX_STEPS or count != 2 * len(ckpt.params):
                        raise ValueError(f"an optimizer state of {count!r} moments after {steps!r} steps")
                    ckpt.state = {"steps": steps, "moments": [(_array(z, f"m{i}"), _array(z, f"v{i}"))
                                                              for i in range(count)]}
    except files.FileError as e:
        raise NNError(f"no checkpoint at {path}" if e.errno == errno.ENOENT
                      else f"cannot read checkpoint {path}: {e}") from None
    except NNError:
        raise
    except Exception as e:  # zip, npy, JSON and key errors all mean the same: not a readable checkpoint
        raise NNError(f"checkpoint {path} is corrupted or not a checkpoint of nn.train ({type(e).__name__}: {e})") from None
    if shapes is None and fingerprint is not None:
        sizes = fingerprint["sizes"]
        shapes = [((n_out, n_in), (n_out,)) for n_in, n_out in zip(sizes[:-1], sizes[1:])]
    _check_params(ckpt.params, path, shapes, dtype)
    if ckpt.state is not None:
        wanted = [p.shape for pair in ckpt.params for p in pair]      # W0, b0, W1, ...: one (m, v) each
        for i, (m, v) in enumerate(ckpt.state["moments"]):
            if m.shape != wanted[i] or v.shape != wanted[i]:
                raise NNError(f"checkpoint {path} is corrupted: the optimizer's m{i}/v{i} are {m.shape}/{v.shape}, "
                              f"their parameter {wanted[i]}")
        _check_values([(x, f"{name}{i}") for i, pair in enumerate(ckpt.state["moments"]) for name, x in zip("mv", pair)],
                      path, dtype)
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
    if "run" in meta and not (isinstance(meta["run"], str) and RUN_ID.fullmatch(meta["run"])):
        raise ValueError("a run identity that nn.train does not write")
    if type(epoch) is not int or epoch < 0 or not isinstance(history, list) or len(history) != epoch:
        raise NNError(f"checkpoint {path} is corrupted: epoch {epoch!r} with "
                      f"{len(history) if isinstance(history, list) else 'no'} epochs of history")
    for i, record in enumerate(history, start=1):
        if not (isinstance(record, dict) and record.get("epoch") == i
                and all(type(record.get(k)) in (int, float) and math.isfinite(record[k]) for k in ("loss", "val_accuracy"))):
            raise NNError(f"checkpoint {path} is corrupted: its history of epoch {i} is not one nn.train writes")
    return meta


def _check_digest(z: zipfile.ZipFile, path):
    """NNError unless the stored digest is that of every other member (none: a checkpoint from
    before digests, read as before)."""
    names = [n for n in z.namelist() if n != "digest.npy"]
    if len(names) == len(z.namelist()):
        return
    stored = _array(z, "digest")
    if stored.dtype.kind != "U" or stored.shape != () or not re.fullmatch(r"[0-9a-f]{64}", str(stored)):
        raise ValueError("a digest that nn.train does not write")
    arrays = {n.removesuffix(".npy"): _array(z, n.removesuffix(".npy")) for n in names}
    if z.namelist()[-1] != "digest.npy" or digest(arrays) != str(stored):
        raise NNError(f"checkpoint {path} is corrupted or not one consistent state of nn.train: its arrays and "
                      "meta do not match its digest (parts of it come from other saves or were edited); "
                      "resume from a checkpoint that nn.train wrote whole, or start a fresh run")


def _array(z: zipfile.ZipFile, name: str) -> np.ndarray:
    with z.open(f"{name}.npy") as member:
        return np.lib.format.read_array(member, allow_pickle=False)


def _check_params(params, path, shapes=None, dtype=None):
    """NNError unless every layer's W (2-D dense, 4-D convolution) and b (n_out,) agree and chain
    (a layer's inputs are the outputs of the one before, where both are dense or both convolutions),
    match `shapes` and `dtype` where given, and hold finite numbers."""
    if shapes is not None and len(params) != len(shapes):
        raise NNError(f"checkpoint {path} holds {len(params)} layers, the run has {len(shapes)}")
    for l, (w, b) in enumerate(params):
        prev = params[l - 1][0] if l else None
        chained = prev is None or prev.ndim != w.ndim or w.shape[1] == prev.shape[0]   # inputs are the last outputs
        if w.ndim not in (2, 4) or b.shape != w.shape[:1] or not chained:
            raise NNError(f"checkpoint {path} is corrupted: layer {l} has W {w.shape} and b {b.shape}")
        if shapes is not None and (w.shape, b.shape) != tuple(map(tuple, shapes[l])):
            raise NNError(f"checkpoint {path} is corrupted: layer {l} has W {w.shape}, the run's network "
                          f"needs {tuple(shapes[l][0])}")
    _check_values([(x, f"{name}{l}") for l, pair in enumerate(params) for name, x in zip("Wb", pair)], path, dtype)


def _check_values(named, path, dtype=None):
    """NNError unless each (array, name) is floating point of `dtype` (where given) and finite."""
    dtype = np.dtype(dtype) if dtype is not None else None
    for x, name in named:
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
