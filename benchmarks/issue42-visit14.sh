#!/usr/bin/env bash
# Issue 42: where the warps of the converted tf32 MLP's two large GEMMs wait: Nsight Compute's
# stall reasons (smsp__pcsamp sampling, the WarpStateStats and SourceCounters sections) on one
# eager step's gemm_wgmma launches, after three steps. From the repository root:
#   source .device/env.sh && bash benchmarks/issue42-visit14.sh
set -uo pipefail
out=${OUT:-/tmp/issue42n}
work=$out/issue42n
mkdir -p "$work"
nvidia-smi -L > "$work/machine.txt" 2>&1
timeout 300 ncu --clock-control none --section WarpStateStats --section SourceCounters --section SpeedOfLight \
    --metrics "regex:smsp__pcsamp_warps_issue_stalled_.*" --kernel-name "regex:gemm_wgmma" \
    --launch-skip 6 --launch-count 2 --page raw --csv \
    python benchmarks/issue42_profile.py --model mlp --precision tf32 > "$work/raw.csv" 2> "$work/ncu.txt"
echo "ncu: exit $?"
python3 - "$work/raw.csv" <<'PY' | tee "$work/stalls.txt"
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]
for r in rows[2:]:
    name = r[head.index("Kernel Name")]
    got = {}
    for h, v in zip(head, r):
        if h.startswith("smsp__pcsamp_warps_issue_stalled_") and not h.endswith("_not_issued"):
            try:
                got[h.removeprefix("smsp__pcsamp_warps_issue_stalled_")] = float(v.replace(",", ""))
            except ValueError:
                pass
    total = sum(got.values()) or 1
    top = sorted(got.items(), key=lambda kv: -kv[1])[:10]
    print(name[:70])
    print("   " + "  ".join(f"{k} {100 * v / total:.0f}%" for k, v in top))
PY
