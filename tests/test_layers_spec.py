"""nn.layers: the --layers spec of a CNN, its shapes, and one-line errors naming the layer."""
import pytest

from nn.errors import NNError
from nn.layers import LENET, canonical, describe, parse_layers


def test_lenet_is_the_reports_network():
    layers = parse_layers(LENET)
    assert describe(layers) == ("1x28x28 conv6x3 6x26x26 pool2 6x13x13 conv10x3 10x11x11 pool2 10x5x5 "
                                "dense128 128 dense100 100 dense80 80 dense10 10")
    assert layers[4].shape_in == (10, 5, 5)                   # flatten: 250 features into dense128
    assert [layer.params for layer in layers] == [6 * 9 + 6, 0, 10 * 6 * 9 + 10, 0, 128 * 250 + 128,
                                                  100 * 128 + 100, 80 * 100 + 80, 10 * 80 + 10]


def test_a_spec_of_the_issue_and_odd_sides():
    layers = parse_layers("conv16x5, pool2,conv32x3,pool2,dense256")
    assert describe(layers).startswith("1x28x28 conv16x5 16x24x24 pool2 16x12x12 conv32x3 32x10x10 pool2 32x5x5")
    assert parse_layers("conv4x2,pool2")[1].shape_out == (4, 13, 13)   # 27 -> 13: the last row dropped
    assert [str(x) for x in parse_layers("dense64", classes=3)] == ["dense64", "dense3"]


@pytest.mark.parametrize("spec, message", [
    ("", "empty layer"),
    ("conv6x3,,pool2", "empty layer"),
    ("conv6x3,pool3", r"layer 2 \('pool3'\): only 2x2 max-pooling"),
    ("conv0x3", r"layer 1 \('conv0x3'\): every size must be in 1..65536"),
    ("dense0", "every size must be in 1..65536"),
    ("conv6x29", r"layer 1 \('conv6x29'\): a 29x29 filter does not fit its 28x28 input"),
    ("conv6x3,pool2,pool2,pool2,pool2,pool2", r"layer 6 \('pool2'\): its 1x1 input is smaller than the 2x2 window"),
    ("conv6x3,pool2,conv10x14,pool2", r"layer 3 \('conv10x14'\): a 14x14 filter does not fit its 13x13 input"),
    ("dense10,conv6x3", r"layer 2 \('conv6x3'\): a conv layer cannot follow a dense layer"),
    ("conv6x3x3", "is not convCxK, poolP or denseN"),
    ("relu", "is not convCxK, poolP or denseN"),
    (",".join(["pool2"] * 40), "40 layers; give at most 31"),
    ("dense" + "9" * 5000, "every size must be in 1..65536"),      # int() raised past 4,300 digits
    ("conv6x" + "9" * 5000, "every size must be in 1..65536"),
    ("dense00000000065537", "every size must be in 1..65536"),
])
def test_a_spec_that_cannot_run_is_one_line_naming_the_layer(spec, message):
    with pytest.raises(NNError, match=message) as err:
        parse_layers(spec)
    assert "\n" not in str(err.value) and str(err.value).startswith("--layers")


def test_a_spec_is_stored_in_one_form():
    """Spaces and leading zeros do not make another network (a resume with them was refused)."""
    assert canonical(" conv2x3 , dense8 ") == canonical("conv2x3,dense8") == "conv2x3,dense8"
    assert canonical("conv016x05,pool2,dense0000000000128") == "conv16x5,pool2,dense128"
    assert canonical(LENET) == LENET
    with pytest.raises(NNError, match="empty layer"):
        canonical("")
