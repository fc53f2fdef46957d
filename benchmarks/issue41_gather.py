"""Issue 41: the implicit-GEMM convolutions on tensor cores, their gather pipelined or not, against
cuDNN. For each layer (n, c, h, w, f, k) and direction, at fp32 and tf32: the family's first
candidates as they are (two stages), the first with one stage, and FMA's first, each checked
against float64 and timed interleaved with cuDNN on the same operands (L2 warm).

    python benchmarks/issue41_gather.py --layers 1000x32x12x12x64x5,1000x64x13x13x128x3 --json out.json
"""
import argparse
import json

from autogemm.runtime.device import this_device
from autogemm.runtime.family import family
from autogemm.store.keys import make_key
from autogemm.tuning.measures import measure_for
from autogemm.tuning.timing import time_interleaved
from kernels.conv2d.measure import cudnn_convolution

DIRECTIONS = ("conv2d", "conv2d_dgrad", "conv2d_wgrad")


def configs_of(fam, problem, device, count: int) -> dict:
    """{label: config}: the first `count` candidates, the first with one stage, FMA's first."""
    candidates = fam.candidates(problem, device)
    chosen = {f"cand{i}": cfg for i, cfg in enumerate(candidates[:count])}
    first = dict(candidates[0])
    if first.get("stages") == 2:
        chosen["cand0-1stage"] = fam.config(dict(first, stages=1))
    fma = next((c for c in candidates if c.math == "fma"), None)
    if fma is not None:
        chosen["fma"] = fma
    return chosen


def rows_of(name: str, sizes: tuple, precision: str, device, count: int, reps: int) -> list[dict]:
    measure = measure_for(make_key(name, sizes, "-", "float32" if precision == "fp32" else precision), device)
    fam = family(name)
    runs, rows = {}, {}
    for label, cfg in configs_of(fam, measure.problem, device, count).items():
        row = rows[label] = dict(direction=name, layer="x".join(map(str, sizes)), precision=precision, variant=label,
                                 kernel=fam.instance_name(cfg, measure.problem), config=dict(cfg))
        try:
            run = measure.launcher(cfg)
            row["max_rel_error"] = measure.verify(run)
            runs[label] = run
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
    run, into_outputs = cudnn_convolution(measure)
    rows["cudnn"] = dict(direction=name, layer="x".join(map(str, sizes)), precision=precision, variant="cudnn",
                         max_rel_error=measure.verify(into_outputs))
    runs["cudnn"] = run
    for label, t in time_interleaved(runs, reps=reps, flush_l2=False).items():
        rows[label]["median_us"] = t.median_us
    base = rows["cudnn"]["median_us"]
    for row in rows.values():
        if "median_us" in row:
            row["vs_cudnn"] = row["median_us"] / base
    return list(rows.values())


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", required=True, help="NxCxHxWxFxK,... (the forward convolution's sizes)")
    p.add_argument("--precisions", default="fp32,tf32")
    p.add_argument("--candidates", type=int, default=3)
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--json", required=True)
    args = p.parse_args()
    device, rows = this_device(), []
    for layer in args.layers.split(","):
        sizes = tuple(int(s) for s in layer.split("x"))
        for precision in args.precisions.split(","):
            for name in DIRECTIONS:
                rows += rows_of(name, sizes, precision, device, args.candidates, args.reps)
                with open(args.json, "w") as f:
                    json.dump(dict(gpu=device.name, rows=rows), f, indent=1)
    print(f"{'layer':22} {'prec':4} {'direction':13} {'variant':13} {'µs':>8} {'vs cuDNN':>8}  kernel")
    for r in rows:
        took = f"{r['median_us']:8.1f} {r['vs_cudnn']:8.2f}" if "median_us" in r else f"{r.get('error', '')[:40]}"
        print(f"{r['layer']:22} {r['precision']:4} {r['direction']:13} {r['variant']:13} {took}  {r.get('kernel', '')[-48:]}")


if __name__ == "__main__":
    main()
