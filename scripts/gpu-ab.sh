#!/usr/bin/env bash
# The decode path of an older commit against this tree's, on one GPU
# machine in one call, interleaved (A B A B: machines of one kind differ
# by 2-7%, so arms are compared only within a call):
#
#   scripts/gpu-ab.sh prepare REV   # on the dev box: REV's dllm and shim sources
#                                   # into build/ab/old, this tree's dllm beside
#                                   # (both gzipped: two binaries exceed what a
#                                   # call carries)
#   scripts/gpu-ab.sh run           # on the GPU machine, carrying build/ab:
#                                   # builds both shims, then per round
#                                   # and context `bench decode` for each arm
#                                   # (k = COMMIT and AR), then a table of the
#                                   # medians and new/old
#
# Environment (run): CTX ("1k 8k 32k"), COMMIT (3), TOKENS (192), WARMUP
# (96), ROUNDS (2), PY (python3), E2E=1 to add the end-to-end point per
# round and arm (scripts/gpu_serve_bench.py --e2e-only: serve.sh with each
# arm's defaults, 16,000 tokens at 3 a step after a 100-token prompt).
# Results in $OUT/ab.jsonl when OUT is set.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OLD=build/ab/old
case "${1:-}" in
prepare)
	rev=${2:?usage: $0 prepare REV}
	wt=$(mktemp -d /tmp/dllm-ab-XXXXXX)
	git worktree add --detach -q "$wt" "$rev"
	trap 'git worktree remove --force "$wt"' EXIT
	rm -rf "$OLD" && mkdir -p "$OLD/torch" "$OLD/scripts"
	(cd "$wt" && go build -ldflags "-s -w" -o "$OLDPWD/$OLD/dllm" ./cmd/dllm)
	go build -ldflags "-s -w" -o build/ab/dllm ./cmd/dllm
	gzip -f "$OLD/dllm" build/ab/dllm
	cp -r "$wt/torch/csrc" "$OLD/torch/"
	cp "$wt/Makefile" "$OLD/"
	cp "$wt"/scripts/*.h "$OLD/scripts/" 2>/dev/null || true
	echo "prepared $(git rev-parse --short "$rev") against this tree in build/ab ($(du -sh build/ab | cut -f1)); carry build/ab"
	;;
run)
	PY=${PY:-python3}
	TORCH=$($PY -c 'import torch,os;print(os.path.dirname(torch.__file__))')
	[ -e "$OLD/dllm.gz" ] && [ -e build/ab/dllm.gz ] || { echo "no build/ab: run '$0 prepare REV' on the dev box and carry build/ab" >&2; exit 2; }
	gunzip -c "$OLD/dllm.gz" >"$OLD/dllm" && gunzip -c build/ab/dllm.gz >bin/dllm && chmod +x "$OLD/dllm" bin/dllm
	rm -f bin/libdllmtorch.so build/*.o
	make -j8 --no-print-directory shim TORCH="$TORCH" >/dev/null
	(cd "$OLD" && rm -f bin/libdllmtorch.so build/*.o && make -j8 --no-print-directory shim TORCH="$TORCH" >/dev/null)
	RES=${OUT:-/tmp}/ab.jsonl
	: >"$RES"
	for round in $(seq "${ROUNDS:-2}"); do
		for arm in old new; do
			bin=bin/dllm lib=$PWD/bin/libdllmtorch.so
			[ "$arm" = old ] && bin=$OLD/dllm lib=$PWD/$OLD/bin/libdllmtorch.so
			for c in ${CTX:-1k 8k 32k}; do
				DLLM_TORCH_LIB=$lib timeout 300 "$bin" bench decode --config testdata/minicpm5-2b-shape/config.json \
					--device cuda --dtype bf16 --ctx "$c" --block 32 --commit "${COMMIT:-3}" --ar \
					--tokens "${TOKENS:-192}" --warmup "${WARMUP:-96}" --json |
					sed "s|^{|{\"arm\":\"$arm\",\"round\":$round,|" >>"$RES"
			done
		done
	done
	if [ "${E2E:-0}" = 1 ]; then
		# serve.sh runs bin/dllm and bin/libdllmtorch.so: each arm's in turn.
		cp bin/dllm /tmp/ab-new-dllm && cp bin/libdllmtorch.so /tmp/ab-new-shim.so
		for round in $(seq "${ROUNDS:-2}"); do
			for arm in old new; do
				if [ "$arm" = old ]; then
					cp "$OLD/dllm" bin/dllm && cp "$OLD/bin/libdllmtorch.so" bin/libdllmtorch.so
				else
					cp /tmp/ab-new-dllm bin/dllm && cp /tmp/ab-new-shim.so bin/libdllmtorch.so
				fi
				timeout 300 $PY scripts/gpu_serve_bench.py --e2e-only --e2e-prompt 100 --e2e-tokens 16000 2>&1 |
					$PY -c "import re, sys
for l in sys.stdin:
    m = re.search(r'bench --server: .*?([0-9.]+)\s+\(medians', l)
    if m: print('{\"arm\":\"$arm\",\"round\":$round,\"context\":\"e2e 16k\",\"mode\":\"tok/s\",\"step_median_ms\":' + m.group(1) + '}')" >>"$RES"
			done
		done
		cp /tmp/ab-new-dllm bin/dllm && cp /tmp/ab-new-shim.so bin/libdllmtorch.so
	fi
	$PY - "$RES" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
pts = {}
for r in rows:
    pts.setdefault((str(r["context"]), r["mode"]), {}).setdefault(r["arm"], []).append(r["step_median_ms"])
print(f"{'ctx':>7} {'mode':>8} {'old':>14} {'new':>14} {'new/old':>8}   (ms a step; the e2e row tok/s)")
for (ctx, mode), arms in sorted(pts.items()):
    o, n = statistics.median(arms.get("old", [0])), statistics.median(arms.get("new", [0]))
    f = lambda v: "/".join(f"{x:.2f}" for x in v)
    print(f"{ctx:>7} {mode:>8} {f(arms.get('old', [])):>14} {f(arms.get('new', [])):>14} {n / o if o else 0:8.3f}")
PYEOF
	;;
*)
	echo "usage: $0 prepare REV | run" >&2
	exit 2
	;;
esac
