"""Benchmark: autogemm's default and best-known configs against cuBLAS (GEMMs) and cuDNN
(convolutions), one process, one timer."""
from dataclasses import dataclass

import numpy as np

from autogemm.errors import AutogemmError
from autogemm.store.keys import Target
from autogemm.tuning.measures import measure_for
from autogemm.tuning.targets import Shape
from autogemm.tuning.timing import Timing, time_interleaved
from kernels import IMPLEMENTATIONS
from kernels.conv2d.measure import cudnn_convolution


@dataclass
class Row:
    shape: Shape | Target  # a GEMM, or a convolution call's launch
    variant: str          # "default", "tuned", "naive", "cublas"; "<family> default|tuned", "cudnn"; "widened", "aligned"
                          # (the call multiplies copies in aligned rows: autogemm.ops.gemm.aligned_operands)
    kernel: str
    timing: Timing | None
    gflops: float
    error: str = ""       # why the variant has no time (failed check, ...)
    max_rel_error: float | None = None   # its max-norm relative error against float64
    runs_the_call: bool = False          # what `autogemm.gemm` (or the convolution's call) runs now


def bench_shape(shape: Shape, dtype=np.float32, configs: dict | None = None, reps: int = 50,
                naive: bool = False, flush_l2: bool = True, precision: str = "fp32",
                bf16_operands: bool = False) -> list[Row]:
    """Time each variant on `shape` after checking its output against float64 NumPy; the checked
    ones and cuBLAS are timed interleaved (autogemm.tuning.timing.time_interleaved).

    configs: {variant name: config mapping}, timed beside the family's default config, the
    tuned one (autogemm.store.lookup: "tuned" for this shape, "stale" for this shape on older templates,
    "nearest" for a neighbour's, when the store has one), the call's other families' (their name
    first) where they can run it, and cuBLAS (with the shape's epilogue, op "nt+bias_sigmoid", cuBLAS
    then autogemm's elementwise pass: the unfused call).
    At precision tf32 or bf16 the GEMMs are calls at it, checked within its bound, and cuBLAS
    rounds its operands alike; with bf16_operands A and B are bfloat16 (precision bf16, float32 out)
    and the tiled family, which cannot read them, has no variants. Where the call copies its operands
    into aligned rows first (autogemm.ops.gemm), that is the variant "widened" (bfloat16 rows no
    family reads) or "aligned" (float32 ones only the tiled family reads). A variant that fails to compile,
    launch or match gets a Row with the reason and no time.
    """
    import cupy

    from autogemm.ops.gemm import operand_copies
    from autogemm.runtime.device import this_device
    from autogemm.runtime.family import family
    from autogemm.store import lookup
    from autogemm.store.keys import key_of
    from kernels.gemm.call import Problem

    problem = Problem.contiguous(shape.m, shape.n, shape.k, np.dtype(dtype).name, shape.trans_a, shape.trans_b,
                                 epilogue=shape.epilogue, precision=precision, bf16_operands=bf16_operands)
    device = this_device()
    known = {}
    if family("gemm").can_run(problem, device):
        choice = lookup.choose("gemm", problem, device)
        known = {"default": dict(family("gemm").default(problem, device))}
        if choice.source != "default":
            known[_variant(choice)] = dict(choice.config)
    configs = {**known, **(configs or {})}
    measure = measure_for(key_of("gemm", problem), device)  # operands, reference, check
    flops = 2 * shape.m * shape.n * shape.k
    variants = [(name, "gemm", cfg) for name, cfg in configs.items()]
    for other in IMPLEMENTATIONS["gemm"][1:]:      # the call's other families, where they can run it
        if family(other).can_run(problem, device):
            choice = lookup.choose(other, problem, device)
            variants.append((f"{other} {_variant(choice)}", other, dict(choice.config)))
    copied = operand_copies(problem, device)       # the call's copies into aligned rows, if it makes them
    if copied:
        variants.append((copied, "gemm", None))
    if naive:
        variants.append(("naive", "gemm_naive", None))
    rows, runs = {}, {}
    for variant, fam, cfg in variants:
        try:
            run = measure.launcher(cfg, fam)
        except AutogemmError as exc:
            rows[variant] = Row(shape, variant, str(cfg), None, 0.0, str(exc))
            continue
        rows[variant] = Row(shape, variant, run.instance.name, None, 0.0)
        try:
            rows[variant].max_rel_error = measure.verify(run)
            runs[variant] = run
        except (AutogemmError, cupy.cuda.driver.CUDADriverError) as exc:  # Mismatch included
            rows[variant].error = str(exc)
    if copied:
        rows[copied].runs_the_call = True
    else:
        _mark_the_call(rows, "gemm", problem, device,
                       lambda name, choice: _variant(choice) if name == "gemm" else f"{name} {_variant(choice)}")
    runs["cublas"] = measure.cublas_launcher()
    rows["cublas"] = Row(shape, "cublas", "cublas" + (f" + elementwise {shape.epilogue}" if shape.epilogue else ""),
                         None, 0.0)
    try:
        rows["cublas"].max_rel_error = measure.verify(runs["cublas"])
    except AutogemmError as exc:
        rows["cublas"].error = str(exc)
    for variant, t in time_interleaved(runs, reps=reps, flush_l2=flush_l2).items():
        rows[variant].timing, rows[variant].gflops = t, t.gflops(flops)
    return list(rows.values())


def _mark_the_call(rows: dict, call: str, problem, device, variant_of) -> None:
    """Mark the row of what a call of `problem` runs now (kernels.IMPLEMENTATIONS' choice, with no
    config given): `variant_of(family, its lookup choice)` names it."""
    from autogemm.ops.kernels import implementation
    from autogemm.store import lookup

    try:
        name = implementation(call, problem, None, device)
        row = rows.get(variant_of(name, lookup.choose(name, problem, device)))
    except AutogemmError:          # no family can run it (bfloat16 rows that are not 16-byte aligned)
        return
    if row is not None:
        row.runs_the_call = True


def _variant(choice) -> str:
    """A looked-up config's variant name: tuned, stale or nearest, the op its record was tuned as
    where that is not the call's (a GEMM's layout, without the call's epilogue), and the GPU it was
    tuned on where that is this one's twin."""
    name = {"exact": "tuned"}.get(choice.source, choice.source)
    name = f"{name} as {choice.record.key.op}" if choice.other_op else name
    return f"{name} on {choice.twin}" if choice.twin else name


def bench_convolution(target: Target, dtype=np.float32, reps: int = 50, flush_l2: bool = True,
                      precision: str = "fp32") -> list[Row]:
    """Time a convolution call (target.family: conv2d, conv2d_dgrad or conv2d_wgrad) at `precision`
    by each of its algorithms, default and best-known configs, against cuDNN's (with TF32 where the
    precision allows it), after checking every output (cuDNN's too) against float64 NumPy; timed
    interleaved, as bench_shape."""
    import cupy

    from autogemm.ops.kernels import kernel
    from autogemm.runtime.device import this_device
    from autogemm.runtime.family import family
    from autogemm.store import lookup

    device = this_device()
    measure = measure_for(target.key(np.dtype(dtype).name if precision == "fp32" else precision), device)
    problem, flops = measure.problem, measure.family.flops(measure.problem)
    configs = {}
    for name in IMPLEMENTATIONS[target.family]:
        configs[f"{name} default"] = family(name).default(problem, device)
        choice = lookup.choose(name, problem, device)
        if choice.source != "default":
            configs[f"{name} {_variant(choice)}"] = choice.config
    rows, runs = {}, {}
    for variant, cfg in configs.items():
        name = variant.split()[0]
        try:
            rows[variant] = Row(target, variant, kernel(name, problem, cfg, device).name, None, 0.0)
            run = measure.launcher(cfg)
            rows[variant].max_rel_error = measure.verify(run)
            runs[variant] = run
        except (AutogemmError, cupy.cuda.driver.CUDADriverError) as exc:  # Mismatch included
            rows.setdefault(variant, Row(target, variant, str(dict(cfg)), None, 0.0)).error = str(exc)
    _mark_the_call(rows, target.family, problem, device, lambda name, choice: f"{name} {_variant(choice)}")
    rows["cudnn"] = Row(target, "cudnn", "cuDNN (PyTorch, cudnn.benchmark)", None, 0.0)
    try:
        run, into_outputs = cudnn_convolution(measure)
        rows["cudnn"].max_rel_error = measure.verify(into_outputs)
        runs["cudnn"] = run
    except AutogemmError as exc:
        rows["cudnn"].error = str(exc)
    for variant, t in time_interleaved(runs, reps=reps, flush_l2=flush_l2).items():
        rows[variant].timing, rows[variant].gflops = t, t.gflops(flops)
    return list(rows.values())
