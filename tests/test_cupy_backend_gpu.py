"""The GPU backends against the NumPy reference: each operation, then whole training runs."""
import numpy as np
import pytest

from nn import allreduce as allreduce_module

from nn.backends import get_backend
from nn.data import locate
from run_train import max_rel_diff, resume_difference, run_train, weights

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def data_dir():
    return str(locate("fashion-mnist"))


@pytest.mark.parametrize("name", ["cupy", "cublas"])
def test_operations_match_numpy(name):
    gpu, ref = get_backend(name, "float64"), get_backend("numpy", "float64")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((37, 29))                           # (B, D)
    w = rng.standard_normal((23, 29))                           # (H, D)
    bias = rng.standard_normal(23)                              # (H,)
    sig = rng.uniform(0.05, 0.95, (37, 29))                     # saved sigmoid output of the layer below (B, D)
    g = rng.standard_normal((37, 23))                           # (B, H)
    cases = [
        dict(a=x, b=w, trans_b=True, epilogue="bias_sigmoid", bias=bias),
        dict(a=x, b=w, trans_b=True, epilogue="bias_relu", bias=bias),
        dict(a=x, b=w, trans_b=True, epilogue="bias", bias=bias),
        dict(a=g, b=w, epilogue="dsigmoid", aux=sig, out_shape=(37, 29)),
        dict(a=g, b=x, trans_a=True, alpha=-0.1, beta=0.99, c=w),
    ]
    for case in cases:
        out_shape = case.pop("out_shape", None)
        results = []
        for bk in (gpu, ref):
            args = {k: bk.asarray(v) if isinstance(v, np.ndarray) else v for k, v in case.items()}
            a, b = args.pop("a"), args.pop("b")
            shape = out_shape or (a.shape[1] if args.get("trans_a") else a.shape[0],
                                  b.shape[0] if args.get("trans_b") else b.shape[1])
            out = args["c"] if "c" in args else bk.empty(shape)
            results.append(bk.to_numpy(bk.gemm(a, b, out, **args)))
        np.testing.assert_allclose(*results, rtol=1e-12, atol=1e-12)

    z = rng.standard_normal((37, 10)) * 4
    labels = rng.integers(0, 10, 37)
    grads, losses = [], []
    for bk in (gpu, ref):
        grad, loss = bk.empty((37, 10)), bk.zeros((1,))
        bk.softmax_xent(bk.asarray(z), bk.asarray(labels), grad, 1 / 37, loss)
        grads.append(bk.to_numpy(grad))
        losses.append(float(bk.to_numpy(loss)[0]))
    np.testing.assert_allclose(*grads, rtol=1e-12, atol=1e-14)
    assert losses[0] == pytest.approx(losses[1], rel=1e-12)

    a1 = rng.uniform(0.05, 0.95, (37, 29))                      # saved sigmoid output (B, H)
    w2 = rng.standard_normal((10, 29))                          # (C, H)
    b2 = rng.standard_normal(10)                                # (C,)
    heads = []
    for bk in (gpu, ref):
        logits, grad, grad_in, loss = bk.empty((37, 10)), bk.empty((37, 10)), bk.empty((37, 29)), bk.zeros((1,))
        bk.linear_xent(bk.asarray(a1), bk.asarray(w2), bk.asarray(b2), bk.asarray(labels), logits, grad,
                       1 / 37, loss, grad_in, "sigmoid")
        heads.append([bk.to_numpy(x) for x in (logits, grad, grad_in, loss)])
    for got, want in zip(*heads):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)

    b1_host = rng.standard_normal(29)                           # (H,)
    back = []                                   # the output layer's backward pass: as gradients, and as the SGD step
    for bk in (gpu, ref):
        g2, a1_, w2_ = bk.asarray(heads[0][1]), bk.asarray(a1), bk.asarray(w2)
        grad_in, dw, db = bk.empty((37, 29)), bk.empty((10, 29)), bk.empty(29)
        bk.linear_backward(g2, w2_, a1_, grad_in, "sigmoid", dw, db)
        b1 = bk.asarray(b1_host)
        bk.linear_backward(g2, w2_, a1_, bk.empty((37, 29)), "sigmoid", w2_, b1, alpha=-0.1, beta=0.99,
                           accumulate_db=True)
        back.append([bk.to_numpy(x) for x in (grad_in, dw, db, w2_, b1)])
    for got, want in zip(*back):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)

    sums = [bk.to_numpy(bk.column_sums(bk.asarray(g), bk.empty(23), 0.5)) for bk in (gpu, ref)]
    np.testing.assert_allclose(*sums, rtol=1e-12)
    updated = [bk.to_numpy(bk.sgd_update(bk.asarray(w), bk.asarray(w * 0.3), 0.1, 1e-3)) for bk in (gpu, ref)]
    np.testing.assert_allclose(*updated, rtol=1e-14)


@pytest.mark.parametrize("rows", [64, 2048])
@pytest.mark.parametrize("apart", [False, True], ids=["output-backward-with-forward", "output-backward-apart"])
def test_one_rank_steps_match_numpy_with_the_output_layers_backward_pass_either_way(apart, rows, monkeypatch):
    """Three fused one-rank steps in float64, the output layer's gradient carried down by linear_xent
    or apart by linear_backward (with the W2 and b1 steps in place; on 2048 rows its default splits
    them in 16 slices), against the NumPy backend."""
    from nn import mlp

    monkeypatch.setattr(mlp, "OUTPUT_BACKWARD_APART_BYTES", -1 if apart else 2**62)
    rng = np.random.default_rng(7)
    sizes = (50, 40, 10)
    params = [(w * 30, rng.standard_normal(b.shape) * 0.1) for w, b in mlp.init_params(sizes, "cme213", 7)]
    x, y = rng.standard_normal((rows, 50)), rng.integers(0, 10, rows)            # X: (rows, 50), labels (rows,)
    results = []
    for name in ("cupy", "numpy"):
        bk = get_backend(name, "float64")
        model = mlp.MLP(bk, sizes, "sigmoid", params)
        step = mlp.Step(model, rows, rows, lr=0.3, reg=0.01)
        assert step.output_backward_apart == apart
        for _ in range(3):
            step.train_batch(bk.asarray(x), bk.asarray(y))
        results.append(model.params_numpy())
    for (w_gpu, b_gpu), (w_ref, b_ref) in zip(*results):
        np.testing.assert_allclose(w_gpu, w_ref, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(b_gpu, b_ref, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_a_column_major_first_gradient_trains_as_a_row_major_one(precision, monkeypatch):
    """Past the apart threshold a float32 two-layer step may have linear_backward store G1
    column-major and W1's GEMM read G1^T K-major (the backend's choice at tf32): three fused steps on
    2048 rows match the same steps with G1 row-major (the GEMM reading G1 M-major) and NumPy in
    float64, at each precision that may choose it."""
    from nn import mlp
    from nn.backends.storage import Storage

    monkeypatch.setattr(mlp, "OUTPUT_BACKWARD_APART_BYTES", -1)
    assert Storage("float32", precision).column_major_input_gradient(10) == (precision == "tf32")
    rng = np.random.default_rng(8)
    sizes, rows = (96, 128, 10), 2048
    params = [(w * 30, rng.standard_normal(b.shape) * 0.1) for w, b in mlp.init_params(sizes, "cme213", 8)]
    x, y = rng.standard_normal((rows, 96)), rng.integers(0, 10, rows)            # X: (rows, 96), labels (rows,)
    results = {}
    for layout in ("column-major", "row-major", "numpy"):
        monkeypatch.setattr(Storage, "column_major_input_gradient", lambda *args: layout == "column-major")
        bk = get_backend("numpy", "float64") if layout == "numpy" else get_backend("cupy", "float32", precision=precision)
        step = mlp.Step(mlp.MLP(bk, sizes, "sigmoid", params), rows, rows, lr=0.3, reg=0.01)
        assert (step.deltas[0].strides[0] == step.deltas[0].itemsize) == (layout == "column-major")
        for _ in range(3):
            step.train_batch(bk.asarray(x), bk.asarray(y))
        results[layout] = step.model.params_numpy()
    tol = {"fp32": 1e-5, "tf32": 2e-3}[precision]
    for layout in ("row-major", "numpy"):
        for got, want in zip(results["column-major"], results[layout]):
            for g, w in zip(got, want):
                assert np.max(np.abs(g - w)) <= tol * np.max(np.abs(w)), layout


def _train(tmp_path, name, *args, ranks=None):
    ckpt = tmp_path / f"{name}.npz"
    out = run_train(tmp_path, *args, "--checkpoint", ckpt, "--no-log", "--quiet", ranks=ranks, timeout=600)
    assert out.returncode == 0, out.stderr
    return weights(ckpt), out.stdout


# Modes 2 and 3 (lr 0.01 and 0.025 on raw 0-255 pixels) are chaotic on Fashion-MNIST: NumPy itself,
# run with 1 and then 2 BLAS threads, ends mode 2 with weights 8% apart. Rounding differences grow
# until then, so those modes are compared while they are still small (1 epoch; 16,000 images).
@pytest.mark.parametrize("mode,extra", [(1, ()), (2, ("--epochs", 1)), (3, ("--train-size", 16000))])
def test_grading_modes_match_numpy_float64(mode, extra, tmp_path, data_dir):
    """CME 213's check: W1, b1, W2, b2 after each grading mode within 1e-7 (max-norm relative)."""
    common = ("--grading-mode", mode, "--data-dir", data_dir, *extra)
    ref, _ = _train(tmp_path, "numpy", *common, "--backend", "numpy")
    gpu, _ = _train(tmp_path, "cupy", *common, "--backend", "cupy")
    assert max_rel_diff(gpu, ref) <= 1e-7


def test_a_side_branch_hands_the_stream_back():
    """Leaving CuPy's `with stream:` makes the NULL stream current, not the one before it (H100,
    CuPy 14): work enqueued after a branch would escape the captured graph. The branch uses use()."""
    import cupy

    bk = get_backend("cupy", "float32")
    for lane in (0, 2):
        with bk.side_branch(lane):
            assert cupy.cuda.get_current_stream().ptr == bk._lanes[lane][0].ptr != bk.stream.ptr
        assert cupy.cuda.get_current_stream().ptr == bk.stream.ptr
    bk.join_branch()
    assert cupy.cuda.get_current_stream().ptr == bk.stream.ptr


def test_graph_replay_equals_eager_steps(tmp_path, data_dir):
    common = ("--hidden", 64, "--epochs", 2, "--dtype", "float64", "--data-dir", data_dir, "--backend", "cupy")
    graph, _ = _train(tmp_path, "graph", *common)
    eager, _ = _train(tmp_path, "eager", *common, "--no-graph")
    assert max_rel_diff(graph, eager) == 0.0


def test_four_ranks_on_one_gpu_match_one_process(tmp_path, data_dir):
    common = ("--hidden", 64, "--epochs", 2, "--batch", 30, "--train-size", 3000, "--dtype", "float64",
              "--data-dir", data_dir, "--backend", "cupy")
    one, _ = _train(tmp_path, "one", *common)
    four, _ = _train(tmp_path, "four", *common, ranks=4)
    assert max_rel_diff(four, one) <= 1e-7


def test_float32_accuracy_matches_numpy(tmp_path, data_dir):
    """The default network in float32: test accuracy within 0.5 points of the NumPy run."""
    common = ("--epochs", 10, "--data-dir", data_dir)
    accuracies = []
    for name in ("numpy", "cupy"):
        _, stdout = _train(tmp_path, name, *common, "--backend", name)
        accuracies.append(float(stdout.split("test accuracy ")[1].split("%")[0]))
    assert abs(accuracies[0] - accuracies[1]) <= 0.5, accuracies


def test_nccl_and_mpi_allreduce_agree(tmp_path, data_dir):
    """Two ranks: MPI through the host, and NCCL (one GPU per rank, else skipped), as one process."""
    import cupy

    common = ("--hidden", 64, "--epochs", 1, "--batch", 30, "--train-size", 3000, "--dtype", "float64",
              "--data-dir", data_dir, "--backend", "cupy")
    one, _ = _train(tmp_path, "one", *common)
    via_mpi, _ = _train(tmp_path, "mpi", *common, ranks=2)
    assert max_rel_diff(via_mpi, one) <= 1e-7
    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("NCCL needs one GPU per rank")
    via_nccl, _ = _train(tmp_path, "nccl", *common, "--allreduce", "nccl", ranks=2)
    assert max_rel_diff(via_nccl, one) <= 1e-7


def test_resume_on_the_gpu_equals_an_uninterrupted_run(tmp_path, data_dir):
    common = ("--hidden", 64, "--dtype", "float64", "--train-size", 8000, "--data-dir", data_dir,
              "--backend", "cupy", "--no-log", "--quiet")
    assert resume_difference(tmp_path, *common) == 0.0


def test_an_all_reduce_overlapped_in_a_captured_graph_equals_the_one_after_the_backward_pass(monkeypatch):
    """NCCL's place taken by a doubling on the current stream (two ranks with the same gradients):
    each layer's bucket on the side branch during the backward pass, captured with the steps into
    one graph, against the same buckets after the backward pass; float64, bit for bit."""
    monkeypatch.setattr(allreduce_module, "BUCKET_BYTES", 0)   # a bucket a layer
    import cupy

    from nn.mlp import MLP, Step, init_params

    class Doubling:
        graph_safe = True

        def __init__(self, buckets):
            self.buckets = buckets

        def __call__(self, buf):
            cupy.multiply(buf, 2, out=buf)     # on the current stream: the side branch's, when there

    rng = np.random.default_rng(3)
    x, y = rng.random((64, 784)), rng.integers(0, 10, 64).astype(np.int32)   # X: (64, 784)
    sizes = (784, 300, 100, 10)
    results = []
    for buckets in ("overlap", "after"):
        bk = get_backend("cupy", "float64")
        step = Step(MLP(bk, sizes, "relu", init_params(sizes, "he")), 64, 128, lr=0.1, reg=0.01)
        xd, yd, reduce = bk.asarray(x), bk.asarray(y), Doubling(buckets)
        graph = bk.capture(lambda: [step.train_batch(xd, yd, allreduce=reduce) for _ in range(4)])
        graph.launch(bk.stream)
        bk.synchronize()
        results.append(step.model.params_numpy())
    for (w0, b0), (w1, b1) in zip(*results):
        assert np.array_equal(w0, w1) and np.array_equal(b0, b1)


def test_reduced_precisions_train_as_fp32_does(tmp_path, data_dir):
    """--precision tf32 and bf16 (GEMM operands rounded, float32 weights and sums): the default
    network's test accuracy within a point of fp32's after 2 epochs on 12,000 images, and weights
    that differ from fp32's (the rounding happened) but stay near them."""
    import re

    from autogemm.runtime.device import this_device

    if this_device().compute_capability != "9.0":
        pytest.skip("the reduced-precision kernels are Hopper's (gemm_wgmma)")
    common = ("--epochs", 2, "--train-size", 12000, "--data-dir", data_dir, "--use-tuned")
    runs = {p: _train(tmp_path, p, *common, "--precision", p) for p in ("fp32", "tf32", "bf16")}
    accuracy = {p: float(re.search(r"test accuracy ([\d.]+)%", out)[1]) for p, (_, out) in runs.items()}
    for p in ("tf32", "bf16"):
        assert abs(accuracy[p] - accuracy["fp32"]) <= 1.0, accuracy
        assert 1e-6 < max_rel_diff(runs[p][0], runs["fp32"][0]) < 0.1, p


def test_tf32_weight_gemms_read_the_datas_column_major_copy():
    """At precision tf32 the backend keeps a column-major copy of read-only data, and a weight GEMM
    G^T X reads X's rows from it K-major, aligned to 16 bytes or not: no staging copy of X, and each
    result within TF32's bound of float64's. At fp32 there is no copy."""
    import cupy

    from autogemm.tuning.verify import compare
    from kernels.gemm.call import Problem, reference

    rng = np.random.default_rng(31)
    x_host = rng.standard_normal((1000, 784)).astype(np.float32)
    g_host = rng.standard_normal((1000, 256)).astype(np.float32)
    bk = get_backend("cupy", "float32", tuned=True, precision="tf32")
    x = bk.read_only(bk.asarray(x_host))                                # X: (1000, 784) float32
    g = bk.asarray(g_host)                                              # G: (1000, 256) float32
    dw = bk.empty((256, 784))
    (source, copy), = bk.storage.column_major
    assert source is x and copy.strides[0] == 4 and np.array_equal(cupy.asnumpy(copy), x_host)
    for first, rows in ((0, 800), (800, 200), (3, 401)):
        bk.gemm(g[first:first + rows], x[first:first + rows], dw, trans_a=True)
        want, magnitude, _ = reference(Problem(256, 784, rows, trans_a=True), g_host[first:first + rows].astype(np.float64),
                                       x_host[first:first + rows].astype(np.float64))["d"]
        verdict = compare(cupy.asnumpy(dw), want, magnitude, rows, np.float32, "tf32")
        assert verdict.ok, (first, rows, verdict.describe())
        plan = bk._plans[next(reversed(bk._plans))]
        staged = {args[0].data.ptr for _, args in plan.staging}        # the sources of its staging copies
        assert staged <= {g[first:].data.ptr}, (first, rows, plan.instance.name)
    fp32 = get_backend("cupy", "float32", precision="fp32")
    fp32.read_only(fp32.asarray(x_host))
    assert fp32.storage.column_major == []


def test_bf16_gemms_read_bfloat16_copies_of_their_operands():
    """At precision bf16 the backend's GEMMs multiply the bfloat16 values of their operands: a
    read-only array's copy (a row slice of it too), a weight rounded again before each call (after
    it changed), a gradient of rows of 10 floats too (the tiled family reads any rows). Each result
    within float32's bound of the bfloat16 values' product; the plan's kernel reads uint16."""
    import cupy

    from autogemm.runtime.device import this_device
    from autogemm.tuning.verify import compare
    from kernels.bf16 import bf16_bits
    from kernels.gemm.call import Problem, reference

    if this_device().compute_capability != "9.0":
        pytest.skip("bfloat16 operands are read by Hopper's kernels (gemm_wgmma)")
    bk = get_backend("cupy", "float32", tuned=True, precision="bf16")
    rng = np.random.default_rng(19)
    x_host = rng.standard_normal((1000, 784)).astype(np.float32)
    x = bk.read_only(bk.asarray(x_host))                                # X: (1000, 784) float32
    w = bk.asarray(rng.standard_normal((512, 784)).astype(np.float32))  # W: (512, 784) float32
    out = bk.empty((800, 512))

    def rounded(a):
        return (bf16_bits(a).astype(np.uint32) << 16).view(np.float32).astype(np.float64)

    for step in range(2):
        bk.gemm(x[100:900], w, out, trans_b=True)
        want, magnitude, _ = reference(Problem(800, 512, 784, trans_b=True), rounded(x_host[100:900]),
                                       rounded(cupy.asnumpy(w)))["d"]
        verdict = compare(cupy.asnumpy(out), want, magnitude, 784, np.float32)
        assert verdict.ok, (step, verdict.describe())
        w *= 1.5                                                        # the copy must follow
    (plan,) = bk._plans.values()
    assert plan.gemm.instance.name.startswith("gemm_wgmma_bf16_") and len(plan.rounding) == 1   # W alone
    g = bk.asarray(rng.standard_normal((800, 10)).astype(np.float32))   # G: (800, 10), rows of 40 bytes
    dw = bk.empty((10, 784))
    bk.gemm(g, x[:800], dw, trans_a=True)
    assert len(bk._plans[next(reversed(bk._plans))].rounding) == 1              # G rounded, X's copy made
    want, magnitude, _ = reference(Problem(10, 784, 800, trans_a=True), rounded(cupy.asnumpy(g)),
                                   rounded(x_host[:800]))["d"]
    assert compare(cupy.asnumpy(dw), want, magnitude, 800, np.float32).ok


def test_a_gemm_at_its_own_precision_reads_float32_operands_as_the_fp32_backend_does():
    """gemm(precision="fp32") on a bf16 backend (a CNN's dense-stack weight gradients, float32 as the
    stack trains): no bfloat16 copies, the fp32 backend's kernel, the same bits."""
    import cupy

    rng = np.random.default_rng(23)
    g_host = rng.standard_normal((1000, 128)).astype(np.float32)     # G: (1000, 128)
    a_host = rng.standard_normal((1000, 250)).astype(np.float32)     # A: (1000, 250)
    results = []
    for precision in ("bf16", "fp32"):
        bk = get_backend("cupy", "float32", tuned=True, precision=precision)
        dw = bk.empty((128, 250))
        bk.gemm(bk.asarray(g_host), bk.asarray(a_host), dw, trans_a=True, precision="fp32")
        (plan,) = bk._plans.values()
        assert not hasattr(plan, "rounding")
        results.append(cupy.asnumpy(dw))
    assert np.array_equal(*results)


@pytest.mark.parametrize("writer", ["linear_xent", "linear_backward"])
def test_bf16_input_gradient_is_written_in_bfloat16_by_the_output_layer(writer):
    """At precision bf16 the output layer's kernel that makes its input gradient writes it in bfloat16
    (a buffer's first rows, then fewer of them): linear_xent beside its float32 values, linear_backward
    (as the MLP's step calls it) alone, its float32 array never written and refused to a reader. The
    weight-gradient GEMM reading the copy rounds nothing: its result within float32's bound of the
    bfloat16 values' product, each step's."""
    import cupy

    from autogemm.runtime.device import this_device
    from autogemm.tuning.verify import compare
    from kernels.bf16 import bf16_bits
    from kernels.gemm.call import Problem, reference
    from nn.errors import NNError

    if this_device().compute_capability != "9.0":
        pytest.skip("bfloat16 operands are read by Hopper's kernels (gemm_wgmma)")
    bk = get_backend("cupy", "float32", tuned=True, precision="bf16")
    rng = np.random.default_rng(23)
    x_host = rng.standard_normal((800, 784)).astype(np.float32)
    x = bk.read_only(bk.asarray(x_host))                                        # X: (800, 784)
    a1 = bk.asarray(rng.uniform(0.01, 0.99, (800, 256)))                        # A1: (800, 256) sigmoid outputs
    w2, b2 = bk.asarray(rng.standard_normal((10, 256)) / 16), bk.asarray(rng.standard_normal(10))
    labels = bk.asarray(rng.integers(0, 10, 800))
    logits, grad, grad_in = bk.empty((800, 10)), bk.empty((800, 10)), bk.empty((800, 256))
    loss, dw, b1 = bk.zeros((1,)), bk.empty((256, 784)), bk.zeros((256,))
    grad_in.fill(np.nan)

    def rounded(a):
        return (bf16_bits(a).astype(np.uint32) << 16).view(np.float32).astype(np.float64)

    for rows in (800, 500, 800):
        if writer == "linear_xent":
            bk.linear_xent(a1[:rows], w2, b2, labels[:rows], logits[:rows], grad[:rows], 1 / 800, loss, grad_in[:rows],
                           "sigmoid")
        else:
            bk.linear_xent(a1[:rows], w2, b2, labels[:rows], logits[:rows], grad[:rows], 1 / 800, loss)
            bk.linear_backward(grad[:rows], w2, a1[:rows], grad_in[:rows], "sigmoid", w2, b1, alpha=-0.1, beta=1.0,
                               accumulate_db=True)
        bk.gemm(grad_in[:rows], x[:rows], dw, trans_a=True)
        copy = cupy.asnumpy(bk.storage.bf16_copy(grad_in[:rows])[0])                   # G_in's bfloat16 bits
        g = (copy.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        want, magnitude, _ = reference(Problem(256, 784, rows, trans_a=True), g, rounded(x_host[:rows]))["d"]
        verdict = compare(cupy.asnumpy(dw), want, magnitude, rows, np.float32)
        assert verdict.ok, (rows, verdict.describe())
        plan = bk._plans[next(reversed(bk._plans))]
        assert plan.gemm.instance.name.startswith("gemm_wgmma_bf16_") and plan.rounding == [], rows
        written = cupy.asnumpy(grad_in[:rows])
        if writer == "linear_xent":
            assert np.array_equal(copy, bf16_bits(written))
        else:
            assert np.isnan(written).all()
        w2 *= 1.5                                                                # the next step's G_in differs
    if writer == "linear_backward":
        with pytest.raises(NNError, match="written in bfloat16 alone"):
            bk.column_sums(grad_in, b1)


def test_a_bf16_alone_input_gradient_is_read_in_bfloat16():
    """At precision bf16 linear_backward writes G1 in bfloat16 alone; the weight GEMM that reads it
    (rows of 250 floats) multiplies those bfloat16 values (reading the copy, or widened back into G1
    where no kernel reads it so), and column sums of it, which the step never takes, are refused,
    not garbage."""
    import cupy

    from autogemm.tuning.verify import compare
    from kernels.gemm.call import Problem, reference
    from nn.errors import NNError

    bk = get_backend("cupy", "float32", tuned=True, precision="bf16")
    rng = np.random.default_rng(29)
    x_host = rng.standard_normal((300, 784)).astype(np.float32)
    x = bk.read_only(bk.asarray(x_host))                                        # X: (300, 784)
    a1 = bk.asarray(rng.uniform(0.01, 0.99, (300, 250)))                        # A1: (300, 250) sigmoid outputs
    g2 = bk.asarray(rng.standard_normal((300, 10)) / 300)                       # G2: (300, 10)
    w2, b1 = bk.asarray(rng.standard_normal((10, 250)) / 16), bk.zeros((250,))
    grad_in, dw = bk.empty((300, 250)), bk.empty((250, 784))
    grad_in.fill(np.nan)
    bk.linear_backward(g2, w2, a1, grad_in, "sigmoid", w2, b1, alpha=-0.1, beta=1.0, accumulate_db=True)
    bk.gemm(grad_in, x, dw, trans_a=True)
    copy = cupy.asnumpy(bk.storage.bf16_copy(grad_in)[0])
    g = (copy.astype(np.uint32) << 16).view(np.float32)
    assert not np.isnan(g).any()
    want, magnitude, _ = reference(Problem(250, 784, 300, trans_a=True), g.astype(np.float64), x_host)["d"]
    verdict = compare(cupy.asnumpy(dw), want, magnitude, 300, np.float32, "bf16")
    assert verdict.ok, verdict.describe()
    with pytest.raises(NNError, match="written in bfloat16 alone"):
        bk.column_sums(grad_in, b1)


@pytest.mark.parametrize("apart", [False, True], ids=["output-backward-with-forward", "output-backward-apart"])
def test_bf16_output_layer_input_is_stored_in_bfloat16_alone_where_its_backward_pass_goes_apart(apart, monkeypatch):
    """At precision bf16, where the output layer's backward pass goes apart, a two-layer step's A1 is
    written by its GEMM in bfloat16 alone (a uint16 D, its float32 array never written) and read so
    by linear_xent and linear_backward; otherwise (the weight GEMM G2^T A1 reads it, which rows of
    10 classes keep in float32) it stays float32. Three fused steps either way stay within bf16
    rounding of the same steps at fp32. A derivative epilogue reading a bfloat16-alone A1 gets it
    widened back first."""
    import cupy

    from autogemm.runtime.device import this_device
    from nn import mlp

    if this_device().compute_capability != "9.0":
        pytest.skip("a bfloat16 D is written by Hopper's kernels (gemm_wgmma)")
    monkeypatch.setattr(mlp, "OUTPUT_BACKWARD_APART_BYTES", -1 if apart else 2**62)
    rng = np.random.default_rng(37)
    sizes, rows = (784, 256, 10), 800
    params = [(w * 30, rng.standard_normal(b.shape) * 0.1) for w, b in mlp.init_params(sizes, "cme213", 37)]
    x, y = rng.standard_normal((rows, 784)), rng.integers(0, 10, rows)           # X: (rows, 784), labels (rows,)
    results = {}
    for precision in ("bf16", "fp32"):
        bk = get_backend("cupy", "float32", tuned=True, precision=precision)
        step = mlp.Step(mlp.MLP(bk, sizes, "sigmoid", params), rows, rows, lr=0.3, reg=0.01)
        step.acts[0].fill(np.nan)
        data = bk.read_only(bk.asarray(x))
        for _ in range(3):
            step.train_batch(data, bk.asarray(y))
        results[precision] = step.model.params_numpy()
        if precision == "bf16":
            assert any(a is step.acts[0] for a in bk.storage.bf16_only) == apart
            assert np.isnan(cupy.asnumpy(step.acts[0])).all() == apart         # never written in float32
            outputs = [_gemm_call(p).out.dtype for p in bk._plans.values()]
            assert (np.uint16 in outputs) == apart
    for got, want in zip(results["bf16"], results["fp32"]):
        for g, w in zip(got, want):
            assert 0 < np.max(np.abs(g - w)) <= 2e-2 * np.max(np.abs(w))


def test_a_bf16_alone_output_layer_input_is_widened_for_a_derivative_epilogue():
    """A1 stored in bfloat16 alone (the backend's empty_output_layer_input at bf16), written by a GEMM
    into its bfloat16 copy: a derivative epilogue reading it as aux gets its values widened back into
    the float32 array first, bit for bit."""
    import cupy

    from autogemm.runtime.device import this_device

    if this_device().compute_capability != "9.0":
        pytest.skip("a bfloat16 D is written by Hopper's kernels (gemm_wgmma)")
    bk = get_backend("cupy", "float32", tuned=True, precision="bf16")
    rng = np.random.default_rng(41)
    a1, plan = _forward_into_a1(bk, rng)
    assert _gemm_call(plan).instance.name.endswith("_d16") and np.isnan(cupy.asnumpy(a1)).all()
    bits = cupy.asnumpy(bk.storage.bf16_copy(a1)[0])
    g = bk.asarray(rng.standard_normal((800, 256)))
    out = bk.empty((800, 256))
    bk.gemm(g, bk.asarray(np.eye(256)), out, epilogue="dsigmoid", aux=a1)     # G a1 (1 - a1)
    a1_values = (bits.astype(np.uint32) << 16).view(np.float32)
    assert np.array_equal(cupy.asnumpy(a1), a1_values)
    want = cupy.asnumpy(g).astype(np.float64) * a1_values * (1 - a1_values)
    assert np.max(np.abs(cupy.asnumpy(out) - want)) <= 1e-2 * np.max(np.abs(want))


def _forward_into_a1(bk, rng):
    """A1 = sigmoid(X W1^T + b1) into an empty_output_layer_input array (800, 256), poisoned with NaNs
    first, by the backend's GEMM: (A1, the plan it made)."""
    x = bk.read_only(bk.asarray(rng.standard_normal((800, 784))))             # X: (800, 784)
    w1, b1 = bk.asarray(rng.standard_normal((256, 784)) / 28), bk.asarray(rng.standard_normal(256))
    a1 = bk.empty_output_layer_input((800, 256))                                # A1: (800, 256)
    a1.fill(np.nan)
    bk.gemm(x, w1, a1, trans_b=True, epilogue="bias_sigmoid", bias=b1)
    (plan,) = bk._plans.values()
    return a1, plan


def _gemm_call(plan):
    """The autogemm GemmCall inside a backend plan (RoundedGemm wrappers unwrapped)."""
    while hasattr(plan, "rounding"):
        plan = plan.gemm
    return plan


def test_a1_in_bfloat16_alone_is_rounded_into_where_no_kernel_writes_bfloat16(monkeypatch):
    """Where no kernel writes a bfloat16 D for a shape, the GEMM into a bfloat16-alone A1 writes float32
    and rounds the result into A1's copy after it (to_bf16): the copy holds the rounded float32 values,
    bit for bit. A copy written at an odd 2-byte offset by gemm_wgmma itself matches float64 too."""
    import cupy

    import autogemm
    from autogemm.runtime.device import this_device
    from autogemm.tuning.verify import OPERAND_ROUNDING, compare
    from kernels.bf16 import bf16_bits, bf16_values
    from kernels.gemm.call import Problem, reference
    from nn.backends import cupy_backend

    if this_device().compute_capability != "9.0":
        pytest.skip("A1 is stored in bfloat16 on Hopper alone")
    planned = cupy_backend.autogemm.plan_gemm

    def no_bfloat16_d(a, b, out, *args, **kw):
        if out.dtype == np.uint16:
            raise autogemm.InvalidConfig("no kernel writes a bfloat16 D here")
        return planned(a, b, out, *args, **kw)

    monkeypatch.setattr(cupy_backend.autogemm, "plan_gemm", no_bfloat16_d)
    bk = get_backend("cupy", "float32", tuned=True, precision="bf16")
    a1, plan = _forward_into_a1(bk, np.random.default_rng(43))
    assert _gemm_call(plan).out is a1 and len(plan.after) == 1
    assert np.array_equal(cupy.asnumpy(bk.storage.bf16_copy(a1)[0]), bf16_bits(cupy.asnumpy(a1)))
    monkeypatch.undo()

    rng_host = np.random.default_rng(44)
    a_host, b_host = (rng_host.standard_normal(s).astype(np.float32) for s in ((300, 264), (132, 264)))
    room = cupy.full(300 * 132 + 1, 0x7fc0, np.uint16)
    out = room[1:].reshape(300, 132)                                            # D: 2 bytes past a 4-byte boundary
    autogemm.gemm(cupy.asarray(a_host), cupy.asarray(b_host), out, trans_b=True, precision="bf16")
    value, magnitude, _ = reference(Problem(300, 132, 264, trans_b=True, precision="bf16"), a_host, b_host)["d"]
    verdict = compare(bf16_values(cupy.asnumpy(out)), value, magnitude, 264, np.float32, "bf16",
                      output_rounding=OPERAND_ROUNDING["bf16"])
    assert verdict.ok and int(cupy.asnumpy(room[0])) == 0x7fc0, verdict.describe()
