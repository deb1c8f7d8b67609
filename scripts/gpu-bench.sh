#!/usr/bin/env bash
# On the GPU machine: build the CUDA shim against the installed PyTorch wheel,
# then measure the decode loop (`dllm bench decode`) on random bf16 weights of
# MiniCPM5-2B's shape: k = 1, 2, 4, 8 tokens committed per denoising forward
# in blocks of 32, and AR (block 1), over KV caches of 1k, 8k, 16k and 32k
# tokens. Prints the points as JSON lines while it runs and a table last;
# the JSON lines are also written to $OUT/bench-decode.jsonl when $OUT is set.
#
# Usage: scripts/gpu-bench.sh   (expects bin/dllm built on the CPU machine)
# Environment:
#   CTX="1k 8k 16k 32k"  contexts, one bench process each, so one that fails
#                        or times out keeps the others' points
#   TOKENS=512           timed tokens per point
#   COMMIT=1,2,4,8       tokens committed per denoising forward (--commit)
#   BANDWIDTH=4300       GB/s for the floor (H200 copy as measured; H100: 3350)
#   TIMEOUT=0            seconds per context (0: none), for a limited device
#   KEEP_SHIM=1          reuse bin/libdllmtorch.so instead of rebuilding it
set -uo pipefail
cd "$(dirname "$0")/.."
CTX=${CTX:-"1k 8k 16k 32k"}
TOKENS=${TOKENS:-512}
COMMIT=${COMMIT:-1,2,4,8}
BANDWIDTH=${BANDWIDTH:-4300}
TIMEOUT=${TIMEOUT:-0}
PY=${PY:-python3}
RESULTS=${OUT:-/tmp}/bench-decode.jsonl
: > "$RESULTS"

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
if [ "${KEEP_SHIM:-0}" = 1 ] && [ -e bin/libdllmtorch.so ]; then
	echo "shim: keeping bin/libdllmtorch.so"
else
	TORCH=$($PY -c 'import torch,os;print(os.path.dirname(torch.__file__))') || exit 1
	echo "torch wheel: $TORCH"
	t0=$(date +%s%N)
	rm -f bin/libdllmtorch.so
	make -j8 --no-print-directory shim TORCH="$TORCH" || exit 1
	echo "shim build: $(( ($(date +%s%N) - t0) / 1000000 )) ms"
	# Brought back so that a later call can skip the build (KEEP_SHIM=1).
	[ -n "${OUT:-}" ] && cp bin/libdllmtorch.so "$OUT/"
fi
bin/dllm version --smoke --device cuda || exit 1

failed=0
for c in $CTX; do
	echo "== context $c"
	t0=$(date +%s)
	# One process per context: prefill at 32k is the slow part, and a crash
	# or a timeout loses only that context.
	timeout "$TIMEOUT" bin/dllm bench decode --config testdata/minicpm5-2b-shape/config.json \
		--device cuda --dtype bf16 --ctx "$c" --block 32 --commit "$COMMIT" --ar \
		--tokens "$TOKENS" --bandwidth-gbs "$BANDWIDTH" --json | tee -a "$RESULTS"
	rc=${PIPESTATUS[0]}
	echo "== context $c: exit $rc after $(( $(date +%s) - t0 )) s"
	[ "$rc" = 0 ] || failed=1
done

$PY - "$RESULTS" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print()
print("MiniCPM5-2B shape, random bf16 weights, block 32 (AR: 1); step = block wall time / forwards")
print(f"{'context':>8} {'mode':<8} {'TPF':>5} {'step ms':>8} {'p90 ms':>7} {'tok/s':>8} {'host ms':>7} {'floor ms':>8} {'x floor':>7} {'prefill s':>9}")
for r in rows:
    print(f"{r['context']:>8} {r['mode']:<8} {r['tpf']:>5.2f} {r['step_median_ms']:>8.2f} {r['step_p90_ms']:>7.2f} "
          f"{r['tokens_per_s']:>8.1f} {r.get('host_ms', 0):>7.2f} {r['floor_ms']:>8.3f} {r['vs_floor']:>7.1f} {r['prefill_ms'] / 1000:>9.2f}")
PYEOF
exit $failed
