"""The `autogemm` command: thin subcommands that parse arguments and call the library."""
import argparse
import json
import sys

import numpy as np

from autogemm.errors import AutogemmError
from autogemm.shapes import parse_shapes


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value


def _hidden(text: str) -> tuple[int, ...]:
    return tuple(_positive_int(part) for part in text.split(","))


def cmd_bench(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from autogemm.bench import bench_shape
    from autogemm.device import this_device
    from autogemm.family import family

    shapes = parse_shapes(args.shapes, args.batch, args.hidden)
    configs = {f"config{i}": _config_json(text) for i, text in enumerate(args.config, 1)}
    dtype = np.dtype(args.dtype).type
    dev = this_device()
    table = Table(title=f"autogemm bench on {dev.name} ({dev.sm_count} SMs), {args.dtype}, "
                        f"median of {args.reps} event-timed runs, L2 {'flushed' if args.l2 == 'flush' else 'warm'}")
    for col in ("shape", "role", "variant", "kernel", "µs", "GFLOP/s", "vs cuBLAS"):
        table.add_column(col, justify="right" if col in ("µs", "GFLOP/s", "vs cuBLAS") else "left")
    records = []
    for shape in shapes:
        extra = dict(configs)
        if args.sample:
            problem = _problem(shape, args.dtype)
            for i, cfg in enumerate(family("gemm").sample(problem, dev, args.sample, seed=args.seed), 1):
                extra[f"sample{i}"] = dict(cfg)
        rows = bench_shape(shape, dtype, configs=extra, reps=args.reps, naive=args.naive,
                           flush_l2=args.l2 == "flush")
        cublas = next(r for r in rows if r.variant == "cublas").timing
        samples = sorted((r for r in rows if r.variant.startswith("sample") and r.timing),
                         key=lambda r: r.timing.median_us)
        shown = [r for r in rows if not r.variant.startswith("sample")] + samples[:args.show]
        for r in rows:
            if r not in shown:
                records.append(dict(shape=str(shape), variant=r.variant, kernel=r.kernel,
                                    median_us=r.timing.median_us if r.timing else None, error=r.error))
        for r in shown:
            us = r.timing.median_us if r.timing else float("nan")
            ratio = us / cublas.median_us if r.timing else float("nan")
            table.add_row(str(shape), shape.role, r.variant, r.kernel,
                          f"{us:.1f}" if r.timing else r.error[:40], f"{r.gflops:.0f}",
                          f"{ratio:.2f}x" if r.timing else "")
            records.append(dict(shape=str(shape), role=shape.role, variant=r.variant, kernel=r.kernel,
                                median_us=us, p10_us=r.timing.p10_us if r.timing else None,
                                p90_us=r.timing.p90_us if r.timing else None, gflops=r.gflops,
                                time_vs_cublas=ratio, error=r.error))
    Console().print(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(gpu=dev.name, sm_count=dev.sm_count, dtype=args.dtype, reps=args.reps,
                           command=" ".join(["autogemm", *sys.argv[1:]]), results=records), f, indent=1)
    return 0


def _config_json(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AutogemmError(f"--config: not JSON ({exc.msg}): {text[:60]}") from None
    if not isinstance(value, dict):
        raise AutogemmError(f"--config: expected a JSON object of gemm parameters, got {text[:60]}")
    return value


def _problem(shape, dtype: str):
    from kernels.gemm import Problem

    return Problem.contiguous(shape.m, shape.n, shape.k, dtype, shape.trans_a, shape.trans_b)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="autogemm", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    bench = sub.add_parser("bench", help="time default and tuned kernels against cuBLAS")
    bench.add_argument("--shapes", default="nn",
                       help="'nn' (the MLP's GEMMs) or MxNxK[:op],... with op nn|nt|tn|tt (default: nn)")
    bench.add_argument("--batch", type=_positive_int, default=800, help="batch size for --shapes nn (800)")
    bench.add_argument("--hidden", type=_hidden, default=(1000,),
                       help="hidden sizes for --shapes nn, comma-separated (1000)")
    bench.add_argument("--dtype", choices=("float32", "float64"), default="float32", help="(float32)")
    bench.add_argument("--reps", type=_positive_int, default=100, help="timed runs per variant (100)")
    bench.add_argument("--naive", action="store_true", help="also time the naive baseline kernel")
    bench.add_argument("--l2", choices=("flush", "warm"), default="flush",
                       help="flush the L2 before each run (a cold first use), or keep it warm as a "
                            "training step that reuses its inputs does (default: flush)")
    bench.add_argument("--config", action="append", default=[], metavar="JSON",
                       help="also time this gemm config, e.g. '{\"bm\": 128, ...}' (repeatable)")
    bench.add_argument("--sample", type=int, default=0, metavar="N",
                       help="also time N random valid configs per shape, show the best (0)")
    bench.add_argument("--show", type=int, default=3, help="sampled configs shown per shape (3)")
    bench.add_argument("--seed", type=int, default=0, help="seed of --sample (0)")
    bench.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    bench.set_defaults(run=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except AutogemmError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
