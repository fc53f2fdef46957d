"""nn.targets: the tuning targets of `autogemm tune --shapes nn`, recorded from the MLP's Step."""
import time

import numpy as np
import pytest

from autogemm import Target
from nn.errors import NNError
from nn.recorder import record_step
from nn.targets import step_rows, step_targets


def launches(targets) -> set:
    return {(t.family, t.sizes, t.op) for t in targets}


def test_step_rows_full_partial_and_per_rank():
    assert step_rows(800, 54_000, 1) == [800, 400]
    assert step_rows(800, 54_000, 4) == [200, 100]
    assert step_rows(800, 54_000, 3) == [267, 266, 134, 133]       # np.array_split sizes
    assert step_rows(800, 1600, 1) == [800]                          # no partial batch
    assert step_rows(800, 500, 1) == [500]                           # one short batch
    assert step_rows(4, 10, 8) == [1]                                # zero shares left out


def test_the_one_rank_step_of_the_default_network():
    """One rank: the forward GEMM with its fused bias and sigmoid, the output layer in one kernel,
    and the fused updates (in-place GEMMs, bias column sums); no gradient buffer, no SGD kernel.
    Each GEMM is a target of both its implementations (the tuner leaves to gemm what gemm_wgmma
    cannot run)."""
    targets = record_step(800, 800, (784, 1000, 10), "sigmoid", ranks=1)
    assert [(str(t), t.role) for t in targets] == [
        ("gemm 800x1000x784:nt+bias_sigmoid", "A1 = bias_sigmoid(A0 W1^T, b1)"),
        ("gemm_wgmma 800x1000x784:nt+bias_sigmoid", "A1 = bias_sigmoid(A0 W1^T, b1)"),
        ("linear_xent 800x10x1000:sigmoid", "Z, G2, G1 from A1 W2^T"),
        ("gemm 10x1000x800:tn", "W2 = G2^T A1"),
        ("gemm_wgmma 10x1000x800:tn", "W2 = G2^T A1"),
        ("colsum 800x1000", "b1 += column sums of G1"),
        ("colsum 800x10", "b2 += column sums of G2"),
        ("gemm 1000x784x800:tn", "W1 = G1^T A0"),
        ("gemm_wgmma 1000x784x800:tn", "W1 = G1^T A0"),
    ]


def test_the_large_networks_output_layer_has_a_backward_pass_of_its_own():
    """A large output-layer input (8192 x 4096 float32) is read once going back: linear_backward
    makes G1 with the W2 and b1 steps (one rank) or dW2 and db1 (two), after the forward-only
    linear_xent; no GEMM or column sums of the output layer's own. At precision tf32 G1 is stored
    transposed (op sigmoid_t) and X has a column-major copy, so that W1's GEMM reads G1^T and X
    K-major ("nt"); else both are row-major ("tn")."""
    one = record_step(8192, 8192, (784, 4096, 10), "sigmoid", ranks=1)
    assert [(str(t), t.role) for t in one if t.family.startswith(("linear", "colsum"))] == [
        ("linear_xent 8192x10x4096", "Z, G2 from A1 W2^T"),
        ("linear_backward 8192x10x4096:sigmoid", "G1, W2 step, b1 step from G2 W2, A1"),
        ("colsum 8192x10", "b2 += column sums of G2")]
    assert ("gemm", (4096, 784, 8192), "tn", "W1 = G1^T A0") in {(t.family, t.sizes, t.op, t.role) for t in one}
    assert not any(t.family.startswith("gemm") and t.sizes == (10, 4096, 8192) for t in one)
    tf32 = launches(record_step(8192, 8192, (784, 4096, 10), "sigmoid", ranks=1, precision="tf32"))
    assert {("linear_backward", (8192, 10, 4096), "sigmoid_t"), ("gemm", (4096, 784, 8192), "nt")} <= tf32
    bf16 = launches(record_step(8192, 8192, (784, 4096, 10), "sigmoid", ranks=1, precision="bf16"))
    assert {("linear_backward", (8192, 10, 4096), "sigmoid"), ("gemm", (4096, 784, 8192), "tn")} <= bf16
    two = launches(record_step(4096, 8192, (784, 4096, 10), "sigmoid", ranks=2, precision="tf32"))
    assert {("linear_xent", (4096, 10, 4096), "-"), ("linear_backward", (4096, 10, 4096), "sigmoid_t"),
            ("colsum", (4096, 10), "-"), ("gemm", (4096, 784, 4096), "nt")} <= two
    assert ("colsum", (4096, 4096), "-") not in two and ("gemm", (10, 4096, 4096), "tn") not in two


@pytest.mark.parametrize("precision, op", [("fp32", "tn"), ("tf32", "tt"), ("bf16", "tn")])
def test_at_tf32_the_first_weight_gemm_reads_the_datas_column_major_copy(precision, op):
    """At precision tf32 the read-only data has a column-major copy (as the cupy backend keeps it), so
    W1's GEMM G1^T X reads X K-major: op "tt" on the CME 213 network's full and last batches and on
    each rank's share; the forward GEMM reads X row-major, as it is K-major there."""
    for ranks, rows in ((1, 800), (1, 400), (4, 200)):
        steps = launches(record_step(rows, 800, (784, 1000, 10), "sigmoid", ranks=ranks, precision=precision))
        assert {("gemm", (1000, 784, rows), op), ("gemm", (rows, 1000, 784), "nt+bias_sigmoid")} <= steps


def test_a_column_major_output_or_column_sums_input_is_an_internal_error():
    """The recorder refuses what the GPU backend's kernels would: a GEMM writing a column-major
    array, or column sums of one."""
    from nn.recorder import LaunchRecorder

    rec = LaunchRecorder()
    column_major = np.empty((6, 4), np.float32).T                              # (4, 6), unit stride down columns
    with pytest.raises(NNError, match="internal error: the step hands a column-major GEMM output"):
        rec.gemm(np.empty((4, 3), np.float32), np.empty((3, 6), np.float32), column_major)
    with pytest.raises(NNError, match="column sums' input"):
        rec.column_sums(column_major, np.empty(6, np.float32))


def test_more_ranks_add_their_shares_gradients_and_sgd_updates():
    targets = step_targets(ranks=(1, 4))
    assert launches(step_targets()) < launches(targets)
    four = launches(record_step(200, 800, (784, 1000, 10), "sigmoid", ranks=4))
    assert {("gemm", (1000, 784, 200), "tn"), ("colsum", (200, 1000), "-"),
            ("elementwise", (1000, 784), "sgd"), ("elementwise", (1, 1000), "sgd"),
            ("elementwise", (10, 1000), "sgd"), ("elementwise", (1, 10), "sgd")} <= four
    assert four <= launches(targets)
    assert len(launches(targets)) == len(targets)                   # each launch once


def test_the_hidden_unit_split_tunes_each_ranks_share_of_the_units_on_every_row():
    """--parallel model on 4 ranks: 250 units a rank, every row of the batch, the logits a GEMM of
    their own (summed across ranks before the softmax), no gradient buffer or SGD kernel."""
    four = launches(step_targets(ranks=(4,), parallel="model"))
    assert {("gemm", (800, 250, 784), "nt+bias_sigmoid"), ("gemm", (800, 10, 250), "nt+bias"),   # rank 0 adds b2
            ("gemm", (800, 10, 250), "nt"), ("softmax_xent", (800, 10), "-"), ("gemm", (800, 250, 10), "nn+dsigmoid"),
            ("gemm", (10, 250, 800), "tn"), ("gemm", (250, 784, 800), "tn"),
            ("gemm", (400, 250, 784), "nt+bias_sigmoid")} <= four               # and the last, 400-row batch
    assert not any(f in ("elementwise", "linear_xent") for f, _, _ in four)
    large = launches(step_targets(batch=8192, hidden=(4096,), ranks=(2,), parallel="model"))   # G1 in its forward
    assert ("gemm", (8192, 2048, 10), "nn+dsigmoid") in large and not any(f == "linear_backward" for f, _, _ in large)
    assert ("gemm", (800, 334, 784), "nt+bias_sigmoid") in launches(step_targets(ranks=(3,), parallel="model"))   # 334, 333, 333
    with pytest.raises(NNError, match="splits one hidden layer"):
        step_targets(hidden=(100, 50), ranks=(2,), parallel="model")


def test_the_step_decides_the_launches():
    """What the Step does shows up without a second copy of it: deeper networks add G GEMMs with the
    activation's derivative fused, no hidden layer drops the input gradient, and more classes than
    one linear_xent kernel holds go through the composed output layer (GEMM, softmax, GEMM)."""
    deep = launches(record_step(64, 64, (784, 512, 256, 10), "relu", ranks=1))
    assert ("gemm", (64, 512, 256), "nn+drelu") in deep and ("linear_xent", (64, 10, 256), "relu") in deep
    assert ("linear_xent", (64, 10, 784), "-") in launches(record_step(64, 64, (784, 10), "relu", ranks=1))
    wide = launches(record_step(64, 64, (784, 100, 40), "sigmoid", ranks=1))
    assert {("gemm", (64, 40, 100), "nt+bias"), ("softmax_xent", (64, 40), "-"), ("gemm", (64, 100, 40), "nn+dsigmoid")} <= wide
    assert not any(f == "linear_xent" for f, _, _ in wide)


def test_targets_are_autogemm_targets_with_valid_keys():
    for t in step_targets(batch=8192, hidden=(4096,), ranks=(1, 2)):
        assert isinstance(t, Target) and t.key("float32").family == t.family


def test_a_large_network_is_recorded_from_shapes_alone():
    """The 8192 x 4096 step allocates lazily and computes nothing: recorded in well under a second."""
    start = time.perf_counter()
    assert step_targets(batch=8192, hidden=(4096,))[0].sizes == (8192, 4096, 784)
    assert time.perf_counter() - start < 5


@pytest.mark.parametrize("activation", ["sigmoid", "relu"])
def test_the_output_layer_takes_the_hidden_activation(activation):
    assert {t.op for t in step_targets(activation=activation) if t.family == "linear_xent"} == {activation}


def test_the_cnn_step_launches_every_convolution_direction_pooling_and_one_adam():
    """LeNet at batch 1000: each convolution forward and backward to its weights; backward to the
    data only above the first layer; one Adam launch over all 54,528 parameters. Each convolution
    beside a pool is recorded both ways its call may run: with the pool fused (the direct family)
    and alone (both families: their records decide); the second pool's backward pass, below the
    dense layers, is their dense stack's."""
    from nn.targets import cnn_step_targets

    targets = cnn_step_targets()
    launched = [(t.family, str(t), t.role) for t in targets if t.family.startswith(("conv2d", "pool2x2", "adam"))]
    conv1, conv2 = "1000x1x28x28x6x3", "1000x6x13x13x10x3"
    forward1, forward2 = "A2 = maxpool(relu(conv(A0, W1) + b1))", "A4 = maxpool(relu(conv(A2, W3) + b3))"
    backward2 = "G1 = maxpool^T(conv^T(G3, W3) relu'(A2))"
    assert launched == [
        ("conv2d_direct", f"conv2d_direct {conv1}:pool", forward1),
        ("conv2d_direct", f"conv2d_direct {conv1}", forward1), ("conv2d", f"conv2d {conv1}", forward1),
        ("conv2d_direct", f"conv2d_direct {conv2}:pool", forward2),
        ("conv2d_direct", f"conv2d_direct {conv2}", forward2), ("conv2d", f"conv2d {conv2}", forward2),
        ("conv2d_wgrad_direct", f"conv2d_wgrad_direct {conv2}", "dW3, db3 from G3, A2"),
        ("conv2d_wgrad", f"conv2d_wgrad {conv2}", "dW3, db3 from G3, A2"),
        ("conv2d_dgrad_direct", f"conv2d_dgrad_direct {conv2}:pool", backward2),
        ("conv2d_dgrad_direct", f"conv2d_dgrad_direct {conv2}", backward2),
        ("conv2d_dgrad", f"conv2d_dgrad {conv2}", backward2),
        ("conv2d_wgrad_direct", f"conv2d_wgrad_direct {conv1}", "dW1, db1 from G1, A0"),
        ("conv2d_wgrad", f"conv2d_wgrad {conv1}", "dW1, db1 from G1, A0"),
        ("adam", "adam 54528", "Adam on every parameter (54528)")]
    dense = launches(targets)
    # the dense layers forward, the loss and their gradients carried down in one launch; their weight gradients beside
    assert ("dense_stack", (1000, 10, 11, 11, 128, 100, 80, 10), "relu+pool") in dense    # and the pool's backward pass
    assert ("gemm", (128, 250, 1000), "tn") in dense and ("colsum", (1000, 128), "-") in dense
    assert not any(family in ("gemm", "linear_xent") and op != "tn" for family, _, op in dense)
    four = launches(cnn_step_targets(batch=128, ranks=(4,), layers="conv4x5,dense16"))
    assert ("conv2d", (32, 1, 28, 28, 4, 5), "-") in four and ("conv2d", (28, 1, 28, 28, 4, 5), "-") in four
    for target in targets:                                               # every key is a valid problem
        target.key("float32")


def test_only_whole_consecutive_rows_of_a_read_only_array_read_its_column_major_copy():
    """k_major_operand swaps in the copy's rows for a row slice of the source read M/N-major alone:
    not for a K-major read, a column slice, every other row, another dtype's view of the bytes, or
    an array elsewhere."""
    import autogemm
    from nn.backends.storage import k_major_operand

    x = np.arange(24, dtype=np.float32).reshape(6, 4)                           # X: (6, 4)
    copy = autogemm.empty_column_major(x.shape, x.dtype, np)
    copy[...] = x
    copies = [(x, copy)]
    got = k_major_operand(x[2:5], True, copies)
    assert got.strides[0] == 4 and np.array_equal(got, x[2:5])                 # column-major, the same rows
    assert k_major_operand(x, True, copies).strides[0] == 4
    for other in (x[:, 1:3], x[::2], x.view(np.int32)[2:5], x.copy()):
        assert k_major_operand(other, True, copies) is other
    rows = x[2:5]
    assert k_major_operand(rows, False, copies) is rows                         # read K-major as it is
