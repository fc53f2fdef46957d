"""Every shipped record of the split-K families rendered as the tree it runs in renders it:
{record: [family, source]} as JSON on stdout. Run from a checkout's root, with that checkout first on PYTHONPATH."""
import json, sys
from pathlib import Path
from autogemm.runtime.family import family
from autogemm.store.keys import parse_key, problem_of
from autogemm.store import records
out = {}
for p in sorted(Path("tuned").glob("*.json")):
    for r in json.loads(p.read_text())["records"]:
        if r["family"] not in ("gemm", "gemm_wgmma", "conv2d_wgrad"):
            continue
        fam = family(r["family"])
        key = parse_key(r["family"], r["shape"], r["op"], r["dtype"])
        cfg = fam.config(records._with_added(r["family"], r["config"]))
        out[f"{p.name}|{r['family']}|{r['shape']}|{r['op']}|{r['dtype']}"] = [r["family"], fam.instance(cfg, problem_of(key)).source]
json.dump(out, sys.stdout)
