"""Run `python -m nn.train` (alone or under mpirun) in a subprocess, as a user would."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MPIRUN = shutil.which("mpirun", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")


def env(tmp_path) -> dict:
    """The repo importable; no data-set search path or proxies from outside; a private download cache."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("AUTOGEMM_", "MNIST_")) and "proxy" not in k.lower()}
    return dict(clean, PYTHONPATH=str(ROOT), AUTOGEMM_CACHE=str(tmp_path / "cache"),
                AUTOGEMM_DATA_MIRROR="http://127.0.0.1:9/")  # offline: a download fails at once


def run_train(tmp_path, *args, ranks=None, timeout=120) -> subprocess.CompletedProcess:
    """`python -m nn.train args` in tmp_path (under `mpirun -n ranks` when ranks is given)."""
    command = [sys.executable, "-m", "nn.train", *map(str, args)]
    if ranks is not None:
        command = [MPIRUN, "-n", str(ranks), *command]
    return subprocess.run(command, cwd=tmp_path, env=env(tmp_path), capture_output=True, text=True, timeout=timeout)


def weights(path) -> list[np.ndarray]:
    """Every array of a checkpoint, in order W0, b0, W1, ..."""
    with np.load(path) as z:
        names = (k for k in z.files if k not in ("meta", "digest"))
        return [z[k] for k in sorted(names, key=lambda k: (int(k[1:]), k))]


def max_rel_diff(a, b) -> float:
    """max over arrays of ||a - b||_inf / ||b||_inf."""
    return max(float(np.max(np.abs(x - y)) / max(np.max(np.abs(y)), 1e-300)) for x, y in zip(a, b, strict=True))


def resume_difference(tmp_path, *common, epochs: int = 3) -> float:
    """max_rel_diff between `epochs` epochs run whole and run as 1, then resumed from its checkpoint
    (`common`: the run's flags, with --no-log and --quiet)."""
    whole, part = tmp_path / "whole.npz", tmp_path / "part.npz"
    for args in (("--epochs", epochs, "--checkpoint", whole), ("--epochs", 1, "--checkpoint", part),
                 ("--epochs", epochs, "--checkpoint", part, "--resume")):
        out = run_train(tmp_path, *common, *args, timeout=600)
        assert out.returncode == 0, out.stderr
    return max_rel_diff(weights(part), weights(whole))
