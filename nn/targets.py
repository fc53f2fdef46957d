"""The kernel launches of the MLP's and the CNN's training steps, as autogemm tuning targets.

They are recorded from the steps themselves (nn/recorder.py runs them on a backend that does no
arithmetic and only notes the kernel each operation launches on the GPU backend): change a step and
its targets follow. autogemm finds `step_targets` and `cnn_step_targets` through the
`autogemm.targets` entry points named `nn` and `lenet` (pyproject.toml), so `autogemm tune --shapes
nn` (or `--model lenet`) tunes what each training step of `python -m nn.train` launches
(evaluation's forward passes are left to lookup's nearest shape).
"""
import numpy as np

import autogemm
from nn.layers import LENET
from nn.model_parallel import check_split
from nn.recorder import record_cnn_step, record_step


def step_rows(batch: int, train_size: int | None, ranks: int) -> list[int]:
    """Rows a rank's step sees with `ranks` ranks: each rank's share (np.array_split) of the full
    batch and of the last, partial batch of an epoch (train_size None: the full batch only);
    largest first, zero shares left out."""
    if train_size is None:
        batches = {batch}
    else:
        batches = {min(batch, train_size)} | ({train_size % batch} if train_size % batch else set())
    rows = {len(part) for b in batches for part in np.array_split(np.empty(b), ranks)}
    return sorted((r for r in rows if r > 0), reverse=True)


def step_targets(batch: int = 800, hidden: tuple[int, ...] = (1000,), train_size: int | None = 54_000,
                 ranks: tuple[int, ...] = (1,), activation: str = "sigmoid", inputs: int = 784,
                 classes: int = 10, parallel: str = "data", precision: str = "fp32") -> list[autogemm.Target]:
    """Every launch of the MLP's training step (784-hidden-10 on Fashion-MNIST's shapes) at
    `precision` (nn.train --precision) for each rank count and each row count a rank sees
    (`parallel` "data"), or each rank's hidden units on every row ("model"), the first of each
    (family, sizes, op) kept."""
    sizes = (inputs, *hidden, classes)
    full = min(batch, train_size or batch)
    first = {}
    for r in ranks:
        if parallel == "model":
            check_split(sizes, r)
            steps = [(rows, rank) for rows in step_rows(batch, train_size, 1) for rank in range(r)]
        else:
            steps = [(rows, None) for rows in step_rows(batch, train_size, r)]
        for rows, rank in steps:
            for launch in record_step(rows, full, sizes, activation, r, rank, precision):
                first.setdefault((launch.family, launch.sizes, launch.op), launch)
    return list(first.values())


def cnn_step_targets(batch: int = 1000, train_size: int | None = 54_000, ranks: tuple[int, ...] = (1,),
                     layers: str = LENET, parallel: str = "data", **_mlp_only) -> list[autogemm.Target]:
    """Every launch of the CNN's training step (the LeNet-like network, or nn.layers spec `layers`)
    for each rank count and each row count a rank sees, the first of each (family, sizes, op) kept.
    The MLP's arguments (hidden, activation) do not apply."""
    if parallel != "data":
        raise ValueError("--parallel model splits the MLP's hidden layer; a CNN trains with --parallel data")
    first = {}
    for r in ranks:
        for rows in step_rows(batch, train_size, r):
            for launch in record_cnn_step(rows, min(batch, train_size or batch), layers, r):
                first.setdefault((launch.family, launch.sizes, launch.op), launch)
    return list(first.values())
