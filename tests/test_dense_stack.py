"""The dense_stack family (kernels/dense_stack): its kernels on the CPU emulator against float64
(ragged blocks, odd widths, both activations, with and without the input's gradient, float32 and
float64), its keys of any depth, and its constraints."""
import dataclasses

import numpy as np
import pytest

from autogemm.runtime.device import H100
from autogemm.runtime.family import family
from autogemm.store.keys import Key, make_key, problem_of
from autogemm.testing.emulator import GXX, Launch, run
from autogemm.tuning.verify import compare
from kernels import dense_stack as ds

# (rows, widths, activation, grad_in, dtype): LeNet's stack at a ragged batch, odd widths, one hidden
# layer, a deep narrow stack, classes 1 and 32.
STACKS = [(37, (250, 128, 100, 80, 10), "relu", True, "float32"),
          (19, (57, 33, 10), "sigmoid", False, "float64"),
          (11, (40, 31, 17, 9, 5, 32), "sigmoid", True, "float32"),
          (9, (16, 70, 1), "relu", False, "float32"),
          (21, (33, 24, 3), "relu", True, "float64")]
# (rows, pooled map (C, H, W), the stack's widths past its input, activation, dtype): the gradient below
# the pool: LeNet's (odd sides: a last row and column of zeros), even sides, one channel.
POOLED = [(37, (10, 11, 11), (128, 100, 80, 10), "relu", "float32"),
          (9, (3, 4, 6), (7, 5), "sigmoid", "float64"),
          (5, (1, 5, 4), (6, 2), "relu", "float32")]


def stack_launch(rows, widths, activation, grad_in, dtype, cfg, seed, pool=None):
    """(launch, outputs, expected) of one problem and config: every output poisoned with NaN."""
    rng = np.random.default_rng(seed)
    p = ds.Problem(rows, widths, dtype, activation, grad_in, pool=pool)
    t = np.dtype(dtype).type
    x = rng.standard_normal((rows, widths[0])).astype(t)                    # X: (rows, W_0)
    if pool:                                                                # a pooled activation
        x = (np.maximum(x, 0) if activation == "relu" else rng.uniform(0.01, 0.99, x.shape)).astype(t)
    where = rng.integers(0, 4, (rows, widths[0])).astype(np.int8) if pool else None
    weights, biases = ds.parameters(p, rng)
    labels = rng.integers(0, widths[-1], rows).astype(np.int32)            # (rows,)
    scale = 1.0 / rows
    got = {"loss": np.zeros(1, t)}
    args = [x]
    for l, (w, b) in enumerate(zip(weights, biases), 1):
        got[f"out{l}"] = np.full((rows, widths[l]), np.nan, t)
        got[f"grad{l}"] = np.full((rows, widths[l]), np.nan, t)
        args += [w, b, got[f"out{l}"], got[f"grad{l}"]]
    if grad_in:
        got["grad_in"] = np.full((rows, *pool) if pool else (rows, widths[0]), np.nan, t)
    args += [where] if pool else []
    args += [got.get("grad_in", np.uint64(0)), labels, got["loss"], np.int32(rows), t(scale)]
    fam = family("dense_stack")
    launch = Launch(fam.instance(fam.validate(cfg, p, H100), p), args)
    return launch, got, ds.reference(p, x, weights, biases, labels, scale, where), dtype


@pytest.mark.slow
@pytest.mark.skipif(GXX is None, reason="g++ is not on PATH: the emulated kernels need it")
def test_every_output_matches_float64_on_the_cpu(tmp_path):
    fam, cases = family("dense_stack"), []
    # a warp's sums of every number of slots, 1 to 32 (rows x cols: three a stack, alternately),
    # beside the default and a sample
    slots = [dict(rows=1, warps=4, cols=1), dict(rows=2, warps=8, cols=1), dict(rows=4, warps=8, cols=1),
             dict(rows=2, warps=4, cols=4), dict(rows=4, warps=4, cols=4), dict(rows=4, warps=4, cols=8)]
    for seed, (rows, widths, activation, grad_in, dtype) in enumerate(STACKS):
        p = ds.Problem(rows, widths, dtype, activation, grad_in)
        configs = [fam.default(p, H100)] + fam.sample(p, H100, 2, seed=seed) + [
            c for c in slots[seed % 2::2] if fam.fits(fam.holds(c), p, H100)]
        configs = list({tuple(sorted(dict(c).items())): c for c in configs}.values())
        cases += [stack_launch(rows, widths, activation, grad_in, dtype, cfg, seed) for cfg in configs]
    for seed, (rows, pool, widths, activation, dtype) in enumerate(POOLED):
        p = ds.Problem(rows, (pool[0] * (pool[1] // 2) * (pool[2] // 2), *widths), dtype, activation, True, pool=pool)
        configs = [fam.default(p, H100)] + fam.sample(p, H100, 2, seed=seed)
        cases += [stack_launch(rows, p.widths, activation, True, dtype, cfg, seed, pool) for cfg in configs]
    run([launch for launch, *_ in cases], tmp_path)
    seen = {(c.rows, c.warps, c.cols) for launch, *_ in cases for c in [launch.instance.config]}
    assert len({r for r, _, _ in seen}) >= 3 and len({k for _, _, k in seen}) >= 2
    assert {r * k for r, _, k in seen} == {1, 2, 4, 8, 16, 32}
    assert {v for launch, *_ in cases for v in launch.instance.name.split("_v")[1].split("_")[0]} == {"1", "2", "4"}
    for launch, got, expected, dtype in cases:
        assert set(expected) == set(got)
        for name, (value, magnitude, k) in expected.items():
            verdict = compare(got[name].reshape(value.shape), value, magnitude, k, dtype)
            assert verdict.ok, f"{launch.instance.name} {name}: {verdict.describe()}"


@pytest.mark.gpu
@pytest.mark.parametrize("rows, widths, activation, grad_in, dtype", STACKS + [(128, (250, 128, 100, 80, 10), "relu",
                                                                                  True, "float32")])
@pytest.mark.parametrize("config", ["default", None])
def test_the_op_on_the_gpu_matches_float64(rows, widths, activation, grad_in, dtype, config):
    """autogemm.dense_stack on CuPy arrays, the default config and the tuned lookup's, against the reference."""
    import cupy

    import autogemm

    rng = np.random.default_rng(rows)
    p = ds.Problem(rows, widths, dtype, activation, grad_in)
    t = np.dtype(dtype).type
    x = rng.standard_normal((rows, widths[0])).astype(t)                    # X: (rows, W_0)
    weights, biases = ds.parameters(p, rng)
    labels = rng.integers(0, widths[-1], rows).astype(np.int32)            # (rows,)
    expected = ds.reference(p, x, weights, biases, labels, 1 / rows)
    got = {name: cupy.full(value.shape, np.nan, t) for name, (value, _, _) in expected.items() if name != "loss"}
    got["loss"] = cupy.zeros(1, t)
    layers = len(weights)
    autogemm.dense_stack(cupy.asarray(x), [cupy.asarray(w) for w in weights], [cupy.asarray(b) for b in biases],
                         cupy.asarray(labels), [got[f"out{l}"] for l in range(1, layers + 1)],
                         [got[f"grad{l}"] for l in range(1, layers + 1)], 1 / rows, got["loss"], activation,
                         got.get("grad_in"), config=config)
    for name, (value, magnitude, k) in expected.items():
        verdict = compare(cupy.asnumpy(got[name]).reshape(value.shape), value, magnitude, k, dtype)
        assert verdict.ok, f"{name}: {verdict.describe()}"


@pytest.mark.gpu
@pytest.mark.parametrize("rows, pool, widths, activation, dtype", POOLED)
def test_the_op_below_a_pool_on_the_gpu_matches_float64(rows, pool, widths, activation, dtype):
    """autogemm.dense_stack with `where`: the input's gradient below the pool, against the reference."""
    import cupy

    import autogemm

    rng = np.random.default_rng(rows)
    p = ds.Problem(rows, (pool[0] * (pool[1] // 2) * (pool[2] // 2), *widths), dtype, activation, True, pool=pool)
    t = np.dtype(dtype).type
    x = rng.standard_normal((rows, p.widths[0]))
    x = (np.maximum(x, 0) if activation == "relu" else rng.uniform(0.01, 0.99, x.shape)).astype(t)   # pooled A
    where = rng.integers(0, 4, (rows, pool[0], pool[1] // 2, pool[2] // 2)).astype(np.int8)
    weights, biases = ds.parameters(p, rng)
    labels = rng.integers(0, p.widths[-1], rows).astype(np.int32)
    expected = ds.reference(p, x, weights, biases, labels, 1 / rows, where)
    got = {name: cupy.full(value.shape, np.nan, t) for name, (value, _, _) in expected.items() if name != "loss"}
    got["loss"] = cupy.zeros(1, t)
    layers = p.layers
    autogemm.dense_stack(cupy.asarray(x), [cupy.asarray(w) for w in weights], [cupy.asarray(b) for b in biases],
                         cupy.asarray(labels), [got[f"out{l}"] for l in range(1, layers + 1)],
                         [got[f"grad{l}"] for l in range(1, layers + 1)], 1 / rows, got["loss"], activation,
                         got["grad_in"], cupy.asarray(where))
    for name, (value, magnitude, k) in expected.items():
        verdict = compare(cupy.asnumpy(got[name]).reshape(value.shape), value, magnitude, k, dtype)
        assert verdict.ok, f"{name}: {verdict.describe()}"


def test_keys_of_any_depth_round_trip():
    key = make_key("dense_stack", (128, 250, 128, 100, 80, 10), "relu+dx", "float32")
    assert key == Key("dense_stack", "128x250x128x100x80x10", "relu+dx", "float32")
    pooled = make_key("dense_stack", (128, 10, 11, 11, 128, 100, 80, 10), "relu+pool", "float32")
    assert problem_of(pooled) == ds.Problem(128, (250, 128, 100, 80, 10), "float32", "relu", True,
                                            pool=(10, 11, 11))
    assert ds.key_of(problem_of(pooled)) == (pooled.sizes, "relu+pool")
    assert problem_of(key) == ds.Problem(128, (250, 128, 100, 80, 10), "float32", "relu", True)
    assert problem_of(make_key("dense_stack", (5, 3, 2, 1), "sigmoid", "float64")).widths == (3, 2, 1)
    assert ds.Problem(128, "250x128x10") == ds.Problem(128, (250, 128, 10))      # as --problem gives it
    for sizes in ((128, 250), (128, 250, 10)):          # too few sizes for a stack
        with pytest.raises(ValueError, match="4 or more sizes"):
            make_key("dense_stack", sizes, "relu", "float32")


def test_constraints_reject_what_cannot_run():
    fam = family("dense_stack")
    lenet = ds.Problem(128, (250, 128, 100, 80, 10), "float32", "relu", True)
    assert fam.default(lenet, H100) == {"rows": 1, "warps": 16, "cols": 4}
    assert fam.default(dataclasses.replace(lenet, rows=1000), H100)["rows"] == 4
    for bad, why in ((ds.Problem(128, (250, 128, 33), "float32"), "at most 32 classes"),
                     (ds.Problem(4, (250, 128, 10), "float32"), "more rows than the batch"),
                     (ds.Problem(128, (4096, 4096, 10), "float64"), "shared memory")):
        cfg = {"rows": 8, "warps": 8, "cols": 2}
        with pytest.raises(Exception, match=why):
            fam.validate(cfg, bad, H100)


@pytest.mark.gpu
def test_bad_arguments_are_one_line_errors():
    import cupy

    import autogemm

    rows, widths = 6, (12, 8, 5)
    x = cupy.ones((rows, widths[0]), np.float32)
    weights = [cupy.ones((8, 12), np.float32), cupy.ones((5, 8), np.float32)]
    biases = [cupy.zeros(8, np.float32), cupy.zeros(5, np.float32)]
    outs = [cupy.empty((rows, 8), np.float32), cupy.empty((rows, 5), np.float32)]
    grads = [cupy.empty((rows, 8), np.float32), cupy.empty((rows, 5), np.float32)]
    labels, loss = cupy.zeros(rows, np.int32), cupy.zeros(1, np.float32)

    def call(**change):
        args = dict(x=x, weights=weights, biases=biases, labels=labels, outs=outs, grads=grads, scale=1.0,
                    loss_acc=loss, activation="relu", grad_in=None) | change
        autogemm.dense_stack(**args)

    call()                                                                   # the good call runs
    for change, message in [(dict(weights=weights[:1]), "lists of one length"),
                            (dict(weights=[weights[0].T.copy(), weights[1]]), "weights\\[0\\] \\(12, 8\\)"),
                            (dict(x=x.astype(np.float64)), "every array must be float64"),
                            (dict(outs=[outs[0][:, ::2], outs[1]]), "C-contiguous"),
                            (dict(labels=labels.astype(np.int64)), "labels must be"),
                            (dict(labels=cupy.zeros(2 * rows, np.int32)[::2]), "labels must be"),
                            (dict(loss_acc=np.zeros(1, np.float32)), "loss_acc must be"),
                            (dict(activation="tanh"), "activation must be"),
                            (dict(grads=[outs[0], grads[1]]), "overlapping"),
                            (dict(grad_in=x), "overlapping"),
                            (dict(weights=[cupy.ones((8, 12), np.float32), cupy.ones((33, 8), np.float32)],
                                  biases=[biases[0], cupy.zeros(33, np.float32)],
                                  outs=[outs[0], cupy.empty((rows, 33), np.float32)],
                                  grads=[grads[0], cupy.empty((rows, 33), np.float32)]), "at most 32 classes")]:
        with pytest.raises(autogemm.BadArguments, match=message) as info:
            call(**change)
        assert "\n" not in str(info.value)


def test_which_stacks_run():
    assert ds.runs((250, 128, 100, 80, 10)) and ds.runs((256, 120, 84, 10))
    assert not ds.runs((1568, 256, 10))                    # too many weights for every block to read
    assert not ds.runs((2880, 16, 10))                     # a row too long for the forward loads in flight
    assert not ds.runs((250, 128, 33)) and not ds.runs((8000, 4, 10)) and not ds.runs((8,) * 11)


def test_every_shipped_stack_record_is_in_the_space():
    from pathlib import Path

    from autogemm.store.records import load

    fam = family("dense_stack")
    records = [r for path in (Path(__file__).parents[1] / "tuned").glob("*.json") for r in load(path).records.values()
               if r.key.family == "dense_stack"]
    assert records
    for r in records:
        fam.validate(dict(r.config), problem_of(r.key), H100)
