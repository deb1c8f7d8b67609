"""Per-kernel summary of a kernel trace (probes/gpu-timeline.sh: lines of
"start end name", nanoseconds):
for the last TAIL fraction of the run's kernels, in order of start, each
kernel's duration and what it added to the GPU's busy span (its end minus
the latest end before it, floored at 0), summed per kernel name, with the
idle gaps between kernels as one more row, split into gaps of 20 us or
more (between forwards: the host's part of a step, the graph launch, which
the tracing itself lengthens by ~0.4 ms) and shorter ones, those charged to
the kernel that ends them (its "idle us" a call). Then the forwards (runs
of kernels between gaps of 20 us or more) by their kernel count, which
tells a block step from a fused commit: each kind's GPU span (first
start to last end, median) and how many ran, and for each kind what each
kernel adds to its span. Then, for each pair of
kernels that follow one another often, when the second starts (its first
CTA) after the first starts and before it ends (medians): where a kernel
that launches early (PDL) only starts once the one before drains, its
CTAs found no room beside that kernel's.

    python3 probes/gpu_timeline_summary.py trace.txt [TAIL]
"""
import re
import sys
from collections import defaultdict

tail = float(sys.argv[2]) if len(sys.argv) > 2 else 0.3
rows = []
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split(" ", 2)
    if len(f) < 3 or not (f[0].isdigit() and f[1].isdigit()):
        continue  # a record cut short when the process ended
    rows.append((int(f[0]), int(f[1]), f[2]))
rows.sort()
rows = rows[int(len(rows) * (1 - tail)):]


def short(name):
    name = re.sub(r"^void ", "", name.replace("(anonymous namespace)::", ""))
    name = re.sub(r"\(.*$", "", name)  # parameters
    m = re.match(r"([\w:]+)(<.*>)?", name)
    if not m:
        return name[:48]
    base = m.group(1)
    tmpl = m.group(2) or ""
    if base.startswith("tgemm"):  # kernels.cu's GEMMs: the shape is in the template
        return base + tmpl[:24]
    if base.startswith("nvjet") or "gemm" in base.lower() or "sm90" in base:
        return "cublas:" + base[:40]
    if base in ("gemv_kernel",):  # its variant (prologue, K) matters
        return base + re.sub(r"__nv_bfloat16|__half", "T", tmpl)[:24]
    return base[:48]


added, dur, count, before = defaultdict(float), defaultdict(float), defaultdict(int), defaultdict(float)
idle = long_idle = 0.0
last_end = rows[0][0] if rows else 0
for start, end, name in rows:
    n = short(name)
    if start > last_end:
        idle += start - last_end
        if start - last_end >= 20_000:
            long_idle += start - last_end
        else:
            before[n] += start - last_end
    added[n] += max(0, end - max(start, last_end))
    dur[n] += end - start
    count[n] += 1
    last_end = max(last_end, end)
span = rows[-1][1] - rows[0][0] if rows else 0
print(f"{len(rows)} kernels over {span / 1e6:.2f} ms (idle between kernels {idle / 1e6:.2f} ms, "
      f"{long_idle / 1e6:.2f} of it in gaps of 20 us or more)")
print(f"{'kernel':50} {'calls':>6} {'mean us':>8} {'added us':>9} {'idle us':>8} {'added %':>8}")
for n in sorted(added, key=lambda n: -added[n]):
    print(f"{n:50} {count[n]:6d} {dur[n] / count[n] / 1e3:8.2f} {added[n] / count[n] / 1e3:9.2f} "
          f"{before[n] / count[n] / 1e3:8.2f} {100 * added[n] / span:8.1f}")
print(f"{'(idle, gaps under 20 us)':50} {'':6} {'':8} {'':9} {'':8} {100 * (idle - long_idle) / span:8.1f}")
print(f"{'(idle, gaps of 20 us or more)':50} {'':6} {'':8} {'':9} {'':8} {100 * long_idle / span:8.1f}")

pairs = defaultdict(list)
for (s0, e0, n0), (s1, _, n1) in zip(rows, rows[1:]):
    pairs[(short(n0), short(n1))].append((s1 - s0, e0 - s1))
print(f"\n{'kernel':40} {'after':40} {'pairs':>6} {'start+us':>9} {'end-us':>7}")
for (a, b), v in sorted(pairs.items(), key=lambda kv: -len(kv[1])):
    if len(v) < max(10, len(rows) // 100):
        continue
    med = lambda xs: sorted(xs)[len(xs) // 2] / 1e3
    print(f"{b[:40]:40} {a[:40]:40} {len(v):6d} {med([x for x, _ in v]):9.2f} {med([y for _, y in v]):7.2f}")

# Forwards: runs of kernels split at gaps of 20 us or more, by kernel count.
spans = defaultdict(list)
run, run_end = [], None
for start, end, name in rows + [(None, None, None)]:
    if run and (start is None or start - run_end >= 20_000):
        spans[len(run)].append((run_end - run[0]) / 1e3)
        run = []
    if start is None:
        break
    run.append(start)
    run_end = end if run_end is None or len(run) == 1 else max(run_end, end)
print(f"\n{'forward (kernels)':20} {'runs':>6} {'span us (median)':>17}")
for k in sorted(spans):
    v = sorted(spans[k])
    if k >= 10:
        print(f"{k:20d} {len(v):6d} {v[len(v) // 2]:17.1f}")

# Each kind of forward (kernel count) with at least 3 runs: what each kernel
# adds to its span, per forward (the whole-run table above mixes the kinds).
runs = defaultdict(list)
run = []
for row in rows + [(None, None, None)]:
    if run and (row[0] is None or row[0] - max(e for _, e, _ in run) >= 20_000):
        runs[len(run)].append(run)
        run = []
    if row[0] is None:
        break
    run.append(row)
for k in sorted(runs):
    if k < 100 or len(runs[k]) < 3:
        continue
    add = defaultdict(float)
    for r in runs[k]:
        end = r[0][0]
        for start, e, name in r:
            add[short(name)] += max(0, e - max(start, end))
            end = max(end, e)
    print(f"\nforward of {k} kernels ({len(runs[k])} runs): added us a forward, by kernel")
    for n in sorted(add, key=lambda n: -add[n])[:14]:
        print(f"  {n:50} {add[n] / len(runs[k]) / 1e3:9.1f}")
