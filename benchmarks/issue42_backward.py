"""Issue 42: linear_backward's narrow column tiles (4-16 columns, new to its space) for the converted
MLP's output layer (800x10x1000, G_in transposed at tf32 and row-major at fp32). Each valid one
timed as the search times it (L2 flushed, quick), then the five fastest and the shipped record
re-timed together, flushed and warm. With --store DIR, the shipped file with both records running
their fastest narrow config is written to DIR (read through $AUTOGEMM_TUNED), so that nn.bench can
time the step with them.

    python benchmarks/issue42_backward.py [--json PATH] [--store DIR]
"""
import argparse
import json
from pathlib import Path

from autogemm.runtime.device import this_device
from autogemm.runtime.family import Config, family
from autogemm.store import lookup
from autogemm.store.keys import make_key, problem_of
from autogemm.tuning.measures import measure_for
from autogemm.tuning.search import retime
from autogemm.tuning.sweep import quick_timings

SHIPPED = Path(__file__).resolve().parents[1] / "autogemm" / "tuned" / "nvidia-h200.json"
NAME, SIZES, OPS = "linear_backward", (800, 10, 1000), ("sigmoid_t", "sigmoid")
NARROW = 16          # the widest of the new tiles


def sweep(op: str, device) -> tuple[list[dict], Config | None]:
    """The finalists' rows ({"op", "config", "flushed_us", "warm_us", "max_rel_error", "shipped"}) and the
    fastest narrow config, flushed."""
    key = make_key(NAME, SIZES, op, "float32")
    problem = problem_of(key)
    fam = family(NAME)
    measure = measure_for(key, device)
    narrow = [c for c in fam.all_configs() if c.cols <= NARROW and fam.fits(c, problem, device)]
    shipped = Config(lookup.choose(NAME, problem, device).config)
    quick, failures = quick_timings(narrow, measure, 20)
    for c, why in failures.items():
        print(f"  failed: {dict(c)}: {why[:80]}")
    finalists = list(dict.fromkeys([shipped, *sorted(quick, key=quick.get)[:5]]))
    flushed = retime(finalists, measure, 3, 60)
    measure.flush_l2 = False
    warm = retime(finalists, measure, 3, 60)
    print(f"{key}: {len(narrow)} narrow configs valid, {len(quick)} ran; µs flushed / warm, max rel. error")
    rows = []
    for c in (c for c in finalists if c in flushed and c in warm):
        error = flushed[c][3]
        print(f"  {flushed[c][0]:6.2f} / {warm[c][0]:6.2f}  {error:.1e}  {dict(c)}{'  shipped' if c == shipped else ''}")
        rows.append(dict(op=op, config=dict(c), flushed_us=flushed[c][0], warm_us=warm[c][0], max_rel_error=error,
                         shipped=c == shipped))
    best = min((c for c in finalists if c.cols <= NARROW and c in flushed), key=lambda c: flushed[c][0], default=None)
    return rows, best


def write_store(folder: Path, best: dict[str, Config]):
    """The shipped file with each op's record running `best[op]` (its code hash that config's)."""
    data = json.loads(SHIPPED.read_text())
    fam = family(NAME)
    for r in data["records"]:
        if (r["family"], r["shape"], r["dtype"]) == (NAME, "x".join(map(str, SIZES)), "float32") and r["op"] in best:
            cfg = best[r["op"]]
            r["config"] = dict(cfg)
            r["template_hash"] = fam.code_hash(cfg, problem_of(make_key(NAME, SIZES, r["op"], "float32")))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / SHIPPED.name).write_text(json.dumps(data))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the finalists' rows here")
    parser.add_argument("--store", type=Path, help="write the shipped file with the fastest narrow configs here")
    args = parser.parse_args()
    device = this_device()
    rows, best = [], {}
    for op in OPS:
        found, fastest = sweep(op, device)
        rows += found
        if fastest is not None:
            best[op] = fastest
    if args.json:
        args.json.write_text(json.dumps(dict(gpu=device.name, results=rows), indent=1))
    if args.store:
        write_store(args.store, best)


if __name__ == "__main__":
    main()
