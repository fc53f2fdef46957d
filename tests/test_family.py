"""Kernel spaces and their checks (autogemm.runtime.family, kernels/*.py): configs that cannot run are
rejected, nothing but declared values reaches the source, instances are named from their values."""
import dataclasses
import hashlib
import itertools
import re

import jinja2
import numpy as np
import pytest

import autogemm.runtime.render
from autogemm.errors import InvalidConfig
from autogemm.ops.kernels import kernel
from autogemm.runtime.device import H100
from autogemm.runtime.family import families, family
from kernels import FAMILIES

BUILT_IN = [module.NAME for module in FAMILIES]     # a plugin family's tests are its own
from autogemm.tuning.targets import parse_shapes
from kernels import (adam, call_of, colsum, dense_stack, elementwise, gemm, linear_backward, linear_xent, pool2x2,
                     softmax_xent, to_bf16)
from kernels.contract import ceil_div

GEMM = family("gemm")
# Valid on every problem below, but for what a test changes.
BASE = dict(bm=64, bn=64, bk=16, ty=16, tx=16, tm=4, tn=4, vec=1, copy="regs", stages=2, split_k=1, pad=True, math="fma")
SQUARE = gemm.Problem.contiguous(1024, 1024, 1024)
HOSTILE = ("128; } __global__ void evil() {", "{{ 7*7 }}", "{% raw %}", "4\n#define T int")
ODD_SHAPES = ((1, 1, 1), (17, 33, 65), (2, 3, 5), (131, 67, 257), (7919, 13, 101), (1, 4096, 3))


class SneakyInt(int):
    """Equal to 4, but renders as source code."""

    def __str__(self):
        return "4; evil();"

    __format__ = __repr__ = lambda self, *_: str(self)


def problems_of(name: str, dtype: str) -> list:
    """A few valid problems of each family, to render and name instances with."""
    if name in ("gemm", "gemm_naive"):
        return [gemm.Problem.contiguous(*s, dtype, *ops) for s, ops in
                zip(ODD_SHAPES, itertools.cycle(itertools.product((False, True), repeat=2)))]
    if name == "gemm_wgmma":   # float32, 16-byte rows: what it can run
        return [gemm.Problem.contiguous(m, n, k, "float32", *ops) for (m, n, k), ops in
                (((800, 1000, 784), (False, True)), ((1, 1, 4), (False, True)), ((36, 132, 260), (True, False)),
                 ((4, 8, 12), (False, False)), ((100, 20, 44), (True, True)))]
    if name == "elementwise":
        return [elementwise.Problem(op, 800, 1000, dtype) for op in elementwise.OPS]
    if name == "linear_xent":
        return [linear_xent.Problem(rows, classes, inputs, dtype, act) for rows, classes, inputs, act in
                ((800, 10, 1000, "sigmoid"), (1, 1, 4, None), (33, 32, 4096, "relu"))]
    if name == "linear_backward":
        return [linear_backward.Problem(rows, classes, inputs, dtype, act) for rows, classes, inputs, act in
                ((800, 10, 1000, "sigmoid"), (1, 1, 4, "relu"), (33, 32, 4096, "relu"))]
    if name.startswith("conv2d"):
        return [family(name).Problem(*sizes, dtype, act) for *sizes, act in
                ((1000, 1, 28, 28, 6, 3, "relu"), (1, 1, 1, 1, 1, 1, None), (7, 6, 13, 13, 10, 3, "sigmoid"))]
    if name == "pool2x2":
        return [pool2x2.Problem(*sizes, dtype, op, act) for *sizes, op, act in
                ((1000, 6, 26, 26, "forward", None), (3, 1, 2, 3, "backward", "relu"), (7, 10, 11, 11, "backward", None))]
    if name == "adam":
        return [adam.Problem(n, dtype) for n in (54528, 1, 4099)]
    if name == "dense_stack":
        return [dense_stack.Problem(rows, widths, dtype, act, dx) for rows, widths, act, dx in
                ((128, (250, 128, 100, 80, 10), "relu", True), (1, (1, 1, 1), "sigmoid", False),
                 (33, (57, 31, 17, 32), "relu", False))]
    if name == "to_bf16":      # float32 alone
        return [to_bf16.Problem(n, aligned=aligned) for n, aligned in ((627200, 8), (1, 1), (4099, 2))]
    return [family(name).Problem(rows, cols, dtype) for rows, cols in ((800, 10), (1, 1), (33, 1000))]


# ---- the constraint checker -----------------------------------------------------------------
@pytest.mark.parametrize("change, problem, message", [
    (dict(ty=32, tx=16, tm=4), SQUARE, "TY*TM must divide BM"),
    (dict(tn=8), SQUARE, "TX*TN must divide BN"),
    (dict(ty=4, tx=4, tm=4, tn=4, bm=16, bn=16), SQUARE, "multiple of 32"),
    (dict(bm=256, bn=256, bk=32, ty=32, tx=32, tm=8, tn=8, pad=True),
     gemm.Problem.contiguous(1024, 1024, 1024, "float64"), "shared memory"),
    (dict(bm=128, bn=128, ty=8, tx=8), SQUARE, "register estimate"),
    (dict(vec=4), gemm.Problem.contiguous(1024, 1024, 1024, "float64"), "at most 16 bytes"),
    (dict(vec=2), gemm.Problem.contiguous(64, 64, 63), "alignment of A and B"),
    (dict(vec=4), gemm.Problem.contiguous(64, 62, 64), "alignment of A and B"),
    (dict(split_k=2), gemm.Problem.contiguous(64, 64, 16), "split-K slice"),
    (dict(split_k=16), gemm.Problem.contiguous(64, 64, 200), "split-K slice"),
    (dict(bm=16, ty=4, tm=4, tx=32, tn=2), gemm.Problem.contiguous(65535 * 16 + 1, 64, 64), "grid rows"),
    (dict(stages=3), SQUARE, "1 or 2 stages"),
    (dict(copy="async", stages=1), SQUARE, "cp.async 2 to 4"),
])
def test_gemm_rejects_configs_that_cannot_run(change, problem, message):
    assert not GEMM.violations(GEMM.config(BASE), problem, H100)
    values = {**BASE, **change}
    assert any(message in broken for broken in GEMM.violations(GEMM.config(values), problem, H100))
    with pytest.raises(InvalidConfig, match="cannot run"):
        GEMM.validate(values, problem, H100)


TF32X3 = dict(BASE, copy="async", stages=3, tm=1, tn=2, math="3xtf32")


@pytest.mark.parametrize("change, problem, device, message", [
    ({}, gemm.Problem.contiguous(1024, 1024, 1024, "float64"), H100, "float32 math on tensor cores"),
    ({}, SQUARE, dataclasses.replace(H100, compute_capability="7.5"), "compute capability 8.0"),
    (dict(copy="regs", stages=2), SQUARE, H100, "copy=async"),
    (dict(tm=2), SQUARE, H100, "TM=1, TN=2"),
    (dict(tn=4), SQUARE, H100, "TM=1, TN=2"),
    (dict(ty=4, tx=64 // 2, bn=64), SQUARE, H100, "warps of 8 x 4 threads"),
    (dict(ty=32, tx=8, bm=32), SQUARE, H100, "BM/TY must be even"),
    (dict(bk=8), SQUARE, H100, "BK must be 16 or 32"),
    (dict(pad=False), SQUARE, H100, "pad true"),
])
def test_3xtf32_rejects_what_tensor_cores_cannot_run(change, problem, device, message):
    assert not GEMM.violations(GEMM.config(TF32X3), SQUARE, H100)
    broken = GEMM.violations(GEMM.config({**TF32X3, **change}), problem, device)
    assert any(message in b for b in broken), broken


def test_3xtf32_pads_each_tile_for_its_fragment_reads():
    """Rows of 16 (mod 32) words for 16-byte reads along k (both K-major), 8 (mod 32) for [k][row]
    tiles and A's row pairs, BK + 4 for single reads along k; FMA tiles keep PAD."""
    cfg = GEMM.config(TF32X3)                                       # BK 16
    problem = lambda ta, tb: gemm.Problem.contiguous(64, 64, 64, trans_a=ta, trans_b=tb)  # noqa: E731
    assert gemm.pads(cfg, problem(False, True)) == (0, 0)                    # nt: 16 + 0
    assert gemm.pads(GEMM.config(dict(TF32X3, bk=32)), problem(False, True)) == (16, 16)   # 32 + 16
    assert gemm.pads(cfg, problem(True, False)) == (8, 8)                    # tn: 64 + 8
    assert gemm.pads(cfg, problem(False, False)) == (4, 8)                   # nn: 16 + 4, 64 + 8
    assert gemm.pads(GEMM.config(dict(TF32X3, math="fma")), problem(True, False)) == (4, 4)


@pytest.mark.parametrize("shape, ta, tb, at_least", [
    ((800, 1000, 784), False, True, 3), ((1000, 784, 800), True, False, 3), ((8192, 4096, 784), False, True, 3),
    ((800, 1000, 10), False, False, 1),     # rows of 10 floats: 8-byte loads, so more of them; fewer tiles fit
])
def test_the_search_starts_from_valid_3xtf32_configs_where_they_can_run(shape, ta, tb, at_least):
    """TPE rarely draws a valid 3xtf32 config at random (TM, TN, the warp shape and PAD all fixed):
    the seeds must hold some, on float32 and tensor cores only, FMAs too."""
    def seeds(dtype, device=H100):
        return GEMM.candidates(gemm.Problem.contiguous(*shape, dtype, ta, tb), device)
    assert any(c.math == "fma" for c in seeds("float32"))
    assert sum(c.math == "3xtf32" for c in seeds("float32")) >= at_least
    assert not any(c.math == "3xtf32" for c in seeds("float64"))
    assert not any(c.math == "3xtf32" for c in seeds("float32", dataclasses.replace(H100, compute_capability="7.5")))


def test_output_vectors_stay_inside_n_and_the_alignment():
    """Ragged tiles store vectors too: as wide as TN, 16 bytes, the outputs' alignment and N allow."""
    cfg = GEMM.config(BASE)                                                # TN 4
    vector = lambda **kw: gemm.output_vector(cfg, gemm.Problem.contiguous(**kw))  # noqa: E731
    assert vector(m=800, n=1000, k=784) == 4
    assert vector(m=800, n=1000, k=784, dtype="float64") == 2              # 16 bytes
    assert vector(m=800, n=98, k=784) == 2 and vector(m=800, n=99, k=784) == 1
    assert gemm.output_vector(cfg, gemm.Problem(800, 1000, 784, vec_out=1)) == 1   # unaligned D
    assert gemm.output_vector(GEMM.config(TF32X3), gemm.Problem.contiguous(800, 1000, 784)) == 2  # TN 2


def test_gemm_smem_limit_is_the_devices():
    values = {**BASE, "bm": 128, "bn": 128, "bk": 32, "ty": 16, "tx": 16, "tm": 4, "tn": 4, "pad": False, "vec": 4}
    needs = gemm.smem_bytes(GEMM.config(values), SQUARE)                 # 2 * 32 * 256 * 4 = 64 KiB
    assert not GEMM.violations(GEMM.config(values), SQUARE, H100)
    small = dataclasses.replace(H100, smem_per_block=needs - 1)
    assert any("shared memory" in v for v in GEMM.violations(GEMM.config(values), SQUARE, small))


@pytest.mark.parametrize("name, values, problem, device, message", [
    ("gemm_naive", dict(by=32, bx=64), SQUARE, H100, "at most 1024"),
    ("gemm_naive", dict(by=1, bx=16), SQUARE, H100, "multiple of 32"),
    ("elementwise", dict(block=256, ept=1, vec=4), elementwise.Problem("bias", 8, 8, "float64"), H100,
     "at most 16 bytes"),
    ("elementwise", dict(block=256, ept=1, vec=4), elementwise.Problem("sgd", 8, 8, aligned=2), H100,
     "alignment"),
    ("elementwise", dict(block=1024, ept=1, vec=1), elementwise.Problem("drelu", 8, 8),
     dataclasses.replace(H100, max_threads_per_block=512), "fit the device"),
    ("softmax_xent", dict(block=512, tpr=32), softmax_xent.Problem(8, 10),
     dataclasses.replace(H100, max_threads_per_block=256), "fit the device"),
    ("colsum", dict(tx=8, ty=2), colsum.Problem(8, 10), H100, "multiple of 32"),
])
def test_small_families_reject_configs_that_cannot_run(name, values, problem, device, message):
    fam = family(name)
    assert any(message in v for v in fam.violations(fam.config(values), problem, device))
    with pytest.raises(InvalidConfig, match="cannot run"):
        fam.validate(values, problem, device)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gemm_defaults_are_valid_for_many_shapes(dtype):
    shapes = [(s.m, s.n, s.k, s.trans_a, s.trans_b) for s in parse_shapes("nn") + parse_shapes("nn", 128, (512, 256))]
    shapes += [(*s, ta, tb) for s in ODD_SHAPES for ta, tb in itertools.product((False, True), repeat=2)]
    for (m, n, k, ta, tb), epilogue in itertools.product(shapes, gemm.EPILOGUES):
        problem = gemm.Problem.contiguous(m, n, k, dtype, ta, tb, epilogue=epilogue)
        for name in ("gemm", "gemm_naive"):
            fam = family(name)
            cfg = fam.default(problem, H100)
            assert fam.validate(dict(cfg), problem, H100) == cfg, (name, problem)


def test_search_starts_from_tiles_that_fill_the_sms_in_whole_waves():
    """800x1000 in 128x64 tiles is 112 blocks on 132 SMs, 8192 outputs an SM; 64x112 tiles (warps
    of 32x56) are 117 blocks of 7168. The wave tiles are valid 3xtf32 seeds of the search."""
    def busiest_sm(m, n, bm, bn):        # outputs of the SM with the most blocks
        return ceil_div(ceil_div(m, bm) * ceil_div(n, bn), H100.sm_count) * bm * bn

    z1 = gemm.Problem.contiguous(800, 1000, 784, trans_b=True, epilogue="bias_sigmoid")
    assert gemm.seeds.wave_tiles(z1, H100, gemm.PARAMS, gemm.CONSTRAINTS) == [(64, 112, 16, 8), (96, 80, 16, 8)]
    for m, n, k in ((800, 1000, 784), (1000, 784, 800), (8192, 4096, 784), (400, 100, 784)):
        problem = gemm.Problem.contiguous(m, n, k, trans_a=m == 1000)
        seeds = {(c.bm, c.bn, c.ty, c.tx) for c in family("gemm").candidates(problem, H100) if c.math == "3xtf32"}
        for bm, bn, ty, tx in gemm.seeds.wave_tiles(problem, H100, gemm.PARAMS, gemm.CONSTRAINTS):
            assert (bm, bn, ty, tx) in seeds
            assert busiest_sm(m, n, bm, bn) <= busiest_sm(m, n, 128, 64)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_small_family_defaults_are_valid(dtype):
    for (rows, cols), aligned in itertools.product(((800, 1000), (800, 10), (1, 1), (7919, 13)), (1, 2, 4)):
        for op in elementwise.OPS:
            problem = elementwise.Problem(op, rows, cols, dtype, aligned)
            assert not family("elementwise").violations(family("elementwise").default(problem, H100), problem, H100)
        for name in ("softmax_xent", "colsum"):
            problem = family(name).Problem(rows, cols, dtype)
            assert not family(name).violations(family(name).default(problem, H100), problem, H100)


# ---- config(): only declared values, of the declared type ----------------------------------
@pytest.mark.parametrize("values, message", [
    ({**BASE, "bq": 4}, "unknown gemm parameter"),
    ({k: v for k, v in BASE.items() if k != "pad"}, "missing gemm parameter"),
    ({**BASE, "bm": 40}, "bm=40 is not in the gemm space"),
    ({**BASE, "split_k": True}, "split_k=True"),
    ({**BASE, "vec": 4.0}, "vec=4.0"),
    ({**BASE, "vec": "4"}, "vec='4'"),
    ({**BASE, "vec": None}, "vec=None"),
    ({**BASE, "vec": SneakyInt(4)}, "is not in the gemm space"),
    ([1], "expected a mapping"),
])
def test_config_rejects_undeclared_values(values, message):
    with pytest.raises(InvalidConfig, match=re.escape(message)):
        GEMM.config(values)


@pytest.mark.parametrize("name", BUILT_IN)
def test_hostile_values_never_reach_the_source(name):
    fam = family(name)
    problem = problems_of(name, "float32")[0]
    valid = dict(fam.default(problem, H100))
    for key, hostile in itertools.product(fam.params, HOSTILE):
        with pytest.raises(InvalidConfig):
            fam.config({**valid, key: hostile})
        with pytest.raises(InvalidConfig):
            kernel(name, problem, {**valid, key: hostile}, H100)
    with pytest.raises(InvalidConfig, match="unknown"):
        fam.config({**valid, HOSTILE[0]: 1})
    source = kernel(name, problem, valid, H100).source
    assert not any(text in source for text in HOSTILE + ("{{", "{%", "evil"))


def test_render_refuses_missing_values():
    with pytest.raises(jinja2.UndefinedError):
        autogemm.runtime.render.render(gemm.TEMPLATE, name="gemm_incomplete")


# ---- problems ----------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda: gemm.Problem(0, 1, 1),
    lambda: gemm.Problem(1, -3, 1),
    lambda: gemm.Problem(1, 1, 2.0),
    lambda: gemm.Problem(1, 1, True),
    lambda: gemm.Problem(1, 1, 1, "float16"),
    lambda: gemm.Problem(1, 1, 1, epilogue="gelu"),
    lambda: gemm.Problem(1, 1, 1, trans_a=1),
    lambda: gemm.Problem(1, 1, 1, vec_a=3),
    lambda: elementwise.Problem("tanh", 1, 1),
    lambda: elementwise.Problem("bias", 0, 1),
    lambda: elementwise.Problem("bias", 1, 1, "int32"),
    lambda: elementwise.Problem("bias", 1, 1, aligned=8),
    lambda: softmax_xent.Problem(1, 0),
    lambda: softmax_xent.Problem(1, 1, "bfloat16"),
    lambda: colsum.Problem(1.5, 1),
])
def test_problems_reject_bad_descriptions(make):
    with pytest.raises(ValueError):
        make()


# ---- instances -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", BUILT_IN)
def test_instance_names_come_from_values_and_name_the_kernel(name):
    fam = family(name)
    sources = {}     # one name, one source: the name is a sound cache key
    for dtype in ("float32", "float64"):
        for problem in problems_of(name, dtype):
            configs = fam.sample(problem, H100, 12, seed=len(sources))
            assert len({fam.instance_name(cfg, problem) for cfg in configs}) == len(configs) > 1
            for cfg in configs:
                inst = fam.instance(cfg, problem)
                assert re.fullmatch(r"[A-Za-z_]\w*", inst.name)
                assert sources.setdefault(inst.name, inst.source) == inst.source, inst.name
                kernels = re.findall(r'extern "C" __global__ void __launch_bounds__\([^)]*\)\s*(?:__cluster_dims__\([^)]*\)\s*)?(\w+)\(', inst.source)
                assert kernels == [inst.name]


def test_cp_async_keeps_each_operand_in_its_global_layout():
    """cp.async cannot transpose: an operand whose K is contiguous sits [row][k] in shared memory
    (K padded) and is read KC k at a time; through registers every operand sits [k][row]."""
    cfg = GEMM.config({**BASE, "copy": "async", "stages": 3})
    for ta, tb in ((False, False), (False, True), (True, False), (True, True)):
        problem = gemm.Problem.contiguous(256, 256, 256, "float32", ta, tb)
        a_k, b_k = gemm.k_major(cfg, problem)
        assert (a_k, b_k) == (not ta, tb)
        tile_a = 64 * (16 + 4) if a_k else 16 * (64 + 4)
        tile_b = 64 * (16 + 4) if b_k else 16 * (64 + 4)
        assert gemm.smem_bytes(cfg, problem) == 3 * (tile_a + tile_b) * 4
        assert gemm.template_args(cfg, problem)["kc"] == (4 if a_k or b_k else 1)
    regs = GEMM.config(BASE)
    assert gemm.k_major(regs, gemm.Problem.contiguous(256, 256, 256)) == (False, False)
    assert gemm.k_chunk(cfg, gemm.Problem.contiguous(256, 256, 256, "float64")) == 2


def test_gemm_name_spells_every_parameter():
    cfg = GEMM.config(BASE)
    name = GEMM.instance_name(cfg, gemm.Problem.contiguous(100, 100, 100, "float64", True, False, epilogue="drelu"))
    assert name == "gemm_f64_tn_bm64_bn64_bk16_ty16_tx16_tm4_tn4_v1_regs2_sk1_p1_fma_drelu_o2"
    assert GEMM.instance_name(cfg, SQUARE).endswith("_p1_fma_even_o4")
    assert GEMM.instance_name(cfg, gemm.Problem.contiguous(100, 98, 100)).endswith("_fma_o2")   # 98 = 2 * 49
    assert GEMM.instance_name(cfg, gemm.Problem.contiguous(100, 99, 100)).endswith("_fma")


BIAS = gemm.Problem.contiguous(800, 1000, 784, epilogue="bias_sigmoid")


def test_a_configs_code_hash_is_that_of_its_rendered_source():
    fma, tf32 = GEMM.code_hash(GEMM.config(BASE), BIAS), GEMM.code_hash(GEMM.config(TF32X3), BIAS)
    assert all(re.fullmatch(r"[0-9a-f]{16}", h) for h in (fma, tf32, GEMM.template_hash)) and fma != tf32
    assert GEMM.code_hash(GEMM.config(dict(BASE, bm=128)), BIAS) != fma          # a value the kernel is built with
    assert GEMM.code_hash(GEMM.config(BASE), gemm.Problem.contiguous(1600, 2000, 1568, epilogue="bias_sigmoid")) == fma
    assert GEMM.code_hash(GEMM.config(BASE), gemm.Problem.contiguous(800, 1000, 784)) != fma    # no epilogue


@pytest.mark.parametrize("name", BUILT_IN)
def test_every_familys_configs_have_a_code_hash(name):
    fam = family(name)
    for problem in problems_of(name, "float32")[:2]:
        cfg = fam.default(problem, H100)
        assert re.fullmatch(r"[0-9a-f]{16}", fam.code_hash(cfg, problem))


def test_normalised_source_is_its_tokens():
    normalised = autogemm.runtime.render.normalised
    source = 'int a = 1; // one\n#define F(x) \\\n  ((x) + 1)\n/* two\nlines */  float s = "a // b /* c";\n\n  char q = \'"\';\n'
    assert normalised(source) == 'int a = 1;\n#define F(x) ((x) + 1)\nfloat s = "a // b /* c"; char q = \'"\';'
    assert normalised("int  a =\n 1 ;") == normalised("int a = 1 ;")


@pytest.mark.parametrize("template, old, new, changed", [
    ("gemm/gemm.cu.j2", "// accumulators per thread: RM x RN", "// RM x RN accumulators a thread", ""),
    ("gemm/gemm.cu.j2", "constexpr int THREADS = TY * TX;", "constexpr int THREADS = TY * TX;   \n\n{# note #}", ""),
    ("gemm/gemm.cu.j2", "constexpr int THREADS = TY * TX;", "constexpr  int THREADS\n   = TY * TX;", "gemm"),
    ("gemm/3xtf32.cuh", "// lo*hi, hi*lo, then hi*hi", "// lo*hi and hi*lo, then hi*hi", ""),
    ("gemm/3xtf32.cuh", "pass < 3", "pass != 3", "3xtf32"),
    ("gemm/fma.cuh", "acc[i][j] = fma(a[k][i], b[k][j], acc[i][j])", "acc[i][j] += a[k][i] * b[k][j]", "fma"),
    ("gemm/epilogue.cuh", "v + bias[n]", "v + 2 * bias[n]", "fma 3xtf32 naive"),
    ("common.cuh", "x > T(0) ? x : T(0)", "x >= T(0) ? x : T(0)", "fma 3xtf32 naive elementwise"),
    ("gemm/gemm.cu.j2", "VEC = {{ vec }};", "VEC = {{ vec // 1 }};", "gemm"),     # // in a tag is code; renders alike
    ("elementwise/elementwise.cu.j2", "typedef {{ ctype }} T;", "typedef {{ ctype }} T_;", "elementwise"),
])
def test_code_hashes_follow_what_each_config_renders(edit_template, template, old, new, changed):
    """An edit changes the code hash of the configs whose rendered source it changes, only those,
    and never for a comment or layout; the template hash (a store's meta) follows the file."""
    def hashes():
        naive, ew = family("gemm_naive"), family("elementwise")
        sgd = elementwise.Problem("sgd", 800, 1000, "float32")
        return {"fma": GEMM.code_hash(GEMM.config(BASE), BIAS), "3xtf32": GEMM.code_hash(GEMM.config(TF32X3), BIAS),
                "gemm": GEMM.template_hash, "naive": naive.code_hash(naive.config(dict(by=8, bx=32)), BIAS),
                "elementwise": ew.code_hash(ew.default(sgd, H100), sgd)}
    before = hashes()
    edit_template(template, old, new)
    after = hashes()
    assert {k for k in before if before[k] != after[k]} == set(changed.split())


def test_code_moved_into_an_include_leaves_every_code_hash(edit_template):
    """What the compiler sees is unchanged when code moves between files."""
    before = GEMM.code_hash(GEMM.config(BASE), BIAS), GEMM.code_hash(GEMM.config(TF32X3), BIAS)
    text = (edit_template.folder / "gemm/gemm.cu.j2").read_text()
    moved = text[text.index("constexpr int THREADS"):text.index("\n", text.index("constexpr int THREADS")) + 1]
    (edit_template.folder / "moved.cuh").write_text("// moved here\n" + moved)
    edit_template("gemm/gemm.cu.j2", moved, '{% include "moved.cuh" %}\n')
    assert (GEMM.code_hash(GEMM.config(BASE), BIAS), GEMM.code_hash(GEMM.config(TF32X3), BIAS)) == before


def test_code_of_keeps_strings_and_jinja_division():
    code = autogemm.runtime.render.code_of('a = "http://x"; // note\n\n{{ n // 2 }} // half\n  // only a comment\n{# gone #}b;\n')
    assert code == 'a = "http://x";\n{{ n // 2 }}\nb;'


# ---- the rendered code, pinned ---------------------------------------------------------------
PINNED = {"fma": (BASE, dict(BASE, copy="async", stages=3, vec=2, split_k=2, pad=False),
                  dict(BASE, bm=128, bn=128, bk=8, tm=8, tn=8, stages=1)),
          "3xtf32": (TF32X3, dict(TF32X3, bm=128, bk=32, ty=16, tx=8, split_k=2))}
# SHA-256 (16 digits) of the rendered code of each math path's PINNED configs on every op, even and
# uneven shapes, every epilogue, with and without C: an edit of one path's template must leave the
# other path's kernels as they are. Update a digest only for a change of its path's kernels.
RENDERED = {"fma": "a1cba096728b9855", "3xtf32": "52cf055671557840"}


@pytest.mark.parametrize("math", PINNED)
def test_each_math_paths_rendered_code_is_pinned(math):
    dtypes = ("float32", "float64") if math == "fma" else ("float32",)
    epilogues = itertools.cycle(gemm.EPILOGUES)
    digest = hashlib.sha256()
    for i, (values, dtype, (ta, tb), shape) in enumerate(itertools.product(
            PINNED[math], dtypes, itertools.product((False, True), repeat=2), ((1024, 1024, 1024), (800, 1000, 784)))):
        problem = gemm.Problem.contiguous(*shape, dtype, ta, tb, epilogue=next(epilogues), use_c=i % 2 == 1)
        digest.update(autogemm.runtime.render.code_of(GEMM.instance(GEMM.config(values), problem).source).encode())
    assert digest.hexdigest()[:16] == RENDERED[math]


def test_every_registered_family_keeps_the_contract():
    """kernels.REGISTRY is the one list of families: each module declares all of KernelFamily, and
    every template file it names is in the folder."""
    from autogemm.store.keys import dtypes
    from kernels import REGISTRY
    from kernels.contract import TEMPLATE_DIR, KernelFamily

    assert tuple(REGISTRY) == families() and families()[:len(FAMILIES)] == tuple(BUILT_IN)
    for name, module in ((m.NAME, m) for m in FAMILIES):
        assert isinstance(module, KernelFamily) and module.NAME == name and module.TEMPLATE == f"{name}/{name}.cu.j2"
        assert (TEMPLATE_DIR / module.TEMPLATE).is_file()
        if hasattr(module, "helper_templates"):        # gemm_wgmma's pretransposed configs
            cfg = next(c for c in family(name).all_configs() if module.helper_templates(c))
            assert all((TEMPLATE_DIR / helper).is_file() for helper in module.helper_templates(cfg))
        sizes = key_sizes(name, (800, 10, 784))
        for op, dtype in itertools.product(module.KEY_OPS, dtypes(name)):   # a key's problem has that key
            assert module.key_of(module.problem_of(sizes, op, dtype)) == (sizes, op)


def key_sizes(name: str, small: tuple) -> tuple:
    """Sizes of a valid tuned key of family `name`: `small` cut to the key's length, or a convolution's,
    or a dense stack's."""
    from kernels import REGISTRY

    if name.startswith("conv2d"):
        return 2, 3, 9, 8, 4, 3
    if name == "dense_stack":     # widths 2-4-6-3-4, or below a pool, a 2 x 4 x 6 map's
        return small[0], 2, 4, 6, 3, 4
    return (2, 3, 9, 8) if name == "pool2x2" else small[:len(REGISTRY[name].KEY_SIZES)]


def reference_operands(name: str, p, rng) -> dict:
    """Random float64 operands of one call of family `name` on problem p, as its reference takes them."""
    normal = rng.standard_normal
    name = call_of(name)                              # the call both convolution algorithms compute
    if name in ("gemm", "gemm_naive", "gemm_wgmma"):
        return {"a": normal((p.k, p.m) if p.trans_a else (p.m, p.k)), "b": normal((p.n, p.k) if p.trans_b else (p.k, p.n)),
                "alpha": 1.5, "beta": -2.0, "c": normal((p.m, p.n)), "bias": normal(p.n),
                "aux": rng.uniform(0, 1, (p.m, p.n))}
    if name == "elementwise":
        y = normal(p.cols) if p.op in elementwise.ROW_OPS else rng.uniform(0, 1, (p.rows, p.cols))
        return {"x": normal((p.rows, p.cols)), "y": y, "w0": normal((p.rows, p.cols)), "lr": 0.1, "reg": 0.01}
    if name == "linear_xent":
        return {"a": rng.uniform(0, 1, (p.rows, p.inputs)), "w": normal((p.classes, p.inputs)),
                "bias": normal(p.classes), "labels": rng.integers(0, p.classes, p.rows), "scale": 1 / p.rows}
    if name == "dense_stack":
        weights, biases = dense_stack.parameters(p, rng)
        return {"x": normal((p.rows, p.widths[0])), "weights": weights, "biases": biases,
                "labels": rng.integers(0, p.widths[-1], p.rows), "scale": 1 / p.rows,
                "where": rng.integers(0, 4, (p.rows, p.widths[0])) if p.pool else None}
    if name == "linear_backward":
        return {"g": normal((p.rows, p.classes)), "w": normal((p.classes, p.inputs)),
                "a": rng.uniform(0, 1, (p.rows, p.inputs)), "dw": normal((p.classes, p.inputs)), "db": normal(p.inputs),
                "alpha": -0.5, "beta": 0.9, "db_beta": 1.0}
    if name == "softmax_xent":
        return {"z": normal((p.rows, p.cols)), "labels": rng.integers(0, p.cols, p.rows), "scale": 1 / p.rows}
    if name == "conv2d":
        return {"x": rng.uniform(0, 1, (p.n, p.c, p.h, p.w)), "w": normal((p.f, p.c, p.k, p.k)), "b": normal(p.f)}
    if name == "conv2d_dgrad":
        return {"g": normal((p.n, p.f, p.out_h, p.out_w)), "w": normal((p.f, p.c, p.k, p.k)),
                "aux": rng.uniform(0, 1, (p.n, p.c, p.h, p.w)), "where": rng.integers(0, 4, (p.n, p.c, p.h, p.w))}
    if name == "conv2d_wgrad":
        return {"g": normal((p.n, p.f, p.out_h, p.out_w)), "x": rng.uniform(0, 1, (p.n, p.c, p.h, p.w))}
    if name == "pool2x2":
        pooled = (p.n, p.c, p.h // 2, p.w // 2)
        if p.op == "forward":
            return {"x": normal((p.n, p.c, p.h, p.w))}
        return {"g": normal(pooled), "where": rng.integers(0, 4, pooled), "y": rng.uniform(0, 1, pooled)}
    if name == "adam":
        return {"w": normal(p.n), "g": normal(p.n), "m": normal(p.n), "v": rng.uniform(0, 1, p.n), "steps": 3,
                "lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-7}
    if name == "to_bf16":
        return {"x": normal(p.n).astype(np.float32)}
    if name == "transpose":
        return {"x": normal((p.rows, p.cols))}
    return {"g": normal((p.rows, p.cols))}                            # colsum


def test_every_registered_family_has_a_float64_reference():
    """Each family's reference, on random float64 operands of a small problem of each op (and GEMM
    epilogue), is {output: (value, magnitude, k)}: magnitudes of the values' shapes, never negative."""
    from autogemm.store.keys import dtypes
    from kernels import REGISTRY

    rng = np.random.default_rng(0)
    for name, module in ((m.NAME, m) for m in FAMILIES):
        assert callable(module.reference)
        sizes = key_sizes(name, (5, 7, 3))
        dtype = "float64" if "float64" in dtypes(name) else dtypes(name)[0]
        problems = [module.problem_of(sizes, op, dtype) for op in module.KEY_OPS]
        problems += [dataclasses.replace(problems[0], epilogue=e) for e in getattr(module, "EPILOGUES", ())[1:]]
        for problem in problems:
            assert isinstance(problem, module.Problem)
            expected = module.reference(problem, **reference_operands(name, problem, rng))
            assert expected, (name, problem)
            for output, (value, magnitude, k) in expected.items():
                assert value.shape == magnitude.shape and (magnitude >= 0).all() and k >= 1, (problem, output)


# ---- a call's implementations -------------------------------------------------------------------
def test_a_config_of_an_older_space_names_what_it_lacks():
    """A gemm_wgmma config written before the space gained parameters goes to gemm_wgmma (the family
    whose parameters hold all it names), whose error names the missing ones, not to the tiled
    family with a list of parameters it does not know."""
    from autogemm.ops.kernels import implementation

    older = dict(bm=128, bn=128, warpgroups=2, stages=3, math="3xtf32", inflight=0, split_k=1, producer=0, tma=0,
                 pretranspose=0, cluster_m=1, cluster_n=1, persistent=0)
    problem = gemm.Problem.contiguous(800, 1000, 784, "float32", False, True)
    assert implementation("gemm", problem, older, H100) == "gemm_wgmma"
    with pytest.raises(InvalidConfig, match=r"missing gemm_wgmma parameter\(s\) reg_a, swap"):
        family("gemm_wgmma").config(older)


def test_gemm_wgmma_runs_float32_gemms_with_16_byte_rows_on_hopper_alone():
    import dataclasses

    from autogemm.ops.kernels import implementation

    wgmma, nt = family("gemm_wgmma"), gemm.Problem.contiguous(800, 1000, 784, "float32", False, True)
    for trans_a, trans_b in itertools.product((False, True), repeat=2):
        assert wgmma.can_run(gemm.Problem.contiguous(800, 1000, 784, "float32", trans_a, trans_b), H100)
    misaligned_a = gemm.Problem.contiguous(798, 1000, 784, "float32", True, False)      # A^T: M % 4
    assert {c.pretranspose for c in wgmma.candidates(misaligned_a, H100)} == {1}        # its copy's rows are aligned
    assert not wgmma.can_run(gemm.Problem.contiguous(800, 1000, 782, "float32", False, True), H100)    # A: K % 4
    assert not wgmma.can_run(gemm.Problem.contiguous(800, 1000, 784, "float64", False, True), H100)
    assert not wgmma.can_run(nt, dataclasses.replace(H100, compute_capability="8.0"))
    tn = gemm.Problem.contiguous(36, 28, 44, "float32", True, False)  # no tuned shape near it in any file
    assert implementation("gemm", tn, None, H100) == "gemm"          # neither tuned: the first listed
    bf16 = gemm.Problem.contiguous(1000, 784, 800, "float32", True, False, precision="bf16", bf16_operands=True)
    assert (bf16.vec_a, bf16.vec_b, bf16.arithmetic) == (8, 8, "bfloat16")
    assert not family("gemm").can_run(bf16, H100) and not family("gemm_naive").can_run(bf16, H100)
    assert wgmma.can_run(bf16, H100) and wgmma.default(bf16, H100).math == "bf16"
    assert implementation("gemm", bf16, None, H100) == implementation("gemm", bf16, "default", H100) == "gemm_wgmma"
    assert not wgmma.can_run(dataclasses.replace(bf16, vec_a=4), H100)      # rows not a multiple of 16 bytes
    wgmma_config = dict(bm=128, bn=128, warpgroups=2, stages=3, math="3xtf32", inflight=0, split_k=1, producer=0, tma=0,
                        pretranspose=0, cluster_m=1, cluster_n=1, persistent=0, reg_a=0, swap=0)
    assert implementation("gemm", nt, wgmma_config, H100) == "gemm_wgmma"
    assert implementation("gemm", nt, "default", H100) == "gemm"


def test_gemm_wgmma_says_at_once_which_problems_no_config_can_run():
    """may_run, asked before the candidates are walked (a walk of thousands where none fits), says
    no exactly where the walk finds none: rows it cannot read, an older GPU, float64."""
    import dataclasses

    import kernels.gemm_wgmma as wgmma_module

    wgmma = family("gemm_wgmma")
    a100 = dataclasses.replace(H100, compute_capability="8.0")
    problems = [gemm.Problem.contiguous(*shape, "float32", ta, tb, **kw)
                for shape, (ta, tb), kw in itertools.product(
                    [(1023, 1025, 1027), (801, 1000, 784), (800, 1000, 782), (1000, 784, 800)],
                    itertools.product((False, True), repeat=2),
                    [{}, dict(precision="bf16", bf16_operands=True)])]
    cases = [(p, H100) for p in problems] + [(gemm.Problem.contiguous(800, 1000, 784, "float64"), H100),
                                             (problems[-1], a100)]
    for problem, device in cases:
        walked = any(wgmma.fits(wgmma.config(v), problem, device)
                     for v in wgmma_module.default_candidates(problem, device))
        assert wgmma_module.may_run(problem, device) == walked == wgmma.can_run(problem, device), (problem, device)


def test_unaligned_float32_rows_are_copied_where_that_lets_gemm_wgmma_serve_a_tf32_or_bf16_call():
    """Rows of float32 operands not a multiple of 16 bytes, at precision tf32 or bf16: copied into
    aligned rows first (gemm_wgmma then reads them, a bfloat16 D too); never at fp32 (the tiled
    family's FP32-accurate kernels run them), never for aligned rows or M/N-major ones gemm_wgmma pretransposes, never
    for a small GEMM or one whose output is small against the operands (copying them would cost
    more than it gains), nor before Hopper."""
    import dataclasses

    from autogemm.ops.gemm import aligned_copies_pay

    def problem(shape, precision, **kw):
        sizes, op = shape.split(":")
        return gemm.Problem.contiguous(*map(int, sizes.split("x")), "float32", op[0] == "t", op[1] == "t",
                                       precision=precision, **kw)

    for shape in ("1023x1025x1027:nn", "777x555x333:nt", "800x1000x782:nt"):
        assert aligned_copies_pay(problem(shape, "tf32"), H100) and aligned_copies_pay(problem(shape, "bf16"), H100)
        assert not aligned_copies_pay(problem(shape, "fp32"), H100)
        assert not aligned_copies_pay(problem(shape, "tf32"), dataclasses.replace(H100, compute_capability="8.0"))
    assert aligned_copies_pay(problem("1023x1025x1027:nn", "bf16", bf16_out=True), H100)
    assert not aligned_copies_pay(problem("1024x1024x1024:nn", "tf32"), H100)
    assert not aligned_copies_pay(problem("801x1000x784:tn", "bf16"), H100)    # M/N-major A: pretransposed
    assert not aligned_copies_pay(problem("4096x4x1027:nn", "tf32"), H100)     # 2 flops a byte of A and B
    assert not aligned_copies_pay(problem("800x100x10:nn", "tf32"), H100)      # 1.6 Mflop: the copies' launches cost more


def test_tf32_and_bf16_products_serve_calls_at_their_precision_or_lower():
    wgmma = family("gemm_wgmma")
    fp32 = gemm.Problem.contiguous(800, 1000, 784, "float32", False, True)
    tf32 = gemm.Problem.contiguous(800, 1000, 784, "float32", False, True, precision="tf32")
    single = wgmma.config(dict(bm=128, bn=128, warpgroups=2, stages=3, math="tf32", inflight=1, split_k=1, producer=0, tma=0,
                               pretranspose=0, cluster_m=1, cluster_n=1, persistent=0, reg_a=0, swap=0))
    bf16 = gemm.Problem.contiguous(800, 1000, 784, "float32", False, True, precision="bf16")
    rounding = ["math tf32 and bf16 round the operands: for calls at that precision or a lower one"]
    assert wgmma.violations(single, fp32, H100) == rounding
    assert not wgmma.violations(single, tf32, H100) and not wgmma.violations(single, bf16, H100)
    assert wgmma.violations(wgmma.config(dict(single, math="bf16")), tf32, H100) == rounding
    # From float32 arrays single TF32 products are the faster default for a bf16 call too (measured);
    # bfloat16 operands need bf16 products.
    bf16_operands = gemm.Problem.contiguous(800, 1000, 784, "float32", False, True, precision="bf16",
                                            bf16_operands=True)
    assert [wgmma.default(p, H100).math for p in (fp32, tf32, bf16, bf16_operands)] == ["3xtf32", "tf32", "tf32", "bf16"]
    assert kernels_smem(single) < kernels_smem(dict(single, math="3xtf32"))      # no lo buffers
    assert kernels_smem(dict(single, math="bf16")) < kernels_smem(dict(single, math="3xtf32"))


def kernels_smem(values):
    from kernels import gemm_wgmma

    return gemm_wgmma.smem_bytes(family("gemm_wgmma").config(values), gemm.Problem(8, 8, 8))


def test_wgmma_candidates_try_persistent_blocks_early_where_their_tiles_outnumber_the_sms():
    """The search's first trials are the candidates in order: persistent 128 x 128 blocks (alone and
    in clusters) come right after the first four one-tile-a-block configs, never as the default."""
    fam = family("gemm_wgmma")
    forward = gemm.Problem.contiguous(8192, 4096, 784, trans_b=True, epilogue="bias_sigmoid", precision="tf32")
    found = fam.candidates(forward, H100)
    assert [c.persistent for c in found[:10]] == [0] * 4 + [1] * 6
    assert {(c.bm, c.bn, c.cluster_m, c.cluster_n) for c in found[4:10]} == {
        (128, 128, 1, 2), (128, 128, 1, 1), (128, 128, 2, 1)}
    assert fam.default(forward, H100).persistent == 0
    small = gemm.Problem.contiguous(800, 1000, 784, trans_b=True, precision="tf32")          # 56 tiles, 132 SMs
    assert not any(c.persistent for c in fam.candidates(small, H100))


def test_wgmma_defaults_split_k_where_few_tiles_leave_most_sms_idle():
    """Split-K only where the tiles busy at most a quarter of the SMs and each slice keeps 512 of K:
    256x256x8192 runs 64 x 32 tiles in 4 slices (128 blocks of 132 SMs); the MLP's 800x1000x784
    (K too short to split) and 4096^3 (tiles enough) stay unsplit."""
    from kernels.contract import split_for

    fam = family("gemm_wgmma")
    long_k = gemm.Problem.contiguous(256, 256, 8192, trans_a=True, precision="tf32")
    c = fam.default(long_k, H100)
    assert (c.bm, c.bn, c.split_k) == (64, 32, 4)
    for m, n, k in ((800, 1000, 784), (4096, 4096, 4096), (96, 3072, 768), (1024, 1024, 1024), (512, 4096, 1024)):
        assert fam.default(gemm.Problem.contiguous(m, n, k, trans_b=True, precision="tf32"), H100).split_k == 1
    assert split_for(64, 32, long_k, H100, (1, 2, 3, 4, 6)) == 4
    assert split_for(64, 32, gemm.Problem.contiguous(256, 256, 1024, precision="tf32"), H100, (1, 2, 3, 4, 6)) == 2


def test_the_tiled_default_on_long_k_fills_the_sms_with_slices_of_k():
    """K at least 8 times the output's longer side: the tile that fills the SMs in up to 16 slices of
    K (64 x 64, 16 slices, on 256x256x8192), not the 16 x 16 tile that fills them in one; shorter K
    keeps the FMA tile that fills them alone (float64), or (float32) takes 3xTF32 with K split as
    gemm_wgmma splits it (slices of at least 512)."""
    long_k = GEMM.default(gemm.Problem.contiguous(256, 256, 8192, trans_a=True), H100)
    assert (long_k.math, long_k.bm, long_k.bn, long_k.split_k) == ("fma", 64, 64, 16)
    short = GEMM.default(gemm.Problem.contiguous(256, 256, 2047, "float64", trans_a=True), H100)
    assert (short.bm, short.bn, short.split_k) == (16, 16, 1)
    short = GEMM.default(gemm.Problem.contiguous(256, 256, 2047, trans_a=True), H100)
    assert (short.math, short.bm, short.bn, short.split_k) == ("3xtf32", 64, 64, 3)


# Issue 40's public shapes, untuned on an H100 (132 SMs): (shape, op) -> the tiled family's default
# (math, bm, bn, split_k) for float32 at fp32.
FIRST_CALLS = {"1024x1024x1024:nn": ("3xtf32", 128, 64, 1), "4096x4096x4096:nn": ("3xtf32", 128, 64, 1),
               "512x4096x1024:tn": ("3xtf32", 128, 64, 1), "8192x8192x256:nn": ("3xtf32", 128, 64, 1),
               "1000x1000x1000:tt": ("3xtf32", 128, 64, 1), "800x1000x784:nt": ("3xtf32", 128, 64, 1),
               # under half the SMs in 128x64 tiles: 64x64 ones, whole (their tiles busy over a quarter)
               "400x1000x784:nt": ("3xtf32", 64, 64, 1), "96x3072x768:nt": ("3xtf32", 64, 64, 1),
               "3072x96x768:tn": ("3xtf32", 64, 64, 1), "777x555x333:nt": ("3xtf32", 64, 64, 1),
               "256x256x8192:tn": ("fma", 64, 64, 16),             # K long against the output: FMAs in slices
               # unaligned: 128x64 in 128 threads needs too many registers; the fullest waves: 128x80 in 256
               "1023x1025x1027:nn": ("3xtf32", 128, 80, 1)}


# At precision tf32 (and bf16) on float32 data, TF32 MMAs on every shape: on the tiles of the fp32
# default, K split where they busy at most a quarter of the SMs (256x256x8192: 16 tiles, 8 slices).
FIRST_CALLS_TF32 = {"4096x4096x4096:nn": (128, 64, 1), "1023x1025x1027:nn": (128, 80, 1), "1024x1024x1024:nn": (128, 64, 1),
                    "777x555x333:nt": (64, 64, 1), "96x3072x768:nt": (64, 64, 1), "256x256x8192:tn": (64, 64, 8)}


@pytest.mark.parametrize("shape", FIRST_CALLS_TF32)
@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_the_untuned_default_at_tf32_takes_tf32_mmas(shape, precision):
    sizes, op = shape.split(":")
    problem = gemm.Problem.contiguous(*map(int, sizes.split("x")), "float32", op[0] == "t", op[1] == "t",
                                      precision=precision)
    cfg = GEMM.default(problem, H100)
    assert (cfg.math, cfg.bm, cfg.bn, cfg.split_k) == ("tf32", *FIRST_CALLS_TF32[shape])
    fp32 = gemm.Problem.contiguous(*map(int, sizes.split("x")), "float32", op[0] == "t", op[1] == "t")
    assert GEMM.violations(cfg, fp32, H100) == ["tf32's products are TF32's: it computes calls at precision tf32 or bf16 only"]


@pytest.mark.parametrize("shape", FIRST_CALLS)
def test_the_untuned_float32_default_takes_3xtf32_where_its_tiles_fill_half_the_sms(shape):
    sizes, op = shape.split(":")
    m, n, k = map(int, sizes.split("x"))
    single, double = (gemm.Problem.contiguous(m, n, k, dtype, op[0] == "t", op[1] == "t") for dtype in ("float32", "float64"))
    cfg = GEMM.default(single, H100)
    assert (cfg.math, cfg.bm, cfg.bn, cfg.split_k) == FIRST_CALLS[shape]
    assert GEMM.default(double, H100).math == "fma"
