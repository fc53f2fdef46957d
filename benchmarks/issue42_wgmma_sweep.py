"""Issue 42: how close is the tuned record of the converted MLP's two large tf32 GEMMs (its forward
GEMM with bias and sigmoid, 800x1000x784 nt, and its first layer's weight gradient, 1000x784x800
tt) to the best of a wide part of gemm_wgmma's space (every block tile of 64 or 128 rows, every
cluster shape, wgmma groups in flight or not, A from registers or not)? Every valid config is
measured as the search measures a trial, the search runs on the same space, then both winners and
the shipped record's config are re-timed together (autogemm.tuning.sweep, L2 flushed). With
--split-k, the same with K in that many slices (reduced by the last block of each tile), over more
stage counts (two blocks an SM need fewer).

    python benchmarks/issue42_wgmma_sweep.py [--json PATH] [--split-k 2,3,4]
"""
import argparse
import json

from autogemm.runtime.device import this_device
from autogemm.runtime.family import Config, family
from autogemm.store import lookup
from autogemm.store.keys import make_key, problem_of
from autogemm.tuning.measures import measure_for
from autogemm.tuning.search import Settings, retime
from autogemm.tuning.sweep import sweep

SPACE = dict(math=("tf32",), producer=(1,), tma=(1,), pretranspose=(0,), stages=(5,), split_k=(1,), swap=(0,),
             persistent=(0,), bm=(64, 128), bn=(64, 96, 112, 128, 160, 192, 224, 256))
KEYS = [((800, 1000, 784), "nt+bias_sigmoid"), ((1000, 784, 800), "tt")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    parser.add_argument("--split-k", help="comma-separated slice counts of K (default: K unsplit)")
    args = parser.parse_args()
    space = SPACE
    if args.split_k:
        space = dict(SPACE, split_k=tuple(int(s) for s in args.split_k.split(",")), stages=(3, 4, 5))
    device = this_device()
    fam = family("gemm_wgmma").restricted(space)
    settings = Settings(trials=40, timeout=None)
    rows = []
    for sizes, op in KEYS:
        key = make_key("gemm_wgmma", sizes, op, "tf32")
        problem = problem_of(key)
        measure = measure_for(key, device)
        report = sweep(fam, problem, device, measure, settings,
                       progress=lambda done, total: print(f"{key}: {done}/{total}", flush=True))
        shipped = lookup.choose("gemm_wgmma", problem, device).config
        names = {}                      # each contender once, named by every role it has
        for name, c in (("sweep best", report.best), ("search", report.search.config), ("shipped", Config(shipped))):
            names[c] = f"{names[c]}, {name}" if c in names else name
        contenders = list(names)
        final = {c: t[0] for c, t in retime(contenders, measure, settings.rounds, settings.final_reps).items()}
        ranked = sorted(report.timings.items(), key=lambda kv: kv[1])[:10]
        rows.append(dict(key=str(key), valid=report.valid, failed=len(report.failures),
                         final=[dict(config=dict(c), median_us=final[c]) for c in contenders if c in final],
                         quick_top=[dict(config=dict(c), median_us=t) for c, t in ranked]))
        print(f"{key}: {report.valid} valid, {len(report.failures)} failed; re-timed together, µs:")
        for c in contenders:
            print(f"  {names[c]:10s} {final.get(c, float('nan')):7.2f}  {dict(c)}")
        print("  quick top 10:")
        for c, t in ranked:
            print(f"    {t:7.2f}  bm {c['bm']} bn {c['bn']} wg {c['warpgroups']} stages {c['stages']} "
                  f"split_k {c['split_k']} inflight {c['inflight']} reg_a {c['reg_a']} "
                  f"cluster {c['cluster_m']}x{c['cluster_n']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(gpu=device.name, space={k: list(v) for k, v in space.items()}, results=rows), f, indent=1)


if __name__ == "__main__":
    main()
