"""Issue 41: where LeNet's step at batch 1000 goes, by leaving work out: the whole step timed as
nn.profile times it (a CUDA graph of `--reps` steps), then again with one kind of operation made a
no-op (the step's time without it; the numbers are wrong, the timing is not), or with side
branches' lanes merged. With `--ncu`, one
eager step between cudaProfilerStart/Stop, for `ncu --profile-from-start off`.

    python benchmarks/issue41_step_parts.py [--batch 1000] [--ncu]
"""
import argparse
import contextlib

import numpy as np

from nn.bench import make_backend
from nn.cnn import CNN, CNNStep, init_cnn_params
from nn.layers import parse_layers
from nn.profile import time_calls

LENET = "conv6x3,pool2,conv10x3,pool2,dense128,dense100,dense80"


@contextlib.contextmanager
def skipping(backend, name, which=lambda i: True):
    """backend.<name> a no-op for the calls of a step whose index (0, 1, ... in the step's order) `which` takes."""
    method, count = getattr(backend, name), [0]

    def call(*args, **kwargs):
        i, count[0] = count[0], count[0] + 1
        if name == "gemm" and not kwargs.get("trans_a"):     # only the weight gradients' GEMMs
            return method(*args, **kwargs)
        return None if which(i) else method(*args, **kwargs)

    setattr(backend, name, call)
    try:
        yield count
    finally:
        delattr(backend, name)


@contextlib.contextmanager
def lanes_merged(backend, lane_of):
    """backend.side_branch(lane) on lane_of(lane) instead."""
    method = backend.side_branch
    backend.side_branch = lambda lane=0: method(lane_of(lane))
    try:
        yield
    finally:
        del backend.side_branch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--layers", default=LENET)
    parser.add_argument("--backend", default="cupy-tuned")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--replays", type=int, default=30)
    parser.add_argument("--ncu", action="store_true")
    args = parser.parse_args()
    backend = make_backend(args.backend)
    rng = np.random.default_rng(0)
    x = backend.read_only(backend.asarray(rng.random((args.batch, 784))))   # (batch, 784)
    labels = backend.asarray(rng.integers(0, 10, args.batch))              # (batch,)
    layers = parse_layers(args.layers)
    step = CNNStep(CNN(backend, layers, "relu", init_cnn_params(layers)), args.batch, args.batch)
    if args.ncu:
        import cupy
        for _ in range(3):
            step.train_batch(x, labels)
        backend.synchronize()
        cupy.cuda.profiler.start()
        step.train_batch(x, labels)
        backend.synchronize()
        cupy.cuda.profiler.stop()
        return
    per_step = lambda i: True    # noqa: E731
    variants = {
        "whole step": [],
        "without the dense weight gradients": [("gemm", per_step), ("column_sums", per_step)],
        "without conv2's weight gradient": [("conv2d_backward_weights", lambda i: i % 2 == 0)],
        "without conv1's weight gradient": [("conv2d_backward_weights", lambda i: i % 2 == 1)],
        "without every side branch (dense and conv2 wgrad)": [("gemm", per_step), ("column_sums", per_step),
                                                               ("conv2d_backward_weights", lambda i: i % 2 == 0)],
        "without the dense stack": [("dense_stack", per_step)],
        "without conv2's backward data": [("conv2d_backward_data", per_step)],
        "without Adam": [("adam_update", per_step)],
        "the dense weight gradients on one lane": lambda lane: min(lane, 1),
        "every side branch on one lane": lambda lane: 0,
    }
    rows = []
    for what, skips in variants.items():
        with contextlib.ExitStack() as stack:
            if callable(skips):
                stack.enter_context(lanes_merged(backend, skips))
                skips = []
            for name, which in skips:
                stack.enter_context(skipping(backend, name, which))
            rows.append(time_calls(what, backend, lambda: step.train_batch(x, labels), args.reps, args.replays))
    base = rows[0].median_us
    print(f"{args.layers}, batch {args.batch}, {args.backend}: µs a step (graph of {args.reps} steps)")
    for t in rows:
        print(f"  {t.operation:<52} {t.median_us:8.2f}  [{t.p10_us:.2f}, {t.p90_us:.2f}]  {t.median_us - base:+8.2f}")


if __name__ == "__main__":
    main()
