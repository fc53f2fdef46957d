"""autogemm.tuning.targets: the MLP's and the CNN's GEMMs, the CNN's convolution calls, and the
`MxNxK[:op]` lists of --shapes."""
import pytest

from autogemm.errors import AutogemmError
from autogemm.tuning.targets import Shape, network_convolutions, parse_shapes


def test_nn_is_the_gemms_of_the_mlp_training_step_in_order():
    shapes = parse_shapes("nn")
    assert [(s.m, s.n, s.k, s.op) for s in shapes] == [
        (800, 1000, 784, "nt+bias_sigmoid"),    # A1 = sigmoid(A0 W1^T + b1) (the output layer: one linear_xent)
        (10, 1000, 800, "tn"),     # W2 = G2^T A1, the fused update
        (1000, 784, 800, "tn"),    # W1 = G1^T A0
    ]
    assert [s.role for s in shapes] == ["A1 = bias_sigmoid(A0 W1^T, b1)", "W2 = G2^T A1", "W1 = G1^T A0"]
    assert (shapes[0].trans_a, shapes[0].trans_b, shapes[0].epilogue) == (False, True, "bias_sigmoid")


def test_nn_follows_batch_and_hidden_sizes():
    shapes = parse_shapes("nn", batch=64, hidden=(512, 256))
    assert len(shapes) == 2 + 1 + 3        # forward per hidden layer, one G below the last, an update per layer
    assert (shapes[0].m, shapes[0].n, shapes[0].k) == (64, 512, 784)
    assert (shapes[-1].m, shapes[-1].n, shapes[-1].k) == (512, 784, 64)


def test_lenet_is_its_dense_gemms_and_its_convolution_calls_on_one_full_batch():
    """LeNet's dense layers run forward and back as one dense_stack launch: its GEMMs are their weight
    gradients, over the batch."""
    shapes = parse_shapes("lenet")
    assert (shapes[0].m, shapes[0].n, shapes[0].k, shapes[0].op) == (10, 80, 1000, "tn")   # its default batch
    assert {(s.k, s.op) for s in shapes} == {(1000, "tn")} and len(shapes) == 4
    assert parse_shapes("lenet", batch=128)[-1].k == 128
    convs = network_convolutions("lenet,nn,17x33x65")          # the MLP and explicit GEMMs have none
    assert [(t.family, t.sizes) for t in convs] == [
        ("conv2d", (1000, 1, 28, 28, 6, 3)), ("conv2d", (1000, 6, 13, 13, 10, 3)),
        ("conv2d_wgrad", (1000, 6, 13, 13, 10, 3)), ("conv2d_dgrad", (1000, 6, 13, 13, 10, 3)),
        ("conv2d_wgrad", (1000, 1, 28, 28, 6, 3))]
    assert network_convolutions("lenet", batch=64)[0].sizes[0] == 64


def test_explicit_shapes():
    shapes = parse_shapes(" 800x1000x784:nt, 17x33x65 ,1x1x1:tt,17x33x65,8x8x8:tn+drelu")
    assert shapes == [Shape(800, 1000, 784, "nt"), Shape(17, 33, 65), Shape(1, 1, 1, "tt"), Shape(8, 8, 8, "tn+drelu")]
    assert (shapes[3].trans_a, shapes[3].trans_b, shapes[3].epilogue, shapes[0].epilogue) == (True, False, "drelu", None)
    assert str(shapes[0]) == "800x1000x784:nt" and str(shapes[1]) == "17x33x65:nn"
    assert (shapes[0].trans_a, shapes[0].trans_b) == (False, True)
    assert (shapes[2].trans_a, shapes[2].trans_b) == (True, True)


@pytest.mark.parametrize("text", ["3x4", "0x1x1", "1x1x1:nx", "1x1x1:NT", "axbxc", "1x2x3x4",
                                  "-1x2x3", "", " , ", "800x1000x784;rm -rf",
                                  "1x1x1:nt+", "1x1x1:nt+softmax", "1x1x1:+bias", "1x1x1:nt+bias+bias"])
def test_bad_shapes_are_one_line_errors(text):
    with pytest.raises(AutogemmError, match="^--shapes: ") as err:
        parse_shapes(text)
    assert "\n" not in str(err.value)
