#!/usr/bin/env bash
# The conversion proxy over seeds (docs/proxy.md, "Statistics"): every
# score a mean over teacher seeds x diffusion seeds with its spread, the
# threshold chosen on the dev split and scored once on the held-out split.
#
#   1. teachers: for each teacher seed, scripts/proxy.sh makes the data and
#      trains a teacher, and scores it (AR decoding) on dev and held-out;
#      the later stages take only the teachers that pass the gate (GATE on
#      every family of the dev split): near chance a normalised score is
#      noise;
#   2. diffusion: for each teacher, budget and diffusion seed, a diffusion
#      model trained from the teacher;
#   3. dev: every diffusion model scored on the dev split at each threshold
#      of THRESHOLDS;
#   4. heldout: per budget, the threshold whose mean dev score over all runs
#      is highest among those whose mean TPF reaches MIN_TPF (else the
#      fastest); every model scored on the held-out split at that threshold
#      alone, and `dllm eval summary` prints the means and spreads.
#
# Independent runs of a stage run JOBS at a time: on a GPU the proxy's
# small models leave it mostly idle, so several share it well.
#
# Usage: [SIZE=cpu|gpu] [SEEDS="0 1 2"] [DIFF_SEEDS="1 2"] [BUDGETS="20 5"] [JOBS=N] scripts/proxy-seeds.sh
# Environment (and scripts/proxy.sh's: TEACHER_SET, DIFF_SET, TRAIN, ...):
#   SEEDS            teacher seeds (0 1 2)
#   DIFF_SEEDS       diffusion seeds per teacher (1 2)
#   BUDGETS          diffusion budgets in percent of the teacher's tokens (20)
#   THRESHOLDS       thresholds tried on dev (0.9 0.95 0.97 0.99); the
#                    heldout stage chooses among all those scored on dev
#   MODES            sampler modes, each scored at every threshold and given
#                    its own threshold on dev: NAME or NAME=JSON, the JSON
#                    (no spaces) merged into the requests, e.g.
#                    "base verify={\"verify\":true} cap2={\"max_commit\":2}" (base)
#   MIN_TPF          the TPF the chosen threshold must reach on dev
#                    (2.5 with SIZE=gpu, else 2)
#   RECIPE           a name for the diffusion recipe that DIFF_SET makes (e.g.
#                    cap with DIFF_SET=confidence_loss_weight=1): its runs and
#                    results are named with it, beside the presets' (unnamed)
#   GATE             the accuracy a teacher must reach on every family of the
#                    dev split to be converted and scored (0.9; 0 takes
#                    every teacher)
#   JOBS             runs at once (1)
#   RESUME=1         the teachers stage finishes the teachers of an earlier,
#                    stopped call (their training goes on from its checkpoint)
#   STAGES           the stages to run, of "teachers diffusion dev heldout"
#                    (all); a later stage reuses an earlier call's output
#   SEEDS_OUT        work directory (out/proxy-seeds[-gpu]); logs in it,
#                    results in SEEDS_OUT/results, the tables in
#                    SEEDS_OUT/summary.txt
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
SIZE=${SIZE:-cpu}
export SIZE TASKS=${TASKS:-v2}
SEEDS=${SEEDS:-0 1 2}
DIFF_SEEDS=${DIFF_SEEDS:-1 2}
BUDGETS=${BUDGETS:-20}
THRESHOLDS=${THRESHOLDS:-0.9 0.95 0.97 0.99}
MIN_TPF=${MIN_TPF:-$([ "$SIZE" = gpu ] && echo 2.5 || echo 2)}
JOBS=${JOBS:-1}
STAGES=${STAGES:-teachers diffusion dev heldout}
MODES=${MODES:-base}
RK=${RECIPE:+-$RECIPE}
mode_name() { echo "${1%%=*}"; }
mode_json() { [[ "$1" == *=* ]] && echo "${1#*=}" || true; }
# (|| true: under set -e a failed test in the substitution would end the script)
BASE=${SEEDS_OUT:-out/proxy-seeds$([ "$SIZE" = gpu ] && echo -gpu || true)}
RES=$BASE/results
BIN=bin/dllm
PORT0=${PORT:-18400}
say() { echo "proxy-seeds: $*" >&2; }
[ "$TASKS" = v2 ] || { say "TASKS must be v2: the dev split is v2's"; exit 2; }
has() { [[ " $STAGES " == *" $1 "* ]]; }

# job NAME VAR=VALUE...: runs scripts/proxy.sh with that environment in the
# background, at most JOBS at once, each on its own pair of ports, its log
# in BASE/NAME.log, in a process group of its own so that a failure can
# stop the rest with everything they started. jobs_wait waits for them all.
declare -A JOBNAME=()
njob=0
job() {
	local name=$1
	shift
	while [ "${#JOBNAME[@]}" -ge "$JOBS" ]; do
		reap
	done
	setsid env "$@" PORT=$((PORT0 + 2 * njob)) scripts/proxy.sh </dev/null >>"$BASE/$name.log" 2>&1 &
	JOBNAME[$!]=$name
	njob=$((njob + 1))
}
# reap waits for one job; a failed one stops them all.
reap() {
	local pid rc=0
	wait -n -p pid "${!JOBNAME[@]}" || rc=$?
	local name=${JOBNAME[$pid]}
	unset "JOBNAME[$pid]"
	if [ "$rc" != 0 ]; then
		tail -n 30 "$BASE/$name.log" >&2
		say "$name failed (log: $BASE/$name.log); stopping the other runs"
		stop_all
		wait || true
		exit 1
	fi
}
# An interrupted run stops its jobs too.
stop_all() {
	for pid in "${!JOBNAME[@]}"; do
		kill -- "-$pid" 2>/dev/null || true
	done
}
trap 'stop_all; exit 130' INT TERM
jobs_wait() {
	while [ "${#JOBNAME[@]}" -gt 0 ]; do
		reap
	done
}
# runs prints a line "TEACHER_SEED BUDGET DIFFUSION_SEED RUN" per diffusion
# model (RUN: its directory under the teacher's), and with "modes" one per
# model and sampler mode, MODE and its JSON appended.
runs() {
	local s b d m
	for s in $SEEDS; do
		for b in $BUDGETS; do
			for d in $DIFF_SEEDS; do
				if [ "${1:-}" = modes ]; then
					for m in $MODES; do
						echo "$s $b $d diffusion$RK-b$b-d$d $(mode_name "$m") $(mode_json "$m")"
					done
				else
					echo "$s $b $d diffusion$RK-b$b-d$d"
				fi
			done
		done
	done
}
stage_time() { say "$1: $(($(date +%s) - $2)) s"; }
GATE=${GATE:-0.9}
# gated prints the seeds of SEEDS whose teachers pass the gate, and says
# why each other one is left out.
gated() {
	local s kept=()
	for s in $SEEDS; do
		if [ "$GATE" = 0 ] || "$BIN" eval summary --brief --gate "$GATE" "$RES/teacher-dev-t$s.json" >/dev/null 2>"$BASE/t$s.gate"; then
			kept+=("$s")
		else
			say "teacher seed $s is left out: $(sed 's/^dllm: eval summary: //' "$BASE/t$s.gate") (GATE=0 takes it anyway)"
		fi
	done
	echo "${kept[*]}"
}

# 1. Teachers, scored on both splits (they are not tuned on either).
if has teachers; then
	t=$(date +%s)
	mkdir -p "$RES"
	# Only these seeds' teachers are made again, so that a GPU call can
	# train some teachers and the next one the rest; with RESUME=1 they go
	# on from where a stopped call left them.
	for s in $SEEDS; do
		keep=1
		if [ "${RESUME:-0}" = 0 ]; then
			rm -rf "${BASE:?}/t$s" "$BASE/t$s".log "$BASE/t$s"-*.log "$RES"/*-t"$s".json "$RES"/*-t"$s"-d*.json
			keep=0
		fi
		say "teacher seed $s"
		job "t$s" KEEP=$keep PROXY_OUT="$BASE/t$s" DIFF_RUN=none EVAL_ON="dev heldout" TEACHER_SET="seed=$s ${TEACHER_SET:-}"
	done
	jobs_wait
	for s in $SEEDS; do
		cp "$BASE/t$s/teacher-dev.json" "$RES/teacher-dev-t$s.json"
		cp "$BASE/t$s/teacher-heldout.json" "$RES/teacher-heldout-t$s.json"
	done
	stage_time teachers "$t"
fi
mkdir -p "$RES"
if has diffusion || has dev || has heldout; then
	SEEDS=$(gated)
	[ -n "$SEEDS" ] || { say "no teacher passes the gate ($GATE on every family of the dev split): draw other seeds (SEEDS) or train the teachers longer"; exit 3; }
fi

# 2. Diffusion models.
if has diffusion; then
	t=$(date +%s)
	while read -r s b d r; do
		say "teacher seed $s: $r"
		job "t$s-$r" KEEP=1 PROXY_OUT="$BASE/t$s" DIFF_RUN="$r" EVAL_ON=none \
			BUDGET="$b" DIFF_SET="seed=$d ${DIFF_SET:-}"
	done < <(runs)
	jobs_wait
	stage_time diffusion "$t"
fi

# 3. Dev scores at every threshold.
if has dev; then
	t=$(date +%s)
	while read -r s b d r m json; do
		job "t$s-$r" KEEP=2 PROXY_OUT="$BASE/t$s" DIFF_RUN="$r" EVAL_ON=dev THRESHOLD="$THRESHOLDS" TAG="$m" EVAL_EXTRA="$json"
	done < <(runs modes)
	jobs_wait
	while read -r s b d r m _; do
		for th in $THRESHOLDS; do
			src=$BASE/t$s/$r-dev-$th-$m.json
			[ "$(wc -w <<<"$THRESHOLDS")" = 1 ] && src=$BASE/t$s/$r-dev-$m.json
			cp "$src" "$RES/dev-b$b$RK-$m-$th-t$s-d$d.json"
		done
	done < <(runs modes)
	stage_time dev "$t"
fi

# 4. Per budget and mode, the threshold chosen on dev alone, then held-out
#    once at it.
if has heldout; then
	t=$(date +%s)
	declare -A CHOSEN=()
	echo "proxy-seeds $(date -u +%F): SIZE=$SIZE, $(wc -w <<<"$SEEDS") teacher seeds x $(wc -w <<<"$DIFF_SEEDS") diffusion seeds" | tee -a "$BASE/summary.txt"
	for b in $BUDGETS; do
		for m in $MODES; do
			m=$(mode_name "$m")
			# Every threshold scored on dev in this or an earlier call.
			ths=$(ls "$RES" | sed -n "s/^dev-b$b$RK-$m-\(.*\)-t[0-9]*-d[0-9]*\.json\$/\1/p" | sort -gu)
			[ -n "$ths" ] || { say "budget $b%, mode $m: no dev results, not scored"; continue; }
			best= bestscore= fastest= fastest_tpf=
			{
				echo
				echo "budget $b%${RECIPE:+, recipe $RECIPE}, mode $m, dev split:"
				echo "threshold  mean-normalised  sd  TPF  worst-task"
			} | tee -a "$BASE/summary.txt"
			for th in $ths; do
				read -r mean sd tpf worst _ < <("$BIN" eval summary --brief "$RES"/dev-b"$b$RK"-"$m"-"$th"-*.json)
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
				say "budget $b%, mode $m: no threshold reaches TPF $MIN_TPF on dev; taking the fastest, $fastest"
				best=$fastest
			fi
			CHOSEN[$b-$m]=$best
			echo "chosen on dev: threshold $best (the best mean score with TPF >= $MIN_TPF)" | tee -a "$BASE/summary.txt"
		done
	done
	while read -r s b d r m json; do
		[ -n "${CHOSEN[$b-$m]:-}" ] || continue
		job "t$s-$r" KEEP=2 PROXY_OUT="$BASE/t$s" DIFF_RUN="$r" EVAL_ON=heldout THRESHOLD="${CHOSEN[$b-$m]}" TAG="$m" EVAL_EXTRA="$json"
	done < <(runs modes)
	jobs_wait
	while read -r s b d r m _; do
		[ -z "${CHOSEN[$b-$m]:-}" ] || cp "$BASE/t$s/$r-heldout-$m.json" "$RES/heldout-b$b$RK-$m-t$s-d$d.json"
	done < <(runs modes)
	{
		echo
		echo "teachers (AR decoding) on the held-out split:"
		"$BIN" eval summary $(for s in $SEEDS; do echo "$RES/teacher-heldout-t$s.json"; done)
		for b in $BUDGETS; do
			for m in $MODES; do
				m=$(mode_name "$m")
				[ -n "${CHOSEN[$b-$m]:-}" ] || continue
				echo
				echo "diffusion models, budget $b%${RECIPE:+, recipe $RECIPE}, mode $m, on the held-out split at threshold ${CHOSEN[$b-$m]}:"
				"$BIN" eval summary "$RES"/heldout-b"$b$RK"-"$m"-t*-d*.json
			done
		done
	} | tee -a "$BASE/summary.txt"
	stage_time heldout "$t"
fi
