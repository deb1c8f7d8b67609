#!/usr/bin/env bash
# The GPU-size proxy over seeds (scripts/proxy-seeds.sh, docs/proxy.md) in
# parts that each fit one 10-minute call of a lent GPU machine, run back to
# back on the same machine (each reuses the last one's out/). Times on one
# H100 with the presets' teachers (131M tokens each):
#
#   scripts/gpu-proxy-seeds.sh a   # the shim, 3 teachers at once, scored; stopped
#                                  # at a checkpoint when the call's time runs out
#   scripts/gpu-proxy-seeds.sh r   # after a stopped a: the teachers finished, scored
#   scripts/gpu-proxy-seeds.sh f   # 6 diffusion models at 5%, dev and held-out scores (234 s)
#   SEEDS=0 scripts/gpu-proxy-seeds.sh b
#                                  # diffusion models at 20% (26M tokens each:
#                                  # one teacher's two a call), dev scores
#   scripts/gpu-proxy-seeds.sh c   # after b for every seed: held-out scores
#   RECIPE=cap DIFF_SET=confidence_loss_weight=0.2 scripts/gpu-proxy-seeds.sh l
#                                  # a training lever's 6 models at 5%
#                                  # (BUDGETS), dev and held-out scores, to
#                                  # hold against f's (~240 s)
#   RECIPE=b10 BUDGETS=10 scripts/gpu-proxy-seeds.sh l
#                                  # the budget as the lever: the presets
#                                  # at 10% of the teacher's tokens
#   scripts/gpu-proxy-seeds.sh side f "cap02 confidence_loss_weight=0.2"
#                                  # parts f and l side by side in one call,
#                                  # each argument "f" or "RECIPE DIFF_SET..."
#                                  # (at the CPU size on an H200 one lever
#                                  # took 123 s, two 207 s, three 333 s; at
#                                  # the GPU size on an H100 two parts took
#                                  # 452-474 s, one alone ~240 s.
#                                  # It saves a call's start and the risk of
#                                  # losing the machine between calls, not
#                                  # GPU time)
#   SWEEP_MODES='eb={"verify":true,"error_budget":0.5}' SWEEP_THRESHOLDS="0.7 0.8" \
#     scripts/gpu-proxy-seeds.sh s # after b: sampler levers on b's 20% models,
#                                  # dev scores (as many as the call's time
#                                  # allows; a later call goes on from there)
#
# Teachers travel between machines: parts a and r leave each finished
# teacher (its bf16 export and its two scores, about 10 MB xz-packed) in
# $OUT as teacher-tSEED.txz; a later machine given those files in
# build/gpu/teachers (carried) makes only the data and the conversions
# for a seed it has no teacher of, and then runs any part but a.
#
# PROXY_SIZE=cpu runs the same parts on the CPU size's models, trained and
# served in f32 on the GPU (scripts/proxy.sh DEVICE=cuda; out/seeds-cpu);
# its archives are named cpu-teacher-tSEED.txz and results-cpu-PART...,
# so that it can run beside a GPU-size part (with another PORT). Teachers
# trained with TEACHER_SET carry it in their archives' names (its letters,
# digits and dots: TEACHER_SET=steps=25600 banks cpu-steps25600-teacher-t0.txz),
# so that a later part given the same TEACHER_SET takes them and no
# preset teacher is mistaken for one of them.
# The teachers under the gate (GATE, scripts/proxy-seeds.sh) are left out
# of parts f on: the CPU size's drawn on a GPU all missed it on word
# problems (docs/proxy.md), and GATE=0 converts them as those runs did.
# Each diffusion model is scored in the sampler modes plain (threshold
# alone) and verify, at THRESHOLDS (0.9). SEEDS (0 1 2) are the teacher
# seeds a part works on; CALL_S (570) the seconds a part may take before
# its evals are cut short. bin/dllm is built on the dev box and carried;
# the shim is built here. Tables and results are copied to $OUT
# (results-PART[-RECIPE].tgz) when it is set, so that parts run side by
# side in one call (each with its own PORT) leave one archive each.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# SIZE_PREFIX names the CPU size's archives apart from the GPU size's.
case "${PROXY_SIZE:-gpu}" in
gpu) export SIZE=gpu SEEDS_OUT=out/seeds-gpu && SIZE_PREFIX= ;;
cpu) export SIZE=cpu DEVICE=cuda SEEDS_OUT=out/seeds-cpu && SIZE_PREFIX=cpu- ;;
*)
	echo "PROXY_SIZE must be gpu or cpu" >&2
	exit 2
	;;
esac
# BANK names the teachers' archives: the size, then any TEACHER_SET.
tset=$(tr -cd 'A-Za-z0-9.' <<<"${TEACHER_SET:-}")
BANK=$SIZE_PREFIX${tset:+$tset-}
export TASKS=v2 SEEDS=${SEEDS:-0 1 2} DIFF_SEEDS="1 2"
export MODES='plain={"verify":false} verify={"verify":true}' THRESHOLDS=${THRESHOLDS:-0.9}
T0=$(date +%s) PART=${1:-}
left() { echo $((${CALL_S:-570} - ($(date +%s) - T0))); }
save() {
	# side's parts each leave their own archive: one more would only
	# repeat the last of them in one of the call's few returned files.
	[ -n "${OUT:-}" ] && [ "$PART" != side ] || return 0
	tar czf "$OUT/results-${SIZE_PREFIX}${PART}${RECIPE:+-$RECIPE}.tgz" "$SEEDS_OUT"/results "$SEEDS_OUT"/summary.txt "$SEEDS_OUT"/*.out 2>/dev/null || true
}
trap save EXIT
# xz archives through Python's tarfile (the machine may have no xz):
# pack ARCHIVE DIR PATH... stores each PATH under DIR by its path below
# DIR; unpack ARCHIVE DIR restores them into DIR.
pack() {
	python3 -c '
import os, sys, tarfile
with tarfile.open(sys.argv[1], "w:xz") as t:
    for p in sys.argv[3:]:
        t.add(p, arcname=os.path.relpath(p, sys.argv[2]))' "$@"
}
unpack() { python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="data")' "$@"; }
bank_out() {
	[ -n "${OUT:-}" ] || return 0
	local s d
	for s in $SEEDS; do
		d=$(ls -d "$SEEDS_OUT/t$s"/teacher-run/model-step-* 2>/dev/null | tail -n 1)
		[ -n "$d" ] && [ -s "$SEEDS_OUT/t$s/teacher-heldout.json" ] || continue
		pack "$OUT/${BANK}teacher-t$s.txz" "$SEEDS_OUT/t$s" "$d" "$SEEDS_OUT/t$s/teacher-dev.json" "$SEEDS_OUT/t$s/teacher-heldout.json" &
	done
	wait
}
bank_in() {
	local s pids=()
	for s in $SEEDS; do
		[ -e "build/gpu/teachers/${BANK}teacher-t$s.txz" ] || continue
		compgen -G "$SEEDS_OUT/t$s/teacher-run/model-step-*" >/dev/null && continue
		echo "teacher seed $s: from build/gpu/teachers"
		rm -rf "$SEEDS_OUT/t$s.bank"
		unpack "build/gpu/teachers/${BANK}teacher-t$s.txz" "$SEEDS_OUT/t$s.bank"
		TEACHER=$(ls -d "$SEEDS_OUT/t$s.bank"/teacher-run/model-step-*) PROXY_OUT=$SEEDS_OUT/t$s \
			DIFF_RUN=none EVAL_ON=none scripts/proxy.sh >"$SEEDS_OUT/t$s.bank.log" 2>&1 &
		pids+=($!)
	done
	[ ${#pids[@]} -gt 0 ] || return 0
	wait "${pids[@]}"
	mkdir -p "$SEEDS_OUT/results"
	for s in $SEEDS; do
		[ -d "$SEEDS_OUT/t$s.bank" ] || continue
		mv "$SEEDS_OUT/t$s.bank"/teacher-*.json "$SEEDS_OUT/t$s/"
		mv "$SEEDS_OUT/t$s.bank/teacher-run" "$SEEDS_OUT/t$s/"
		rmdir "$SEEDS_OUT/t$s.bank"
		for split in dev heldout; do
			cp "$SEEDS_OUT/t$s/teacher-$split.json" "$SEEDS_OUT/results/teacher-$split-t$s.json"
		done
	done
}
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
bin/dllm version 2>&1 | grep -q "^cuda: [1-9]" || scripts/gpu-smoke.sh 2>&1 | grep -E "shim build|^cuda:|smoke"
mkdir -p "$SEEDS_OUT"
[ "$PART" = a ] || bank_in
case "$PART" in
a | r)
	# Training that would outrun the call is stopped (SIGTERM: each dllm
	# train checkpoints its step) and part r goes on from there.
	resume=0
	[ "$1" = r ] && resume=1
	if ! RESUME=$resume STAGES=teachers JOBS=3 timeout "$(($(left) - 15))" scripts/proxy-seeds.sh 2>&1 |
		tee "$SEEDS_OUT/$1.out" | grep -v "^proxy-seeds: teacher seed"; then
		for _ in $(seq 30); do pgrep -f "dllm train" >/dev/null || break; sleep 1; done
		echo "the teachers were stopped at the call's limit; part r finishes them"
	fi
	for s in $SEEDS; do
		for split in dev heldout; do
			f=$SEEDS_OUT/results/teacher-$split-t$s.json
			[ -e "$f" ] || continue
			echo "teacher seed $s, $split:"
			bin/dllm eval summary "$f" | sed -n 1,7p
		done
		# The teacher's own run judged it against the gate in its summary.
		sed -n "s/^proxy: the teacher /teacher seed $s /p" "$SEEDS_OUT/t$s/summary-none.txt" 2>/dev/null || true
	done
	bank_out
	;;
b)
	BUDGETS=20 STAGES=diffusion JOBS=6 scripts/proxy-seeds.sh 2>&1 | tee "$SEEDS_OUT/b1.out" | grep -v "^proxy-seeds: teacher seed"
	BUDGETS=20 STAGES=dev JOBS=12 timeout "$(left)" scripts/proxy-seeds.sh 2>&1 | tee "$SEEDS_OUT/b2.out" | tail -n 2
	;;
c)
	BUDGETS=20 STAGES=heldout JOBS=12 timeout "$(left)" scripts/proxy-seeds.sh 2>&1 | tee "$SEEDS_OUT/c1.out" | tail -n 40
	;;
f)
	BUDGETS=5 STAGES=diffusion JOBS=6 scripts/proxy-seeds.sh >"$SEEDS_OUT/f1.out" 2>&1
	BUDGETS=5 STAGES=dev JOBS=12 timeout "$(left)" scripts/proxy-seeds.sh >"$SEEDS_OUT/f2.out" 2>&1
	BUDGETS=5 STAGES=heldout JOBS=12 timeout "$(left)" scripts/proxy-seeds.sh 2>&1 | tee "$SEEDS_OUT/f3.out" | tail -n 40
	;;
s)
	# One mode at a time over the 6 models (its thresholds in turn, 12
	# evals at once), so that a mode finished before the call's time runs
	# out is kept; a mode whose dev results are all there is skipped. The
	# table is every mode's dev scores so far.
	SWEEP_MODES=${SWEEP_MODES:-$MODES}
	export THRESHOLDS="${SWEEP_THRESHOLDS:-0.7 0.8 0.9 0.95}"
	for mode in $SWEEP_MODES; do
		m=${mode%%=*}
		n=$(ls "$SEEDS_OUT"/results/dev-b20-$m-*.json 2>/dev/null | wc -l)
		[ "$n" -ge $((6 * $(wc -w <<<"$THRESHOLDS"))) ] && continue
		[ "$(left)" -gt 60 ] || break
		MODES="$mode" BUDGETS=20 STAGES=dev JOBS=12 timeout "$(left)" scripts/proxy-seeds.sh >>"$SEEDS_OUT/s.out" 2>&1 || break
	done
	MODES=$SWEEP_MODES
	for m in $MODES; do
		m=${m%%=*}
		for th in $THRESHOLDS; do
			f=("$SEEDS_OUT"/results/dev-b20-$m-$th-*.json)
			[ -e "${f[0]}" ] && echo "budget 20%, $m, threshold $th, dev (mean sd TPF worst runs): $(bin/dllm eval summary --brief "${f[@]}")"
		done
	done
	;;
l)
	# A lever is a recipe (DIFF_SET) or a budget (BUDGETS) other than f's.
	[ -n "${RECIPE:-}" ] && [ -n "${DIFF_SET:-}${BUDGETS:-}" ] || { echo "l needs RECIPE, and DIFF_SET or BUDGETS" >&2; exit 2; }
	export BUDGETS=${BUDGETS:-5}
	STAGES=diffusion JOBS=6 scripts/proxy-seeds.sh >"$SEEDS_OUT/l1-$RECIPE.out" 2>&1
	STAGES=dev JOBS=12 timeout "$(left)" scripts/proxy-seeds.sh >"$SEEDS_OUT/l2-$RECIPE.out" 2>&1
	STAGES=heldout JOBS=12 timeout "$(left)" scripts/proxy-seeds.sh 2>&1 | tee "$SEEDS_OUT/l3-$RECIPE.out" | tail -n 40
	;;
side)
	# The teachers are in place (bank_in above), so the parts share them;
	# each gets its own ports and the time left, and its output is shown
	# when all are done.
	shift
	[ $# -gt 0 ] || { echo "side needs parts: f or \"RECIPE DIFF_SET...\"" >&2; exit 2; }
	for p in "$@"; do
		[ "$p" = f ] || [[ "$p" == *" "* ]] || { echo "side: \"$p\" is neither f nor \"RECIPE DIFF_SET...\"" >&2; exit 2; }
	done
	i=0
	pids=()
	for p in "$@"; do
		# f runs the presets whatever the caller's RECIPE; a lever sets its own.
		part=f lever=()
		[ "$p" = f ] || part=l lever=(RECIPE="${p%% *}" DIFF_SET="${p#* }")
		env -u RECIPE -u DIFF_SET PORT=$((18400 + 100 * i)) CALL_S="$(left)" "${lever[@]}" \
			scripts/gpu-proxy-seeds.sh $part >"$SEEDS_OUT/side-$i.out" 2>&1 &
		pids+=($!)
		i=$((i + 1))
	done
	rc=0
	for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
	i=0
	for p in "$@"; do
		echo "== $p"
		tail -n 42 "$SEEDS_OUT/side-$i.out"
		i=$((i + 1))
	done
	[ $rc = 0 ] || exit 1
	;;
*)
	echo "usage: $0 a|r|b|c|f|s|l|side" >&2
	exit 2
	;;
esac
say_time=$(($(date +%s) - T0))
echo "part $PART done in ${say_time} s"
