"""FP32-accurate GEMMs against cuBLAS FP32, error and time on the same operands (issue 40, item 2).

    python benchmarks/issue40_fp32_error.py --label base --json out.json

For each shape: the tiled family's two first 3xtf32 seeds, its FMA default and its config from the
shipped tuned file (a record of the shape or a near one), gemm_wgmma's 3xtf32 default where it runs, and cuBLAS FP32, each checked against float64 (the tuning measure's operands:
random normal, seed 0) and timed (median of --reps). Run once per variant of the templates (the
visit swaps kernels/gemm/3xtf32.cuh), so rows of one shape are on the same data.
"""
import argparse
import json

from autogemm.runtime.device import this_device
from autogemm.runtime.family import family
from autogemm.store import lookup
from autogemm.store.keys import key_of
from autogemm.tuning.measures import measure_for
from kernels.gemm.call import Problem

SHAPES = ["1024x1024x1024:nn", "2048x2048x2048:nt", "4096x4096x4096:nn", "512x4096x1024:tn", "4096x512x1024:nt",
          "256x256x8192:tn", "8192x8192x256:nn", "1000x1000x1000:tt", "777x555x333:nt", "96x3072x768:nt",
          "3072x96x768:tn", "1023x1025x1027:nn", "800x1000x784:nt", "1000x784x800:tn", "256x256x1024:nt",
          "256x256x4096:nt", "256x256x16384:nt", "1024x1024x16384:nt"]


def problem_of(text: str) -> Problem:
    sizes, op = text.split(":")
    m, n, k = map(int, sizes.split("x"))
    return Problem.contiguous(m, n, k, "float32", op[0] == "t", op[1] == "t")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    args = ap.parse_args()
    device, rows = this_device(), []
    tiled, wgmma = family("gemm"), family("gemm_wgmma")
    for text in args.shapes.split(","):
        problem = problem_of(text)
        runs = [("gemm", "fma", tiled.default(problem, device))]
        runs += [("gemm", "3xtf32", c) for c in tiled.restricted({"math": ("3xtf32",)}).candidates(problem, device)[:2]]
        tuned = lookup.choose("gemm", problem, device)          # the shipped record's config, if any
        if tuned.source != "default" and tuned.config not in [c for _, _, c in runs]:
            runs.append(("gemm", tuned.config["math"], tuned.config))
        if wgmma.can_run(problem, device):
            runs += [("gemm_wgmma", "3xtf32", c)
                     for c in wgmma.restricted({"math": ("3xtf32",)}).candidates(problem, device)[:1]]
        measures = {name: measure_for(key_of(name, problem), device) for name, _, _ in runs}
        for name, m in measures.items():
            m.prepare([cfg for n, _, cfg in runs if n == name])      # compiled in parallel
        for name, math, cfg in runs:
            m = measures[name]
            row = dict(label=args.label, shape=text, family=name, math=math,
                       kernel=family(name).instance_name(cfg, problem))
            try:
                t = m(cfg, args.reps)
                row.update(median_us=t.median_us, max_rel_error=t.max_rel_error)
            except Exception as exc:      # a mismatch or launch failure is a result too
                row.update(error=f"{type(exc).__name__}: {exc}"[:300])
            rows.append(row)
        m = measures["gemm"]
        base = m.baseline(args.reps)
        rows.append(dict(label=args.label, shape=text, family="cublas", math="fp32", kernel="cublas",
                         median_us=base.median_us, max_rel_error=m.verify(m.cublas_launcher())))
        cublas = rows[-1]
        for r in rows:
            if r["shape"] == text and r.get("max_rel_error") is not None:
                r["error_vs_cublas"] = r["max_rel_error"] / cublas["max_rel_error"]
                r["time_vs_cublas"] = r["median_us"] / cublas["median_us"]
        for r in rows[-len(runs) - 1:]:
            print(f"{args.label:8} {text:20} {r['family']:10} {r['math']:6} "
                  f"{r.get('median_us', float('nan')):9.1f} us  err {r.get('max_rel_error', float('nan')):.2e} "
                  f"({r.get('error_vs_cublas', float('nan')):5.2f}x)  time {r.get('time_vs_cublas', float('nan')):5.2f}x"
                  f"  {r.get('error', '')[:80]}", flush=True)
    json.dump(rows, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
