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
