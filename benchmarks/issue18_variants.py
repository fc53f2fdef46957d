"""Issue 18 on a Hopper GPU: gemm_wgmma's variants on the configs of this GPU's tuned records, each
checked against float64 first, then all timed interleaved with autogemm's timer (events, L2
flushed, median), cuBLAS in the record's precision beside them.

    python benchmarks/issue18_variants.py --vary cluster|persistent|width [--shapes 8192x4096x784:nt,...]
        [--epilogue bias_sigmoid] [--reps 30] [--json PATH]

cluster: the record's config in clusters of 1 x 1, 2 x 1, 1 x 2 and 2 x 2 blocks (M x N: blocks along
M share their B tiles, along N their A tiles, by multicast bulk copies). persistent: the record's
config, then persistent blocks of two warpgroups taking turns on tiles of each warpgroup's share of
the record's tile, and of 128 x 128, with a TMA producer, the most stages that fit, wgmmas in flight
or not, alone or in clusters of 2 x 1 and 1 x 2 (and 64 x 256 tiles in clusters of 2 x 2). width:
the record's config, then tiles 112 and 224 wide (N = 784 in 7 or 3.5 of them: on 4096 x 784,
256 x 112 and 128 x 224 tiles take one wave of blocks where 128 x 128 ones take 1.7), one a block (the record's pipeline and a TMA producer,
the latter also in 2 x 1 clusters) and persistent, the most stages that fit. With
--epilogue, each variant also runs with that fused epilogue (a layer's forward GEMM: bias, then the
activation), checked and timed beside the others; cuBLAS runs without it (with a record's own
epilogue, cuBLAS then the elementwise pass).
"""
import argparse

CLUSTERS = ((1, 1), (2, 1), (1, 2), (2, 2))
# (bm, bn, warpgroups, persistent) of --vary width: a warpgroup's tile at most 128 accumulators.
WIDTHS = ((128, 224, 2, 0), (256, 112, 2, 0), (128, 112, 2, 0), (64, 224, 1, 0), (128, 112, 2, 1), (64, 224, 2, 1))


def variants(fam, cfg, vary: str) -> dict:
    """{label: config} of the record's config `cfg`."""
    if vary == "cluster":
        return {f"{cm}x{cn}": fam.config(dict(cfg, cluster_m=cm, cluster_n=cn)) for cm, cn in CLUSTERS}
    out = {"record": cfg}
    if vary == "width":
        for bm, bn, warpgroups, persistent in WIDTHS:
            pipelines = {(1, 1, 1, 1), (1, 1, 2, 1)} | (set() if persistent else {(cfg.producer, cfg.tma, 1, 1)})
            for producer, tma, cm, cn in sorted(pipelines):
                for stages in (5, 4, 3, 2):
                    out[f"{bm}x{bn}-wg{warpgroups}{'-persistent' * persistent}-p{producer}t{tma}-c{cm}x{cn}-s{stages}"] = \
                        fam.config(dict(cfg, bm=bm, bn=bn, warpgroups=warpgroups, producer=producer, tma=tma,
                                        persistent=persistent, stages=stages, split_k=1, cluster_m=cm, cluster_n=cn))
        return out
    for bm, bn in dict.fromkeys(((cfg.bm // cfg.warpgroups, cfg.bn), (128, 128))):
        for (cm, cn), inflight in ((1, 1), 0), ((1, 1), 1), ((2, 1), 0), ((1, 2), 0), ((2, 2), 0):
            for stages in (5, 4, 3, 2):
                out[f"persistent-{bm}x{bn}-c{cm}x{cn}-s{stages}-if{inflight}"] = fam.config(dict(
                    cfg, bm=bm, bn=bn, warpgroups=2, producer=1, tma=1, persistent=1, inflight=inflight, stages=stages,
                    split_k=1, cluster_m=cm, cluster_n=cn))
    return out


def main():
    from autogemm.runtime.device import this_device
    from autogemm.runtime.family import family
    from autogemm.tuning.measure import GemmMeasure
    from kernels.gemm import key_op
    from wgmma_records import add_arguments, records, verified, with_cublas_us, write_results

    p = argparse.ArgumentParser()
    p.add_argument("--vary", choices=("cluster", "persistent", "width"), required=True)
    p.add_argument("--epilogue", choices=("bias", "bias_sigmoid", "bias_relu"))
    add_arguments(p)
    args = p.parse_args()
    device, fam, results = this_device(), family("gemm_wgmma"), []
    for r in records(device, args.shapes):
        measure = GemmMeasure(r.key, device)
        layout = measure.problem.trans_a, measure.problem.trans_b
        fused = GemmMeasure(r.key._replace(op=key_op(*layout, args.epilogue)), device) if args.epilogue else None
        runs, configs, taken = {}, {}, set()
        for label, cfg in variants(fam, r.config, args.vary).items():
            kind = label.replace(f"-s{cfg.stages}", "")     # a variant without its stage count: the most that fit
            if fam.violations(cfg, measure.problem, device) or kind in taken:
                continue
            taken.add(kind)
            if (run := verified(measure, cfg)) is None:
                continue
            runs[label], configs[label] = run, dict(cfg)
            if fused and (run := verified(fused, cfg)) is not None:
                runs[f"{label}+{args.epilogue}"] = run
        us = with_cublas_us(measure, runs, args.reps)
        results.append({"key": str(r.key), "config": dict(r.config), "us": us, "configs": configs})
        print(f"{str(r.key):44s} " + "  ".join(f"{name} {t:7.1f}" for name, t in us.items()) + " us", flush=True)
    write_results(args.json, device, results)


if __name__ == "__main__":
    main()
