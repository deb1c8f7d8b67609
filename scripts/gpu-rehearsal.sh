#!/usr/bin/env bash
# On the GPU machine: the shape-level rehearsal of the MiniCPM5-2B recipe
# (docs/recipe.md, "Shape-level rehearsal on the GPU"). Every stage of
# scripts/minicpm5-2b.sh at the real model's shape, with the tiny corpus and
# budgets, in ~5 minutes on one H200:
#   1. builds the shim against the installed PyTorch wheel (make shim TORCH=...);
#   2. makes random bf16 weights of MiniCPM5-2B's shape with transformers, as
#      scripts/gpu_serve_bench.py does (tiny-llama's tokenizer, so the mask
#      token takes padded row 500), in out/minicpm5-2b-shape-random (kept:
#      a rerun reuses them);
#   3. runs scripts/minicpm5-2b.sh --rehearsal --from that --fresh --no-serve
#      (out/rehearsal-gpu; at the peak ~46 GB of disk beside the 5 GB of
#      weights: it checks before it starts);
#   4. prints a table last: wall time and throughput per stage, and the full
#      recipe's cost projected from the measured rates (training,
#      checkpoints, distillation with the local teacher, eval).
# The full logs stay in out/rehearsal-gpu-logs/; only a summary is printed.
# The first failure stops it, naming the stage, with the end of its log.
#
# Usage: scripts/gpu-rehearsal.sh [--resume] [minicpm5-2b.sh options...]
#   --resume   continue an interrupted rehearsal instead of starting afresh
#              (done stages are skipped; the weights are always reused)
# Expects bin/dllm built on the CPU machine, python3 with torch and
# transformers, g++ (and nvcc for the decoder's kernels).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
T0=$(date +%s)
say() { echo "gpu-rehearsal: $*"; }
die() {
	say "FAILED: $*"
	exit 1
}
FRESH=(--fresh)
PASS=()
for a in "$@"; do
	case "$a" in
	--resume) FRESH=() ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) PASS+=("$a") ;;
	esac
done
WEIGHTS=out/minicpm5-2b-shape-random
OUT=out/rehearsal-gpu
LOGS=out/rehearsal-gpu-logs
mkdir -p "$LOGS"
[ -x bin/dllm ] || die "bin/dllm is missing: build it on the CPU machine (make dllm) and bring it here"
gpu=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -n 1) || true
[ -n "$gpu" ] || die "nvidia-smi sees no GPU"
TORCH=$($PY -c 'import torch,os;print(os.path.dirname(torch.__file__))') || die "$PY cannot import torch"
vers=$($PY -c 'import torch,transformers;print("torch", torch.__version__, "transformers", transformers.__version__)') ||
	die "$PY cannot import transformers"
say "$gpu; $vers; $(df -h . | awk 'NR == 2 {print $4 " free on " $6}')"

# 1. The shim. A carried CPU build would look up to date to make.
t=$(date +%s)
ver=$(bin/dllm version 2>&1) || true
grep -q '^cuda: [1-9]' <<<"$ver" || rm -f bin/libdllmtorch.so
say "1/4 make shim TORCH=$TORCH (~20 s-2 min)"
make -j8 --no-print-directory shim TORCH="$TORCH" >"$LOGS/shim.log" 2>&1 || {
	tail -n 30 "$LOGS/shim.log"
	die "make shim (log: $LOGS/shim.log)"
}
ver=$(bin/dllm version 2>&1) || true
grep -q '^cuda: [1-9]' <<<"$ver" || {
	echo "$ver"
	die "the shim was built but libtorch sees no GPU"
}
SHIM_S=$(($(date +%s) - t))
say "    $(grep '^cuda:' <<<"$ver"); $SHIM_S s"

# 2. Random weights of the shape, written beside the work directory (the
# same disk, so convert hard-links them) and renamed into place when whole.
t=$(date +%s)
if [ -f "$WEIGHTS/config.json" ]; then
	say "2/4 random weights: $WEIGHTS exists, reused"
else
	say "2/4 random bf16 weights of testdata/minicpm5-2b-shape with transformers -> $WEIGHTS (~30 s)"
	rm -rf "$WEIGHTS.tmp"
	$PY - "$WEIGHTS.tmp" >"$LOGS/weights.log" 2>&1 <<'EOF' || {
import shutil, sys
import torch
from transformers import AutoConfig, LlamaForCausalLM
out = sys.argv[1]
cfg = AutoConfig.from_pretrained("testdata/minicpm5-2b-shape/config.json")
torch.manual_seed(0)
with torch.device("cuda"):
    m = LlamaForCausalLM(cfg).to(torch.bfloat16)
m.save_pretrained(out, safe_serialization=True)
for f in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(f"testdata/tiny-llama/{f}", out)
print("parameters", sum(p.numel() for p in m.parameters()))
EOF
		tail -n 20 "$LOGS/weights.log"
		die "making the random weights (log: $LOGS/weights.log)"
	}
	mv "$WEIGHTS.tmp" "$WEIGHTS"
fi
WEIGHTS_S=$(($(date +%s) - t))
say "    $(du -sh "$WEIGHTS" | cut -f1) in $WEIGHTS_S s"

# 3. The recipe. Everything goes to the log; the terminal gets the script's
# own lines (plan, stages, expected and actual durations) and each stage's
# result line.
say "3/4 scripts/minicpm5-2b.sh --rehearsal --from $WEIGHTS ${FRESH[*]} --no-serve ${PASS[*]} (~5 min; log: $LOGS/rehearsal.log)"
# awk flushes every line: what a killed run printed is not lost in a buffer.
KEEP='^minicpm5-2b: |^dllm: |^train: (throughput|done)|^distill: [0-9]+/[0-9]+ done|completion tokens in|^data: done|^ +all +[0-9]|requests in .* tokens/s overall|^wrote .* in [0-9.]+s|^exported|[Ee]rror|panic|[Ff]ailed|FAIL|not finite|out of memory|No space'
set +e
scripts/minicpm5-2b.sh --rehearsal --from "$WEIGHTS" ${FRESH[@]+"${FRESH[@]}"} --no-serve ${PASS[@]+"${PASS[@]}"} 2>&1 |
	tee "$LOGS/rehearsal.log" | awk -v keep="$KEEP" '$0 ~ keep { print substr($0, 1, 240); fflush() }'
rc=${PIPESTATUS[0]}
set -e
REHEARSAL_S=$(($(date +%s) - T0 - SHIM_S - WEIGHTS_S))

# 4. The table, also after a failure (the stages that ran).
$PY - "$LOGS/rehearsal.log" "$OUT" "$rc" "$SHIM_S" "$WEIGHTS_S" "$REHEARSAL_S" "$gpu" <<'EOF' || say "(the table failed: see $LOGS/rehearsal.log)"
import glob, json, os, re, sys
from datetime import datetime

log, out, rc, shim_s, weights_s, reh_s, gpu = sys.argv[1], sys.argv[2], int(sys.argv[3]), *map(int, sys.argv[4:7]), sys.argv[7]
lines = open(log, errors="replace").read().splitlines()
# Split the log at the stage headers: "minicpm5-2b: == [N/8] title".
stages, cur = [], None
for l in lines:
    m = re.match(r"minicpm5-2b: == \[(\d)/8\] (.*)", l)
    if m:
        cur = {"n": int(m.group(1)), "title": m.group(2), "lines": []}
        stages.append(cur)
    elif cur:
        cur["lines"].append(l)
names = {1: "convert", 2: "distill", 3: "prepare", 4: "train 1", 5: "train 2", 6: "export", 7: "eval", 8: "serve"}


def wall(st):
    for l in st["lines"]:
        m = re.search(r"^minicpm5-2b:\s+\S+ took (\d+) s", l)
        if m:
            return int(m.group(1))
        if "done already" in l:
            return "skipped"
    return None


def find(st, pat, all_=False):
    r = [m for m in (re.search(pat, l) for l in st["lines"]) if m]
    return r if all_ else (r[-1] if r else None)


def size_gb(pattern):
    fs = glob.glob(pattern)
    return sum(os.path.getsize(f) for f in fs) / 1e9 if fs else 0


def ts(s):
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def train_row(st, run):
    p = os.path.join(out, run, "metrics.jsonl")
    if not os.path.exists(p):
        return "no metrics.jsonl", "", None
    recs = {}
    for l in open(p):
        r = json.loads(l)
        recs[r["step"]] = r  # a resumed run's later line of a step wins
    recs = [recs[k] for k in sorted(recs)]
    if not recs:
        return "no step logged", "", None
    seq = recs[0]["tokens"] // recs[0]["step"]  # tokens a step
    steady = recs[1:] or recs
    tps = sum(r["tok_s"] for r in steady) / len(steady)
    mfu = [r["mfu"] for r in steady if r.get("mfu") is not None]
    step_s = sum(seq / r["tok_s"] for r in recs)
    peak = find(st, r"peak GPU memory ([\d.]+) GB")
    ev = find(st, r"eval loss ([\d.]+)")
    thr = f"{tps:,.0f} tokens/s" + (f", MFU {100 * sum(mfu) / len(mfu):.1f}%" if mfu else "") + \
        (f", peak {peak.group(1)} GB" if peak else "")
    per = " ".join(f"{r['tok_s'] / 1e3:.2f}k" for r in recs)
    note = f"{len(recs)} steps x {seq} tokens, {step_s:.0f} s in steps (first {seq / recs[0]['tok_s']:.1f} s); tokens/s per step: {per}"
    # After the last step: eval, checkpoint and export, from the files'
    # times (stage 1's checkpoint is gone by now: the two together).
    last = ts(recs[-1]["time"])
    ck = sorted(glob.glob(os.path.join(out, run, "checkpoints", "step-*", "manifest.json")))
    exp = sorted(glob.glob(os.path.join(out, run, "model-step-*", "dllm.json")))
    if ck and exp:
        ckpt_s[run] = os.path.getmtime(ck[-1]) - last
        note += f"; after the last step: eval + checkpoint {ckpt_s[run]:.0f} s, export {os.path.getmtime(exp[-1]) - os.path.getmtime(ck[-1]):.0f} s"
    elif exp:
        note += f"; after the last step: eval + checkpoint + export {os.path.getmtime(exp[-1]) - last:.0f} s"
    loss = f"; loss {recs[0]['loss']:.2f} -> {recs[-1]['loss']:.2f}" + (f", eval {ev.group(1)}" if ev else "")
    return thr, note + loss, tps


rows, rates, ckpt_s, distill_tps, eval_tps = [], {}, {}, 0, []
for st in stages:
    n, w = st["n"], wall(st)
    if n == 8:
        continue
    thr, note = "", ""
    if n == 1:
        t = [m.group(1) for m in find(st, r"^wrote .* in ([\d.]+)s", True)]
        inp = find(st, r"([\d.]+ [kMG]B) in \d+ file")
        thr = f"{inp.group(1) if inp else '?'} each" if t else ""
        note = f"2 conversions in {' s, '.join(t)} s (hard links + sha256)" if t else ""
    elif n == 2:
        d = find(st, r"(\d+) completion tokens in (\S+)")
        p = find(st, r"done .*, ([\d.]+) tok/s")
        thr = f"{p.group(1)} tok/s" if p else ""
        distill_tps = float(p.group(1)) if p else 0
        note = f"{d.group(1)} tokens in {d.group(2)}, local AR teacher (dllm serve, blocks of 1)" if d else ""
    elif n == 3:
        ws = [m.group(1) for m in find(st, r"^data: .* tokens written \(([^)]*tok/s)\)", True)]
        dn = [f"{m.group(1)} x {m.group(2)} tokens" for m in find(st, r"^data: done: .* (\d+) sequences of (\d+) tokens", True)]
        thr = ", ".join(ws)
        note = "stage 1: " + ", stage 2: ".join(dn) if dn else ""
    elif n in (4, 5):
        thr, note, r = train_row(st, "minicpm5-2b-block" if n == 4 else "minicpm5-2b-sft")
        if r:
            rates[n] = r
    elif n == 6:
        g = size_gb(os.path.join(out, "minicpm5-2b-final", "*.safetensors"))
        thr = f"{g:.1f} GB written" + (f", {g / w:.2f} GB/s" if isinstance(w, int) and w > 0 else "")
        note = "float32 masters of the checkpoint -> bf16"
    elif n == 7:
        o = [m.group(1) for m in find(st, r"requests in .*, ([\d.]+) completion tokens/s overall", True)]
        tpf = [l.split()[6] for l in st["lines"] if re.match(r"^\s+all\s+\d", l)]
        thr = "; ".join(f"{k} {a} tok/s, TPF {b}" for k, a, b in zip(("AR", "diffusion"), o, tpf))
        eval_tps = [float(x) for x in o]
        note = "1 item per task, 32 tokens at most, temperature 0"
    rows.append((names[n], "" if w is None else w, thr, note))

print()
print(f"== GPU shape-level rehearsal ({gpu}): {'PASSED' if rc == 0 else 'FAILED (exit %d)' % rc}")
print(f"shim {shim_s} s, random weights {weights_s} s, recipe {reh_s} s; log {log}")
print("| stage | wall s | throughput | notes |")
print("|---|---|---|---|")
for r in rows:
    print("| " + " | ".join(str(x) for x in r) + " |")
total = sum(r[1] for r in rows if isinstance(r[1], int))
print(f"| all | {total} | | the script's stages (plus shim and weights above) |")
if 4 in rates and 5 in rates:
    r1, r2 = rates[4], rates[5]
    h1, h2 = 16000 * 65536 / r1 / 3600, 3000 * 65536 / r2 / 3600
    print(f"\nprojected full recipe at these rates (1 sequence a step; the presets accumulate 16 and 8, a few % faster):")
    print(f"  stage 1: 1,048,576,000 tokens / {r1:,.0f} tok/s = {h1:.0f} h; stage 2: 196,608,000 / {r2:,.0f} = {h2:.0f} h;"
          f" both {h1 + h2:.0f} h = {(h1 + h2) / 24:.1f} days (scripts/minicpm5-2b.sh assumes 4,700 and 3,619: 77 h)")
    print(f"  stage 2 / stage 1 tokens/s: {r2 / r1:.2f} (the script uses 0.77, measured with the presets' settings);"
          f" pass --train-tps {r1:.0f} to scripts/minicpm5-2b.sh")
    if ckpt_s:
        c = max(ckpt_s.values())
        print(f"  checkpoints: 32 in stage 1 (every 500 steps) + 12 in stage 2 (every 250) x {c:.0f} s = {44 * c / 60:.0f} min more")
if distill_tps > 0:
    # The recipe's N = (0.15 D1 + 0.6 D2) / 3,000 = 91,750 prompts x ~3,000 tokens.
    print(f"  distill, 275M tokens: {275e6 / distill_tps / 86400:.0f} days at the local teacher's {distill_tps:.0f} tok/s"
          f" (one stream; a batched vLLM/SGLang teacher, assumed 20,000 tok/s: 3.8 h)")
if len(eval_tps) == 2 and min(eval_tps) > 0:
    # The recipe's eval: 4 tasks x 10 items x ~1,024 tokens per model.
    print(f"  eval, 2 x 40,960 tokens: {(40960 / eval_tps[0] + 40960 / eval_tps[1]) / 60:.0f} min at these rates")
if rc != 0:
    failed = stages[-1] if stages else None
    print(f"\nFAILED in {'[%d/8] %s' % (failed['n'], failed['title']) if failed else 'the start (before stage 1)'}; the end of its log:")
    tail = (failed["lines"] if failed else lines)[-25:]
    print("\n".join(l[:200] for l in tail))
EOF
if [ "$rc" != 0 ]; then
	die "scripts/minicpm5-2b.sh exited with $rc (full log: $LOGS/rehearsal.log)"
fi
say "done in $(($(date +%s) - T0)) s"
