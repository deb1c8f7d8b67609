#!/usr/bin/env bash
# The conversion proxy over seeds (docs/proxy.md, "Statistics"): every
# score a mean over teacher seeds x diffusion seeds with its spread, the
# threshold chosen on the dev split and scored once on the held-out split.
#
#   1. for each teacher seed, scripts/proxy.sh trains a teacher (and its
#      data), then for each diffusion seed a diffusion model from it; each
#      model is scored on the dev split at every threshold of THRESHOLDS;
#   2. the threshold: the one whose mean dev score over all runs is highest
#      among those whose mean TPF reaches MIN_TPF (else the fastest);
#   3. every model is scored on the held-out split at that threshold, and
#      `dllm eval summary` prints the means and spreads.
#
# Usage: [SIZE=cpu|gpu] [TASKS=v2] [SEEDS="0 1 2"] [DIFF_SEEDS="1 2"] scripts/proxy-seeds.sh
# Environment (and scripts/proxy.sh's: TEACHER_SET, DIFF_SET, TRAIN, ...):
#   SEEDS            teacher seeds (0 1 2)
#   DIFF_SEEDS       diffusion seeds per teacher (1 2)
#   THRESHOLDS       thresholds tried on dev (0.9 0.95 0.97 0.99)
#   MIN_TPF          the TPF the chosen threshold must reach on dev
#                    (2.5 with SIZE=gpu, else 2)
#   SEEDS_OUT        work directory (out/proxy-seeds[-gpu]); results in
#                    SEEDS_OUT/results, the table in SEEDS_OUT/summary.txt
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
SIZE=${SIZE:-cpu}
export SIZE TASKS=${TASKS:-v2}
SEEDS=${SEEDS:-0 1 2}
DIFF_SEEDS=${DIFF_SEEDS:-1 2}
THRESHOLDS=${THRESHOLDS:-0.9 0.95 0.97 0.99}
MIN_TPF=${MIN_TPF:-$([ "$SIZE" = gpu ] && echo 2.5 || echo 2)}
BASE=${SEEDS_OUT:-out/proxy-seeds$([ "$SIZE" = gpu ] && echo -gpu)}
RES=$BASE/results
BIN=bin/dllm
say() { echo "proxy-seeds: $*" >&2; }
[ "$TASKS" = v2 ] || { say "TASKS must be v2: the dev split is v2's"; exit 2; }
rm -rf "$BASE"
mkdir -p "$RES"

# 1. Teachers, diffusion models, dev scores.
for s in $SEEDS; do
	keep=0
	for d in $DIFF_SEEDS; do
		say "teacher seed $s, diffusion seed $d"
		KEEP=$keep PROXY_OUT=$BASE/t$s DIFF_RUN=diffusion-d$d EVAL_ON=dev THRESHOLD="$THRESHOLDS" \
			TEACHER_SET="seed=$s ${TEACHER_SET:-}" DIFF_SET="seed=$d ${DIFF_SET:-}" scripts/proxy.sh >"$BASE/t$s-d$d.log" 2>&1 ||
			{ tail -n 30 "$BASE/t$s-d$d.log" >&2; say "the run of teacher seed $s, diffusion seed $d failed (log: $BASE/t$s-d$d.log)"; exit 1; }
		for th in $THRESHOLDS; do
			cp "$BASE/t$s/diffusion-dev-$th.json" "$RES/dev-$th-t$s-d$d.json"
		done
		keep=1
	done
	cp "$BASE/t$s/teacher-dev.json" "$RES/teacher-dev-t$s.json"
done

# 2. The threshold, on dev alone.
best= bestscore= fastest= fastest_tpf=
{
	echo "dev split, $(wc -w <<<"$SEEDS") teacher seeds x $(wc -w <<<"$DIFF_SEEDS") diffusion seeds:"
	echo "threshold  mean-normalised  sd  TPF  worst-task"
} | tee "$BASE/summary.txt"
for th in $THRESHOLDS; do
	read -r mean sd tpf worst _ < <("$BIN" eval summary --brief "$RES"/dev-"$th"-*.json)
	echo "$th  $mean  $sd  $tpf  $worst" | tee -a "$BASE/summary.txt"
	if awk -v t="$tpf" -v m="$MIN_TPF" 'BEGIN { exit !(t >= m) }' &&
		{ [ -z "$best" ] || awk -v a="$mean" -v b="$bestscore" 'BEGIN { exit !(a > b) }'; }; then
		best=$th bestscore=$mean
	fi
	if [ -z "$fastest" ] || awk -v a="$tpf" -v b="$fastest_tpf" 'BEGIN { exit !(a > b) }'; then
		fastest=$th fastest_tpf=$tpf
	fi
done
if [ -z "$best" ]; then
	say "no threshold reaches TPF $MIN_TPF on dev; taking the fastest, $fastest"
	best=$fastest
fi
echo "chosen on dev: threshold $best (the best mean score with TPF >= $MIN_TPF)" | tee -a "$BASE/summary.txt"

# 3. Held-out, at that threshold only.
for s in $SEEDS; do
	for d in $DIFF_SEEDS; do
		KEEP=2 PROXY_OUT=$BASE/t$s DIFF_RUN=diffusion-d$d EVAL_ON=heldout THRESHOLD="$best" \
			scripts/proxy.sh >>"$BASE/t$s-d$d.log" 2>&1 ||
			{ tail -n 30 "$BASE/t$s-d$d.log" >&2; say "the held-out eval of teacher seed $s, diffusion seed $d failed"; exit 1; }
		cp "$BASE/t$s/diffusion-heldout.json" "$RES/heldout-t$s-d$d.json"
	done
	cp "$BASE/t$s/teacher-heldout.json" "$RES/teacher-heldout-t$s.json"
done
{
	echo
	echo "teachers (AR decoding) on the held-out split:"
	"$BIN" eval summary "$RES"/teacher-heldout-t*.json
	echo
	echo "diffusion models on the held-out split at threshold $best:"
	"$BIN" eval summary "$RES"/heldout-t*-d*.json
} | tee -a "$BASE/summary.txt"
