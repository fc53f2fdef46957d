"""Issue 18 on a Hopper GPU: gemm_wgmma's pipelines on the configs of this GPU's tuned records.
For each record: its config in each pipeline (one loop; a producer copying by cp.async; a producer
copying by TMA; as many of its stages as fit), and with a producer of either kind and the most
stages that fit without wgmmas in flight; each of those with its M/N-major operands pretransposed
where it has any (and not, where the record does); each checked against float64 first, then all timed
interleaved with autogemm's timer (events, L2 flushed, median), cuBLAS in the record's precision
beside them.

    python benchmarks/issue18_pipeline.py [--shapes 800x1000x784:nt,...] [--reps 30] [--json PATH]
"""
import argparse


def variants(fam, cfg, problem, device) -> list:
    """The record's config, then the variants that fit, without repeats."""
    out = [cfg]
    for producer, tma, stages, inflight in ((0, 0, cfg.stages, cfg.inflight), (1, 0, cfg.stages, cfg.inflight),
                                            (1, 1, cfg.stages, cfg.inflight), (1, 0, 5, 0), (1, 1, 5, 0)):
        for s in range(stages, 1, -1):
            c = fam.config(dict(cfg, producer=producer, tma=tma, stages=s, inflight=inflight if s >= 3 else 0))
            if not fam.violations(c, problem, device):
                out.append(c)
                break
    out += [fam.config(dict(c, pretranspose=1 - c.pretranspose)) for c in out]
    return [c for c in dict.fromkeys(out) if not fam.violations(c, problem, device)]


def pipeline(cfg) -> str:
    name = {(0, 0): "one-loop", (1, 0): "cp.async-producer", (1, 1): "tma-producer"}[cfg["producer"], cfg["tma"]]
    return name + ("+pretransposed" if cfg["pretranspose"] else "")


def main():
    from autogemm.runtime.device import this_device
    from autogemm.runtime.family import family
    from autogemm.tuning.measure import GemmMeasure
    from wgmma_records import add_arguments, records, verified, with_cublas_us, write_results

    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args()
    device, fam, results = this_device(), family("gemm_wgmma"), []
    for r in records(device, args.shapes):
        measure = GemmMeasure(r.key, device)
        runs, configs = {}, {}
        for cfg in variants(fam, r.config, measure.problem, device):
            if (run := verified(measure, cfg)) is not None:
                runs[run.instance.name], configs[run.instance.name] = run, dict(cfg)
        us = with_cublas_us(measure, runs, args.reps)
        record_name = fam.instance(r.config, measure.problem).name
        best = {p: min((t, name) for name, t in us.items() if name in configs and pipeline(configs[name]) == p)
                for p in {pipeline(cfg) for cfg in configs.values()}}
        results.append({"key": str(r.key), "record_us": us.get(record_name), "cublas_us": us["cublas"],
                        "best": {p: {"us": t, "config": configs[name]} for p, (t, name) in sorted(best.items())},
                        "all_us": us, "configs": configs})
        print(f"{str(r.key):44s} record {us.get(record_name, float('nan')):7.1f}  "
              + "  ".join(f"{p} {t:7.1f}" for p, (t, _) in sorted(best.items()))
              + f"  cuBLAS {us['cublas']:7.1f} us", flush=True)
    write_results(args.json, device, results)


if __name__ == "__main__":
    main()
