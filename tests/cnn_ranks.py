"""A small CNN trained by nn.cnn.CNNStep on the NumPy backend, as one process or as each rank of
`mpirun -n R python tests/cnn_ranks.py OUT.npz` (the ranks split every batch's rows): the all-reduce
whole (the host's, as nn.train hands it on the NumPy backend), and bucketed per layer "overlap"
and "after" (as the GPU all-reduces ask), each from the same start. Rank 0 saves each run's flat
parameters to OUT.npz."""
import sys

import numpy as np

from nn import allreduce
from nn.backends import get_backend
from nn.cnn import CNN, CNNStep, init_cnn_params
from nn.dist import Dist, maybe_init_dist, rank_rows
from nn.layers import parse_layers

SPEC, IMAGE, CLASSES = "conv3x3,pool2,conv4x2,dense6", (1, 8, 8), 4
ROWS, BATCH, EPOCHS = 14, 6, 2     # over 4 ranks: shares 2, 2, 1, 1 and a last batch of 2 rows (1, 1, 0, 0)
RUNS = ("whole", "overlap", "after")


class HostSum:
    """Dist.allreduce_sum with the `buckets` of the GPU all-reduces (None: the whole buffer)."""

    def __init__(self, dist: Dist, backend, buckets):
        self.dist, self.backend, self.buckets = dist, backend, buckets

    def __call__(self, buf):
        return self.dist.allreduce_sum(self.backend, buf)


def train(dist: Dist, run: str) -> np.ndarray:
    """The flat parameters after EPOCHS epochs of Adam on this rank's rows (all of them for one rank)."""
    bk = get_backend("numpy", "float64")
    layers = parse_layers(SPEC, CLASSES, IMAGE)
    model = CNN(bk, layers, "relu", init_cnn_params(layers, seed=4))
    rng = np.random.default_rng(4)
    x = rng.random((ROWS, int(np.prod(IMAGE))))                        # X: (rows, C*H*W) pixels in [0, 1)
    labels = rng.integers(0, CLASSES, ROWS).astype(np.int32)
    index, spans = rank_rows(ROWS, BATCH, dist.rank, dist.size)
    x, labels = x[index], labels[index]
    step = CNNStep(model, max(count for _, count in spans), BATCH, "adam", lr=0.02, reg=0.01)
    allreduce = None if dist.size == 1 else HostSum(dist, bk, None if run == "whole" else run)
    for _ in range(EPOCHS):
        for first, count in spans:
            step.train_batch(x[first:first + count], labels[first:first + count], allreduce)
    return model.flat.copy()


if __name__ == "__main__":
    allreduce.BUCKET_BYTES = 0      # a bucket a layer: the most all-reduces a step (this process alone)
    world = maybe_init_dist()
    try:
        flats = {run: train(world, run) for run in RUNS}
        if world.rank == 0:
            np.savez(sys.argv[1], **flats)
    except Exception as exc:     # every rank ends at once: the others may be waiting in an all-reduce
        world.crash(exc)
