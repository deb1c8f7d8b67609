"""Summarise an Nsight Compute CSV (ncu --csv --metrics gpu__time_duration.sum)
of a decode run: GPU time per kernel kind, summed and per call, so a step's
time can be split into matmuls, attention and the small kernels. Used by
probes/gpu-profile.sh.

    python3 probes/gpu_ncu_summary.py ncu.csv [forwards]
"""
import csv
import sys
from collections import defaultdict

rows = list(csv.DictReader(l for l in open(sys.argv[1]) if l.startswith('"')))
fw = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
tot, cnt = defaultdict(float), defaultdict(int)
for r in rows:
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    v = float(r["Metric Value"].replace(",", ""))
    unit = r.get("Metric Unit", "nsecond")
    v *= {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}.get(unit, 1e-3)
    name = r["Kernel Name"][:90]
    tot[name] += v
    cnt[name] += 1
all_us = sum(tot.values())
print(f"{len(rows)} kernels, {all_us:.0f} us of kernel time; per forward ({fw:g} forwards): {all_us / fw:.0f} us")
for name in sorted(tot, key=lambda n: -tot[n]):
    print(f"{tot[name] / fw:9.1f} us/fwd {cnt[name] / fw:7.1f} calls/fwd {tot[name] / cnt[name]:7.2f} us/call  {name}")
