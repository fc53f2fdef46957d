"""Every family's kernels run on the CPU (autogemm/testing/cuda_emu.h, inline PTX emulated) against float64
NumPy: what CI can check of what they compute. Outputs are poisoned (NaN) before each run; sizes
leave ragged blocks."""
import dataclasses
import importlib
import itertools
from pathlib import Path

import numpy as np
import pytest

from autogemm.runtime.device import H100
from autogemm.runtime.family import family
from autogemm.tuning.verify import OPERAND_ROUNDING, compare
from autogemm.testing.emulator import GXX, Launch, run
from kernels import gemm, linear_backward, linear_xent
from kernels.bf16 import bf16_bits, bf16_values
from kernels.gemm.call import split_op

if GXX is None:
    pytest.skip("g++ is not on PATH: the emulated kernels need it", allow_module_level=True)

pytestmark = pytest.mark.slow


def check(got, expected, k, dtype):
    value, magnitude = expected
    verdict = compare(got.reshape(value.shape), value, magnitude, k, dtype)
    assert verdict.ok, verdict.describe()


def saved_output(rng, activation, shape, t):
    """Random outputs of `activation` of dtype t, as a backward op's saved activation: relu's (half of
    them zero), else sigmoid's (in (0.01, 0.99))."""
    if activation == "relu":
        return np.maximum(rng.standard_normal(shape), 0).astype(t)
    return rng.uniform(0.01, 0.99, shape).astype(t)


# ---- linear_xent ---------------------------------------------------------------------------------
HEADS = [(37, 10, 1000, "sigmoid", "float32"), (19, 3, 96, "relu", "float64"), (21, 10, 784, None, "float32"),
         (5, 32, 260, "sigmoid", "float64"), (50, 10, 100, "relu", "float32")]


def head_launches(rows, classes, inputs, activation, dtype, seed):
    """(launch, arrays, operands) for the default and sampled configs of one problem; float32 ones
    with an input gradient also write its bfloat16 copy, and every other one reads A in bfloat16."""
    rng = np.random.default_rng(seed)
    t = np.dtype(dtype).type
    a = saved_output(rng, activation, (rows, inputs), t)                      # A: (rows, K)
    w = (rng.standard_normal((classes, inputs)) / np.sqrt(inputs)).astype(t)  # W: (C, K)
    b = rng.standard_normal(classes).astype(t)                                # b: (C,)
    labels = rng.integers(0, classes, rows).astype(np.int32)                  # (rows,)
    bf16 = activation is not None and dtype == "float32"
    problem = linear_xent.Problem(rows, classes, inputs, dtype, activation, grad_in_bf16=bf16)
    fam = family("linear_xent")
    configs = fam.candidates(problem, H100)[:1] + fam.sample(problem, H100, 3, seed=seed)
    out = []
    for i, cfg in enumerate(configs):
        a_bf16 = dtype == "float32" and i % 2 == 0
        a_in = bf16_bits(a) if a_bf16 else a                                # A's bits (uint16) or A
        arrays = dict(logits=np.full((rows, classes), np.nan, t), grad=np.full((rows, classes), np.nan, t),
                      grad_in=np.full((rows, inputs), np.nan, t) if activation else None, loss=np.zeros(1, t),
                      grad_in_bf16=np.full((rows, inputs), 0x7fc0, np.uint16) if bf16 else None)   # bfloat16 NaN
        args = [a_in, w, b, labels, arrays["logits"], arrays["grad"],
                arrays["grad_in"] if activation else np.uint64(0),
                arrays["grad_in_bf16"] if bf16 else np.uint64(0), arrays["loss"], np.int32(rows), t(1 / rows)]
        instance = fam.instance(cfg, dataclasses.replace(problem, a_bf16=a_bf16))
        out.append((Launch(instance, args), arrays, (a_in, w, b, labels)))
    return out


def test_linear_xent_matches_float64_on_the_cpu(tmp_path):
    cases = [(case, item) for seed, case in enumerate(HEADS) for item in head_launches(*case, seed)]
    run([launch for _, (launch, _, _) in cases], tmp_path)
    configs = {(c.warps, c.rows, c.vec, c.unroll, c.w_smem) for _, (l, _, _) in cases for c in [l.instance.config]}
    assert {c[4] for c in configs} == {False, True} and {c[2] for c in configs} == {1, 2, 4}
    assert {l.instance.config.vec for _, (l, got, _) in cases if got["grad_in_bf16"] is not None} == {1, 2, 4}
    assert {l.instance.config.vec for _, (l, _, operands) in cases if operands[0].dtype == np.uint16} == {1, 2, 4}
    for (rows, classes, inputs, activation, dtype), (launch, got, operands) in cases:
        problem = linear_xent.Problem(rows, classes, inputs, dtype, activation, a_bf16=operands[0].dtype == np.uint16)
        expected = linear_xent.reference(problem, *operands, 1 / rows)
        for name, (value, magnitude, k) in expected.items():
            check(got[name], (value, magnitude), k, dtype)
        if got["grad_in_bf16"] is not None:       # grad_in's bits, rounded to nearest even
            assert np.array_equal(got["grad_in_bf16"], bf16_bits(got["grad_in"]))


def test_the_logits_alone_match_float64_on_the_cpu(tmp_path):
    """linear_xent without its loss (autogemm.linear_logits): Z alone, nothing else written, for the
    default and sampled configs, A in float32 and in bfloat16 bits, ragged rows and K."""
    fam, cases = family("linear_xent"), []
    for seed, (rows, classes, inputs, dtype) in enumerate([(37, 10, 1000, "float32"), (19, 3, 96, "float64"),
                                                           (5, 32, 260, "float32"), (50, 10, 100, "float64")]):
        rng = np.random.default_rng(seed)
        t = np.dtype(dtype).type
        a = saved_output(rng, "sigmoid", (rows, inputs), t)                       # A: (rows, K)
        w = (rng.standard_normal((classes, inputs)) / np.sqrt(inputs)).astype(t)  # W: (C, K)
        b = rng.standard_normal(classes).astype(t)                                # b: (C,)
        problem = linear_xent.Problem(rows, classes, inputs, dtype, loss=False)
        for i, cfg in enumerate(fam.candidates(problem, H100)[:1] + fam.sample(problem, H100, 3, seed=seed)):
            a_bf16 = dtype == "float32" and i % 2 == 1
            a_in = bf16_bits(a) if a_bf16 else a
            logits = np.full((rows, classes), np.nan, t)
            null = np.uint64(0)
            args = [a_in, w, b, null, logits, null, null, null, null, np.int32(rows), t(0)]
            p = dataclasses.replace(problem, a_bf16=a_bf16)
            cases.append((Launch(fam.instance(cfg, p), args), logits, linear_xent.reference(p, a_in, w, b), dtype))
    run([launch for launch, *_ in cases], tmp_path)
    assert {launch.instance.config.w_smem for launch, *_ in cases} == {False, True}
    for launch, logits, expected, dtype in cases:
        assert set(expected) == {"logits"} and "_logits_" in launch.instance.name
        check(logits, expected["logits"][:2], expected["logits"][2], dtype)


# The float64 output layer of 784-4096-10 (nn.train --hidden 4096 --dtype float64): W, 320 KiB, does not
# fit shared memory, so the defaults read it through the caches: two rows a warp, then one, unrolled
# twice, then 4 times. The configs of 8192 rows, run on 37 (a config does not depend on the rows; a
# ragged last block), and on a ragged K (3000: a last column slice past K) whose W does not fit either.
F64_HEADS = [(37, 10, 4096, None, 3), (37, 10, 4096, "sigmoid", 2), (11, 10, 3000, "relu", 1)]   # ..., configs run


def test_linear_xent_float64_defaults_where_w_does_not_fit_shared_memory(tmp_path):
    fam = family("linear_xent")
    cases = []
    for seed, (rows, classes, inputs, activation, count) in enumerate(F64_HEADS):
        rng = np.random.default_rng(seed)
        a = saved_output(rng, activation or "sigmoid", (rows, inputs), np.float64)     # A: (rows, K)
        w = rng.standard_normal((classes, inputs)) / np.sqrt(inputs)                   # W: (C, K)
        b = rng.standard_normal(classes)                                               # b: (C,)
        labels = rng.integers(0, classes, rows).astype(np.int32)                       # (rows,)
        problem = linear_xent.Problem(rows, classes, inputs, "float64", activation)
        large = linear_xent.Problem(8192, classes, inputs, "float64", activation)
        configs = fam.candidates(large, H100)[:3]                                      # the default first
        assert configs[0] == fam.default(large, H100) and not any(c.w_smem for c in configs)
        assert [(c.warps, c.rows, c.vec, c.unroll) for c in configs] == [(8, 2, 2, 2), (8, 1, 2, 2), (8, 2, 2, 4)]
        for cfg in configs[:count]:
            got = dict(logits=np.full((rows, classes), np.nan), grad=np.full((rows, classes), np.nan),
                       grad_in=np.full((rows, inputs), np.nan) if activation else None, loss=np.zeros(1))
            args = [a, w, b, labels, got["logits"], got["grad"], got["grad_in"] if activation else np.uint64(0),
                    np.uint64(0), got["loss"], np.int32(rows), np.float64(1 / rows)]
            cases.append((Launch(fam.instance(fam.validate(cfg, problem, H100), problem), args), got,
                          linear_xent.reference(problem, a, w, b, labels, 1 / rows)))
    run([launch for launch, _, _ in cases], tmp_path)
    for launch, got, expected in cases:
        assert set(expected) == {name for name, x in got.items() if x is not None}
        for name, (value, magnitude, k) in expected.items():
            check(got[name], (value, magnitude), k, "float64")


# ---- linear_backward -----------------------------------------------------------------------------
# (rows, classes, inputs, activation, dtype, SGD step): ragged column tiles and row slices, both
# activations and dtypes; the SGD step's alpha, beta and db_beta, else a plain gradient into NaNs
# (beta = 0 must not read them).
BACKWARDS = [(37, 10, 200, "sigmoid", "float32", True), (50, 3, 96, "relu", "float64", False),
             (29, 32, 130, "sigmoid", "float32", False), (70, 10, 100, "relu", "float32", True),
             (5, 7, 36, "sigmoid", "float64", True)]
BACKWARD_SPACE = {"threads": (64, 128, 256)}     # at most 256 threads a block


def backward_launches(rows, classes, inputs, activation, dtype, sgd, seed):
    """(launch, outputs, reference) for the default and sampled configs of one problem, each storing
    the input gradient in turn: float32 ones with its bfloat16 copy, that copy alone (from A in
    float32 or, as the trainer's step at bf16, in bfloat16), or transposed; float64 ones as they are
    or transposed (into rows of a (K, rows + 3) buffer); every other one with the layer's own bias
    gradient (db_out) too."""
    rng = np.random.default_rng(seed)
    t = np.dtype(dtype).type
    a = saved_output(rng, activation, (rows, inputs), t)                      # A: (rows, K)
    g = (rng.standard_normal((rows, classes)) / rows).astype(t)               # G: (rows, C)
    w = (rng.standard_normal((classes, inputs)) / np.sqrt(inputs)).astype(t)  # W: (C, K)
    dw0 = w.copy() if sgd else np.full((classes, inputs), np.nan, t)         # dW before: W (the step) or NaN
    db0 = rng.standard_normal(inputs).astype(t) if sgd else np.full(inputs, np.nan, t)   # (K,)
    db_out0 = rng.standard_normal(classes).astype(t) if sgd else np.full(classes, np.nan, t)   # (C,)
    alpha, beta, db_beta = (-0.3, 0.99, 1.0) if sgd else (1.0, 0.0, 0.0)
    fam = family("linear_backward").restricted(BACKWARD_SPACE)
    plain = linear_backward.Problem(rows, classes, inputs, dtype, activation)
    a16 = bf16_bits(a) if dtype == "float32" else None                  # A's bfloat16 bits
    modes = ("bf16in", "bf16only", "transposed", "a16") if dtype == "float32" else ("plain", "transposed")
    out = []
    narrow = family("linear_backward").restricted({**BACKWARD_SPACE, "cols": (4, 8, 16)})
    configs = list(dict.fromkeys(fam.candidates(plain, H100)[:1] + fam.sample(plain, H100, 7, seed=seed)
                                 + narrow.sample(plain, H100, 2, seed)))
    for i, cfg in enumerate(configs):
        mode = modes[i % len(modes)]
        bf16, f32, transposed = mode.startswith("bf16") or mode == "a16", mode not in ("bf16only", "a16"), mode == "transposed"
        problem = linear_backward.Problem(rows, classes, inputs, dtype, activation, grad_in_bf16=bf16, grad_in_f32=f32,
                                          grad_in_transposed=transposed, a_bf16=mode == "a16", bias_grad=i % 2 == 1)
        a_in = a16 if mode == "a16" else a
        expected = linear_backward.reference(problem, g, w, a_in, np.nan_to_num(dw0), np.nan_to_num(db0), alpha, beta,
                                             db_beta, np.nan_to_num(db_out0))
        geo = linear_backward.geometry(cfg, problem)
        ld_t = rows + 3 if transposed else 0
        stored = np.full((inputs, ld_t) if transposed else (rows, inputs), np.nan, t) if f32 else None  # G_in or G_in^T
        got = dict(grad_in=stored[:, :rows].T if transposed else stored, dw=dw0.copy(), db=db0.copy(),
                   grad_in_bf16=np.full((rows, inputs), 0x7fc0, np.uint16) if bf16 else None,   # bfloat16 NaN
                   db_out=db_out0.copy() if problem.bias_grad else None)
        scratch = (np.full(geo.workspace_elems, np.nan, t), np.zeros(geo.counters, np.int32)) if cfg.split > 1 else (
            np.uint64(0), np.uint64(0))
        null = np.uint64(0)
        args = [g, w, a_in, stored if f32 else null, got["grad_in_bf16"] if bf16 else null, got["dw"], got["db"],
                *([got["db_out"]] if problem.bias_grad else []), *scratch, np.int32(rows), np.int32(ld_t), t(alpha), t(beta), t(db_beta)]
        out.append((Launch(fam.instance(cfg, problem), args), got, expected, scratch[1], stored))
    return out


def test_linear_backward_matches_float64_on_the_cpu(tmp_path):
    cases = [(case[4], item) for seed, case in enumerate(BACKWARDS) for item in backward_launches(*case, seed)]
    run([launch for _, (launch, *_) in cases], tmp_path)
    configs = [launch.instance.config for _, (launch, *_) in cases]
    assert {c.split > 1 for c in configs} == {False, True} and {c.vec for c in configs} == {1, 2, 4}
    assert any(c.unroll > 1 for c in configs) and any(130 % c.cols for c in configs)
    assert {c.cols for c in configs} >= {4, 8, 16}
    names = [launch.instance.name.removesuffix("_db") for _, (launch, *_) in cases]
    assert {name.split("_")[-1] for name in names} >= {"bf16in", "bf16only", "transposed", "a16"}
    assert {launch.instance.config.split > 1 for _, (launch, got, *_) in cases if got["db_out"] is not None} == {
        False, True}
    for dtype, (launch, got, expected, counters, stored) in cases:
        for name, (value, magnitude, k) in expected.items():
            if got[name] is not None:
                check(got[name], (value, magnitude), k, dtype)
        if got["grad_in_bf16"] is not None and got["grad_in"] is not None:      # grad_in's bits, rounded to nearest even
            assert np.array_equal(got["grad_in_bf16"], bf16_bits(got["grad_in"]))
        elif got["grad_in_bf16"] is not None:                                     # alone: within bfloat16's rounding
            value, magnitude, k = expected["grad_in"]
            as_float = (got["grad_in_bf16"].astype(np.uint32) << 16).view(np.float32)
            assert compare(as_float, value, magnitude + np.abs(value), k, np.float32, "bf16").ok
        if launch.instance.name.removesuffix("_db").endswith("_transposed"):    # the padding past the rows untouched
            assert np.isnan(stored[:, got["grad_in"].shape[0]:]).all()
        if isinstance(counters, np.ndarray):      # left zero for the next launch
            assert not counters.any()


def test_linear_backward_refuses_outputs_that_share_memory(monkeypatch):
    """The entry point with NumPy arrays standing in for CuPy's: dw may be w itself (the SGD step),
    but an output overlapping another array, or more classes than a lane holds, is a one-line
    BadArguments before any launch."""
    from autogemm.errors import BadArguments

    entry = importlib.import_module("autogemm.ops.elementwise")
    launched = []
    monkeypatch.setattr(entry, "_contiguous", lambda x, what: x)
    monkeypatch.setattr(entry, "_layer_input", lambda x, what: x.dtype)
    monkeypatch.setattr(entry, "overlaps", lambda x, y: np.shares_memory(x, y))
    monkeypatch.setattr(entry, "_aligned", lambda *arrays: 4)
    monkeypatch.setattr(entry, "launch", lambda *call: launched.append(call))

    class Device(np.ndarray):                  # a NumPy array with CuPy's data.ptr
        @property
        def data(self):
            return type("Pointer", (), {"ptr": self.__array_interface__["data"][0]})

    def arr(*shape):
        return np.zeros(shape, np.float32).view(Device)

    g, w, a, grad_in, db = arr(8, 3), arr(3, 16), arr(8, 16), arr(8, 16), arr(16)
    entry.linear_backward(g, w, a, grad_in, "sigmoid", w, db)
    assert len(launched) == 1
    for grad_in_, dw, db_, message in ((a, w, db, "a and grad_in overlap"), (grad_in, w, w.reshape(-1)[:16], "w and db"),
                                       (grad_in, a[:3], db, "a and dw overlap")):
        with pytest.raises(BadArguments, match=message):
            entry.linear_backward(g, w, a, grad_in_, "sigmoid", dw, db_)
    with pytest.raises(BadArguments, match="at most 32 classes"):
        entry.linear_backward(arr(8, 40), arr(40, 16), a, grad_in, "sigmoid", arr(40, 16), db)
    assert len(launched) == 1


# ---- the tiled GEMM, every math path ----------------------------------------------------------------
TF32X3 = {"math": ("3xtf32",), "tm": (1,), "tn": (2,), "copy": ("async",), "pad": (True,), "bk": (16, 32)}
TF32 = {**TF32X3, "math": ("tf32",)}
FMA = {"math": ("fma",), "ty": (1, 2, 4, 8, 16), "tx": (1, 2, 4, 8, 16)}   # at most 256 threads a block
WAVE_TILES = {"bm": (48, 80, 96, 112), "bn": (48, 80, 96, 112)}          # tiles that are not powers of two


def sampled(restrictions: dict, count: int):
    """`count` random configs of the restricted GEMM space that can run a problem."""
    def configs(problem):
        seed = problem.m + problem.n + problem.k
        found = family("gemm").restricted(restrictions).sample(problem, H100, count, seed=seed)
        assert len(found) == count, f"too few {restrictions} configs for {problem}"
        return found
    return configs


# (M, N, K, dtype, trans_a, trans_b, epilogue, use_c, configs): every operand layout of each math
# path, ragged and even tiles, split-K, both copy paths, the epilogues, C in place.
GEMMS = [
    (70, 45, 50, "float32", False, True, "bias_sigmoid", False, sampled(TF32X3, 2)),   # both K-major: 16-byte k reads
    (64, 64, 64, "float32", False, False, None, True, sampled(TF32X3, 1)),            # B stored [k][n]
    (45, 70, 40, "float32", True, False, "dsigmoid", False, sampled(TF32X3, 2)),      # A stored [k][m]: row pairs
    (33, 40, 72, "float32", True, True, "bias_relu", True, sampled(TF32X3, 1)),
    (70, 45, 150, "float32", False, True, None, False, sampled({**TF32X3, "split_k": (2, 3)}, 1)),
    (37, 29, 43, "float32", False, False, "bias", True, sampled({**FMA, "copy": ("regs",)}, 2)),
    (50, 61, 35, "float32", True, True, "drelu", False, sampled({**FMA, "copy": ("async",)}, 2)),
    (64, 32, 96, "float32", False, True, None, True, sampled({**FMA, "split_k": (2, 4)}, 1)),
    (41, 23, 30, "float64", True, False, "bias_sigmoid", True, sampled(FMA, 2)),
    (130, 120, 40, "float32", False, True, "bias_sigmoid", False, sampled({**TF32X3, **WAVE_TILES}, 2)),
    (90, 170, 33, "float32", True, False, "dsigmoid", True, sampled({**TF32X3, **WAVE_TILES}, 2)),
    (90, 70, 35, "float32", True, False, None, True, sampled({**FMA, **WAVE_TILES}, 2)),
    (70, 45, 50, "float32", False, True, "bias_sigmoid", False, sampled(TF32, 1), "tf32"),
    (45, 70, 40, "float32", True, False, None, True, sampled(TF32, 1), "tf32"),
    (70, 45, 150, "float32", True, True, "drelu", False, sampled({**TF32, "split_k": (2, 3)}, 1), "bf16"),
]


def gemm_launches(monkeypatch, cases, family_name="gemm", staging=None, bf16_out=False) -> list:
    """(launch, D, (value, magnitude), K, dtype, precision) for each config of each case (M, N, K,
    dtype, trans_a, trans_b, epilogue, use_c, configs: problem -> [Config][, precision]) of a family
    of the gemm call; the arguments are autogemm.ops.gemm.launch_args's, with NumPy scratch in place
    of CuPy's. Precision "bfloat16" stands for bfloat16 operands (their bits), checked within
    float32's bound: their products are exact. The launches that stage operands first
    (autogemm.ops.gemm.staged_operands, scratch of their own) go to `staging`: run them before.
    `bf16_out`: D is written in bfloat16 (its bits, poisoned with NaNs first), C apart from it."""
    entry = importlib.import_module("autogemm.ops.gemm")           # the package's `gemm` is the function
    monkeypatch.setattr(entry, "scratch", lambda kind, dtype, size: np.zeros(size, dtype))
    rng, out = np.random.default_rng(7), []
    for m, n, k, dtype, ta, tb, epilogue, use_c, configs, *precision in cases:
        precision = precision[0] if precision else "fp32"
        bf16_operands = precision == "bfloat16"
        t = np.dtype(dtype).type
        a = rng.standard_normal((k, m) if ta else (m, k)).astype(t)          # op(A): (M, K)
        b = rng.standard_normal((n, k) if tb else (k, n)).astype(t)          # op(B): (K, N)
        if bf16_operands:
            a, b, precision = bf16_bits(a), bf16_bits(b), "fp32"  # uint16 bits of the same shapes
        bias, aux = rng.standard_normal(n).astype(t), rng.uniform(-0.5, 1, (m, n)).astype(t)
        c = rng.standard_normal((m, n)).astype(t)                            # C: (M, N)
        alpha, beta = -0.5, (0.75 if use_c else 0.0)
        problem = gemm.Problem.contiguous(m, n, k, dtype, ta, tb, epilogue=epilogue, use_c=use_c,
                                          precision="bf16" if bf16_operands else precision, bf16_operands=bf16_operands,
                                          bf16_out=bf16_out)
        want = gemm.reference(problem, a, b, alpha, beta, c, bias, aux)["d"][:2]
        for cfg in configs(problem):
            assert not family(family_name).violations(cfg, problem, H100), (cfg, problem)
            instance = family(family_name).instance(cfg, problem)
            if bf16_out:
                d = np.full((m, n), 0x7fc0, np.uint16)                        # D: (M, N) bfloat16 NaNs
            else:
                d = c.copy() if use_c else np.full((m, n), np.nan, t)        # D: (M, N); C in place
            (ka, lda), (kb, ldb), staged = entry.staged_operands(instance, a, a.shape[1], b, b.shape[1], H100)
            if staged:
                assert staging is not None, "pass `staging` for configs that stage their operands"
                staging += [Launch(*launch) for launch in staged]
            args = entry.launch_args(instance, ka, kb, c if bf16_out else d, d, bias, aux, (m, n, k, lda, ldb, n, n, n),
                                     alpha, beta)
            out.append((Launch(instance, list(args)), d, want, k, dtype, precision))
    return out


def test_the_3xtf32_split_rounds_to_nearest_ties_away_as_cvt_rna_does():
    """kernels/gemm/3xtf32.cuh forms hi = (bits + 0x1000) & 0xffffe000 in place of cvt.rna.tf32.f32:
    the float32 rounded to 10 fraction bits, to nearest, ties away from zero (ties, carries into
    the exponent, subnormals and overflow to infinity included)."""
    rng = np.random.default_rng(3)
    bits = rng.integers(0, 0x7f800000, 200_000, dtype=np.uint32)              # finite magnitudes
    bits[:1000] = (bits[:1000] & 0xffffe000) | 0x1000                           # exact ties
    bits[1000:1100] = 0x7f7fe000 + np.arange(100, dtype=np.uint32) * 0x40     # near the largest float
    bits = np.concatenate([bits, bits | 0x80000000])                           # and their negatives
    x = bits.view(np.float32).astype(np.float64)
    hi = ((bits.astype(np.uint64) + 0x1000) & 0xffffe000).astype(np.uint32).view(np.float32)
    _, exponent = np.frexp(np.abs(x))                                          # |x| = m 2^exponent, m in [0.5, 1)
    exponent = np.maximum(exponent, -125)                                      # subnormals: a fixed unit
    unit = np.ldexp(1.0, exponent - 11)                                        # a TF32 unit of |x|
    want = np.sign(x) * np.floor(np.abs(x) / unit + 0.5) * unit
    with np.errstate(over="ignore"):
        assert np.array_equal(hi, want.astype(np.float32))


def test_bf16_bits_round_to_nearest_even():
    """kernels.bf16.bf16_bits (the bfloat16 operands of the tests and the tuner) against float64
    arithmetic: 7 fraction bits, ties to even, overflow to infinity, NaN kept; bf16_values inverts it."""
    rng = np.random.default_rng(4)
    bits = rng.integers(0x00800000, 0x7f800000, 200_000, dtype=np.uint32)       # normal magnitudes
    bits[:1000] = (bits[:1000] & 0xffff0000) | 0x8000                            # exact ties
    bits[1000:1010] = 0x7f7fffff                                                 # the largest float
    bits = np.concatenate([bits, bits | 0x80000000])
    x = bits.view(np.float32).astype(np.float64)
    _, exponent = np.frexp(np.abs(x))
    unit = np.ldexp(1.0, exponent - 8)                                           # a bfloat16 unit of |x|
    with np.errstate(over="ignore"):
        want = (np.sign(x) * np.round(np.abs(x) / unit) * unit).astype(np.float32)   # np.round: ties to even
        assert np.array_equal(bf16_values(bf16_bits(bits.view(np.float32))), want.astype(np.float64))
    assert np.isnan(bf16_values(bf16_bits(np.float32([np.nan])))).all()


def run_and_check(launches, tmp_path, defines=()):
    """Run (launch, output, (value, magnitude), k, dtype[, precision]) launches, each once however
    many outputs it lists, and check each output against float64, naming the kernel that fails."""
    run(list({id(launch): launch for launch, *_ in launches}.values()), tmp_path, defines=defines)
    for launch, d, want, k, dtype, *precision in launches:
        verdict = compare(d, *want, k, dtype, *precision)
        assert verdict.ok, f"{launch.instance.name}: {verdict.describe()}"


def test_gemm_every_math_path_every_layout_on_the_cpu(tmp_path, monkeypatch):
    cases = gemm_launches(monkeypatch, GEMMS)
    configs = [launch.instance.config for launch, *_ in cases]
    assert {c.math for c in configs} == {"fma", "3xtf32", "tf32"} and {c.copy for c in configs} == {"regs", "async"}
    assert max(c.split_k for c in configs if c.math == "3xtf32") > 1 and max(c.split_k for c in configs) > 1
    run_and_check(cases, tmp_path)


def wgmma_config(bm, bn, warpgroups, stages, math="3xtf32", inflight=0, split_k=1, producer=0, tma=0, pretranspose=0,
                 cluster=(1, 1), persistent=0, reg_a=0, swap=0):
    values = dict(bm=bm, bn=bn, warpgroups=warpgroups, stages=stages, math=math, inflight=inflight, split_k=split_k,
                  producer=producer, tma=tma, pretranspose=pretranspose, cluster_m=cluster[0], cluster_n=cluster[1],
                  persistent=persistent, reg_a=reg_a, swap=swap)
    return lambda problem: [family("gemm_wgmma").config(values)]


# (M, N, K, ...) as GEMMS: ragged and even tiles, one to three 64-row wgmma tiles per warpgroup,
# one and two warpgroups, 2 to 5 stages (K of 2 to 4 tiles: every stage slot reused or not), N from
# 32 to 256, odd N (scalar stores), the epilogues, C in place; every op (operands transposed in
# shared memory: M and N a multiple of 4, the 16-byte copies' alignment); TF32 and BF16 products
# for calls at those precisions (checked within their bounds); bfloat16 operands (rows a multiple
# of 8 elements, stages of 64 k), M/N-major ones read by the transposing wgmma (one and two 64-row
# blocks); split-K in 2 to 4 slices (the last one short), C in place; the producer warpgroup's
# pipeline on each kind of stage (prepared with every lag from 0 to 3 stages, or read as landed)
# over K of 5 to 13 stages, so that every slot is reused, copying by cp.async and by TMA (the emulated bulk copies land at the
# wait for them, swizzled, with zeros past the edges: ragged M, N and K); TMA in clusters of 2 x 1, 1 x 2
# and 2 x 2 blocks sharing their tiles by multicast, each kind of tile parted (K-major by rows,
# M/N-major by k-rows), with a prepare step or without, the grid padded to whole clusters; persistent
# blocks (3 of them, emulated.EMULATED_SMS, or whole clusters) taking 2 to 8 tiles each, their one or
# two warpgroups alternating whole tiles, each producer pipeline, wgmmas in flight or not, alone and in
# clusters taking cluster tiles.
WGMMAS = [
    (130, 70, 100, "float32", False, True, "bias_sigmoid", False, wgmma_config(128, 64, 1, 3)),
    (130, 70, 164, "float32", False, True, "dsigmoid", True, wgmma_config(128, 64, 2, 3, "tf32", 1), "tf32"),
    (64, 96, 200, "float32", False, True, None, False, wgmma_config(64, 96, 1, 4, "tf32", 1), "tf32"),
    (70, 45, 52, "float32", False, True, None, True, wgmma_config(128, 48, 2, 2)),
    (64, 256, 96, "float32", False, True, "drelu", False, wgmma_config(64, 256, 1, 3, "tf32"), "tf32"),
    (200, 90, 68, "float32", False, True, "dsigmoid", True, wgmma_config(192, 80, 1, 4, "tf32"), "tf32"),
    (100, 64, 200, "float32", False, True, "bias", False, wgmma_config(64, 64, 1, 5)),
    (40, 30, 36, "float32", False, True, "bias_relu", False, wgmma_config(256, 32, 2, 2)),
    (130, 100, 164, "float32", False, True, "bias_relu", True, wgmma_config(128, 96, 2, 3, "tf32", 1), "tf32"),
    (70, 256, 64, "float32", False, True, None, False, wgmma_config(64, 256, 1, 5, "tf32", 0), "tf32"),
    (132, 72, 100, "float32", True, False, "dsigmoid", True, wgmma_config(128, 64, 2, 3)),
    (68, 96, 164, "float32", False, False, "bias_relu", False, wgmma_config(64, 96, 1, 4)),
    (200, 45, 68, "float32", True, True, None, True, wgmma_config(192, 32, 1, 3)),
    (132, 80, 100, "float32", True, False, "bias", False, wgmma_config(64, 80, 1, 4, "tf32", 1), "tf32"),
    (64, 40, 36, "float32", False, False, None, True, wgmma_config(64, 32, 1, 2, "tf32"), "tf32"),
    (130, 100, 164, "float32", False, True, "bias_relu", True, wgmma_config(128, 96, 2, 3, "bf16", 1), "bf16"),
    (132, 72, 100, "float32", True, False, "dsigmoid", False, wgmma_config(64, 64, 1, 4, "bf16"), "bf16"),
    (68, 40, 36, "float32", False, False, None, True, wgmma_config(64, 32, 1, 2, "bf16"), "bf16"),
    (200, 45, 68, "float32", True, True, "bias", False, wgmma_config(192, 48, 1, 3, "bf16", 1), "bf16"),
    (130, 100, 328, "float32", False, True, "bias_sigmoid", True, wgmma_config(128, 96, 2, 3, "bf16", 1), "bfloat16"),
    (136, 72, 328, "float32", True, False, "dsigmoid", True, wgmma_config(64, 64, 1, 4, "bf16"), "bfloat16"),
    (72, 40, 40, "float32", False, False, None, False, wgmma_config(64, 64, 1, 2, "bf16"), "bfloat16"),
    (200, 45, 72, "float32", True, True, "drelu", False, wgmma_config(192, 48, 1, 3, "bf16", 1), "bfloat16"),
    (72, 136, 48, "float32", False, False, "bias", False, wgmma_config(64, 128, 1, 3, "bf16", 1), "bfloat16"),
    (296, 64, 72, "float32", True, False, None, True, wgmma_config(256, 64, 2, 3, "bf16"), "bfloat16"),
    (130, 70, 300, "float32", False, True, "bias_sigmoid", True, wgmma_config(64, 64, 1, 3, split_k=3)),
    (72, 40, 400, "float32", False, True, "dsigmoid", False, wgmma_config(64, 32, 1, 4, "tf32", 1, split_k=4), "tf32"),
    (136, 128, 200, "float32", True, False, "bias", True, wgmma_config(128, 64, 2, 3, "bf16", split_k=2), "bfloat16"),
    (130, 70, 300, "float32", False, True, "bias_sigmoid", False, wgmma_config(128, 64, 2, 3, producer=1)),
    (132, 72, 400, "float32", True, False, "dsigmoid", True, wgmma_config(64, 64, 1, 4, producer=1)),
    (132, 80, 420, "float32", True, False, "bias", False, wgmma_config(64, 64, 1, 5, "tf32", producer=1), "tf32"),
    (200, 45, 220, "float32", True, True, None, False, wgmma_config(192, 32, 1, 2, producer=1)),
    (70, 256, 200, "float32", False, True, None, False, wgmma_config(64, 256, 1, 2, "tf32", producer=1), "tf32"),
    (130, 100, 264, "float32", False, False, "bias_relu", True, wgmma_config(128, 96, 2, 4, "bf16", 1, producer=1), "bf16"),
    (136, 128, 600, "float32", True, False, "bias", True, wgmma_config(128, 64, 2, 3, "bf16", split_k=2, producer=1),
     "bfloat16"),
    (72, 40, 400, "float32", False, True, "dsigmoid", False, wgmma_config(64, 32, 1, 4, "tf32", 1, split_k=4, producer=1),
     "tf32"),
    (130, 70, 300, "float32", False, True, "bias_sigmoid", False, wgmma_config(128, 64, 2, 3, producer=1, tma=1)),
    (132, 72, 400, "float32", True, False, "dsigmoid", True, wgmma_config(64, 64, 1, 4, producer=1, tma=1)),
    (132, 80, 420, "float32", True, False, "bias", False, wgmma_config(64, 64, 1, 5, "tf32", producer=1, tma=1), "tf32"),
    (200, 45, 220, "float32", True, True, None, False, wgmma_config(192, 32, 1, 2, producer=1, tma=1)),
    (70, 256, 200, "float32", False, True, None, False, wgmma_config(64, 256, 1, 2, "tf32", producer=1, tma=1), "tf32"),
    (130, 100, 264, "float32", False, False, "bias_relu", True, wgmma_config(128, 96, 2, 4, "bf16", 1, producer=1, tma=1),
     "bf16"),
    (130, 100, 456, "float32", False, True, "bias_sigmoid", True, wgmma_config(128, 96, 2, 3, "bf16", 1, producer=1, tma=1),
     "bfloat16"),
    (136, 128, 600, "float32", True, False, "bias", True, wgmma_config(128, 64, 2, 3, "bf16", split_k=2, producer=1, tma=1),
     "bfloat16"),
    (72, 40, 400, "float32", False, True, "dsigmoid", False,
     wgmma_config(64, 32, 1, 4, "tf32", 1, split_k=4, producer=1, tma=1), "tf32"),
    (130, 70, 300, "float32", False, True, "bias_sigmoid", False,
     wgmma_config(64, 64, 1, 3, "tf32", 1, producer=1, tma=1, cluster=(2, 1)), "tf32"),
    (100, 136, 420, "float32", False, True, "drelu", True, wgmma_config(64, 48, 1, 4, producer=1, tma=1, cluster=(1, 2))),
    (132, 80, 420, "float32", True, False, "bias", False,
     wgmma_config(64, 64, 1, 5, "tf32", producer=1, tma=1, cluster=(2, 2)), "tf32"),
    (136, 128, 600, "float32", True, False, "bias", True,
     wgmma_config(64, 64, 1, 3, "bf16", 1, producer=1, tma=1, cluster=(2, 2)), "bfloat16"),
    (130, 100, 456, "float32", False, True, "bias_sigmoid", False,
     wgmma_config(128, 96, 2, 3, "bf16", producer=1, tma=1, cluster=(1, 2)), "bfloat16"),
    (200, 136, 300, "float32", False, True, "bias_sigmoid", True,
     wgmma_config(64, 64, 2, 3, "tf32", 1, producer=1, tma=1, persistent=1), "tf32"),
    (132, 72, 100, "float32", True, False, "dsigmoid", False, wgmma_config(64, 64, 2, 4, producer=1, tma=1, persistent=1)),
    (130, 100, 264, "float32", False, False, "bias_relu", True,
     wgmma_config(64, 32, 1, 4, "bf16", 1, producer=1, persistent=1), "bf16"),
    (136, 128, 328, "float32", True, False, "bias", False,
     wgmma_config(64, 64, 2, 3, "bf16", producer=1, tma=1, persistent=1), "bfloat16"),
    (70, 256, 200, "float32", False, True, None, False, wgmma_config(128, 64, 2, 2, producer=1, persistent=1)),
    (264, 136, 300, "float32", False, True, "bias_sigmoid", True,
     wgmma_config(64, 64, 2, 3, "tf32", 1, producer=1, tma=1, persistent=1, cluster=(2, 1)), "tf32"),
    (200, 136, 164, "float32", True, False, "bias", False,
     wgmma_config(64, 64, 2, 4, "bf16", producer=1, tma=1, persistent=1, cluster=(1, 2)), "bfloat16"),
    (130, 100, 100, "float32", False, False, "drelu", False, wgmma_config(64, 32, 1, 3, producer=1, tma=1, persistent=1,
                                                                           cluster=(2, 2))),
    # op(A) read into registers (reg_a): one, two and four 64-row tiles a warpgroup (8- and 16-byte
    # reads of the landed tile), both maths, B K-major or transposed in shared memory, each pipeline,
    # TMA's swizzled boxes alone and parted in a cluster along N, persistent blocks, split-K.
    (132, 70, 100, "float32", True, True, "bias_sigmoid", False, wgmma_config(128, 64, 1, 3, "tf32", reg_a=1), "tf32"),
    (136, 72, 164, "float32", True, False, "dsigmoid", True, wgmma_config(128, 64, 2, 3, "tf32", reg_a=1), "tf32"),
    (68, 96, 200, "float32", True, True, None, False, wgmma_config(64, 96, 1, 4, "tf32", producer=1, reg_a=1), "tf32"),
    (200, 40, 420, "float32", True, False, "bias", False, wgmma_config(256, 32, 1, 4, "tf32", producer=1, tma=1, reg_a=1),
     "tf32"),
    (132, 130, 200, "float32", True, True, None, True,
     wgmma_config(64, 64, 1, 3, "tf32", producer=1, tma=1, cluster=(1, 2), reg_a=1), "tf32"),
    (260, 130, 100, "float32", True, True, "drelu", False,
     wgmma_config(128, 64, 2, 3, "tf32", producer=1, tma=1, persistent=1, reg_a=1), "tf32"),
    (72, 40, 400, "float32", True, True, "dsigmoid", False, wgmma_config(64, 32, 1, 4, split_k=4, reg_a=1)),
    # D^T computed (swap), op(B) N-major read into registers: ops nn and tn (op(A) then transposed in
    # shared memory), every epilogue's coordinates (bias by D's column, aux and C by D's element),
    # ragged M and N, each pipeline, split-K, one, two and four 64-row tiles a warpgroup, clusters
    # sharing the register operand's tile (1 x 2) and B's (2 x 1, reg_a alone).
    (134, 72, 100, "float32", False, False, "bias_sigmoid", False, wgmma_config(64, 64, 1, 3, reg_a=1, swap=1)),
    (100, 136, 164, "float32", False, False, "dsigmoid", True,
     wgmma_config(128, 64, 2, 3, "tf32", producer=1, tma=1, reg_a=1, swap=1), "tf32"),
    (68, 132, 200, "float32", True, False, "bias", False, wgmma_config(64, 96, 1, 4, producer=1, reg_a=1, swap=1)),
    (42, 72, 400, "float32", False, False, "drelu", True,
     wgmma_config(64, 32, 1, 4, "tf32", split_k=4, producer=1, tma=1, reg_a=1, swap=1), "tf32"),
    (70, 140, 100, "float32", False, False, "bias", True, wgmma_config(128, 64, 1, 3, producer=1, reg_a=1, swap=1)),
    (40, 264, 164, "float32", True, False, None, False,
     wgmma_config(256, 32, 1, 3, "tf32", producer=1, tma=1, reg_a=1, swap=1), "tf32"),
    (100, 136, 200, "float32", False, False, "bias_relu", False,
     wgmma_config(64, 64, 1, 3, "tf32", producer=1, tma=1, cluster=(1, 2), reg_a=1, swap=1), "tf32"),
    (136, 100, 200, "float32", True, True, "dsigmoid", True,
     wgmma_config(64, 64, 1, 3, producer=1, tma=1, cluster=(2, 1), reg_a=1)),
]


def test_gemm_wgmma_descriptors_swizzle_and_fragments_on_the_cpu(tmp_path, monkeypatch):
    """The wgmma path's shared layout (stages copied by cp.async or TMA into the 128-byte swizzle), its
    pipelines' mbarriers, its descriptors and its accumulator fragments, as the emulator runs them,
    against float64."""
    run_and_check(gemm_launches(monkeypatch, WGMMAS, "gemm_wgmma"), tmp_path)


# D in bfloat16 (precision bf16): column pairs stored as one 4-byte word, odd N column by column;
# C apart from D; split-K's float32 sums rounded once; each math that serves bf16; every op;
# bfloat16 operands in persistent blocks.
WGMMAS_BF16_OUT = [
    (130, 70, 100, "float32", False, True, "bias_sigmoid", False, wgmma_config(128, 64, 1, 3, "bf16"), "bf16"),
    (70, 45, 52, "float32", False, True, None, True, wgmma_config(128, 48, 2, 2, "tf32"), "bf16"),
    (72, 40, 400, "float32", False, False, "dsigmoid", False, wgmma_config(64, 32, 1, 4, split_k=4), "bf16"),
    (68, 40, 36, "float32", True, True, "bias_relu", False, wgmma_config(64, 32, 1, 2, "bf16"), "bf16"),
    (136, 128, 328, "float32", True, False, "bias", True,
     wgmma_config(64, 64, 2, 3, "bf16", producer=1, tma=1, persistent=1), "bfloat16"),
]


def test_gemm_wgmma_writes_bfloat16_on_the_cpu(tmp_path, monkeypatch):
    """D rounded to bfloat16 in the epilogue: within the precision's bound and half a bfloat16 unit."""
    launches = gemm_launches(monkeypatch, WGMMAS_BF16_OUT, "gemm_wgmma", bf16_out=True)
    run([launch for launch, *_ in launches], tmp_path)
    for launch, d, want, k, dtype, precision in launches:
        verdict = compare(bf16_values(d), *want, k, dtype, precision, output_rounding=OPERAND_ROUNDING["bf16"])
        assert verdict.ok, f"{launch.instance.name}: {verdict.describe()}"


def test_gemm_wgmma_bulk_copies_landing_when_issued_on_the_cpu(tmp_path, monkeypatch):
    """The TMA cases again, their bulk copies landing as soon as they are issued (the earliest a
    GPU may): a slot refilled while its stage is still read would change under its readers."""
    launches = [case for case in gemm_launches(monkeypatch, WGMMAS, "gemm_wgmma") if case[0].instance.config.tma]
    assert len(launches) >= 9
    run_and_check(launches, tmp_path, defines=("EMU_BULK_COPIES_LAND_AT_ISSUE",))


# Pretransposed operands (pretranspose): every op with an M/N-major operand, either math of TF32
# products, the one loop and the TMA producer, split-K; each operand transposed into scratch by the
# transpose kernel (run first), then read K-major.
PRETRANSPOSED = [
    (132, 72, 100, "float32", True, False, "dsigmoid", True, wgmma_config(128, 64, 2, 3, pretranspose=1)),
    (68, 96, 164, "float32", False, False, "bias_relu", False, wgmma_config(64, 96, 1, 4, "tf32", pretranspose=1),
     "tf32"),
    (200, 45, 220, "float32", True, True, None, False, wgmma_config(192, 32, 1, 2, producer=1, tma=1, pretranspose=1)),
    (132, 80, 420, "float32", True, False, "bias", True,
     wgmma_config(64, 64, 1, 5, "tf32", split_k=2, producer=1, tma=1, pretranspose=1), "tf32"),
    (68, 200, 300, "float32", False, False, None, False,
     wgmma_config(64, 96, 1, 4, "tf32", producer=1, tma=1, pretranspose=1, cluster=(2, 1)), "tf32"),
    (132, 72, 164, "float32", True, False, "bias", False,                # B copied, A read into registers
     wgmma_config(128, 64, 1, 4, producer=1, tma=1, pretranspose=1, reg_a=1)),
    (132, 200, 164, "float32", True, False, "bias_relu", True,           # swap: A copied, B read into registers
     wgmma_config(64, 64, 1, 4, producer=1, tma=1, pretranspose=1, reg_a=1, swap=1)),
]


def test_gemm_wgmma_pretransposed_operands_on_the_cpu(tmp_path, monkeypatch):
    """Operands staged K-major by the transpose kernel into scratch, then multiplied by the kernel of
    the K-major call (autogemm.ops.gemm.staged_operands: the staging a GemmCall launches first)."""
    staging = []
    launches = gemm_launches(monkeypatch, PRETRANSPOSED, "gemm_wgmma", staging)
    assert len(staging) == 9 and all("_nt_" in launch.instance.name or "_ra" in launch.instance.name
                                     for launch, *_ in launches)
    run(staging, tmp_path / "staging")
    run_and_check(launches, tmp_path)


def tuned_gemm_cases() -> list:
    """One case per distinct (op, dtype, config) of the GEMM records in tuned/: the record's config
    on its op (at its precision: tf32 and bf16 records multiply float32 data so), sizes cut to about
    1.5 tiles (ragged) and two BK steps per split-K slice (one short), with the epilogue the trainer
    gives that op (Z: bias + sigmoid, dA: sigma', dW: in place)."""
    from autogemm.store.records import load

    cases = {}
    for path in sorted((Path(__file__).parents[1] / "tuned").glob("*.json")):
        for r in load(path).records.values():
            if r.key.family != "gemm":
                continue
            c, (m, n, k), op = r.config, r.key.sizes, r.key.op
            cut = lambda size, tile: min(size, -(-(tile + tile // 2 + 3) // 4) * 4)  # noqa: E731
            m, n, k = cut(m, c.bm), cut(n, c.bn), min(k, 2 * c.split_k * c.bk - 4)
            trans_a, trans_b, epilogue = split_op(op)   # without one: the step's own for the layout
            epilogue, use_c = (epilogue, False) if epilogue else {
                "nt": ("bias_sigmoid", False), "nn": ("dsigmoid", False), "tn": (None, True)}[op]
            dtype, precision = ("float32", r.key.dtype) if r.key.dtype in ("tf32", "bf16") else (r.key.dtype, "fp32")
            cases[op, r.key.dtype, c] = (m, n, k, dtype, trans_a, trans_b, epilogue, use_c,
                                         lambda problem, c=c: [c], precision)
    return list(cases.values())


def test_every_tuned_gemm_config_on_the_cpu(tmp_path, monkeypatch):
    """The configs the trainer runs (stale records' too) compute their ops right with today's templates."""
    cases = tuned_gemm_cases()
    assert len(cases) >= 30
    run_and_check(gemm_launches(monkeypatch, cases), tmp_path)


# ---- the naive GEMM and the small families -----------------------------------------------------
def test_gemm_naive_every_op_and_epilogue_on_the_cpu(tmp_path):
    fam, rng, cases = family("gemm_naive"), np.random.default_rng(0), []
    for i, ((ta, tb), epilogue) in enumerate(zip([(False, False), (False, True), (True, False), (True, True)] * 2,
                                                 gemm.EPILOGUES[1:] + (None, "bias_sigmoid", "drelu"))):
        dtype = ("float32", "float64")[i % 2]
        t = np.dtype(dtype).type
        m, n, k = 19, 23, 37 + i
        a = rng.standard_normal((k, m) if ta else (m, k)).astype(t)          # op(A): (M, K)
        b = rng.standard_normal((n, k) if tb else (k, n)).astype(t)          # op(B): (K, N)
        c = rng.standard_normal((m, n)).astype(t)                            # C: (M, N)
        bias, aux = rng.standard_normal(n).astype(t), rng.uniform(-0.5, 1, (m, n)).astype(t)
        d = np.full((m, n), np.nan, t)                                       # D: (M, N)
        problem = gemm.Problem(m, n, k, dtype, ta, tb, epilogue, use_c=True, vec_a=1, vec_b=1, vec_out=1)
        cfg = fam.sample(problem, H100, 1, seed=i)[0]
        args = [a, b, c, d, bias, aux, np.uint64(0), np.uint64(0),
                *(np.int32(s) for s in (m, n, k, a.shape[1], b.shape[1], n, n, n)), t(-0.5), t(2.0)]
        want = gemm.reference(problem, a, b, -0.5, 2.0, c, bias, aux)["d"][:2]
        cases.append((Launch(fam.instance(cfg, problem), args), d, want, k, dtype))
    run([launch for launch, *_ in cases], tmp_path)
    for _, d, want, k, dtype in cases:
        check(d, want, k, dtype)


def test_softmax_xent_colsum_and_elementwise_on_the_cpu(tmp_path):
    from kernels import colsum, elementwise, softmax_xent

    rng, cases = np.random.default_rng(1), []
    for dtype, (rows, cols) in (("float32", (37, 10)), ("float64", (70, 33))):
        t = np.dtype(dtype).type
        z = (rng.standard_normal((rows, cols)) * 3).astype(t)                # Z: (rows, cols)
        labels = rng.integers(0, cols, rows).astype(np.int32)
        z64 = z.astype(np.float64)
        p = np.exp(z64 - z64.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        onehot = np.eye(cols)[labels]
        sx = family("softmax_xent")
        for cfg in sx.sample(softmax_xent.Problem(rows, cols, dtype), H100, 2, seed=rows):
            grad, loss = np.full((rows, cols), np.nan, t), np.zeros(1, t)
            args = [z, labels, grad, loss, np.int32(rows), np.int32(cols), t(1 / rows)]
            cases.append((Launch(sx.instance(cfg, softmax_xent.Problem(rows, cols, dtype)), args), grad,
                          ((p - onehot) / rows, (p + onehot) / rows), cols, dtype))
            want = -np.log(p[np.arange(rows), labels]).sum()
            cases.append((None, loss, (np.array([[want]]), np.array([[want + rows]])), rows * cols, dtype))
        cs = family("colsum")
        for cfg in cs.sample(colsum.Problem(rows, cols, dtype), H100, 2, seed=cols):
            out = rng.standard_normal(cols).astype(t)                        # (cols,), updated in place
            want = (-0.1 * z64.sum(0) + out)[None, :], (0.1 * np.abs(z64).sum(0) + np.abs(out))[None, :]
            args = [z, out, np.int32(rows), np.int32(cols), np.int32(cols), t(-0.1), t(1.0)]
            cases.append((Launch(cs.instance(cfg, colsum.Problem(rows, cols, dtype)), args), out, want, rows, dtype))
        ew = family("elementwise")
        y = rng.uniform(0.01, 0.99, (rows, cols)).astype(t)                  # a saved sigmoid output
        for op, want in (("dsigmoid", z64 * y * (1 - y)), ("sgd", y - 0.1 * (z64 + 0.01 * y))):
            problem = elementwise.Problem(op, rows, cols, dtype, aligned=1)
            out = y.copy() if op == "sgd" else np.full((rows, cols), np.nan, t)
            cfg = ew.sample(problem, H100, 1, seed=len(op))[0]
            args = [out, z, y if op == "dsigmoid" else np.uint64(0), np.int32(rows * cols), np.int32(cols),
                    t(0.1), t(0.01)]
            cases.append((Launch(ew.instance(cfg, problem), args), out, (want, np.abs(want) + np.abs(y)), 4, dtype))
    run([launch for launch, *_ in cases if launch is not None], tmp_path)
    for _, got, want, k, dtype in cases:
        check(got, want, k, dtype)


def test_autogemm_linear_xent_binds_the_arguments_its_kernel_takes(tmp_path, monkeypatch):
    """The entry point with NumPy arrays standing in for CuPy's: its launch, run on the CPU, is right,
    the input gradient's bfloat16 copy too, from A in float32 and from A's bfloat16 bits."""
    entry = importlib.import_module("autogemm.ops.elementwise")    # the package's `elementwise` is the function
    monkeypatch.setattr(entry, "_contiguous", lambda x, what: x)
    monkeypatch.setattr(entry, "_layer_input", lambda x, what: np.dtype(np.float32))
    monkeypatch.setattr(entry, "_aligned", lambda *arrays: 4)
    monkeypatch.setattr(entry, "_bf16_bits", lambda x, shape, what: 4)
    rng = np.random.default_rng(5)
    a = rng.uniform(0.01, 0.99, (29, 200)).astype(np.float32)                # A: (rows, K)
    w = rng.standard_normal((10, 200)).astype(np.float32) / 14               # W: (C, K)
    b = rng.standard_normal(10).astype(np.float32)                           # b: (C,)
    labels = rng.integers(0, 10, 29).astype(np.int32)
    for a_in in (a, bf16_bits(a)):
        launched = []
        monkeypatch.setattr(entry, "_run", lambda *call: launched.append(call))
        logits, grad = np.full((29, 10), np.nan, np.float32), np.full((29, 10), np.nan, np.float32)
        grad_in, loss = np.full((29, 200), np.nan, np.float32), np.zeros(1, np.float32)
        grad_in_bf16 = np.zeros((29, 200), np.uint16)
        entry.linear_xent(a_in, w, b, labels, logits, grad, 1 / 29, loss, grad_in, "sigmoid", grad_in_bf16=grad_in_bf16)
        (name, problem, args, config), = launched
        fam = family(name)
        assert problem.grad_in_bf16 and problem.a_bf16 == (a_in.dtype == np.uint16)
        run([Launch(fam.instance(fam.default(problem, H100), problem), list(args))], tmp_path)
        expected = linear_xent.reference(problem, a_in, w, b, labels, 1 / 29)
        for name, got in (("logits", logits), ("grad", grad), ("grad_in", grad_in), ("loss", loss)):
            check(got, expected[name][:2], expected[name][2], "float32")
        assert np.array_equal(grad_in_bf16, bf16_bits(grad_in))


# ---- conv2d: the implicit-GEMM forward convolution -------------------------------------------------
CONVS = [(3, 1, 28, 28, 6, 3, "relu", "float32"),     # LeNet's first layer, 3 images
         (2, 6, 13, 13, 10, 3, "relu", "float64"),    # its second, on the pooled maps
         (2, 3, 9, 7, 5, 5, None, "float32"),         # odd channels, a non-square image, K = 5
         (1, 2, 4, 5, 33, 2, "sigmoid", "float64"),   # more filters than a tile holds
         (5, 1, 3, 3, 1, 3, None, "float32")]         # one output pixel an image


@pytest.mark.parametrize("name", ["conv2d", "conv2d_direct"])
def test_conv2d_matches_float64_on_the_cpu(name, tmp_path):
    from kernels import conv2d

    rng, cases = np.random.default_rng(11), []
    fam = family(name)
    for seed, (n, c, h, w, f, k, activation, dtype) in enumerate(CONVS):
        t = np.dtype(dtype).type
        p = conv2d.Problem(n, c, h, w, f, k, dtype, activation)
        x = rng.uniform(0, 1, (n, c, h, w)).astype(t)                       # X: (N, C, H, W) pixels
        wt = (rng.standard_normal((f, c, k, k)) / k).astype(t)               # W: (F, C, K, K)
        b = rng.standard_normal(f).astype(t)                                 # b: (F,)
        value, magnitude, depth = conv2d.reference(p, x, wt, b)["z"]
        for cfg in fam.candidates(p, H100)[:1] + fam.sample(p, H100, 3, seed=seed):
            z = np.full((n, f, p.out_h, p.out_w), np.nan, t)                 # Z: (N, F, OH, OW), poisoned
            cases.append((Launch(fam.instance(cfg, p), [x, wt, b, z, np.int32(n)]), z, (value, magnitude), depth, dtype))
    run_and_check(cases, tmp_path)


@pytest.mark.parametrize("name", ["conv2d_dgrad", "conv2d_dgrad_direct"])
def test_conv2d_dgrad_matches_float64_on_the_cpu(name, tmp_path):
    from kernels import conv2d_dgrad

    rng, cases = np.random.default_rng(12), []
    fam = family(name)
    for seed, (n, c, h, w, f, k, activation, dtype) in enumerate(CONVS):
        t = np.dtype(dtype).type
        p = conv2d_dgrad.Problem(n, c, h, w, f, k, dtype, activation)
        g = rng.standard_normal((n, f, p.out_h, p.out_w)).astype(t)          # G: (N, F, OH, OW)
        wt = (rng.standard_normal((f, c, k, k)) / k).astype(t)               # W: (F, C, K, K)
        aux = saved_output(rng, activation, (n, c, h, w), t)                 # the layer below's output
        value, magnitude, depth = conv2d_dgrad.reference(p, g, wt, aux)["dx"]
        for cfg in fam.candidates(p, H100)[:1] + fam.sample(p, H100, 3, seed=seed):
            dx = np.full((n, c, h, w), np.nan, t)                            # dX: (N, C, H, W), poisoned
            args = [g, wt, aux if activation else np.uint64(0), dx, np.int32(n)]
            cases.append((Launch(fam.instance(cfg, p), args), dx, (value, magnitude), depth, dtype))
    run_and_check(cases, tmp_path)


# A 2 x 2 max-pool fused into the direct kernels: even and odd outputs (a dropped row and column),
# several filter groups, both dtypes and activations.
POOLED_CONVS = [(3, 1, 28, 28, 6, 3, "relu", "float32"),     # LeNet's first layer: 26 x 26 -> 13 x 13
                (2, 6, 13, 13, 10, 3, "sigmoid", "float64"), # its second: 11 x 11 -> 5 x 5
                (2, 3, 9, 8, 17, 5, None, "float32")]        # 5 x 4 -> 2 x 2, 17 filters


def test_direct_convolutions_with_a_fused_pool_match_float64_on_the_cpu(tmp_path):
    """Forward: the pooled maxima within the bound, each position a window's maximum (or a tie
    within the bound); backward data: the gradient at the given maxima of (N, C, 2H, 2W), zero
    beside them, every element written."""
    from kernels import conv2d, conv2d_dgrad

    rng, cases, positions = np.random.default_rng(17), [], []
    forward, backward = family("conv2d_direct"), family("conv2d_dgrad_direct")
    for seed, (n, c, h, w, f, k, activation, dtype) in enumerate(POOLED_CONVS):
        t = np.dtype(dtype).type
        p = conv2d.Problem(n, c, h, w, f, k, dtype, activation, pool=True)
        x = rng.uniform(0, 1, (n, c, h, w)).astype(t)                       # X: (N, C, H, W)
        wt = (rng.standard_normal((f, c, k, k)) / k).astype(t)               # W: (F, C, K, K)
        b = rng.standard_normal(f).astype(t)                                 # b: (F,)
        want = conv2d.reference(p, x, wt, b)
        for cfg in forward.candidates(p, H100)[:1] + forward.sample(p, H100, 2, seed=seed):
            z = np.full((n, f, *p.pooled), np.nan, t)                        # Z pooled: (N, F, OH/2, OW/2)
            where = np.full(z.shape, -1, np.int8)
            launch = Launch(forward.instance(cfg, p), [x, wt, b, z, where, np.int32(n)])
            cases.append((launch, z, want["z"][:2], p.depth, dtype))
            positions.append((launch, where, want["where"][0], want["z"], dtype))
        # backward data into the layer below, which pooled (N, F, 2H, 2W) maps of f channels to these
        q = conv2d_dgrad.Problem(n, f, h, w, c, k, dtype, activation, pool=True)
        g = rng.standard_normal((n, c, q.out_h, q.out_w)).astype(t)         # G: (N, C, OH, OW)
        wd = (rng.standard_normal((c, f, k, k)) / k).astype(t)               # W: (C, F, K, K)
        aux = saved_output(rng, activation, (n, f, h, w), t)                 # the pooled activations
        maxima = rng.integers(0, 4, (n, f, h, w)).astype(np.int8)            # where each window's maximum was
        value, magnitude, depth = conv2d_dgrad.reference(q, g, wd, aux, maxima)["dx"]
        for cfg in backward.candidates(q, H100)[:1] + backward.sample(q, H100, 2, seed=seed):
            dx = np.full((n, f, 2 * h, 2 * w), np.nan, t)                    # dX unpooled, poisoned
            args = [g, wd, aux if activation else np.uint64(0), maxima, dx, np.int32(n)]
            cases.append((Launch(backward.instance(cfg, q), args), dx, (value, magnitude), depth, dtype))
    run_and_check(cases, tmp_path)
    for launch, where, z, (pooled, magnitude, depth), dtype in positions:
        assert ((where >= 0) & (where <= 3)).all(), launch.instance.name
        chosen = np.take_along_axis(conv2d.pool_windows(z), where[..., None].astype(np.intp), -1)[..., 0]
        verdict = compare(chosen, pooled, magnitude, depth, dtype)
        assert verdict.ok, f"{launch.instance.name}: {verdict.describe()}"


@pytest.mark.parametrize("name, split, sampled", [
    ("conv2d_wgrad", dict(bm=4, bn=16, bk=8, ty=4, tx=8, tm=1, tn=2, pad=False, split_k=4, math="fma", stages=1), {}),   # 4 ragged slices
    # sampled blocks of at most 4 warps: the emulator runs each warp shuffle of 512 threads' sums slowly
    ("conv2d_wgrad_direct", dict(threads=64, fpt=2, split_k=4), {"threads": (64, 128)})])
def test_conv2d_wgrad_matches_float64_on_the_cpu(name, split, sampled, tmp_path):
    """The weight and bias gradients, with split-K slices reduced by the last block (ragged slices,
    several tiles) and without."""
    from kernels import conv2d_wgrad

    rng, cases = np.random.default_rng(13), []
    fam = family(name)
    for seed, (n, c, h, w, f, k, _, dtype) in enumerate(CONVS):
        t = np.dtype(dtype).type
        p = conv2d_wgrad.Problem(n, c, h, w, f, k, dtype)
        g = rng.standard_normal((n, f, p.out_h, p.out_w)).astype(t)          # G: (N, F, OH, OW)
        x = rng.uniform(0, 1, (n, c, h, w)).astype(t)                       # X: (N, C, H, W)
        want = conv2d_wgrad.reference(p, g, x)
        configs = fam.candidates(p, H100)[:1] + fam.restricted(sampled).sample(p, H100, 2, seed=seed)
        configs += [fam.config(split)] if not fam.violations(fam.config(split), p, H100) else []
        for cfg in configs:
            inst = fam.instance(cfg, p)
            dw = np.full((f, c, k, k), np.nan, t)                           # dW: (F, C, K, K), poisoned
            db = np.full(f, np.nan, t)                                       # db: (F,)
            geo = inst.geometry
            args = [g, x, dw, db, np.zeros(max(geo.workspace_elems, 1), t), np.zeros(max(geo.counters, 1), np.int32),
                    np.int32(n)]
            launch = Launch(inst, args)
            cases += [(launch, dw, want["dw"][:2], p.depth, dtype), (launch, db, want["db"][:2], p.depth, dtype)]
    assert any(launch.instance.config.split_k > 1 for launch, *_ in cases)
    run_and_check(cases, tmp_path)


# The tensor-core maths of the three implicit-GEMM directions: ragged M, filters and depth against
# their 16 x 8 MMA tiles and 16-deep k steps, odd channels, every fused epilogue, split-K slices.
TENSOR_CORE_CONVS = [((6, 3, 9, 7, 20, 3), "relu", "fp32"),      # M = 210, F = 20, depth 27: all ragged
                     ((1, 5, 6, 6, 33, 2), "sigmoid", "tf32"),   # F = 33: a third, one-column N tile
                     ((3, 17, 5, 4, 16, 3), None, "fp32"),       # 17 channels: depths 153 and 144
                     ((2, 2, 8, 9, 16, 6), "relu", "tf32"),      # 36 taps: backward data's 64-bit tap masks
                     ((4, 5, 7, 6, 24, 3), "sigmoid", "bf16"),   # BF16 MMAs: depth 45, odd channels
                     ((2, 8, 6, 6, 16, 2), None, "tf32"),        # depths 32 and 64: whole slices, no K check
                     ((1, 16, 4, 4, 512, 3), "relu", "tf32")]    # backward data's 4608 taps: too many to tabulate


def tensor_core_configs(fam, p, seed):
    """The family's first candidate (tensor cores, where the problem is wide enough) and two sampled
    configs of the call's tensor-core math."""
    from kernels.conv2d import MMA_MATH

    math = MMA_MATH[p.precision]
    space = {"math": (math,), "tm": (1,), "tn": (2,), "pad": (True,), "bk": (16, 32)}
    if math == "bf16":
        space["stages"] = (2,)
    if "split_k" in fam.params:             # backward weights: 210 pixels in 4 slices
        space["split_k"] = (1, 4)
    configs = fam.candidates(p, H100)[:1] + fam.restricted(space).sample(p, H100, 2, seed=seed)
    assert all(c.math == math for c in configs[1:])
    return configs


def test_convolutions_on_tensor_cores_match_float64_on_the_cpu(tmp_path):
    """Forward (bias and each activation), backward data (each activation's derivative) and
    backward weights (split-K too), each on mma.sync's 3xTF32, TF32 and BF16 paths."""
    from kernels import conv2d, conv2d_dgrad, conv2d_wgrad

    rng, cases = np.random.default_rng(17), []
    for seed, (sizes, activation, precision) in enumerate(TENSOR_CORE_CONVS):
        n, c, h, w, f, k = sizes
        x = rng.uniform(0, 1, (n, c, h, w)).astype(np.float32)              # X: (N, C, H, W)
        wt = (rng.standard_normal((f, c, k, k)) / k).astype(np.float32)      # W: (F, C, K, K)
        b = rng.standard_normal(f).astype(np.float32)                        # b: (F,)
        p = conv2d.Problem(*sizes, "float32", activation, precision)
        g = rng.standard_normal((n, f, p.out_h, p.out_w)).astype(np.float32)  # G: (N, F, OH, OW)
        aux = saved_output(rng, activation, (n, c, h, w), np.float32)
        value, magnitude, depth = conv2d.reference(p, x, wt, b)["z"]
        for cfg in tensor_core_configs(family("conv2d"), p, seed):
            z = np.full((n, f, p.out_h, p.out_w), np.nan, np.float32)        # Z, poisoned
            launch = Launch(family("conv2d").instance(cfg, p), [x, wt, b, z, np.int32(n)])
            cases.append((launch, z, (value, magnitude), depth, "float32", precision))
        pd = conv2d_dgrad.Problem(*sizes, "float32", activation, precision)
        value, magnitude, depth = conv2d_dgrad.reference(pd, g, wt, aux)["dx"]
        for cfg in tensor_core_configs(family("conv2d_dgrad"), pd, seed):
            dx = np.full((n, c, h, w), np.nan, np.float32)                   # dX, poisoned
            args = [g, wt, aux if activation else np.uint64(0), dx, np.int32(n)]
            cases.append((Launch(family("conv2d_dgrad").instance(cfg, pd), args), dx, (value, magnitude), depth,
                          "float32", precision))
        pw = conv2d_wgrad.Problem(*sizes, "float32", precision=precision)
        want = conv2d_wgrad.reference(pw, g, x)
        wgrad = family("conv2d_wgrad")
        for cfg in tensor_core_configs(wgrad, pw, seed):
            inst = wgrad.instance(cfg, pw)
            dw, db = np.full((f, c, k, k), np.nan, np.float32), np.full(f, np.nan, np.float32)   # dW, db
            geo = inst.geometry
            args = [g, x, dw, db, np.zeros(max(geo.workspace_elems, 1), np.float32),
                    np.zeros(max(geo.counters, 1), np.int32), np.int32(n)]
            launch = Launch(inst, args)
            cases += [(launch, dw, want["dw"][:2], pw.depth, "float32", precision),
                      (launch, db, want["db"][:2], pw.depth, "float32", precision)]
    maths = {launch.instance.config.math for launch, *_ in cases}
    assert {"3xtf32", "tf32", "bf16"} <= maths, maths
    tables = {"TABULATED = true" in launch.instance.source for launch, *_ in cases
              if launch.instance.name.startswith("conv2d_dgrad_f") and launch.instance.config.stages == 2}
    assert tables == {True, False}, tables                  # backward data's gather with and without depth tables
    for name in ("conv2d", "conv2d_dgrad", "conv2d_wgrad"):        # each direction's gathers, both loops
        stages = {launch.instance.config.stages for launch, *_ in cases if launch.instance.name.startswith(name + "_f")}
        assert stages == {1, 2}, (name, stages)
    assert any(getattr(launch.instance.config, "split_k", 1) > 1 for launch, *_ in cases)
    run_and_check(cases, tmp_path)


POOLS = [(2, 3, 6, 8, None, "float32"),        # even sides
         (3, 2, 7, 5, "relu", "float64"),      # odd sides: the last row and column dropped
         (1, 10, 11, 11, "sigmoid", "float32")]


def test_pool2x2_forward_and_backward_match_float64_on_the_cpu(tmp_path):
    from kernels import pool2x2

    rng, cases = np.random.default_rng(14), []
    fam = family("pool2x2")
    for seed, (n, c, h, w, activation, dtype) in enumerate(POOLS):
        t = np.dtype(dtype).type
        x = rng.standard_normal((n, c, h, w)).astype(t)                     # X: (N, C, H, W)
        x[0, 0, 0, :2] = x[0, 0, 1, :2] = 0.5                               # a window of equal values: the first wins
        forward = pool2x2.Problem(n, c, h, w, dtype)
        want = pool2x2.reference(forward, x=x)
        pooled = (n, c, h // 2, w // 2)
        for cfg in fam.candidates(forward, H100)[:1] + fam.sample(forward, H100, 2, seed=seed):
            y, where = np.full(pooled, np.nan, t), np.full(pooled, -1, np.int8)   # poisoned
            launch = Launch(fam.instance(cfg, forward), [x, np.uint64(0), np.uint64(0), y, where, np.int32(n)])
            cases += [(launch, y, want["y"][:2], 1, dtype), (launch, where, want["where"][:2], 1, dtype)]
        backward = pool2x2.Problem(n, c, h, w, dtype, "backward", activation)
        g = rng.standard_normal(pooled).astype(t)                           # G: (N, C, H/2, W/2)
        where = want["where"][0].astype(np.int8)
        y = want["y"][0].astype(t)
        dx_want = pool2x2.reference(backward, g=g, where=where, y=y)["dx"][:2]
        for cfg in fam.candidates(backward, H100)[:1] + fam.sample(backward, H100, 2, seed=seed):
            dx = np.full((n, c, h, w), np.nan, t)                           # dX: (N, C, H, W), poisoned
            args = [g, where, y if activation else np.uint64(0), dx, np.uint64(0), np.int32(n)]
            cases.append((Launch(fam.instance(cfg, backward), args), dx, dx_want, 1, dtype))
    run_and_check(cases, tmp_path)


def test_adam_matches_float64_and_advances_the_step_count_on_the_cpu(tmp_path):
    from kernels import adam

    rng, cases, counts = np.random.default_rng(15), [], []
    fam = family("adam")
    for seed, (n, dtype, done) in enumerate(((1000, "float32", 0), (4099, "float64", 7), (1, "float32", 2))):
        t = np.dtype(dtype).type
        w0, g = rng.standard_normal(n).astype(t), rng.standard_normal(n).astype(t)
        m0, v0 = (rng.standard_normal(n) * 0.1).astype(t), rng.uniform(0, 0.1, n).astype(t)
        hyper = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-7)
        p = adam.Problem(n, dtype)
        want = adam.reference(p, w0, g, m0, v0, done, **hyper)
        for cfg in fam.candidates(p, H100)[:1] + fam.sample(p, H100, 2, seed=seed):
            w, m, v = w0.copy(), m0.copy(), v0.copy()
            steps, arrivals = np.array([done], np.int32), np.zeros(1, np.int32)
            launch = Launch(fam.instance(cfg, p), [w, g, m, v, steps, arrivals, np.int32(n),
                                                   *map(np.float64, hyper.values())])
            cases += [(launch, out, want[name][:2], 4, dtype) for name, out in (("w", w), ("m", m), ("v", v))]
            counts.append((steps, arrivals, done))
    run_and_check(cases, tmp_path)
    assert all(steps[0] == done + 1 and arrivals[0] == 0 for steps, arrivals, done in counts)


def test_transpose_every_config_on_the_cpu(tmp_path, monkeypatch):
    """out = x^T for every config, float32 and float64, ragged tiles, both leading dimensions wider
    than the rows they hold, each also with one grid row stepping down all the tiles (as past
    65535 tiles); the padding beside them untouched."""
    from kernels import transpose
    from kernels.contract import RowsProblem

    rng, fam, cases = np.random.default_rng(17), family("transpose"), []
    for (rows, cols), dtype, grid_rows in itertools.product(((70, 45), (33, 129), (1, 5)), ("float32", "float64"),
                                                            (transpose.MAX_GRID_ROWS, 1)):
        monkeypatch.setattr(transpose, "MAX_GRID_ROWS", grid_rows)
        t = np.dtype(dtype).type
        x = rng.standard_normal((rows, cols + 3)).astype(t)           # x: (rows, cols), leading dimension cols + 3
        p = RowsProblem(rows, cols, dtype)
        for cfg in fam.sample(p, H100, 8):
            out = np.full((cols, rows + 5), np.nan, t)                 # out: (cols, rows), leading dimension rows + 5
            args = [x, out, *map(np.int32, (rows, cols, cols + 3, rows + 5))]
            cases.append((Launch(fam.instance(cfg, p), args), out, x[:, :cols].T))
    assert any(launch.instance.geometry.grid[1] == 1 < -(-70 // launch.instance.config.tile) for launch, *_ in cases)
    assert {launch.instance.config.tile for launch, *_ in cases} == {32, 64}
    run([launch for launch, *_ in cases], tmp_path)
    for launch, out, want in cases:
        assert np.array_equal(out[:, :want.shape[1]], want), launch.instance.name
        assert np.isnan(out[:, want.shape[1]:]).all(), launch.instance.name


def test_to_bf16_rounds_bit_for_bit_on_the_cpu(tmp_path):
    """The bfloat16 rounding kernel (cvt.rn.bf16x2) against kernels.bf16.bf16_bits, every vector
    width, a ragged tail, ties and the largest float included."""
    from kernels import to_bf16
    rng, cases = np.random.default_rng(16), []
    fam = family("to_bf16")
    for n in (1000, 4099, 1):
        x = rng.standard_normal(n).astype(np.float32)
        x[:n // 2] = (x[:n // 2].view(np.uint32) & 0xFFFF0000 | 0x8000).view(np.float32)   # exact ties
        x[-1:] = 3.4028235e38
        p = to_bf16.Problem(n)
        for cfg in fam.candidates(p, H100):
            out = np.full(n, 0xFFFF, np.uint16)
            cases.append((Launch(fam.instance(cfg, p), [x, out, np.int32(n)]), out, bf16_bits(x)))
    run([launch for launch, *_ in cases], tmp_path)
    for launch, out, want in cases:
        assert np.array_equal(out, want), launch.instance.name
