"""The CNN on the GPU: every configs of its kernel families against float64 (through the tuner's
measures), each backend operation against NumPy, and whole training runs against the NumPy trainer."""
import numpy as np
import pytest

from nn import allreduce as allreduce_module

from nn.backends import get_backend
from nn.data import locate
from run_train import max_rel_diff, resume_difference, run_train, weights

pytestmark = pytest.mark.gpu

# LeNet's launches at batch 1000 and 128, and odd sizes (ragged tiles, odd maps, K = 5)
KEYS = [("conv2d", (1000, 1, 28, 28, 6, 3), "-"), ("conv2d", (1000, 6, 13, 13, 10, 3), "-"),
        ("conv2d_wgrad", (1000, 1, 28, 28, 6, 3), "-"), ("conv2d_wgrad", (1000, 6, 13, 13, 10, 3), "-"),
        ("conv2d_wgrad", (128, 1, 28, 28, 6, 3), "-"), ("conv2d_wgrad", (3, 5, 9, 7, 33, 5), "-"),
        ("conv2d_dgrad", (7, 2, 4, 5, 3, 2), "-"),
        ("conv2d_wgrad_direct", (1000, 1, 28, 28, 6, 3), "-"), ("conv2d_wgrad_direct", (1000, 6, 13, 13, 10, 3), "-"),
        ("conv2d_wgrad_direct", (128, 1, 28, 28, 6, 3), "-"), ("conv2d_wgrad_direct", (3, 5, 9, 7, 33, 5), "-"),
        ("conv2d_direct", (1000, 6, 13, 13, 10, 3), "-"), ("conv2d_dgrad_direct", (1000, 6, 13, 13, 10, 3), "-"),
        ("pool2x2", (1000, 6, 26, 26), "forward"), ("pool2x2", (1000, 10, 11, 11), "forward"),
        ("pool2x2", (1000, 6, 26, 26), "backward"), ("pool2x2", (3, 5, 7, 9), "backward"),
        ("adam", (54528,), "-"), ("adam", (1,), "-"), ("adam", (1 << 20,), "-")]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("family, sizes, op", KEYS)
def test_family_configs_match_float64(family, sizes, op, dtype):
    """The default and sampled configs, each verified by the measure that tuning uses (raises on a mismatch)."""
    from autogemm.runtime.device import this_device
    from autogemm.runtime.family import family as family_of
    from autogemm.store.keys import make_key, problem_of
    from autogemm.tuning.measures import measure_for

    key, device = make_key(family, sizes, op, dtype), this_device()
    measure, fam = measure_for(key, device), family_of(family)
    problem = problem_of(key)
    for cfg in fam.candidates(problem, device)[:2] + fam.sample(problem, device, 6, seed=sum(sizes)):
        measure(cfg, reps=1)


def test_cnn_operations_match_numpy():
    gpu, ref = get_backend("cupy", "float64"), get_backend("numpy", "float64")
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 1, (5, 3, 12, 11))                      # X: (N, C, H, W)
    w = rng.standard_normal((4, 3, 3, 3))                      # W: (F, C, K, K)
    b = rng.standard_normal(4)                                 # b: (F,)
    g = rng.standard_normal((5, 4, 10, 9))                     # G: (N, F, H', W')
    relu_out = np.maximum(rng.standard_normal(x.shape), 0)     # the layer below's saved ReLU output
    pooled = rng.standard_normal((5, 3, 6, 5))                 # a pool's gradient and outputs (N, C, H/2, W/2)

    def run(bk):
        out = {}
        out["z"] = bk.conv2d(bk.asarray(x), bk.asarray(w), bk.asarray(b), bk.empty((5, 4, 10, 9)), "relu")
        out["dx"] = bk.conv2d_backward_data(bk.asarray(g), bk.asarray(w), bk.empty(x.shape), bk.asarray(relu_out), "relu")
        dw, db = bk.empty(w.shape), bk.empty(b.shape)
        bk.conv2d_backward_weights(bk.asarray(g), bk.asarray(x), dw, db)
        out["dw"], out["db"] = dw, db
        y, where = bk.empty((5, 3, 6, 5)), bk.xp.empty((5, 3, 6, 5), np.int8)
        out["y"], out["where"] = bk.maxpool2x2(bk.asarray(x), y, where), where
        out["unpooled"] = bk.maxpool2x2_backward(bk.asarray(pooled), where, bk.empty(x.shape), y, "relu")
        params, steps = bk.asarray(w.ravel()), bk.asarray(np.array([4], np.int32))
        m, v = bk.asarray(w.ravel() * 0.1), bk.asarray(np.abs(w.ravel()) * 0.01)
        bk.adam_update(params, bk.asarray(g.ravel()[:params.size]), m, v, steps, 1e-3, 0.9, 0.999, 1e-7)
        out.update(adam_w=params, adam_m=m, adam_v=v, steps=steps)
        return {name: bk.to_numpy(a) for name, a in out.items()}

    got, want = run(gpu), run(ref)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-13, err_msg=name)
    assert got["steps"][0] == 5


@pytest.fixture(scope="module")
def data_dir():
    return str(locate("fashion-mnist"))


def _train(tmp_path, name, *args, ranks=None):
    ckpt = tmp_path / f"{name}.npz"
    out = run_train(tmp_path, *args, "--checkpoint", ckpt, "--no-log", "--quiet", ranks=ranks, timeout=900)
    assert out.returncode == 0, out.stderr
    return weights(ckpt), out.stdout


def test_lenet_in_float64_equals_the_numpy_trainer_after_two_epochs(tmp_path, data_dir):
    common = ("--model", "lenet", "--dtype", "float64", "--epochs", 2, "--train-size", 12000, "--data-dir", data_dir)
    ref, _ = _train(tmp_path, "numpy", *common, "--backend", "numpy")
    gpu, _ = _train(tmp_path, "cupy", *common, "--backend", "cupy")
    assert max_rel_diff(gpu, ref) <= 1e-7


# Issue 41's public stacks: 5 x 5 and 3 x 3 convolutions of 1 to 128 channels
PUBLIC_STACKS = ["conv32x5,pool2,conv64x5,pool2,dense1024",
                 "conv16x3,conv16x3,pool2,conv32x3,conv32x3,pool2,dense256",
                 "conv64x3,pool2,conv128x3,pool2,dense256",
                 "conv6x5,pool2,conv16x5,pool2,dense120,dense84"]


@pytest.mark.parametrize("stack", PUBLIC_STACKS)
def test_public_stacks_in_float64_equal_numpy_and_four_ranks_one_process(stack, tmp_path, data_dir):
    """Two epochs on 6,000 images in float64: the GPU's weights are NumPy's, and four ranks' one
    process's, to 1e-12."""
    common = ("--layers", stack, "--dtype", "float64", "--epochs", 2, "--train-size", 6000, "--data-dir", data_dir)
    ref, _ = _train(tmp_path, "numpy", *common, "--backend", "numpy")
    gpu, _ = _train(tmp_path, "cupy", *common, "--backend", "cupy")
    four, _ = _train(tmp_path, "four", *common, "--backend", "cupy", ranks=4)
    print(f"{stack}: GPU against NumPy {max_rel_diff(gpu, ref):.1e}, four ranks against one {max_rel_diff(four, gpu):.1e}")
    assert max_rel_diff(gpu, ref) <= 1e-12
    assert max_rel_diff(four, gpu) <= 1e-12


def test_lenet_graph_replay_equals_eager_steps_and_four_ranks_one_process(tmp_path, data_dir):
    common = ("--model", "lenet", "--dtype", "float64", "--epochs", 2, "--train-size", 3000, "--batch", 250,
              "--data-dir", data_dir, "--backend", "cupy")
    graph, _ = _train(tmp_path, "graph", *common)
    eager, _ = _train(tmp_path, "eager", *common, "--no-graph")
    assert max_rel_diff(graph, eager) == 0.0
    four, _ = _train(tmp_path, "four", *common, ranks=4)
    assert max_rel_diff(four, graph) <= 1e-7


def test_lenet_resume_on_the_gpu_equals_an_uninterrupted_run(tmp_path, data_dir):
    common = ("--model", "lenet", "--dtype", "float64", "--train-size", 3000, "--batch", 250, "--data-dir", data_dir,
              "--backend", "cupy", "--no-log", "--quiet")
    assert resume_difference(tmp_path, *common) == 0.0


def test_lenets_all_reduce_overlapped_in_a_captured_graph_equals_the_one_after_the_backward_pass(monkeypatch):
    """NCCL's place taken by a doubling on the current stream (two ranks with the same gradients):
    each layer's [dW_l, db_l] on the side branch right after that layer's weight gradient, captured
    with the steps into one graph, and eagerly, against the same buckets after the backward pass;
    float64, bit for bit."""
    monkeypatch.setattr(allreduce_module, "BUCKET_BYTES", 0)   # a bucket a layer
    import cupy

    from nn.cnn import CNN, CNNStep, init_cnn_params
    from nn.layers import LENET, parse_layers

    class Doubling:
        graph_safe = True

        def __init__(self, buckets):
            self.buckets = buckets

        def __call__(self, buf):
            cupy.multiply(buf, 2, out=buf)     # on the current stream: the side branch's, when there

    layers = parse_layers(LENET)
    rng = np.random.default_rng(5)
    x, y = rng.random((64, 784)), rng.integers(0, 10, 64).astype(np.int32)   # X: (64, 784)
    results = []
    for buckets, graphed in (("overlap", True), ("after", True), ("overlap", False)):
        bk = get_backend("cupy", "float64")
        step = CNNStep(CNN(bk, layers, "relu", init_cnn_params(layers, seed=2)), 64, 128, "adam", lr=0.01)
        xd, yd, reduce = bk.asarray(x), bk.asarray(y), Doubling(buckets)

        def steps():
            for _ in range(4):
                step.train_batch(xd, yd, allreduce=reduce)
        if graphed:
            bk.capture(steps).launch(bk.stream)
        else:
            steps()
        bk.synchronize()
        results.append(bk.to_numpy(step.model.flat).copy())
    assert np.isfinite(results[0]).all()
    assert all(np.array_equal(r, results[0]) for r in results[1:])
