"""The storage policy (nn/backends/storage.py) on the host: which arrays get a bfloat16 or a
column-major copy at each precision, copies found by address for row slices, and the launch
recorder laying out its arrays by the same policy as the cupy backend."""
import numpy as np
import pytest

from nn.backends.storage import Storage
from nn.errors import NNError
from nn.recorder import LaunchRecorder


def test_copies_at_each_precision():
    x = np.empty((100, 784), np.float32)                                # X: (100, 784), never read
    for precision, bf16, column_major in (("fp32", 0, 0), ("tf32", 0, 1), ("bf16", 1, 0)):
        storage = Storage("float32", precision, filled=False)
        assert storage.read_only(x) is x
        assert (len(storage.bf16_copies), len(storage.column_major)) == (bf16, column_major), precision
        assert storage.column_major_input_gradient(10) == (precision == "tf32")
        g = storage.empty_input_gradient((100, 256), 10)                # G1: (100, 256)
        assert (g.strides[0] == g.itemsize) == (precision == "tf32")
    assert not Storage("float64", "tf32", filled=False).column_major_input_gradient(10)


def test_row_slices_read_their_rows_of_the_copies():
    storage = Storage("float32", "bf16", filled=False)
    x = storage.read_only(np.empty((10, 8), np.float32))                # X: (10, 8)
    (_, copy), = storage.bf16_copies
    rows, round_into = storage.bf16_copy(x[3:7])
    assert round_into is None and rows.shape == (4, 8) and rows.__array_interface__["data"][0] == \
        copy[3:].__array_interface__["data"][0]
    other, round_into = storage.bf16_copy(np.empty((2, 8), np.float32))
    assert round_into is not None and other.dtype == np.uint16          # rounded before each call
    tf32 = Storage("float32", "tf32", filled=False)
    data = tf32.read_only(np.empty((10, 8), np.float32))
    a, ta, b, tb = tf32.launched_operands(np.empty((8, 4), np.float32), True, data[2:6], False)
    assert (ta, tb) == (True, True)                                     # rows of X read K-major from its copy


def test_bf16_alone_arrays_refuse_a_float32_reader():
    storage = Storage("float32", "bf16", filled=False, bf16_outputs=True)
    a1 = storage.empty_output_layer_input((6, 4))                      # A1: (6, 4), in bfloat16 alone
    assert storage.in_bf16_alone(a1[2:]) and storage.stored(a1).dtype == np.uint16
    with pytest.raises(NNError, match="written in bfloat16 alone"):
        storage.check_float32_values(a1)
    grad = np.empty((8, 4), np.float32)                                 # G1's buffer: (8, 4)
    copy = storage.written_bf16_copy(grad[:5], alone=True)              # a step on 5 of its rows
    assert copy.shape == (5, 4) and storage.in_bf16_alone(grad) and storage.bf16_copy(grad)[1] is None
    assert Storage("float32", "bf16", filled=False).empty_output_layer_input((6, 4)).dtype == np.float32
    assert Storage("float32", "tf32", filled=False).written_bf16_copy(grad) is None


def test_the_launch_recorder_lays_out_by_the_policy():
    recorder = LaunchRecorder(precision="tf32")
    assert isinstance(recorder.storage, Storage) and recorder.storage.precision == "tf32"
    x = recorder.read_only(np.empty((10, 784), np.float32))
    assert recorder.storage.column_major[0][0] is x
    assert recorder.empty_input_gradient((10, 100), 10).strides[0] == 4


def test_the_cublas_backend_is_no_cupy_backend():
    """The baseline shares GpuBackend's device, streams and kernels and adds cuBLAS's GEMM; it has no
    storage policy of its own (cuBLAS reads every array as it is)."""
    from nn.backends.cublas_backend import CublasBackend
    from nn.backends.cupy_backend import CupyBackend
    from nn.backends.gpu import GpuBackend

    assert issubclass(CublasBackend, GpuBackend) and not issubclass(CublasBackend, CupyBackend)
    assert {"read_only", "empty_input_gradient", "empty_output_layer_input", "linear_xent"} & set(vars(CublasBackend)) \
        == set()
