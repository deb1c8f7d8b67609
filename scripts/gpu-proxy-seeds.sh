#!/usr/bin/env bash
# The GPU-size proxy over seeds (scripts/proxy-seeds.sh, docs/proxy.md) in
# parts that each fit one 10-minute call of a lent GPU machine, run back to
# back on the same machine (each reuses the last one's out/):
#
#   scripts/gpu-proxy-seeds.sh a   # the shim, 3 teachers (at once), scored
#   scripts/gpu-proxy-seeds.sh b   # 12 diffusion models (20% and 5%), dev scores
#   scripts/gpu-proxy-seeds.sh c   # sampler modes on dev, then held-out scores
#
# bin/dllm is built on the dev box and carried; the shim is built here.
# Tables and results are copied to $OUT when it is set.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export SIZE=gpu TASKS=v2 SEEDS_OUT=out/seeds-gpu SEEDS="0 1 2" DIFF_SEEDS="1 2" BUDGETS="20 5"
MODES_C=${MODES_C:-verify={\"verify\":true} cap2={\"max_commit\":2}}
T0=$(date +%s)
left() { echo $((570 - ($(date +%s) - T0))); }
save() {
	[ -n "${OUT:-}" ] || return 0
	mkdir -p "$OUT/results"
	cp "$SEEDS_OUT"/summary.txt "$OUT/" 2>/dev/null || true
	cp "$SEEDS_OUT"/results/*.json "$OUT/results/" 2>/dev/null || true
	grep -h "proxy-seeds: [a-z]*: [0-9]* s" "$SEEDS_OUT"/*.out >"$OUT/stages.txt" 2>/dev/null || true
}
trap save EXIT
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
bin/dllm version 2>&1 | grep -q "^cuda: [1-9]" || scripts/gpu-smoke.sh 2>&1 | grep -E "shim build|^cuda:|smoke"
mkdir -p "$SEEDS_OUT"
case "${1:-}" in
a)
	STAGES=teachers JOBS=3 scripts/proxy-seeds.sh 2>&1 | tee "$SEEDS_OUT/a.out" | grep -v "^proxy-seeds: teacher seed"
	for s in $SEEDS; do
		bin/dllm eval summary "$SEEDS_OUT"/results/teacher-dev-t"$s".json | sed -n 1,7p
	done
	;;
b)
	STAGES=diffusion JOBS=6 scripts/proxy-seeds.sh 2>&1 | tee "$SEEDS_OUT/b1.out" | grep -v "^proxy-seeds: teacher seed"
	STAGES=dev JOBS=8 MODES=base THRESHOLDS="0.9 0.95 0.97 0.99" timeout "$(left)" scripts/proxy-seeds.sh 2>&1 | tee "$SEEDS_OUT/b2.out"
	for b in $BUDGETS; do
		for th in 0.9 0.95 0.97 0.99; do
			echo "budget $b% base $th: $(bin/dllm eval summary --brief "$SEEDS_OUT"/results/dev-b"$b"-base-"$th"-*.json)"
		done
	done
	;;
c)
	for m in $MODES_C; do
		ths="0.9 0.97"
		[[ "$m" == verify* ]] && ths="0.5 0.7 0.9"
		STAGES=dev JOBS=12 BUDGETS=20 MODES="$m" THRESHOLDS="$ths" timeout "$(left)" scripts/proxy-seeds.sh 2>&1 | tee -a "$SEEDS_OUT/c1.out"
	done
	STAGES=heldout JOBS=12 MODES="base $MODES_C" timeout "$(left)" scripts/proxy-seeds.sh 2>&1 | tee "$SEEDS_OUT/c2.out" | tail -80
	;;
*)
	echo "usage: $0 a|b|c" >&2
	exit 2
	;;
esac
say_time=$(($(date +%s) - T0))
echo "part ${1} done in ${say_time} s"
