"""Issue 42: whether the way a stage is copied limits the converted MLP's two large tf32 GEMMs: the
shipped tiles with bulk tensor copies (TMA, a producer warpgroup), cp.async from a producer
warpgroup, or cp.async from every thread, at 3-5 stages, and narrower tiles that fit three blocks
an SM; each timed as the search times a trial (L2 flushed), then with L2 warm.

    python benchmarks/issue42_copies.py [--json PATH]
"""
import argparse
import json

from autogemm.runtime.device import this_device
from autogemm.runtime.family import Config, family
from autogemm.store import lookup
from autogemm.store.keys import make_key, problem_of
from autogemm.tuning.measures import measure_for
from autogemm.tuning.search import retime

BASE = dict(warpgroups=1, math="tf32", inflight=0, split_k=1, pretranspose=0, reg_a=0, swap=0, cluster_m=1,
            cluster_n=1, persistent=0)
COPIES = {"tma": dict(producer=1, tma=1), "producer cp.async": dict(producer=1, tma=0),
          "all cp.async": dict(producer=0, tma=0)}
TILES = {((800, 1000, 784), "nt+bias_sigmoid"): [dict(bm=64, bn=64), dict(bm=64, bn=48), dict(bm=64, bn=32)],
         ((1000, 784, 800), "tt"): [dict(bm=64, bn=112, reg_a=1), dict(bm=64, bn=64, reg_a=1),
                                    dict(bm=64, bn=48, reg_a=1)]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    args = parser.parse_args()
    device = this_device()
    fam = family("gemm_wgmma")
    rows = []
    for (sizes, op), tiles in TILES.items():
        key = make_key("gemm_wgmma", sizes, op, "tf32")
        problem = problem_of(key)
        measure = measure_for(key, device)
        shipped = Config(lookup.choose("gemm_wgmma", problem, device).config)
        named = {shipped: "shipped"}
        for tile in tiles:
            for copy, how in COPIES.items():
                for stages in (3, 4, 5):
                    c = fam.config(dict(BASE, **tile, **how, stages=stages))
                    if fam.fits(c, problem, device):
                        named.setdefault(c, f"{tile['bm']}x{tile['bn']} {copy} {stages} stages")
        configs = list(named)
        getattr(measure, "prepare", lambda batch: None)(configs)
        flushed = retime(configs, measure, 3, 40)
        measure.flush_l2 = False
        warm = retime(configs, measure, 3, 40)
        print(f"{key}: µs flushed / warm")
        for c in configs:
            if c in flushed and c in warm:
                print(f"  {flushed[c][0]:7.2f} / {warm[c][0]:6.2f}  {named[c]}")
                rows.append(dict(key=str(key), name=named[c], config=dict(c), flushed_us=flushed[c][0],
                                 warm_us=warm[c][0]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(gpu=device.name, results=rows), f, indent=1)


if __name__ == "__main__":
    main()
