"""A sample of every kernel family's space renders and compiles with nvcc for sm_90a (Hopper with its
architecture-specific instructions, which the wgmma path needs; the rest compiles alike for sm_90),
without spills.

Instances are compiled many to a file, each wrapped in its own namespace (their file-scope helpers
share names) after a #line marker naming it, a test's instances in two files compiled at once (an
nvcc process spends 0.6 s of CPU starting: one a file, not one an instance). ptxas's
--resource-usage report gives each kernel's registers and spills.
"""
import functools
import itertools
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import pytest

from autogemm.runtime.device import H100
from autogemm.runtime.family import family
from kernels import REGISTRY, adam, dense_stack, elementwise, gemm, linear_backward, linear_xent, pool2x2, to_bf16
from kernels.contract import RowsProblem
from kernels.gemm.call import LAYOUTS

NVCC = shutil.which("nvcc")
if NVCC is None:
    pytest.skip("nvcc is not on PATH: compiling the kernel spaces needs the CUDA toolkit",
                allow_module_level=True)

DTYPES = ("float32", "float64")
OPS = list(itertools.product((False, True), repeat=2))           # (trans_a, trans_b)
# Shapes the tiles divide (the unguarded fast path), and shapes they do not.
EVEN_SHAPES = ((1024, 1024, 1024), (256, 512, 768))
UNEVEN_SHAPES = ((800, 1000, 784), (17, 33, 65), (800, 10, 1000), (1, 1, 1), (131, 67, 257))
FILES = 2   # a test's batch files, compiled at once: nvcc's start-up is paid a file


class Usage(NamedTuple):
    registers: int
    stack: int
    spill_stores: int
    spill_loads: int


# ---- instances ------------------------------------------------------------------------------
def matrix_problems() -> list:
    """Every op x epilogue, with the dtype and C or not chosen so that every pair of any two of dtype,
    op, epilogue and use_c is among them (24 problems, not 96), on shapes taken in turn."""
    shapes = itertools.cycle(UNEVEN_SHAPES[:3] + EVEN_SHAPES)
    return [gemm.Problem.contiguous(*next(shapes), DTYPES[(i + j) % 2], ta, tb, epilogue=epilogue,
                                    use_c=(i // 2 + j) % 2 == 1)
            for (i, (ta, tb)), (j, epilogue) in itertools.product(enumerate(OPS), enumerate(gemm.EPILOGUES))]


def gemm_matrix(name: str) -> list:
    """The default config of each of matrix_problems()."""
    fam = family(name)
    return [fam.instance(fam.default(problem, H100), problem) for problem in matrix_problems()]


def gemm_sample(fam=family("gemm"), dtypes=DTYPES, precision="fp32", count=2) -> list:
    """`count` random valid configs of `fam` (Family.sample) a problem, over dtypes, ops, even and
    uneven shapes, epilogues."""
    epilogues = itertools.cycle(gemm.EPILOGUES)
    out = []
    for seed, (dtype, (ta, tb), shape) in enumerate(
            itertools.product(dtypes, OPS, EVEN_SHAPES + UNEVEN_SHAPES[:3])):
        problem = gemm.Problem.contiguous(*shape, dtype, ta, tb, epilogue=next(epilogues),
                                          use_c=seed % 2 == 1, precision=precision)
        out += [fam.instance(cfg, problem) for cfg in fam.sample(problem, H100, count, seed=seed)]
    return out


# Valid 3xtf32 configs are a sixtieth as likely as FMA ones in the whole space: sampled on their own.
TF32X3_SPACE = family("gemm").restricted({"math": ("3xtf32",), "copy": ("async",), "tm": (1,), "tn": (2,), "pad": (True,)})
TF32_SPACE = family("gemm").restricted({"math": ("tf32",), "copy": ("async",), "tm": (1,), "tn": (2,), "pad": (True,)})


def small_families() -> list:
    """gemm_naive, elementwise (every op), softmax_xent, colsum, linear_xent (with and without the
    input gradient and its bfloat16 copy, K with and without a ragged last slice, the float64 defaults
    of 10 x 4096, whose W does not fit shared memory), linear_backward
    (both activations, 10 and 32 classes, the bfloat16 copy beside float32 and alone, transposed), dense
    stacks (LeNet's and LeNet-5's, a tiny one; with and without the input gradient, LeNet's below its
    pool), the
    convolutions (a one-channel layer, LeNet-5's second, odd sizes; the direct ones with a fused pool
    too), pooling both ways and Adam, both dtypes, sampled
    configs; the bfloat16 rounding's every vector width."""
    out = []
    for dtype in DTYPES:
        naive = family("gemm_naive")
        problem = gemm.Problem(17, 33, 65, dtype, True, False, "bias_relu")
        out += [naive.instance(cfg, problem) for cfg in naive.sample(problem, H100, 6)]
        ew = family("elementwise")
        for op in elementwise.OPS:
            problem = elementwise.Problem(op, 800, 1000, dtype)
            out += [ew.instance(cfg, problem) for cfg in ew.sample(problem, H100, 4, seed=len(op))]
        for name in ("softmax_xent", "colsum"):
            fam = family(name)
            problem = fam.Problem(800, 10, dtype)
            out += [fam.instance(cfg, problem) for cfg in fam.sample(problem, H100, 8)]
        stack = family("dense_stack")
        for rows, widths, activation, dx in ((128, (250, 128, 100, 80, 10), "relu", True),
                                             (37, (400, 120, 84, 10), "sigmoid", False), (5, (3, 7, 1), "relu", True)):
            problem = dense_stack.Problem(rows, widths, dtype, activation, dx)
            out += [stack.instance(cfg, problem) for cfg in stack.candidates(problem, H100)[:1]
                    + stack.sample(problem, H100, 3, seed=rows)]
        problem = dense_stack.Problem(128, (250, 128, 100, 80, 10), dtype, "relu", True, pool=(10, 11, 11))
        out += [stack.instance(cfg, problem) for cfg in stack.candidates(problem, H100)[:1] + stack.sample(problem, H100, 2)]
        lx = family("linear_xent")
        for activation, inputs in ((None, 784), ("sigmoid", 1000), ("relu", 4096), ("sigmoid", 100), ("relu", 33)):
            problem = linear_xent.Problem(800, 10, inputs, dtype, activation)
            out += [lx.instance(cfg, problem) for cfg in lx.sample(problem, H100, 4, seed=inputs)]
        out += [lx.instance(cfg, problem) for cfg in lx.candidates(problem, H100)]
        if dtype == "float32":                 # the input gradient's bfloat16 copy too
            problem = linear_xent.Problem(800, 10, 4096, dtype, "sigmoid", grad_in_bf16=True)
            out += [lx.instance(cfg, problem) for cfg in lx.candidates(problem, H100)[:2] + lx.sample(problem, H100, 4)]
        else:                                  # W of 10 x 4096 too large for shared memory: the defaults read it cached
            for activation in (None, "sigmoid"):
                problem = linear_xent.Problem(8192, 10, 4096, dtype, activation)
                out += [lx.instance(cfg, problem) for cfg in lx.candidates(problem, H100)[:2]]
        problem = linear_xent.Problem(800, 10, 1000, dtype, loss=False)     # the logits alone
        out += [lx.instance(cfg, problem) for cfg in lx.candidates(problem, H100)[:2] + lx.sample(problem, H100, 2)]
        lb = family("linear_backward")
        for classes, inputs, activation, bf16 in ((10, 4096, "sigmoid", dtype == "float32"), (10, 1000, "relu", False),
                                                  (32, 100, "sigmoid", False), (3, 66, "relu", False)):
            problem = linear_backward.Problem(8192, classes, inputs, dtype, activation, grad_in_bf16=bf16)
            out += [lb.instance(cfg, problem) for cfg in lb.candidates(problem, H100)[:2] + lb.sample(problem, H100, 5,
                                                                                                    seed=inputs)]
        if dtype == "float32":                 # the input gradient in bfloat16 alone
            problem = linear_backward.Problem(8192, 10, 4096, dtype, "relu", grad_in_bf16=True, grad_in_f32=False)
            out += [lb.instance(cfg, problem) for cfg in lb.candidates(problem, H100)[:2]]
        problem = linear_backward.Problem(8192, 10, 4096, dtype, "sigmoid", grad_in_transposed=True)   # stored as G_in^T
        out += [lb.instance(cfg, problem) for cfg in lb.candidates(problem, H100)[:2] + lb.sample(problem, H100, 5)]
        for transposed in (False, True):       # with the layer's own bias gradient
            problem = linear_backward.Problem(800, 10, 1000, dtype, "sigmoid", grad_in_transposed=transposed, bias_grad=True)
            out += [lb.instance(cfg, problem) for cfg in lb.candidates(problem, H100)[:2] + lb.sample(problem, H100, 3)]
        for name in ("conv2d", "conv2d_dgrad", "conv2d_wgrad", "conv2d_direct", "conv2d_dgrad_direct",
                     "conv2d_wgrad_direct"):
            cv = family(name)
            # one channel of 32 filters 5 x 5 (the direct kernel's unrolled loop), LeNet-5's second
            # layer (tensor cores), odd sizes
            for sizes, activation in (((1000, 1, 28, 28, 32, 5), "relu"), ((1000, 6, 12, 12, 16, 5), "sigmoid"),
                                      ((3, 5, 9, 7, 33, 5), None)):
                problem = cv.Problem(*sizes, dtype, activation)
                out += [cv.instance(cfg, problem) for cfg in cv.candidates(problem, H100)[:2] + cv.sample(problem, H100, 2)]
        for name in ("conv2d_direct", "conv2d_dgrad_direct"):      # with the 2 x 2 pool fused
            cv = family(name)
            for sizes, activation in (((1000, 1, 28, 28, 6, 3), "relu"), ((1000, 6, 12, 12, 16, 5), "sigmoid")):
                problem = cv.Problem(*sizes, dtype, activation, pool=True)
                configs = cv.candidates(problem, H100)[:2] + cv.sample(problem, H100, 2)
                out += [cv.instance(cfg, problem) for cfg in configs]
        pool = family("pool2x2")
        for op, activation in (("forward", None), ("backward", "relu"), ("backward", None)):
            problem = pool2x2.Problem(1000, 6, 26, 26, dtype, op, activation)
            out += [pool.instance(cfg, problem) for cfg in pool.candidates(problem, H100)[:1] + pool.sample(problem, H100, 2)]
        opt = family("adam")
        problem = adam.Problem(54528, dtype)
        out += [opt.instance(cfg, problem) for cfg in opt.candidates(problem, H100)[:1] + opt.sample(problem, H100, 2)]
    rounding = family("to_bf16")
    problem = to_bf16.Problem(627200)
    out += [rounding.instance(cfg, problem) for cfg in rounding.candidates(problem, H100)]
    flip = family("transpose")
    for dtype in ("float32", "float64"):
        problem = RowsProblem(8192, 4096, dtype)
        out += [flip.instance(cfg, problem) for cfg in flip.sample(problem, H100, 8)]
    return out


def wgmma_sample() -> list:
    """gemm_wgmma: its default for every epilogue and C or not, on ragged and even shapes, every op
    (each operand K-major or transposed in shared memory), every precision, bfloat16 operands and D, and
    sampled configs (one to four 64-row tiles a warpgroup, every stage count, tile width and math,
    both pipelines, copies by cp.async and by TMA)."""
    fam, out = family("gemm_wgmma"), []
    shapes = itertools.cycle(((800, 1000, 784), (132, 68, 260), (1024, 1024, 1024)))
    ops = itertools.cycle(((False, True), (True, False), (False, False), (True, True), (True, False)))
    precisions = itertools.cycle(("fp32", "bf16", "tf32", "bf16"))
    for epilogue, use_c in itertools.product(gemm.EPILOGUES, (False, True)):
        problem = gemm.Problem.contiguous(*next(shapes), "float32", *next(ops), epilogue=epilogue, use_c=use_c,
                                          precision=next(precisions))
        out += [fam.instance(fam.default(problem, H100), problem)]
        out += [fam.instance(cfg, problem) for cfg in fam.sample(problem, H100, 2, seed=len(out))]
    for (trans_a, trans_b), epilogue in zip(itertools.product((False, True), repeat=2), gemm.EPILOGUES[1:]):
        problem = gemm.Problem.contiguous(264, 136, 520, "float32", trans_a, trans_b, epilogue=epilogue,
                                          precision="bf16", bf16_operands=True)      # A, B in bfloat16
        out += [fam.instance(cfg, problem) for cfg in [fam.default(problem, H100), *fam.sample(problem, H100, 1)]]
    for bf16_operands, epilogue in ((False, "bias_sigmoid"), (True, "bias_relu"), (True, None)):
        problem = gemm.Problem.contiguous(800, 1000 + (epilogue is None), 784, "float32", False, True, epilogue=epilogue,
                                          precision="bf16", bf16_operands=bf16_operands, bf16_out=True)    # D in bfloat16
        out += [fam.instance(cfg, problem) for cfg in [fam.default(problem, H100), *fam.sample(problem, H100, 2)]]
    return out


# ---- compiling ------------------------------------------------------------------------------
def wrapped(inst) -> str:
    """`inst`'s source in its own namespace, its error lines counted from its own first line."""
    undefs = "".join(f"#undef {m}\n" for m in re.findall(r"^#define (\w+)", inst.source, re.M))
    return f'namespace ns_{inst.name} {{\n#line 1 "{inst.name}.cu"\n{inst.source}}}\n{undefs}'


def resource_usage(log: str) -> dict[str, Usage]:
    """{kernel: Usage} from ptxas's --resource-usage report (entry functions only)."""
    usage = {}
    for name, body in re.findall(r"Compiling entry function '(\w+)'(.*?)(?=Compiling entry function|\Z)", log, re.S):
        props = re.search(rf"Function properties for {name}\s+(\d+) bytes stack frame, (\d+) bytes spill "
                          r"stores, (\d+) bytes spill loads", body)
        regs = re.search(r"Used (\d+) registers", body)
        usage[name] = Usage(int(regs[1]), *map(int, props.groups()))
    return usage


def compile_all(instances: list, workdir) -> tuple[dict[str, Usage], list[str]]:
    """Compile `instances` in FILES files at once: their usage, and nvcc's errors."""
    def run(i: int) -> tuple[int, str]:
        path = workdir / f"batch{i}.cu"
        path.write_text("".join(wrapped(inst) for inst in instances[i::FILES]))
        proc = subprocess.run([NVCC, "-gencode=arch=compute_90a,code=sm_90a", "-cubin", "--resource-usage", "-o",
                               str(path.with_suffix(".cubin")), str(path)],
                              capture_output=True, text=True)
        return proc.returncode, proc.stdout + proc.stderr

    usage, errors = {}, []
    with ThreadPoolExecutor(FILES) as pool:
        for rc, log in pool.map(run, range(FILES)):
            usage.update(resource_usage(log))
            if rc:
                errors.append("\n".join(line for line in log.splitlines() if "error" in line)[:2000])
    return usage, errors


# ---- tests ----------------------------------------------------------------------------------
@functools.cache
def rendered(kind: str) -> list:
    """The instances of one kind, rendered on first use: each pytest-xdist worker renders only what
    its own tests compile."""
    return {"gemm": lambda: gemm_matrix("gemm"), "naive": lambda: gemm_matrix("gemm_naive"),
            "sample": lambda: (gemm_sample() + gemm_sample(TF32X3_SPACE, ("float32",))
                               + gemm_sample(TF32_SPACE, ("float32",), "tf32", count=1)),
            "small": small_families, "wgmma": wgmma_sample}[kind]()


# The families small_families() renders: all but the two tiled GEMMs, which have tests of their own.
SMALL_FAMILIES = sorted(set(REGISTRY) - {"gemm", "gemm_wgmma"})


@pytest.fixture
def compiled(tmp_path):
    """compiled(instances): their ptxas usage, each test compiling its own (pytest-xdist's workers
    share the sample's compiling out between them)."""
    def compile_(instances):
        usage, errors = compile_all(list({i.name: i for i in instances}.values()), tmp_path)
        assert not errors, "nvcc failed:\n" + "\n".join(errors)
        return usage
    return compile_


def assert_compiled_without_spills(instances, usage):
    missing = [i.name for i in instances if i.name not in usage]
    assert not missing, f"no ptxas report for {missing[:5]}"
    spilled = {i.name for i in instances if usage[i.name].spill_stores or usage[i.name].spill_loads}
    assert not spilled, f"valid configs that spill: {({n: usage[n] for n in spilled})}"


def test_sample_covers_the_space():
    configs = [i.config for i in rendered("sample")]
    for key, wanted in (("vec", {1, 2, 4}), ("copy", {"regs", "async"}), ("stages", {1, 2, 3, 4}),
                        ("pad", {False, True}), ("math", {"fma", "3xtf32", "tf32"})):
        assert {c[key] for c in configs} == wanted, key
    assert any(c.split_k > 1 for c in configs)
    assert {"_even_" in i.name for i in rendered("sample")} == {True, False}
    assert {"_even_" in i.name for i in rendered("gemm")} == {True, False}
    assert {i.family for i in rendered("small")} == set(SMALL_FAMILIES)    # every family but the tiled GEMMs
    heads = [i.config for i in rendered("small") if i.family == "linear_xent"]
    assert {c.w_smem for c in heads} == {False, True} and {c.vec for c in heads} == {1, 2, 4}


def test_gemm_every_pair_of_dtype_op_epilogue_and_c_compiles(compiled):
    assert_compiled_without_spills(rendered("gemm"), compiled(rendered("gemm")))


def test_the_matrix_holds_every_pair_of_dtype_op_epilogue_and_c():
    values = [(p.dtype, (p.trans_a, p.trans_b), p.epilogue, p.use_c) for p in matrix_problems()]
    choices = (DTYPES, OPS, gemm.EPILOGUES, (False, True))
    for a, b in itertools.combinations(range(4), 2):
        assert {(v[a], v[b]) for v in values} == set(itertools.product(choices[a], choices[b])), (a, b)


def test_gemm_wgmma_sample_compiles_without_spills(compiled):
    configs = [i.config for i in rendered("wgmma")]
    assert {c.stages for c in configs} == set(family("gemm_wgmma").params["stages"])
    assert {c.warpgroups for c in configs} == {1, 2} and len({c.bn for c in configs}) >= 5
    assert {i.name.split("_")[3] for i in rendered("wgmma")} == set(LAYOUTS)
    assert {c.math for c in configs} == set(family("gemm_wgmma").params["math"])
    assert {(c.producer, c.tma) for c in configs} == {(0, 0), (1, 0), (1, 1)}   # the pipelines and their copies
    assert {i.name.split("_")[2] for i in rendered("wgmma")} == {"f32", "bf16"}          # operand types
    assert_compiled_without_spills(rendered("wgmma"), compiled(rendered("wgmma")))


def test_gemm_naive_every_pair_of_dtype_op_epilogue_and_c_compiles(compiled):
    assert_compiled_without_spills(rendered("naive"), compiled(rendered("naive")))


@pytest.mark.parametrize("part", range(4))
def test_gemm_sampled_configs_compile_without_spills(compiled, part):
    """The register estimate is conservative: no config it lets through spills or runs out (the
    sample in four parts, which pytest-xdist's workers share)."""
    sample = rendered("sample")[part::4]
    assert_compiled_without_spills(sample, usage := compiled(sample))
    assert all(usage[i.name].registers <= min(255, H100.regs_per_block // gemm.threads(i.config)) for i in sample)


@pytest.mark.parametrize("name", SMALL_FAMILIES)
def test_small_families_compile(compiled, name):
    """Each family apart, so that pytest-xdist's workers share them."""
    instances = [i for i in rendered("small") if i.family == name]
    assert_compiled_without_spills(instances, compiled(instances))
