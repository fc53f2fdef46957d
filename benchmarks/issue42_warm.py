"""Issue 42: the converted MLP's small launches ranked with L2 warm, as they run in the step (their
inputs written by the launch before), rather than flushed as the search times them. Every valid
config of linear_backward 800x10x1000:sigmoid_t and of the logits (linear_xent 800x10x1000:logits)
timed warm (quick), then the five fastest and the shipped record re-timed together, warm and
flushed.

    python benchmarks/issue42_warm.py [--json PATH]
"""
import argparse
import json

from autogemm.runtime.device import this_device
from autogemm.runtime.family import Config, family
from autogemm.store import lookup
from autogemm.store.keys import make_key, problem_of
from autogemm.tuning.measures import measure_for
from autogemm.tuning.search import retime
from autogemm.tuning.sweep import quick_timings

KEYS = [("linear_backward", (800, 10, 1000), "sigmoid_t"), ("linear_xent", (800, 10, 1000), "logits")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    args = parser.parse_args()
    device = this_device()
    rows = []
    for name, sizes, op in KEYS:
        key = make_key(name, sizes, op, "float32")
        problem = problem_of(key)
        fam = family(name)
        measure = measure_for(key, device)
        valid = [c for c in fam.all_configs() if fam.fits(c, problem, device)]
        shipped = Config(lookup.choose(name, problem, device).config)
        measure.flush_l2 = False
        quick, failures = quick_timings(valid, measure, 20)
        for c, why in failures.items():
            print(f"  failed: {dict(c)}: {why[:80]}")
        finalists = list(dict.fromkeys([shipped, *sorted(quick, key=quick.get)[:5]]))
        warm = retime(finalists, measure, 3, 60)
        measure.flush_l2 = True
        flushed = retime(finalists, measure, 3, 60)
        print(f"{key}: {len(valid)} valid, {len(quick)} ran; µs warm / flushed")
        for c in (c for c in finalists if c in warm and c in flushed):
            tag = "shipped" if c == shipped else ""
            print(f"  {warm[c][0]:6.2f} / {flushed[c][0]:6.2f}  {dict(c)} {tag}")
            rows.append(dict(key=str(key), config=dict(c), warm_us=warm[c][0], flushed_us=flushed[c][0],
                             shipped=c == shipped))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(gpu=device.name, results=rows), f, indent=1)


if __name__ == "__main__":
    main()
