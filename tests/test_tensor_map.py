"""autogemm.runtime.tensor_map on the CPU: what a launch binds, and a clear error without a driver
(the encoding itself runs on the GPU: tests/test_gemm_gpu.py's TMA tests)."""
import ctypes

import numpy as np
import pytest

from autogemm.errors import AutogemmError
from autogemm.runtime import tensor_map
from autogemm.runtime.family import family
from kernels import gemm


def test_a_wgmma_launch_binds_a_and_b_with_their_leading_dimensions():
    from autogemm.ops.gemm import launch_args

    problem = gemm.Problem.contiguous(200, 136, 300, "float32", True, False)   # A^T, B: both M/N-major
    instance = family("gemm_wgmma").instance(family("gemm_wgmma").config(dict(
        bm=128, bn=64, warpgroups=2, stages=3, math="3xtf32", inflight=1, split_k=1, producer=1, tma=1, pretranspose=0,
        cluster_m=1, cluster_n=1, persistent=0, reg_a=0, swap=0)), problem)
    a, b = np.ones((300, 208), np.float32)[:, :200], np.ones((300, 136), np.float32)   # A: (K, M) in rows of 208
    d = np.zeros((200, 136), np.float32)
    args = launch_args(instance, a, b, d, d, None, None, (200, 136, 300, 208, 136, 136, 136, 136), 1.0, 0.0)
    a_map, b_map = args[-2:]
    assert a_map.array is a and (a_map.ld, a_map.dims, a_map.box, a_map.swizzle) == (208, (200, 300), (128, 32), 0)
    assert b_map.array is b and (b_map.ld, b_map.dims, b_map.box, b_map.swizzle) == (136, (136, 300), (64, 32), 0)
    assert tensor_map.kernel_args(args[:-2]) == args[:-2]              # the other arguments pass as they are


def test_a_pretransposed_launch_binds_the_k_major_copies_in_rows_of_16_bytes(monkeypatch):
    """pretranspose: A^T (K, M) and B (K, N) are each staged by a transpose launch into scratch of
    rows padded to 16 bytes (K = 301: 304 floats apart), and the maps are the copies' (K-major,
    128-byte swizzle), of the K-major call's kernel."""
    from autogemm.ops import gemm as entry
    from autogemm.runtime.device import H100

    monkeypatch.setattr(entry, "scratch", lambda kind, dtype, size: np.zeros(size, dtype))
    problem = gemm.Problem.contiguous(200, 136, 301, "float32", True, False)
    instance = family("gemm_wgmma").instance(family("gemm_wgmma").config(dict(
        bm=128, bn=64, warpgroups=2, stages=3, math="tf32", inflight=1, split_k=1, producer=1, tma=1, pretranspose=1,
        cluster_m=1, cluster_n=1, persistent=0, reg_a=0, swap=0)), problem)
    a, b = np.ones((301, 200), np.float32), np.ones((301, 136), np.float32)      # A: (K, M), B: (K, N)
    (a_t, lda), (b_t, ldb), staging = entry.staged_operands(instance, a, 200, b, 136, H100)
    assert "_nt_" in instance.name and instance.geometry.transposed == ("a", "b")
    assert (a_t.shape, lda, b_t.shape, ldb) == ((200, 301), 304, (136, 301), 304)
    assert [(t.family, args[0] is x, args[1] is x_t, tuple(map(int, args[2:])))
            for (t, args), x, x_t in zip(staging, (a, b), (a_t, b_t))] == [
        ("transpose", True, True, (301, 200, 200, 304)), ("transpose", True, True, (301, 136, 136, 304))]
    d = np.zeros((200, 136), np.float32)
    a_map, b_map = entry.launch_args(instance, a_t, b_t, d, d, None, None, (200, 136, 301, lda, ldb, 136, 136, 136),
                                     1.0, 0.0)[-2:]
    assert a_map.array is a_t and (a_map.ld, a_map.dims, a_map.box, a_map.swizzle) == (304, (301, 200), (32, 128), 128)
    assert b_map.array is b_t and (b_map.ld, b_map.dims, b_map.box, b_map.swizzle) == (304, (301, 136), (32, 64), 128)


def test_a_column_major_operand_is_its_row_major_transpose():
    """autogemm.gemm's reading of layouts: a column-major G1 (rows, M), G1^T's rows ld apart, named
    with trans_a is G1^T itself untransposed (K-major, ld kept); row-major arrays, a column of one,
    and layouts neither way round stay as given (leading_dim judges those)."""
    from autogemm.errors import BadArguments
    from autogemm.ops.gemm import leading_dim, row_major_operand

    g1_t = np.ones((200, 304), np.float32)[:, :300]                   # G1^T: (M, rows) in rows of 304
    a, trans_a = row_major_operand(g1_t.T, True)                     # op(A) = G1^T
    assert a.base is g1_t.base and a.shape == (200, 300) and not trans_a and leading_dim(a, "a") == 304
    one_row = np.ones((7, 8), np.float32)[:, :1].T                   # (1, 7), 8 apart: column-major
    assert row_major_operand(one_row, False)[0].shape == (7, 1) and row_major_operand(one_row, False)[1]
    for x in (np.ones((3, 5), np.float32), np.ones((5, 1), np.float32), np.ones((6, 10), np.float32)[::2, ::2]):
        assert row_major_operand(x, False) == (x, False)
    with pytest.raises(BadArguments, match="unit stride along rows"):
        leading_dim(np.ones((6, 10), np.float32)[::2, ::2], "a")


def test_encoding_without_the_cuda_driver_says_what_is_missing(monkeypatch):
    def no_driver(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", no_driver)
    tensor_map._driver.cache_clear()
    tensor_map._encoded.cache_clear()
    try:
        with pytest.raises(AutogemmError, match=r"tensor maps need the CUDA driver \(libcuda.so.1\)"):
            tensor_map._encoded(1 << 20, np.dtype(np.float32), (300, 200), 300, (32, 128), 128)
    finally:
        tensor_map._driver.cache_clear()
