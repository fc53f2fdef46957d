"""GPU checks of the convolution families (forward, backward to the input; implicit GEMM and direct) against their float64 references:
the default and sampled configs of LeNet's layers and of odd sizes, compiled with NVRTC and launched."""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu

CONVS = [(1000, 1, 28, 28, 6, 3, "relu"), (1000, 6, 13, 13, 10, 3, "relu"), (128, 1, 28, 28, 6, 3, "relu"),
         (3, 5, 9, 7, 33, 5, None), (7, 2, 4, 5, 3, 2, "sigmoid")]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n, c, h, w, f, k, activation", CONVS)
@pytest.mark.parametrize("name", ["conv2d", "conv2d_direct"])
def test_conv2d_configs_match_float64(name, n, c, h, w, f, k, activation, dtype):
    import cupy

    from autogemm.runtime import compile as compiler
    from autogemm.runtime.device import this_device
    from autogemm.runtime.family import family
    from autogemm.tuning.verify import compare
    from kernels import conv2d

    rng = np.random.default_rng(n + c + f)
    p = conv2d.Problem(n, c, h, w, f, k, dtype, activation)
    x = rng.uniform(0, 1, (n, c, h, w)).astype(dtype)                       # X: (N, C, H, W)
    wt = (rng.standard_normal((f, c, k, k)) / k).astype(dtype)               # W: (F, C, K, K)
    b = rng.standard_normal(f).astype(dtype)                                 # b: (F,)
    value, magnitude, depth = conv2d.reference(p, x, wt, b)["z"]
    fam, device = family(name), this_device()
    for cfg in fam.candidates(p, device)[:2] + fam.sample(p, device, 4, seed=n):
        inst = fam.instance(cfg, p)
        z = cupy.full((n, f, p.out_h, p.out_w), cupy.nan, dtype)            # Z: (N, F, OH, OW), poisoned
        g = inst.geometry
        compiler.load(inst)(g.grid, g.block, (cupy.asarray(x), cupy.asarray(wt), cupy.asarray(b), z, np.int32(n)),
                            shared_mem=g.smem_bytes)
        verdict = compare(cupy.asnumpy(z), value, magnitude, depth, dtype)
        assert verdict.ok, f"{inst.name}: {verdict.describe()}"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n, c, h, w, f, k, activation", CONVS)
@pytest.mark.parametrize("name", ["conv2d_dgrad", "conv2d_dgrad_direct"])
def test_conv2d_dgrad_configs_match_float64(name, n, c, h, w, f, k, activation, dtype):
    import cupy

    from autogemm.runtime import compile as compiler
    from autogemm.runtime.device import this_device
    from autogemm.runtime.family import family
    from autogemm.tuning.verify import compare
    from kernels import conv2d_dgrad

    rng = np.random.default_rng(n + c + f)
    p = conv2d_dgrad.Problem(n, c, h, w, f, k, dtype, activation)
    g = rng.standard_normal((n, f, p.out_h, p.out_w)).astype(dtype)          # G: (N, F, OH, OW)
    wt = (rng.standard_normal((f, c, k, k)) / k).astype(dtype)               # W: (F, C, K, K)
    aux = rng.uniform(0, 1, (n, c, h, w)).astype(dtype)                      # the layer below's output
    value, magnitude, depth = conv2d_dgrad.reference(p, g, wt, aux)["dx"]
    fam, device = family(name), this_device()
    for cfg in fam.candidates(p, device)[:2] + fam.sample(p, device, 4, seed=n):
        inst = fam.instance(cfg, p)
        dx = cupy.full((n, c, h, w), cupy.nan, dtype)                        # dX: (N, C, H, W), poisoned
        g_, args = inst.geometry, (cupy.asarray(g), cupy.asarray(wt), cupy.asarray(aux), dx, np.int32(n))
        compiler.load(inst)(g_.grid, g_.block, args, shared_mem=g_.smem_bytes)
        verdict = compare(cupy.asnumpy(dx), value, magnitude, depth, dtype)
        assert verdict.ok, f"{inst.name}: {verdict.describe()}"


# The four public stacks' wider layers (batch 128) and a ragged one: every direction on tensor cores.
WIDE_CONVS = [(128, 32, 12, 12, 64, 5), (128, 16, 26, 26, 16, 3), (128, 64, 13, 13, 128, 3), (37, 6, 12, 12, 16, 5)]


@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16"])
@pytest.mark.parametrize("sizes", WIDE_CONVS)
@pytest.mark.parametrize("name", ["conv2d", "conv2d_dgrad", "conv2d_wgrad"])
def test_convolutions_on_tensor_cores_match_float64(name, sizes, precision):
    """The default (tensor cores where the layer is wide enough) and sampled configs of the call's
    tensor-core math (3xTF32 at fp32, TF32 at tf32, BF16 at bf16), through the entry points as tuning runs them
    (the forward pass with bias, backward weights split-K; the emulator checks each activation),
    within the precision's bound (autogemm.tuning.verify)."""
    from autogemm.runtime.device import this_device
    from autogemm.runtime.family import family
    from autogemm.store.keys import make_key
    from autogemm.tuning.measure import Mismatch
    from autogemm.tuning.measures import measure_for
    from kernels.conv2d import MMA_MATH

    device = this_device()
    measure = measure_for(make_key(name, sizes, "-", "float32" if precision == "fp32" else precision), device)
    fam, math = family(name), MMA_MATH[precision]
    space = {"math": (math,), "tm": (1,), "tn": (2,), "pad": (True,), "bk": (16, 32)}
    if math == "bf16":                      # its gather in two stages only
        space["stages"] = (2,)
    configs = fam.candidates(measure.problem, device)[:2] + fam.restricted(space).sample(measure.problem, device, 2)
    assert any(c.math == math for c in configs)
    for cfg in configs:
        try:
            measure.verify(measure.launcher(cfg))
        except Mismatch as exc:
            pytest.fail(f"{name} {dict(cfg)}: {exc}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n, c, h, w, f, k, activation", [
    (1000, 1, 28, 28, 6, 3, "relu"), (1000, 6, 13, 13, 10, 3, "relu"), (128, 6, 12, 12, 16, 5, "sigmoid"),
    (7, 2, 9, 8, 3, 4, None)])
def test_a_fused_pool_equals_the_convolution_then_the_pool(n, c, h, w, f, k, activation, dtype):
    """conv2d with `where` gives maxpool2x2 of the direct kernel's output, bit for bit (each pixel's
    sum in the same order); conv2d_backward_data with `where`, maxpool2x2_backward of its output
    (with act' of the pooled values): for the default and sampled configs, odd sides dropped."""
    import cupy

    import autogemm
    from autogemm.runtime.device import this_device
    from autogemm.runtime.family import family
    from kernels import conv2d, conv2d_dgrad

    rng = np.random.default_rng(n + f)
    x = cupy.asarray(rng.uniform(0, 1, (n, c, h, w)).astype(dtype))         # X: (N, C, H, W)
    wt = cupy.asarray((rng.standard_normal((f, c, k, k)) / k).astype(dtype))  # W: (F, C, K, K)
    b = cupy.asarray(rng.standard_normal(f).astype(dtype))                   # b: (F,)
    p, device = conv2d.Problem(n, c, h, w, f, k, dtype, activation, pool=True), this_device()
    z = cupy.empty((n, f, p.out_h, p.out_w), dtype)                          # Z: (N, F, OH, OW)
    autogemm.conv2d(x, wt, b, z, activation, config=family("conv2d_direct").default(p, device))
    pooled, where = cupy.empty((n, f, *p.pooled), dtype), cupy.empty((n, f, *p.pooled), np.int8)
    autogemm.maxpool2x2(z, pooled, where)
    fam = family("conv2d_direct")
    for cfg in fam.candidates(p, device)[:2] + fam.sample(p, device, 3, seed=n):
        got, at = cupy.full_like(pooled, cupy.nan), cupy.full_like(where, -1)
        autogemm.conv2d(x, wt, b, got, activation, config=cfg, where=at)
        assert cupy.array_equal(got, pooled) and cupy.array_equal(at, where), cfg

    # backward data of a convolution above pooled maps of f channels: (n, f, h2, w2) from (n, f, 2 h2, 2 w2)
    h2, w2 = p.pooled
    if min(h2, w2) < k:
        return
    q = conv2d_dgrad.Problem(n, f, h2, w2, c, k, dtype, activation, pool=True)
    g = cupy.asarray(rng.standard_normal((n, c, q.out_h, q.out_w)).astype(dtype))   # G: (N, C, OH, OW)
    wd = cupy.asarray((rng.standard_normal((c, f, k, k)) / k).astype(dtype))         # W: (C, F, K, K)
    aux = pooled if activation else None                                       # the pooled activations
    dx = cupy.empty((n, f, h2, w2), dtype)
    autogemm.conv2d_backward_data(g, wd, dx, config=family("conv2d_dgrad_direct").default(q, device))
    want = cupy.empty((n, f, 2 * h2, 2 * w2), dtype)
    autogemm.maxpool2x2_backward(dx, where, want, aux, activation)
    fam = family("conv2d_dgrad_direct")
    for cfg in fam.candidates(q, device)[:2] + fam.sample(q, device, 3, seed=n):
        got = cupy.full_like(want, cupy.nan)
        autogemm.conv2d_backward_data(g, wd, got, aux, activation, config=cfg, where=where)
        assert cupy.array_equal(got, want), cfg


@pytest.mark.parametrize("given", [True, False])
def test_a_pool_beside_an_implicit_gemm_runs_after_it(given):
    """A config of the implicit GEMM (which fuses no pool): conv2d with `where` is that convolution
    into `unpooled` (or scratch) then maxpool2x2, and conv2d_backward_data with `where` that
    backward pass then maxpool2x2_backward, bit for bit."""
    import cupy

    import autogemm
    from autogemm.runtime.device import this_device
    from autogemm.runtime.family import family
    from kernels import conv2d, conv2d_dgrad

    rng, device = np.random.default_rng(3), this_device()
    n, c, h, w, f, k = 64, 32, 12, 12, 64, 5
    x = cupy.asarray(rng.uniform(0, 1, (n, c, h, w)).astype(np.float32))          # X: (N, C, H, W)
    wt = cupy.asarray((rng.standard_normal((f, c, k, k)) / k / 6).astype(np.float32))   # W: (F, C, K, K)
    b = cupy.asarray(rng.standard_normal(f).astype(np.float32))                     # b: (F,)
    cfg = family("conv2d").default(conv2d.Problem(n, c, h, w, f, k, "float32", "relu"), device)
    z = cupy.empty((n, f, 8, 8), np.float32)                                        # Z: (N, F, OH, OW)
    autogemm.conv2d(x, wt, b, z, "relu", config=cfg)
    pooled, where = cupy.empty((n, f, 4, 4), np.float32), cupy.empty((n, f, 4, 4), np.int8)
    autogemm.maxpool2x2(z, pooled, where)
    unpooled = cupy.full_like(z, cupy.nan) if given else None
    got, at = cupy.full_like(pooled, cupy.nan), cupy.full_like(where, -1)
    autogemm.conv2d(x, wt, b, got, "relu", config=cfg, where=at, unpooled=unpooled)
    assert cupy.array_equal(got, pooled) and cupy.array_equal(at, where)
    assert not given or cupy.array_equal(unpooled, z)

    # backward data of a layer of 16 filters above those pooled maps: the pool's backward pass after it
    wd = cupy.asarray((rng.standard_normal((16, f, 3, 3)) / 9).astype(np.float32))       # W: (16, F, 3, 3)
    g = cupy.asarray(rng.standard_normal((n, 16, 2, 2)).astype(np.float32))              # G: (N, 16, 2, 2)
    dcfg = family("conv2d_dgrad").default(conv2d_dgrad.Problem(n, f, 4, 4, 16, 3, "float32", "relu"), device)
    dx = cupy.empty((n, f, 4, 4), np.float32)
    autogemm.conv2d_backward_data(g, wd, dx, config=dcfg)
    want = cupy.empty_like(z)
    autogemm.maxpool2x2_backward(dx, where, want, pooled, "relu")
    got = cupy.full_like(z, cupy.nan)
    autogemm.conv2d_backward_data(g, wd, got, pooled, "relu", config=dcfg, where=where,
                                  unpooled=cupy.empty_like(dx) if given else None)
    assert cupy.array_equal(got, want)
