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

    shapes = parse_shapes(args.shapes, args.batch, args.hidden)
    dtype = np.dtype(args.dtype).type
    dev = this_device()
    table = Table(title=f"autogemm bench on {dev.name} ({dev.sm_count} SMs), {args.dtype}, "
                        f"median of {args.reps} event-timed runs, L2 flushed")
    for col in ("shape", "role", "variant", "kernel", "µs", "GFLOP/s", "vs cuBLAS"):
        table.add_column(col, justify="right" if col in ("µs", "GFLOP/s", "vs cuBLAS") else "left")
    records = []
    for shape in shapes:
        rows = bench_shape(shape, dtype, reps=args.reps, naive=args.naive)
        cublas = next(r for r in rows if r.variant == "cublas").timing
        for r in rows:
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
