"""The `autogemm` command: thin subcommands that parse arguments and call the library."""
import os
import sys

from autogemm import signals

# The command itself (its console script, or `python -m autogemm.cli`, whose package loads while
# argv[0] is still "-m"), not a library import: a stop signal while the modules below load ends
# it in one line, no traceback.
if sys.argv[0] == "-m" or os.path.basename(sys.argv[0]) == "autogemm":
    signals.starting()

import argparse
import contextlib
import json
import re
import shlex
from collections import Counter
from pathlib import Path

import numpy as np

from autogemm import arguments, files
from autogemm.errors import AutogemmError, first_line
from autogemm.store.keys import brief
from autogemm.version import __version__
from autogemm.tuning.targets import TUNE_FAMILIES, parse_shapes, parse_targets
from kernels import REGISTRY, call_of
from kernels.contract import MAX_SIZE
from kernels.gemm.call import PRECISIONS


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise AutogemmError(message)  # one line `error: ...`, exit 2, like every other bad input


def _cut(text: str, limit: int = 40) -> str:
    """A number as the user wrote it, cut short (brief without the quotes)."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _integer(lowest: int, highest: int | None = None, why: str = ""):
    """A parser of integers in lowest..highest (no bound above when None); `why` explains the bound."""
    def parse(text: str) -> int:
        match = re.fullmatch(r"\s*([+-]?)0*([0-9]+)\s*", text)
        if not match:
            raise argparse.ArgumentTypeError(f"{brief(text)} is not an integer")
        if len(match[2]) > 30:           # past any bound, and int() refuses over 4300 digits
            value = -10**30 if match[1] == "-" else 10**30
        else:
            value = int(match[1] + match[2])
        shown = _cut(match[1] + match[2])
        if value < lowest:
            raise argparse.ArgumentTypeError(f"{shown} must be >= {lowest}")
        if highest is not None and value > highest:
            raise argparse.ArgumentTypeError(f"{shown} is over {highest}{why}")
        if value == 10**30:
            raise argparse.ArgumentTypeError(f"{shown} is too large")
        return value
    return parse


_positive_int = _integer(1)                                  # counts: trials, repetitions
SEARCH_PATIENCE = 8          # tune's --patience: autogemm.tuning.search.Settings.patience (a test keeps them one)
_seed = _integer(0, 2**32 - 1)                            # what Optuna's samplers take
_size = _integer(1, MAX_SIZE, ", more than the kernels' 32-bit sizes hold")
_rank_count = _integer(1, 1024)


def _input_shape(text: str) -> tuple[int, ...]:
    """An input's shape: sizes joined by x (1x28x28)."""
    try:
        shape = tuple(int(part) for part in text.split("x"))
    except ValueError:
        shape = ()
    if not shape or min(shape) < 1 or max(shape) > 1 << 24:
        raise argparse.ArgumentTypeError(f"{_cut(text)!r}: give positive sizes joined by x, e.g. 1x28x28")
    return shape


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{brief(text)} is not a number") from None
    if value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"{brief(text)} is not a finite number")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{_cut(text)} must be a number > 0")
    return value


def _tunable() -> tuple[str, ...]:
    """The families `--families` may name: ours but the baselines, then the installed plugins'."""
    from autogemm.runtime import plugins

    return TUNE_FAMILIES + tuple(plugins.plugins())


def _families(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [n for n in names if n not in _tunable()]
    if unknown or not names:
        what = f"unknown {', '.join(map(brief, unknown[:3]))}" if unknown else "no family named"
        raise argparse.ArgumentTypeError(f"{brief(text)}: {what}; families are {', '.join(_tunable())} (comma-separated)")
    return names


def _console(fit: bool = False):
    """A rich Console: as wide as the terminal; where the output is not one, 200 columns, so that
    tables stay unwrapped in logs, or with `fit` $COLUMNS, else 80 (a summary made to fit)."""
    import shutil

    from rich.console import Console

    if sys.stdout.isatty():
        return Console()
    return Console(width=shutil.get_terminal_size((80, 24)).columns if fit else 200)


def cmd_bench(args) -> int:
    from autogemm.runtime.device import this_device
    from autogemm.store import lookup
    from autogemm.tuning.targets import network_convolutions

    if (args.family is None) != (args.problem is None):
        raise AutogemmError("--family and --problem go together: the family, and the sizes of a problem of it")
    if args.family is not None:
        return _bench_family(args)
    arithmetic = _arithmetic(args)           # tf32 or bf16 with float64 fails here, in one line
    bf16_operands = arithmetic == "bfloat16"
    precision = "bf16" if bf16_operands else args.precision
    if args.layers is not None and args.shapes not in (None, "lenet"):
        raise AutogemmError(f"--layers builds a CNN in place of lenet's layers; it takes no --shapes {brief(args.shapes)}")
    args.shapes = "lenet" if args.layers is not None else "nn" if args.shapes is None else args.shapes
    shapes = parse_shapes(args.shapes, args.batch, args.hidden, precision, args.layers)
    convolutions = network_convolutions(args.shapes, args.batch, args.layers)
    configs = {f"config{i}": _config_json(text) for i, text in enumerate(args.config, 1)}
    _claim_json(args.json, "autogemm bench", early=True)
    if bf16_operands and convolutions:
        raise AutogemmError("--dtype bfloat16: GEMMs only (A and B in bfloat16); the convolutions compute in float32")
    dtype = np.float32 if bf16_operands else np.dtype(args.dtype).type   # of the outputs
    dev = this_device()
    _claim_json(args.json, "autogemm bench")          # last: nothing is created for a run that cannot start
    at = f" at precision {precision}" if precision != "fp32" else ""
    timer = f"median of {args.reps} event-timed runs, L2 {'flushed' if args.l2 == 'flush' else 'warm'}"
    how = f"{args.dtype}{at}, {timer}"
    if args.untuned:
        how += ", untuned"
    with lookup.untuned() if args.untuned else contextlib.nullcontext():
        records = _bench_all(args, shapes, convolutions, configs, dtype, precision, bf16_operands, dev, how, timer)
    _write_json(args.json, dict(gpu=dev.name, sm_count=dev.sm_count, dtype=args.dtype, precision=args.precision,
                                reps=args.reps, untuned=args.untuned, command=args.command_line, results=records))
    return 0


def _bench_family(args) -> int:
    """`autogemm bench --family NAME|PATH --problem ...`: per problem, the family's default config,
    the one lookup chooses (tuned, or the nearest shape's) and each --config, each checked against
    its float64 reference and timed as tune times a candidate, in one table."""
    from rich.table import Table
    from rich.text import Text

    from autogemm.runtime.device import this_device
    from autogemm.runtime.family import family
    from autogemm.store import lookup
    from autogemm.store.keys import problem_of
    from autogemm.tuning.measures import measure_for

    if args.shapes is not None or args.layers is not None or args.dtype == "bfloat16" or args.precision != "fp32":
        raise AutogemmError("--family benches the problems of --problem at --dtype float32 or float64; it takes no "
                            "--shapes, --layers or --precision")
    targets = _family_targets(args.family, args.problem, args.dtype)
    configs = [_config_json(text) for text in args.config]
    _claim_json(args.json, "autogemm bench", early=True)
    dev = this_device()
    _claim_json(args.json, "autogemm bench")
    table = Table(title=f"autogemm bench on {dev.name}: {targets[0].family}, {args.dtype}, median of {args.reps} "
                        f"event-timed runs, L2 flushed")
    for col in ("problem", "variant", "kernel", "µs", "vs default", "error"):
        table.add_column(col, justify="left" if col in ("problem", "variant", "kernel") else "right")
    records = []
    for target in targets:
        key = target.key(args.dtype)
        fam, problem = family(key.family), problem_of(key)
        measure = measure_for(key, dev)
        choice = lookup.choose(key.family, problem, dev)
        looked_up = f"{choice.source} on {choice.twin}" if choice.twin else choice.source
        variants = [("default", fam.default(problem, dev)), (looked_up, choice.config)]
        variants += [(f"config{i}", fam.validate(c, problem, dev, f"--config {i}")) for i, c in enumerate(configs, 1)]
        default_us = None
        for variant, cfg in variants:
            try:
                measure.prepare([cfg])
                t = measure(cfg, args.reps)
            except AutogemmError as exc:
                table.add_row(target.role, variant, fam.instance_name(cfg, problem), Text(brief(str(exc), 60)), "", "")
                records.append(dict(problem=target.role, variant=variant, config=dict(cfg), error=str(exc)))
                continue
            default_us = t.median_us if variant == "default" else default_us
            ratio = f"{default_us / t.median_us:.2f}x" if default_us else ""
            table.add_row(target.role, variant, fam.instance_name(cfg, problem), f"{t.median_us:.2f}", ratio,
                          f"{error:.1e}" if (error := getattr(t, "max_rel_error", None)) is not None else "")
            records.append(dict(problem=target.role, variant=variant, config=dict(cfg), median_us=t.median_us,
                                p10_us=t.p10_us, p90_us=t.p90_us, max_rel_error=getattr(t, "max_rel_error", None)))
    _console().print(table)
    _write_json(args.json, dict(gpu=dev.name, family=targets[0].family, dtype=args.dtype, reps=args.reps,
                                command=args.command_line, results=records))
    return 0


def _bench_all(args, shapes, convolutions, configs, dtype, precision, bf16_operands, dev, how, timer) -> list[dict]:
    """Bench every GEMM shape, then every convolution; print their tables; return the JSON records."""
    from rich.console import Console

    from autogemm.runtime.family import family
    from autogemm.tuning.bench import bench_convolution, bench_shape

    arithmetic = _arithmetic(args)
    records = []
    gemms = _bench_table(f"autogemm bench on {dev.name} ({dev.sm_count} SMs): GEMMs, {how}", "cuBLAS")
    for shape in shapes:
        extra = dict(configs)
        if args.sample:
            problem = _problem(shape, arithmetic)
            for i, cfg in enumerate(family("gemm").sample(problem, dev, args.sample, seed=args.seed), 1):
                extra[f"sample{i}"] = dict(cfg)
        rows = bench_shape(shape, dtype, configs=extra, reps=args.reps, naive=args.naive,
                           flush_l2=args.l2 == "flush", precision=precision, bf16_operands=bf16_operands)
        samples = sorted((r for r in rows if r.variant.startswith("sample") and r.timing),
                         key=lambda r: r.timing.median_us)
        shown = [r for r in rows if not r.variant.startswith("sample")] + samples[:args.show]
        records += [_bench_record(r, None) for r in rows if r not in shown]
        records += _add_bench_rows(gemms, shown, "cublas")
    Console().print(gemms)
    if convolutions:
        accuracy = "FP32-accurate" if precision == "fp32" else f"precision {precision}, cuDNN with TF32"
        convs = _bench_table(f"autogemm bench on {dev.name}: convolutions, {args.dtype} ({accuracy}), {timer}",
                             "cuDNN")
        for target in convolutions:
            records += _add_bench_rows(convs, bench_convolution(target, dtype, reps=args.reps,
                                                                flush_l2=args.l2 == "flush", precision=precision),
                                       "cudnn")
        Console().print(convs)
    print("*: what the call runs now (autogemm.gemm, or the convolution's call, given no config)")
    return records


def _bench_table(title: str, baseline: str):
    from rich.table import Table

    table = Table(title=title)
    for col in ("shape", "role", "variant", "kernel", "µs", "GFLOP/s", f"vs {baseline}", "error", f"vs {baseline}'s"):
        table.add_column(col, justify="left" if col in ("shape", "role", "variant", "kernel") else "right")
    return table


def _add_bench_rows(table, rows, baseline: str) -> list[dict]:
    """Each row into `table` with its time and its max-norm relative error against the `baseline`
    variant's (`*` marks what the call runs now); their JSON records."""
    from rich.text import Text

    base = next(r for r in rows if r.variant == baseline)
    records = []
    for r in rows:
        ratio = r.timing.median_us / base.timing.median_us if r.timing and base.timing else None
        error = r.max_rel_error / base.max_rel_error if r.max_rel_error is not None and base.max_rel_error else None
        table.add_row(str(r.shape), r.shape.role, r.variant + (" *" if r.runs_the_call else ""), r.kernel,
                      f"{r.timing.median_us:.1f}" if r.timing else Text(r.error[:40]),
                      f"{r.gflops:.0f}" if r.timing else "", f"{ratio:.2f}x" if ratio is not None else "",
                      f"{r.max_rel_error:.1e}" if r.max_rel_error is not None else "",
                      f"{error:.2f}x" if error is not None else "")
        records.append(_bench_record(r, ratio, error))
    return records


def _bench_record(r, ratio, error_ratio=None) -> dict:
    t = r.timing
    return dict(shape=str(r.shape), role=r.shape.role, variant=r.variant, kernel=r.kernel,
                median_us=t.median_us if t else None, p10_us=t.p10_us if t else None,
                p90_us=t.p90_us if t else None, gflops=r.gflops, time_vs_baseline=ratio, error=r.error,
                max_rel_error=r.max_rel_error, error_vs_baseline=error_ratio, runs_the_call=r.runs_the_call)


def cmd_tune(args) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from autogemm.runtime.device import software, this_device
    from autogemm.runtime.family import family
    from autogemm.store import locations
    from autogemm.store.keys import problem_of
    from autogemm.store.records import Meta, file_for
    from autogemm.tuning import gpus as gpus_module
    from autogemm.tuning import measures
    from autogemm.tuning.search import Settings
    from autogemm.tuning.tune import at_precision, runnable_targets, stale_elsewhere, stale_targets, tune_targets

    if args.model is not None and args.shapes is not None:
        raise AutogemmError("--model and --shapes both name what to tune; give one")
    if args.torch is not None and (args.shapes, args.model, args.layers, args.stale) != (None, None, None, False):
        raise AutogemmError("--torch names what to tune; it takes no --shapes, --model, --layers or --stale")
    if (args.family is None) != (args.problem is None):
        raise AutogemmError("--family and --problem go together: the family, and the sizes of a problem of it")
    if args.family is not None and (args.shapes, args.model, args.layers, args.torch, args.stale) != (
            None, None, None, None, False):
        raise AutogemmError("--family names what to tune; it takes no --shapes, --model, --layers, --torch or --stale")
    if args.family is not None and args.gpus is not None and args.family not in REGISTRY:
        raise AutogemmError(f"--family {args.family} with --gpus: each GPU's worker process loads installed families "
                            f"only; pip install the family's package, then give --family with its name")
    if (args.torch is None) != (args.input is None):
        raise AutogemmError("--torch and --input go together: the model, and the shape of one of its inputs")
    for flag, given in (("--shapes", args.shapes), ("--model", args.model)):
        if given is not None and not given.replace(",", "").strip():
            raise AutogemmError(f"{flag}: nothing given; use 'nn' or MxNxK[:op],...")
    shapes = args.model or args.shapes or ("lenet" if args.layers else "nn")
    if args.stale and (args.shapes, args.model, args.layers) != (None, None, None):
        raise AutogemmError("--stale tunes the stale records of the tuned file; it takes no --shapes, --model or --layers")
    arithmetic = _arithmetic(args)
    if args.torch is not None:
        targets = _torch_targets(args, arithmetic)
    elif args.family is not None:
        targets = _family_targets(args.family, args.problem, arithmetic)
    else:
        targets = None if args.stale else parse_targets(shapes, args.batch, args.hidden, args.train_size, args.ranks,
                                                         args.families, args.activation, args.layers, args.parallel,
                                                         "bf16" if arithmetic == "bfloat16" else args.precision,
                                                         every_precision=arithmetic == "float32")
    if targets and arithmetic == "bfloat16":   # the GEMM call's families read bfloat16 operands
        targets = [t for t in targets if call_of(t.family) == "gemm"]
    elif targets and args.precision != "fp32":   # the families whose own kernels compute at it
        targets = at_precision(targets, args.precision)
        if not targets:
            having = [name for name, module in REGISTRY.items()
                      if args.precision in getattr(module, "KERNEL_PRECISIONS", ("fp32",))]
            raise AutogemmError(f"--precision {args.precision}: no family of these shapes has {args.precision} kernels "
                                f"(those that do: {', '.join(having)}); the more accurate records serve "
                                f"{args.precision} calls")
    gemm_space = _fixed(args.fix)
    family("gemm").restricted(gemm_space)      # an unknown name or value fails here, in one line
    if gemm_space and arithmetic not in ("float32", "float64", *REGISTRY["gemm"].KERNEL_PRECISIONS):
        raise AutogemmError(f"--fix confines the tiled gemm family, which has no {arithmetic} kernels; "
                            f"drop --fix, or tune the FP32-accurate records without --precision/--dtype")
    if gemm_space and targets:                 # --fix confines the tiled family: the GEMMs are its alone
        targets = [t for t in targets if call_of(t.family) != "gemm" or t.family == "gemm"]
    out = Path(args.out) if args.out else locations.tune_dir()
    if out.exists() and not out.is_dir():
        given = "--out" if args.out else locations.tune_dir_named()
        raise AutogemmError(f"{given} {out}: not a folder (tuned files are named after the GPU inside it)")
    gpus = gpus_module.parse_gpus(args.gpus) if args.gpus is not None else None
    devices = [gpus_module.gpu_info(g) for g in gpus] if gpus else [this_device()]
    device = devices[0]
    models = list({d.name: d for d in devices}.values())       # one tuned file each
    path = file_for(out, device)
    for model in models:
        _claim_tuned_file(file_for(out, model), model)
    shipped = file_for(locations.shipped_dir(), device)
    also = () if files.same_file(shipped, path) else (shipped,)      # read-only: starting points, stale records
    if args.stale:
        targets = stale_targets([path, *also], arithmetic, args.families)
        for other, count in stale_elsewhere([path, *also], arithmetic, args.families).items():
            flags = f"--dtype {other}" if other in ("float32", "float64", "bfloat16") else f"--precision {other}"
            print(f"autogemm tune --stale: {count} stale {other} record(s) too, which this run leaves: "
                  f"autogemm tune --stale {flags} tunes them")
        if not targets:
            print(f"autogemm tune --stale: no stale {arithmetic} records in {' or '.join(map(str, [path, *also]))}: "
                  "nothing to tune")
            return 0
    targets, elsewhere = runnable_targets(targets, arithmetic, device)
    for model in models[1:]:      # --gpus of several models: any may run one
        more, elsewhere = runnable_targets(elsewhere, arithmetic, model)
        targets += more
    first = {}                    # each family left out: its first shape's problem
    for t in elsewhere:
        first.setdefault(t.family, problem_of(t.key(arithmetic)))
    why = {name: ("it is not FP32-accurate (its error passes 2x cuBLAS FP32's)" if not family(name).serves(p)
                  else ", ".join(family(name).why_not(p, device)))
           for name, p in first.items()}
    if not targets:
        if not elsewhere:
            raise AutogemmError(f"--families {','.join(args.families)}: none of them launches in these shapes")
        reasons = "; ".join(f"{name}: {reason}" for name, reason in why.items())
        raise AutogemmError(f"no config can run these shapes at {arithmetic} on {device.name} ({reasons})")
    for name, count in Counter(t.family for t in elsewhere).items():
        print(f"autogemm tune: {count} shape(s) left to the other implementations of their call: {name} "
              f"cannot run them on {device.name}: {why[name]}")
    patience = SEARCH_PATIENCE if args.patience is None else args.patience or None
    settings = Settings(trials=args.trials, timeout=args.timeout, seed=args.seed, patience=patience)
    console = _console()
    where = f"{len(gpus)} GPUs ({','.join(map(str, gpus))}: {', '.join(m.name for m in models)})" if gpus else device.name
    into = ", ".join(str(file_for(out, m)) for m in models)
    console.print(f"autogemm tune: {len(targets)} shapes on {where}, {arithmetic}, up to {args.trials} "
                  f"trials and {args.timeout:g} s each{', resuming' if args.resume else ''}; results into {into}")
    outcomes, tasks = [], {}
    # Live bars on a terminal; elsewhere (a log, a pipe) one line a finished target, as it finishes.
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=console,
                        disable=not console.is_terminal)

    def on_start(target, key):
        tasks[target] = progress.add_task(f"{target} {arithmetic}", total=args.trials, info="")

    def on_progress(target, p):
        best = f"best {p.best_us:.1f} µs" if p.best_us is not None else "no result yet"
        phase = ", re-timing the top candidates" if p.phase == "final" else ""
        progress.update(tasks[target], completed=p.measured,
                        info=f"{best}, {p.failed} failed, {p.rejected} rejected{phase}")

    if gpus:
        job = gpus_module.Job(arithmetic, out, settings, args.command_line, locations.shipped_dir(), args.resume,
                              gemm_space, context=gpus_module.gpu_context, measure_for=measures.measure_for)
        finished = _on_gpus(targets, gpus, job, on_start, on_progress)
    else:
        finished = tune_targets(targets, arithmetic, device, out, settings, meta=Meta.here(device, software()),
                                command=args.command_line, resume=args.resume, gemm_space=gemm_space, also=also,
                                on_start=on_start, on_progress=on_progress)
    try:
        with progress:
            for o in finished:
                outcomes.append(o)
                if not console.is_terminal:
                    print(f"autogemm tune: [{len(outcomes)}/{len(targets)}] {_finished_line(o, arithmetic)}", flush=True)
                task = tasks.get(o.target)
                if task is None:              # failed before it began (its --gpus worker ended)
                    on_start(o.target, o.key)
                    task = tasks[o.target]
                if o.result is None:
                    progress.update(task, info=f"[red]failed[/red]: {o.error[:80]}")
                    continue
                vs = f", cuBLAS {o.cublas_us:.1f} µs" if o.cublas_us else ""
                how = "from the finished study" if o.result.reused else f"{o.result.seconds:.0f} s"
                progress.update(task, completed=args.trials,
                                info=f"{o.result.median_us:.1f} µs{vs} ({o.stored}, {how})")
    except KeyboardInterrupt as stop:
        console.print(_summary(outcomes, Table))
        done = sum(o.result is not None for o in outcomes)
        print(f"{signals.interrupted(signals.signum_of(stop))}: {done} of {len(targets)} shapes finished and "
              f"saved in {_one_line(into)}; run the same command with --resume to go on", file=sys.stderr)
        return signals.status(stop)
    console.print(_summary(outcomes, Table))
    failed = [o for o in outcomes if o.result is None]
    for o in failed:
        print(f"error: {o.target}: {o.error}", file=sys.stderr)
    return 1 if failed else 0


def _family_targets(given: str, problems: list[str], dtype: str) -> list:
    """The targets of `--family NAME|PATH --problem KEY=VALUE,...`: the family (a folder is loaded
    first), each problem built from its Problem's fields (integers where they read as one) and `dtype`."""
    from autogemm.runtime import plugins
    from autogemm.store.keys import Target

    name = given if given in REGISTRY or "/" not in given and not Path(given).is_dir() else plugins.load_folder(given)
    plugins.require(name)
    module = REGISTRY[name]
    targets = []
    for text in problems:
        fields = {}
        for item in text.split(","):
            key, sep, value = (part.strip() for part in item.partition("="))
            if not sep or not key:
                raise AutogemmError(f"--problem {brief(text)}: give KEY=VALUE,... (the fields of {name}'s Problem)")
            if key in fields or key == "dtype":
                raise AutogemmError(f"--problem {brief(text)}: {key} " + ("is --dtype's to give" if key == "dtype"
                                                                          else "is given twice"))
            fields[key] = _field_value(module.Problem, key, value, text)
        try:
            problem = module.Problem(**fields, dtype=dtype)
            target = Target(name, *module.key_of(problem), "--problem " + text)
            target.key(dtype)                      # sizes, op and dtype a key can have
        except AutogemmError:
            raise
        except Exception as exc:                   # the family's own checks (a plugin's code)
            raise AutogemmError(f"--problem {brief(text)}: not a problem of {name}: {type(exc).__name__}: "
                                f"{first_line(exc)}") from None
        targets.append(target)
    return targets


def _field_value(problem_class, key: str, value: str, text: str):
    """`value` of --problem's `key` as the Problem's field takes it: true/false (or 1/0) for a bool,
    an integer where it reads as one, else the text (the Problem checks it)."""
    import typing

    try:
        kind = typing.get_type_hints(problem_class).get(key)
    except Exception:                               # a plugin's annotations that do not resolve
        kind = None
    if kind is bool:
        if value.lower() not in ("true", "false", "1", "0"):
            raise AutogemmError(f"--problem {brief(text)}: {key} is true or false, not {brief(value)}")
        return value.lower() in ("true", "1")
    return int(value) if re.fullmatch(r"-?[0-9]{1,12}", value) else value


def _torch_targets(args, arithmetic: str) -> list:
    """The launches of one forward and backward pass of the PyTorch model `--torch` names, converted
    (autogemm.torch), on --batch inputs of --input's shape, of --families; float32 records serve
    every precision's calls, so at that arithmetic each precision's launches."""
    if args.batch is None:
        raise AutogemmError("--torch needs --batch: the batch size the model trains with")
    from autogemm.torch import targets as torch_targets

    precisions = PRECISIONS if arithmetic == "float32" else ("bf16",) if arithmetic == "bfloat16" else (args.precision,)
    found = torch_targets.launches(torch_targets.model_of(args.torch), args.input, args.batch, precisions)
    chosen = [t for t in found if t.family in args.families]
    if not chosen:
        raise AutogemmError(f"--families {','.join(args.families)}: none of them launches in this model")
    return chosen


def _claim_tuned_file(path: Path, device) -> None:
    """Before any tuning: `path` can take `device`'s results (new, or a tuned file of that GPU)."""
    from autogemm.store.records import load

    def ours(p: Path) -> bool:
        held = load(p).meta.gpu          # a file that does not load fails here, before any tuning
        if held != device.name:
            raise AutogemmError(f"{p}: holds results for {held}, not this GPU ({device.name}); choose another --out")
        return True

    try:
        files.claim_output(path, ours)
    except files.FileError as exc:
        raise AutogemmError(f"{path}: cannot be written: {exc}") from None


def _on_gpus(targets, gpus, job, on_start, on_progress):
    """The outcomes of tune_on_gpus, its other events passed to the progress callbacks."""
    from autogemm.tuning import gpus as gpus_module

    for event in gpus_module.tune_on_gpus(targets, gpus, job):
        if isinstance(event, gpus_module.Started):
            on_start(event.target, event.key)
        elif isinstance(event, gpus_module.Advanced):
            on_progress(event.target, event.progress)
        else:
            yield event.outcome


def _finished_line(o, arithmetic: str) -> str:
    """One tuned target as a line of a log: shape, family, best time against cuBLAS's, trials, seconds."""
    head = f"{o.target} {arithmetic}"
    r = o.result
    if r is None:
        return f"{head}: failed: {_one_line(o.error)}"
    vs = f", cuBLAS {o.cublas_us:.1f} µs ({o.cublas_us / r.median_us:.2f}x)" if o.cublas_us else ""
    how = "from the finished study" if r.reused else f"{r.seconds:.1f} s"
    if r.waiting_s >= 0.05:
        how += f" ({r.waiting_s:.1f} s waiting for compiles, {r.retiming_s:.1f} s re-timing)"
    return f"{head}: best {r.median_us:.1f} µs{vs}, {r.trials} trials, {how}, {o.stored}"


def _summary(outcomes, Table):
    table = Table(title="autogemm tune: best of each shape (µs: median of the interleaved re-timing)")
    for col in ("shape", "role", "best µs", "cuBLAS µs", "speed-up", "trials", "failures", "store"):
        table.add_column(col, justify="left" if col in ("shape", "role", "store") else "right")
    for o in outcomes:
        r = o.result
        if r is None:
            table.add_row(str(o.target), o.target.role, "", "", "", "", "", f"failed: {o.error[:60]}")
            continue
        speedup = f"{o.cublas_us / r.median_us:.2f}x" if o.cublas_us else ""
        table.add_row(str(o.target), o.target.role, f"{r.median_us:.1f}",
                      f"{o.cublas_us:.1f}" if o.cublas_us else "", speedup, str(r.trials), str(r.failed), o.stored)
    return table


def cmd_sweep(args) -> int:
    from rich.table import Table

    from autogemm.runtime.device import this_device
    from autogemm.runtime.family import family
    from autogemm.store.keys import problem_of
    from autogemm.tuning.measures import measure_for
    from autogemm.tuning.search import Settings
    from autogemm.tuning.sweep import sweep

    targets = parse_targets(args.shapes, args.batch, args.hidden, families=("gemm",))
    fam = family("gemm").restricted(_fixed(args.fix))
    _claim_json(args.json, "autogemm sweep", early=True)
    device = this_device()
    _claim_json(args.json, "autogemm sweep")          # last: nothing is created for a run that cannot start
    settings = Settings(trials=args.trials, timeout=None, seed=args.seed)
    console = _console()
    table = Table(title=f"autogemm sweep on {device.name}: every valid config of the space, then the search "
                        f"({args.trials} trials) on it; µs re-timed together, interleaved")
    for col in ("shape", "valid", "failed", "sweep best µs", "search µs", "search / best", "sweep s", "search s"):
        table.add_column(col, justify="left" if col == "shape" else "right")
    results = []
    for target in targets:
        key = target.key(args.dtype)
        report = sweep(fam, problem_of(key), device, measure_for(key, device, args.seed), settings,
                       progress=lambda done, total, t=target: console.print(f"{t}: {done}/{total} measured"))
        best = report.best
        table.add_row(str(target), str(report.valid), str(len(report.failures)), f"{report.final[best]:.1f}",
                      f"{report.final[report.search.config]:.1f}", f"{report.ratio:.3f}",
                      f"{report.seconds_sweep:.0f}", f"{report.seconds_search:.0f}")
        results.append(dict(shape=str(target), valid=report.valid, failed=len(report.failures),
                            sweep_best=dict(config=dict(best), median_us=report.final[best]),
                            search=dict(config=dict(report.search.config), trials=report.search.trials,
                                        median_us=report.final[report.search.config]),
                            search_over_best=report.ratio, seconds_sweep=report.seconds_sweep,
                            seconds_search=report.seconds_search,
                            quick_us=[[dict(c), t] for c, t in sorted(report.timings.items(), key=lambda kv: kv[1])]))
    console.print(table)
    _write_json(args.json, dict(gpu=device.name, dtype=args.dtype, command=args.command_line,
                                space={k: list(v) for k, v in fam.params.items()}, results=results))
    return 0


def _fix(text: str) -> tuple[str, tuple]:
    """NAME=V[,V...] of --fix: integers where they are ASCII digits, true/false as booleans, words
    otherwise (checked by the family)."""
    name, sep, values = text.partition("=")
    if not sep or not name.strip() or not values.strip():
        raise argparse.ArgumentTypeError(f"{brief(text)}: expected NAME=VALUE[,VALUE...], e.g. copy=async or bk=16,32")
    def value(v: str):
        if re.fullmatch(r"-?[0-9]+", v):
            return int(v)
        return {"true": True, "false": False}.get(v.lower(), v)

    return name.strip(), tuple(value(v.strip()) for v in values.split(","))


def cmd_show(args) -> int:
    from autogemm.cli.show import collect, dumps, summary, tables, to_json
    from autogemm.store import locations

    places = [("given", Path(args.path))] if args.path else locations.lookup_dirs()
    shown = collect(places, required=bool(args.path))
    if args.json:
        print(dumps(to_json(shown)))
    elif args.all:
        console = _console()
        for table in tables(shown):
            if isinstance(table, str):       # a file of many records, as plain lines (rich is slow)
                sys.stdout.write(table + "\n")
            else:
                console.print(table)
    else:
        console = _console(fit=True)
        for part in summary(shown, places):
            if isinstance(part, str):            # a path, whole whatever the width
                console.print(part, soft_wrap=True, markup=False, highlight=False)
            else:
                console.print(part)
    for error in shown.errors:
        print(f"error: {_one_line(error)}", file=sys.stderr)
    return 2 if shown.errors else 0


def _fixed(fixes: list[tuple[str, tuple]]) -> dict:
    """The --fix flags as {name: values}; a parameter fixed twice is an error, not the last one."""
    names = [name for name, _ in fixes]
    twice = next((name for name in names if names.count(name) > 1), None)
    if twice:
        raise AutogemmError(f"--fix {twice} is given twice; give its choices once: --fix {twice}=V1,V2")
    return dict(fixes)


def _claim_json(path: str | None, command: str, early: bool = False):
    """Before the work: --json can be written, new or an earlier output of `command`. `early`:
    before the checks that a run can start (CUDA), only where that creates no folder."""
    if path and (not early or Path(path).parent.is_dir()):
        try:
            files.claim_output(path, files.output_of(command))
        except files.FileError as exc:
            raise AutogemmError(f"--json {path}: cannot be written: {exc}") from None


def _write_json(path: str | None, doc: dict):
    if path:
        try:
            files.write_atomic(path, json.dumps(doc, indent=1).encode())
        except files.FileError as exc:
            raise AutogemmError(f"--json {path}: cannot be written: {exc}") from None


def _config_json(text: str) -> dict:
    try:
        value = files.parse_json(text)
    except json.JSONDecodeError as exc:
        raise AutogemmError(f"--config: not JSON ({exc.msg}): {brief(text, 60)}") from None
    except ValueError as exc:
        raise AutogemmError(f"--config: {exc}: {brief(text, 60)}") from None
    if not isinstance(value, dict):
        raise AutogemmError(f"--config: expected a JSON object of gemm parameters, got {brief(text, 60)}")
    return value


def _arithmetic(args) -> str:
    """The dtype field of the keys a run tunes or benches: --dtype, or the precision (tf32, bf16)."""
    if args.dtype == "bfloat16":
        if args.precision not in ("fp32", "bf16"):
            raise AutogemmError(f"--dtype bfloat16 multiplies at precision bf16; --precision is {args.precision}")
        return "bfloat16"
    if args.precision != "fp32" and args.dtype != "float32":
        raise AutogemmError(f"--precision {args.precision} rounds float32 operands; --dtype is {args.dtype}")
    return args.dtype if args.precision == "fp32" else args.precision


def _problem(shape, arithmetic: str):
    from kernels.gemm.call import problem_of

    return problem_of((shape.m, shape.n, shape.k), shape.op, arithmetic)


DESCRIPTION = ("Generate, check, time and tune autogemm's CUDA kernels, and show the tuned results. bench, tune and "
               "sweep run kernels: they need a CUDA GPU and CuPy (pip install 'autogemm[cuda13]' or [cuda12]); show "
               "reads the tuned files and needs no GPU.")
_GPU = "Needs a CUDA GPU and CuPy."


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="autogemm", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"autogemm {__version__}",
                        help="print autogemm's version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{bench,tune,sweep,show}")
    _bench_parser(sub)
    _tune_parser(sub)
    _sweep_parser(sub)
    _show_parser(sub)
    return parser


def _bench_parser(sub):
    bench = sub.add_parser(
        "bench", help="on a GPU: time default and tuned kernels against cuBLAS and cuDNN",
        description="Time the GEMMs of a network's training step (and a CNN's convolutions) or of given shapes: "
                    "the default config, the tuned ones, optionally the naive kernel, given and random configs, "
                    f"and cuBLAS (cuDNN), each checked against float64 first; one process, one timer. {_GPU}")
    bench.add_argument("--shapes",
                       help="'nn' (the GEMMs of the MLP's training step), 'lenet' (the CNN's GEMMs and "
                            "convolutions, these against cuDNN) or MxNxK[:op],... with op nn|nt|tn|tt, +epilogue "
                            "for a fused one (nt+bias_sigmoid; cuBLAS then runs autogemm's elementwise pass) "
                            "(default: nn)")
    bench.add_argument("--layers", metavar="SPEC",
                       help="the CNN of these layers (python -m nn.train's --layers) in place of lenet's")
    bench.add_argument("--family", metavar="NAME|PATH",
                       help="a kernel family of your own (a plugin's name, or its folder): its default, tuned and "
                            "--config configs on each --problem")
    bench.add_argument("--problem", action="append", metavar="KEY=VALUE,...",
                       help="with --family: one problem of it, its Problem's fields (rows=4096,cols=1024); repeatable")
    bench.add_argument("--batch", type=_size, help="batch size of a network (default: 800 for nn, 1000 for lenet)")
    bench.add_argument("--hidden", **arguments.size_list(_size), default=(1000,),
                       help="hidden sizes for --shapes nn: 100,10 or 100 10 (default: 1000)")
    bench.add_argument("--dtype", choices=("float32", "float64", "bfloat16"), default="float32",
                       help="of the arrays; bfloat16: A and B in bfloat16 (uint16 bits), float32 out, precision bf16 "
                            "(gemm_wgmma on Hopper), cuBLAS's GemmEx on the same (default: float32)")
    bench.add_argument("--precision", choices=PRECISIONS, default="fp32",
                       help="the GEMMs' precision: fp32 (FP32-accurate), tf32 or bf16 (operands rounded to TF32 or "
                            "bfloat16, float32 sums; cuBLAS timed with its TF32 or BF16 tensor-core math on float32 "
                            "arrays) (default: fp32)")
    bench.add_argument("--reps", type=_positive_int, default=100, help="timed runs per variant (default: 100)")
    bench.add_argument("--naive", action="store_true", help="also time the naive baseline kernel")
    bench.add_argument("--untuned", action="store_true",
                       help="read no tuned file: time what a shape no one tuned gets (each family's default)")
    bench.add_argument("--l2", choices=("flush", "warm"), default="flush",
                       help="flush the L2 before each run (a cold first use), or keep it warm as a "
                            "training step that reuses its inputs does (default: flush)")
    bench.add_argument("--config", action="append", default=[], metavar="JSON",
                       help="also time this gemm config, e.g. '{\"bm\": 128, ...}' (repeatable)")
    bench.add_argument("--sample", type=_integer(0), default=0, metavar="N",
                       help="also time N random valid configs per shape, show the best (default: 0)")
    bench.add_argument("--show", type=_integer(0), default=3, help="sampled configs shown per shape (default: 3)")
    bench.add_argument("--seed", type=_seed, default=0, help="seed of --sample (default: 0)")
    bench.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    bench.set_defaults(run=cmd_bench)


def _tune_parser(sub):
    tune = sub.add_parser(
        "tune", help="on a GPU: search each kernel launch's fastest config with Optuna; store it",
        description="Search the fastest config of each kernel launch with Optuna, on this GPU: every launch of a "
                    "network's training step (nn, lenet) or given GEMM shapes, each candidate checked against "
                    "float64 before it is timed. Each result is merged into <store>/<gpu>.json as it is found, "
                    "where autogemm's calls look it up; Ctrl-C keeps the finished shapes, --resume goes on. "
                    + _GPU)
    tune.add_argument("--shapes",
                      help="'nn' (every kernel of the MLP's training step), 'lenet' (the CNN's) or MxNxK[:op],... "
                           "GEMMs, op nn|nt|tn|tt with +epilogue where fused (nt+bias_sigmoid) (default: nn)")
    tune.add_argument("--model", metavar="NETWORK",
                      help="every kernel of this network's training step: the same as --shapes NETWORK (nn, lenet)")
    tune.add_argument("--layers", metavar="SPEC",
                      help="the CNN of these layers (python -m nn.train's --layers) in place of lenet's")
    tune.add_argument("--torch", metavar="MODULE:FACTORY",
                      help="a PyTorch model, FACTORY() of MODULE (importable, or a .py file): every launch of one "
                           "forward and backward pass of it converted (autogemm.torch.convert), on --batch inputs "
                           "of --input's shape; needs PyTorch")
    tune.add_argument("--input", type=_input_shape, metavar="SHAPE",
                      help="with --torch: one input's shape, without the batch: 1x28x28, or 784")
    tune.add_argument("--family", metavar="NAME|PATH",
                      help="a kernel family (a plugin's, or a family folder to load: its module, template and "
                           "measure.py) to tune on the sizes of --problem")
    tune.add_argument("--problem", action="append", metavar="KEY=VALUE,...",
                      help="with --family: one problem of it, its Problem's fields (rows=4096,cols=1024); "
                           "repeatable")
    tune.add_argument("--hidden", **arguments.size_list(_size), default=(1000,),
                      help="hidden sizes for nn: 100,10 or 100 10 (default: 1000)")
    tune.add_argument("--batch", type=_size,
                      help="batch size of a network (default: 800 for nn, 1000 for lenet; --torch needs it)")
    tune.add_argument("--train-size", type=_size, default=54_000,
                      help="training images for nn: its remainder modulo --batch is the last batch (default: 54000)")
    tune.add_argument("--ranks", **arguments.size_list(_rank_count, "R", unique=True), default=(1,),
                      help="MPI rank counts for nn, 1,4 or 1 4: each rank's share of the batches too (default: 1)")
    tune.add_argument("--parallel", choices=("data", "model"), default="data",
                      help="what the ranks split (nn.train --parallel): data, each rank's rows; model, each "
                           "rank's hidden units on every row (default: data)")
    tune.add_argument("--activation", choices=("sigmoid", "relu"), default="sigmoid",
                      help="the hidden layers' activation for nn (its derivative is fused into the output layer) "
                           "(default: sigmoid)")
    tune.add_argument("--families", type=_families, default=_tunable(),
                      help=f"kernel families to tune, comma-separated (default: all: {','.join(_tunable())})")
    tune.add_argument("--dtype", choices=("float32", "float64", "bfloat16"), default="float32",
                      help="of the arrays; bfloat16: the GEMMs with A and B in bfloat16, float32 out "
                           "(default: float32)")
    tune.add_argument("--precision", choices=PRECISIONS, default="fp32",
                      help="the GEMMs' precision: fp32 (FP32-accurate), tf32 or bf16: the families with kernels "
                           "at it (gemm_wgmma) tuned into records of it, which only calls at it or a lower precision "
                           "use (default: fp32)")
    tune.add_argument("--trials", type=_positive_int, default=40,
                      help="configs compiled and measured per shape, at most: a search whose proposals stop "
                           "gaining ends sooner (default: 40)")
    tune.add_argument("--timeout", type=_positive_float, default=20.0,
                      help="seconds of search per shape, the final re-timing not counted (default: 20)")
    tune.add_argument("--patience", type=_integer(0, 10**6), metavar="N",
                      help="proposals in a row without a 1%% gain before the search turns to the best configs' "
                           "neighbours, and as many more before it ends; 0: it never ends early, --trials and "
                           f"--timeout alone stop it (default: {SEARCH_PATIENCE})")
    tune.add_argument("--out", metavar="DIR",
                      help="store folder (default: $AUTOGEMM_TUNED if set; else the repository's tuned/ in a "
                           "checkout; else the user store, ~/.cache/autogemm/tuned)")
    tune.add_argument("--resume", action="store_true",
                      help="continue the studies of an interrupted run (kept in $AUTOGEMM_CACHE/studies)")
    tune.add_argument("--stale", action="store_true",
                      help="instead of --shapes: every stale record of this GPU's file (its template's code changed)")
    tune.add_argument("--fix", type=_fix, action="append", default=[], metavar="NAME=V[,V...]",
                      help="search only these choices of a gemm parameter (repeatable; the GEMMs are then tuned on "
                           "the gemm family alone), e.g. --fix copy=async")
    tune.add_argument("--seed", type=_seed, default=0, help="seed of the TPE sampler and the operands (default: 0)")
    tune.add_argument("--gpus", metavar="all|N,N...",
                      help="tune on these GPUs of this machine at once, a worker process each, every result into "
                           "its GPU model's file (default: the current GPU only)")
    tune.set_defaults(run=cmd_tune)


def _sweep_parser(sub):
    sweep = sub.add_parser(
        "sweep", help="on a GPU: measure every config of a (restricted) gemm space, and the search on it",
        description="Measure every valid config of a GEMM space restricted by --fix, then the search on the same "
                    "space, both re-timed together: how close tuning gets to the best there is. " + _GPU)
    sweep.add_argument("--shapes", required=True,
                       help="MxNxK[:op],... (op with +epilogue where fused, or 'nn'): the GEMMs to sweep")
    sweep.add_argument("--hidden", **arguments.size_list(_size), default=(1000,),
                       help="hidden sizes for nn: 100,10 or 100 10 (default: 1000)")
    sweep.add_argument("--batch", type=_size, default=800, help="batch size for nn (default: 800)")
    sweep.add_argument("--fix", type=_fix, action="append", default=[], metavar="NAME=V[,V...]",
                       help="limit a gemm parameter to these choices (repeatable), e.g. --fix copy=async --fix bk=16")
    sweep.add_argument("--trials", type=_positive_int, default=40,
                       help="the search's trials on the same space (default: 40)")
    sweep.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                       help="of the arrays (default: float32)")
    sweep.add_argument("--seed", type=_seed, default=0, help="seed of the search and the operands (default: 0)")
    sweep.add_argument("--json", metavar="PATH", help="also write every timing as JSON")
    sweep.set_defaults(run=cmd_sweep)


def _show_parser(sub):
    show = sub.add_parser(
        "show", help="the tuned results: a summary per GPU (--all: every record; --json)",
        description="Show the tuned files that lookup reads (the user store, then the results shipped with "
                    "autogemm), or those given: by default a summary per GPU, its records per kernel family in "
                    "the user store and shipped, stale and overridden, as wide as the terminal; --all every "
                    "record; --json for scripts. Needs no GPU.")
    show.add_argument("path", nargs="?",
                      help="a tuned file, or a folder of them (default: what lookup reads: the user store, "
                           "$AUTOGEMM_TUNED or ~/.cache/autogemm/tuned, then the results shipped with autogemm)")
    show.add_argument("--all", action="store_true",
                      help="every record, a table per file (a file of over 500 records as plain lines), in place of "
                           "the summary")
    show.add_argument("--json", action="store_true", help="print every record as JSON for scripts instead of tables")
    show.set_defaults(run=cmd_show)


# Options whose absence has a meaning (a default network, folder or no output): given as '' they
# are refused, not taken as absent.
_NOT_EMPTY = {"layers": "--layers", "out": "--out", "json": "--json", "path": "path"}


def _refuse_empty(args):
    for name, flag in _NOT_EMPTY.items():
        value = getattr(args, name, None)
        if isinstance(value, str) and not value.strip():
            raise AutogemmError(f"{flag}: empty (leave it out, or give a value)")


def _one_line(message: str) -> str:
    """A message as one line of readable length, whatever it quotes: a newline in a path escaped,
    a value a layer below quoted whole (nn's --layers spec) cut short."""
    from autogemm.store.records import printable

    return printable(message, 1000)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        with signals.stoppable():
            args = build_parser().parse_args(argv)
            _refuse_empty(args)
            args.command_line = shlex.join(["autogemm", *argv])
            return args.run(args)
    except AutogemmError as exc:
        print(f"error: {_one_line(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:    # tune has its own: what it saved, and how to resume
        print(signals.interrupted(signals.signum_of(stop)), file=sys.stderr)
        return signals.status(stop)
    except BrokenPipeError:      # `autogemm show --json | head`: the reader stopped reading
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # no second error at exit
        return 1
