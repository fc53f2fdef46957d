"""Issue 18 on a Hopper GPU: gemm_wgmma's thread-block clusters on the configs of this GPU's tuned
records. For each record: its config in clusters of 1 x 1, 2 x 1, 1 x 2 and 2 x 2 blocks (M x N:
blocks along M share their B tiles, along N their A tiles, by multicast bulk copies), those that
are valid, each checked against float64 first, then all timed interleaved with autogemm's timer
(events, L2 flushed, median), cuBLAS in the record's precision beside them.

    python tuned/bench/issue18_cluster.py [--shapes 8192x4096x784:nt,...] [--reps 30] [--json PATH]
"""
import argparse
import json

CLUSTERS = ((1, 1), (2, 1), (1, 2), (2, 2))


def main():
    from autogemm.ops.cublas import cublas_gemm
    from autogemm.runtime.device import this_device
    from autogemm.runtime.family import family
    from autogemm.store.locations import tune_dir
    from autogemm.store.records import file_for, load
    from autogemm.tuning.measure import GemmMeasure
    from autogemm.tuning.timing import time_interleaved

    p = argparse.ArgumentParser()
    p.add_argument("--shapes", help="SIZES:OP of the records to take (default: all gemm_wgmma records)")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--json")
    args = p.parse_args()
    device, fam, results = this_device(), family("gemm_wgmma"), []
    wanted = set(args.shapes.split(",")) if args.shapes else None
    records = [r for r in load(file_for(tune_dir(), device)).records.values() if r.key.family == "gemm_wgmma"
               and (wanted is None or f"{'x'.join(map(str, r.key.sizes))}:{r.key.op}" in wanted)]
    for r in records:
        measure = GemmMeasure(r.key, device)
        runs = {}
        for cm, cn in CLUSTERS:
            cfg = fam.config(dict(r.config, cluster_m=cm, cluster_n=cn))
            if fam.violations(cfg, measure.problem, device):
                continue
            run = measure.launcher(cfg)
            try:
                measure.verify(run)
            except Exception as exc:
                print(f"{r.key}: {run.instance.name}: FAILED {str(exc)[:300]}", flush=True)
                continue
            runs[f"{cm}x{cn}"] = run
        runs["cublas"] = lambda m=measure: cublas_gemm(m.a, m.b, m.out, m.trans_a, m.trans_b, m.precision)
        timings = time_interleaved(runs, reps=args.reps)
        us = {name: timings[name].median_us for name in runs}
        results.append({"key": str(r.key), "config": dict(r.config), "us": us})
        print(f"{str(r.key):44s} " + "  ".join(f"{name} {t:7.1f}" for name, t in us.items()) + " us", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": device.name, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
