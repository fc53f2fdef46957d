"""Issue 42: whether the converted MLP's two large tf32 GEMMs wait on their loads: each timed (as
the search times a trial, L2 flushed) with more pipeline stages than gemm_wgmma's space offers
(PARAMS["stages"] widened for this run alone), against the shipped record's config.

    python benchmarks/issue42_stages.py [--json PATH]
"""
import argparse
import json
from unittest import mock

import kernels.gemm_wgmma as gemm_wgmma
from autogemm.runtime.device import this_device
from autogemm.runtime.family import Config, family
from autogemm.store import lookup
from autogemm.store.keys import make_key, problem_of
from autogemm.tuning.measures import measure_for
from autogemm.tuning.search import retime

STAGES = (2, 3, 4, 5, 6, 7, 8, 9, 10, 12)
BASE = dict(warpgroups=1, math="tf32", inflight=0, split_k=1, producer=1, tma=1, pretranspose=0, reg_a=0, swap=0,
            cluster_m=1, cluster_n=1, persistent=0)
TILES = {((800, 1000, 784), "nt+bias_sigmoid"): [dict(bm=64, bn=64), dict(bm=128, bn=64, warpgroups=2),
                                                  dict(bm=64, bn=128), dict(bm=128, bn=128, warpgroups=2)],
         ((1000, 784, 800), "tt"): [dict(bm=64, bn=112, reg_a=1), dict(bm=128, bn=112, warpgroups=2, reg_a=1),
                                    dict(bm=64, bn=64, reg_a=1), dict(bm=128, bn=64, warpgroups=2, reg_a=1)]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    args = parser.parse_args()
    with mock.patch.dict(gemm_wgmma.PARAMS, stages=STAGES):    # the space widened while this runs
        run(args)


def run(args):
    device = this_device()
    fam = family("gemm_wgmma")
    rows = []
    for (sizes, op), tiles in TILES.items():
        key = make_key("gemm_wgmma", sizes, op, "tf32")
        problem = problem_of(key)
        measure = measure_for(key, device)
        shipped = Config(lookup.choose("gemm_wgmma", problem, device).config)
        configs = [shipped] + [fam.config(dict(BASE, **tile, stages=s)) for tile in tiles for s in STAGES]
        configs = list(dict.fromkeys(c for c in configs if fam.fits(c, problem, device)))
        getattr(measure, "prepare", lambda batch: None)(configs)
        times = retime(configs, measure, 3, 50)
        print(f"{key}: µs, L2 flushed")
        for c in configs:
            if c in times:
                name = "shipped" if c == shipped else ""
                print(f"  {times[c][0]:7.2f}  bm {c['bm']} bn {c['bn']} wg {c['warpgroups']} stages {c['stages']} {name}")
                rows.append(dict(key=str(key), config=dict(c), median_us=times[c][0], shipped=c == shipped))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(gpu=device.name, results=rows), f, indent=1)


if __name__ == "__main__":
    main()
