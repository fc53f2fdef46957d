"""Issue 18 on a Hopper GPU: gemm_wgmma's untuned default for every GEMM of the three networks'
steps (one rank) at precision tf32 and on bfloat16 arrays, against the default of an older commit
(its configs in a JSON file that --write makes there, no GPU needed), each checked against float64,
timed interleaved with autogemm's timer (events, L2 flushed, median), cuBLAS beside them.

    python benchmarks/issue18_defaults.py --write FILE      # this file run on the older commit's tree
    python benchmarks/issue18_defaults.py --before FILE [--reps 30] [--json PATH]

fp32 calls are left out: untuned, they run the tiled family (kernels.IMPLEMENTATIONS lists it first).
"""
import argparse
import json

NETWORKS = ("cme213", "grading", "large")                 # nn.bench's
ARITHMETICS = {"tf32": "tf32", "bfloat16": "bf16"}      # key dtype: the step's precision


def keys() -> list:
    """The distinct gemm_wgmma keys of the networks' GEMMs in each arithmetic."""
    from autogemm.store.keys import make_key
    from nn.networks import networks
    from nn.targets import step_targets

    nets = [networks()[name] for name in NETWORKS]
    return list(dict.fromkeys(make_key("gemm_wgmma", t.sizes, t.op, arithmetic)
                              for arithmetic, precision in ARITHMETICS.items() for net in nets
                              for t in step_targets(net.batch, (net.hidden,), net.images, precision=precision)
                              if t.family == "gemm"))


def main():
    from autogemm.runtime.device import H100, this_device
    from autogemm.runtime.family import family
    from autogemm.store.keys import parse_key
    from autogemm.tuning.measure import GemmMeasure
    from wgmma_records import add_arguments, verified, with_cublas_us, write_results

    parser = argparse.ArgumentParser()
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--write", help="write this tree's defaults (an H100's, for the GEMMs gemm_wgmma can run) here")
    which.add_argument("--before", help="the older tree's defaults, from --write")
    add_arguments(parser, shapes=False)
    args = parser.parse_args()
    fam = family("gemm_wgmma")
    if args.write:
        from kernels.gemm_wgmma import problem_of
        problems = {k: problem_of(k.sizes, k.op, k.dtype) for k in keys()}
        defaults = [{"key": [k.family, k.shape, k.op, k.dtype], "config": dict(fam.default(problem, H100))}
                    for k, problem in problems.items() if fam.can_run(problem, H100)]
        with open(args.write, "w") as f:
            json.dump(defaults, f, indent=1)
        return
    with open(args.before) as f:
        before = json.load(f)
    device, results = this_device(), []
    for entry in before:
        key, old = parse_key(*entry["key"]), entry["config"]
        measure = GemmMeasure(key, device)
        now = fam.default(measure.problem, device)
        configs = {"before": fam.config(old)}
        if now != configs["before"]:
            configs["now"] = now
        runs = {label: run for label, cfg in configs.items() if (run := verified(measure, cfg)) is not None}
        us = with_cublas_us(measure, runs, args.reps)
        results.append({"key": str(key), "before": old, "now": dict(now), "us": us})
        print(f"{str(key):52s} " + "  ".join(f"{name} {t:7.1f}" for name, t in us.items())
              + (" (same config)" if len(configs) == 1 else f"  now {now['bm']}x{now['bn']} was {old['bm']}x{old['bn']}"), flush=True)
    write_results(args.json, device, results)


if __name__ == "__main__":
    main()
