#!/usr/bin/env bash
# The conversion proxy (docs/proxy.md), `make proxy`: does AR -> block
# diffusion conversion keep the AR model's skill?
#
#   1. synthetic reasoning tasks with exact answers (dllm data synth),
#   2. a small AR teacher trained from random weights on them (objective ar;
#      ~105 minutes on a 2-core CPU for the second task set), or TEACHER,
#   3. the teacher converted (mask = a padded embedding row, blocks of 8) and
#      trained on as a block-diffusion model with BUDGET% of its tokens,
#   4. both served by dllm serve (the teacher with blocks of 1: plain greedy
#      AR decoding) and scored on the held-out split through the HTTP API
#      with dllm eval; the diffusion model's normalised score is
#      100*(acc - chance)/(teacher acc - chance) per task.
#
# Usage: scripts/proxy.sh
#        make proxy   (TASKS=v2 TEACHER=models/proxy-teacher BUDGET=5: ~30
#                    minutes on two cores)
#        SIZE=gpu scripts/proxy.sh   (the larger proxy, on one GPU: a
#                    6.56M-parameter teacher, configs/proxy/gpu/; ~10 min,
#                    ~2 with TASKS=v1)
# Environment:
#   SIZE             cpu (configs/proxy/, served on the CPU in f32) or gpu
#                    (configs/proxy/gpu/, served with --device cuda in bf16)
#   DEVICE           with SIZE=cpu: where its models train and are served
#                    (cpu, or cuda: the same models in f32 on a GPU, minutes
#                    instead of hours, for statistics over seeds)
#   PROXY_OUT        work directory (out/proxy, or out/proxy-gpu for SIZE=gpu)
#   TASKS            the task set: v2 (free widths, lists, long work, prose,
#                    code, with a dev split and plain-text stories; the
#                    default) or v1 (add, mul, mcq, trace: a quarter of an
#                    hour on two cores, teacher included)
#   TRAIN, HELDOUT   synthetic problems per task (6000, 100; TRAIN 24000 for v2
#                    with SIZE=gpu); DEV (100) for v2
#   TEXT             stories for v2's plain-text share (5000; 20000 with SIZE=gpu)
#   MAX_TOKENS       the eval's max_tokens (320 for v1; v2: 512, 1536 with SIZE=gpu)
#   TEACHER          a trained AR teacher to convert instead of training one
#                    (models/proxy-teacher: the CPU size's on v2)
#   TEACHER_SET      extra --set KEY=VALUE words for the teacher's training
#   BUDGET           the diffusion training's tokens, in percent of the
#                    teacher's (20; fractions too, at least one step)
#   DIFF_SET         extra --set KEY=VALUE words for the diffusion training
#   GATE             the accuracy the teacher should reach on every family
#                    (0.9): the summary says whether it does, on the first
#                    split scored
#   THRESHOLD        the diffusion model's denoising threshold (0.9; "" for dllm.json's);
#                    several, space-separated, are each scored
#   EVAL_ON          the splits scored: heldout (default), dev, or "dev heldout"
#                    (v2 only has dev), or none; results in
#                    $OUT/{teacher,diffusion}-SPLIT[-T].json
#   DIFF_RUN         the diffusion run's directory under PROXY_OUT (diffusion-run),
#                    so that runs of several diffusion seeds can share a teacher;
#                    none: the teacher alone (trained, converted, scored)
#   KEEP=1           reuse the data and teacher of an earlier run in PROXY_OUT
#                    (only the diffusion stage and the evals run again; the
#                    teacher's results are reused where they exist); a
#                    teacher or a DIFF_RUN whose training was stopped goes
#                    on from its checkpoint instead of starting over
#   KEEP=2           reuse the diffusion model too (only the evals run again)
#   EVAL_EXTRA       a JSON object merged into the diffusion model's requests
#                    (dllm eval --extra), e.g. {"verify":true}
#   TAG              appended to the diffusion model's result names (-TAG)
#   PORT             first of the two ports the servers use (18400)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

case "${SIZE:-cpu}" in
cpu) CONF=configs/proxy OUT=${PROXY_OUT:-out/proxy} RUNDEV=${DEVICE:-cpu} SERVE=(--dtype f32) ;;
gpu) CONF=configs/proxy/gpu OUT=${PROXY_OUT:-out/proxy-gpu} RUNDEV=cuda SERVE=(--dtype bf16) ;;
*)
	echo "proxy: SIZE must be cpu or gpu, not '$SIZE'" >&2
	exit 2
	;;
esac
if [ -n "${DEVICE:-}" ] && { [ "${SIZE:-cpu}" != cpu ] || [[ ! "$DEVICE" =~ ^(cpu|cuda(:[0-9]+)?)$ ]]; }; then
	echo "proxy: DEVICE (cpu, cuda or cuda:N) is for SIZE=cpu, not '$DEVICE' with SIZE=${SIZE:-cpu}" >&2
	exit 2
fi
HELDOUT=${HELDOUT:-100}
TASKS=${TASKS:-v2}
DIFF_RUN=${DIFF_RUN:-diffusion-run}
case "$TASKS" in
v1) DATA_CONF=configs/proxy/data.yaml SYNTH=() MAX_TOKENS=${MAX_TOKENS:-320} ;;
v2)
	DATA_CONF=$CONF/data-v2.yaml SYNTH=(--size "${SIZE:-cpu}" --dev "${DEV:-100}" --text "${TEXT:-$([ "${SIZE:-cpu}" = gpu ] && echo 20000 || echo 5000)}")
	# The GPU teacher reads 131M tokens: 6,000 problems a task made that
	# eight passes, in which short tasks (sort, sum) are a few percent of
	# the tokens and were learnt worst; 24,000 make it about two.
	[ "${SIZE:-cpu}" = gpu ] && TRAIN=${TRAIN:-24000}
	MAX_TOKENS=${MAX_TOKENS:-$([ "${SIZE:-cpu}" = gpu ] && echo 1536 || echo 512)}
	;;
*)
	echo "proxy: TASKS must be v1 or v2, not '$TASKS'" >&2
	exit 2
	;;
esac
TRAIN=${TRAIN:-6000}
[[ "${BUDGET:-20}" =~ ^[0-9]*\.?[0-9]+$ ]] || { echo "proxy: BUDGET must be a percentage, not '$BUDGET'" >&2; exit 2; }
PORT=${PORT:-18400}
TOK=testdata/tiny-llama

say() { echo "proxy: $*" >&2; }
stamp() { date +%s; }
T0=$(stamp)
declare -A SECS

sets() { local w; for w in $1; do printf -- '--set\n%s\n' "$w"; done; }
# preset NAME is the task set's own training preset where it has one
# (configs/proxy/gpu/teacher-v2.yaml), else the size's.
preset() { if [ -f "$CONF/$1-$TASKS.yaml" ]; then echo "$CONF/$1-$TASKS.yaml"; else echo "$CONF/$1.yaml"; fi; }

if [ "${KEEP:-0}" = 0 ]; then
	rm -rf "$OUT"
fi
mkdir -p "$OUT"

# Every stage runs a private copy of the binary and the shim, one per run
# of this script: bin/ may be rebuilt, with another shim ABI, while the
# proxy runs, and runs that share PROXY_OUT (scripts/proxy-seeds.sh) may
# run at once. A copy that does not pass the smoke check (missing, or a
# binary and a shim of different builds) is remade with make first.
PRIV=$(mktemp -d "$OUT/.bin-XXXXXX")
BIN=$PRIV/dllm
export DLLM_TORCH_LIB=$(cd "$PRIV" && pwd)/libdllmtorch.so
private_bin() {
	rm -f "$BIN" "$DLLM_TORCH_LIB"
	cp bin/dllm bin/libdllmtorch.so "$PRIV/" 2>/dev/null && "$BIN" version --smoke --device cpu >/dev/null 2>&1
}
if ! private_bin; then
	say "bin/dllm or bin/libdllmtorch.so is missing or they do not match; running make all"
	make --no-print-directory all >&2
	private_bin || { "$BIN" version --smoke --device cpu >&2; exit 1; }
fi

if [ "${KEEP:-0}" = 0 ]; then

	# 1. Data: the tasks, and the training chats packed with the tokenizer.
	t=$(stamp)
	"$BIN" data synth --out "$OUT/synth" --tasks "$TASKS" ${SYNTH[@]+"${SYNTH[@]}"} --train "$TRAIN" --heldout "$HELDOUT" --seed 0 >&2
	# The teacher's starting directory: its shape and the tiny tokenizer
	# (train reads config.json; export copies the tokenizer from here).
	mkdir -p "$OUT/teacher-init"
	cp "$CONF/teacher-config.json" "$OUT/teacher-init/config.json"
	cp "$TOK"/tokenizer.json "$TOK"/tokenizer_config.json "$TOK"/generation_config.json "$OUT/teacher-init/"
	sed "s#out/proxy/#$OUT/#g" "$DATA_CONF" >"$OUT/data.yaml"
	"$BIN" data prepare --config "$OUT/data.yaml" >&2
	SECS[data]=$(($(stamp) - t))
fi

# 2. The AR teacher, from random weights (unless one is given). A teacher
#    whose training was stopped (Ctrl-C or SIGTERM: dllm train checkpoints
#    the step in progress) goes on from its checkpoint with KEEP=1.
if [ -z "${TEACHER:-}" ] && ! compgen -G "$OUT/teacher-run/model-step-*" >/dev/null; then
	t=$(stamp)
	extra=()
	compgen -G "$OUT/teacher-run/checkpoints/step-*" >/dev/null && extra=(--resume) && say "teacher: resuming $OUT/teacher-run"
	mapfile -t -O "${#extra[@]}" extra < <(sets "device=$RUNDEV ${TEACHER_SET:-}")
	"$BIN" train --config "$(preset teacher)" --model "$OUT/teacher-init" \
		--data "$OUT/data" --out "$OUT/teacher-run" ${extra[@]+"${extra[@]}"} >&2
	SECS[teacher]=$(($(stamp) - t))
fi
if [ -n "${TEACHER:-}" ]; then
	[ -s "$TEACHER/train.json" ] || { say "TEACHER=$TEACHER: no trained model there (train.json)"; exit 2; }
else
	TEACHER=$(ls -d "$OUT"/teacher-run/model-step-* | tail -n 1)
fi

# 3. Convert: as the AR baseline (blocks of 1 with the shift: exactly greedy
#    AR decoding) and as the start of diffusion training (blocks of 8).
#    Both are made once per teacher: runs that share it reuse them.
for conv in "teacher-ar 1" "teacher-dllm 8"; do
	set -- $conv
	[ -s "$OUT/$1/dllm.json" ] || { "$BIN" convert --from "$TEACHER" --out "$OUT/$1.tmp" --block-size "$2" --hash fast >/dev/null && mv "$OUT/$1.tmp" "$OUT/$1"; }
done
if [ "${KEEP:-0}" != 2 ] && [ "$DIFF_RUN" != none ]; then
	t=$(stamp)
	# A diffusion run stopped before its export (Ctrl-C, SIGTERM, a lost
	# session) goes on from its checkpoint with KEEP=1, as the teacher
	# does (resuming is exact: docs/training.md); any other starts over.
	resume=()
	if [ "${KEEP:-0}" = 1 ] && ! compgen -G "$OUT/$DIFF_RUN/model-step-*" >/dev/null &&
		compgen -G "$OUT/$DIFF_RUN/checkpoints/step-*" >/dev/null; then
		resume=(--resume)
		say "diffusion: resuming $OUT/$DIFF_RUN"
	else
		rm -rf "${OUT:?}/$DIFF_RUN"
	fi
	# BUDGET percent of the teacher's tokens, in steps of the preset's
	# micro batches of seq_len tokens (DIFF_SET may still set steps).
	field() { sed -n "s/^ *\"*$1\"*: *\([0-9]*\).*/\1/p" "$2" | head -n 1; }
	dp=$(preset diffusion)
	accum=$(field grad_accum "$dp")
	per_step=$(($(field micro_batch "$dp") * ${accum:-1} * $(field seq_len "$OUT/data.yaml")))
	steps=$(awk -v t="$(field tokens_seen "$TEACHER/train.json")" -v b="${BUDGET:-20}" -v n="$per_step" \
		'BEGIN { s = int(t * b / 100 / n); print (s < 1 ? 1 : s) }')
	mapfile -t extra < <(sets "device=$RUNDEV steps=$steps ${DIFF_SET:-}")
	"$BIN" train --config "$dp" --model "$OUT/teacher-dllm" \
		--data "$OUT/data" --out "$OUT/$DIFF_RUN" ${resume[@]+"${resume[@]}"} ${extra[@]+"${extra[@]}"} >&2
	SECS[diffusion]=$(($(stamp) - t))
fi
DIFF=
[ "$DIFF_RUN" = none ] || DIFF=$(ls -d "$OUT/$DIFF_RUN"/model-step-* | tail -n 1)

# 4. Serve each and score it through the HTTP API.
SERVER=
stop_server() {
	if [ -n "$SERVER" ]; then
		kill "$SERVER" 2>/dev/null || true
		wait "$SERVER" 2>/dev/null || true
		SERVER=
	fi
}
trap 'stop_server; rm -rf "$PRIV"' EXIT
serve_model() { # name model port
	"$BIN" serve --model "$2" --host 127.0.0.1 --port "$3" --device "$RUNDEV" "${SERVE[@]}" \
		--served-model-name "$1" 2>"$OUT/$1-serve.log" &
	SERVER=$!
	for _ in $(seq 600); do
		curl -sf --noproxy '*' -o /dev/null "http://127.0.0.1:$3/health" && return
		kill -0 "$SERVER" 2>/dev/null || { cat "$OUT/$1-serve.log" >&2; say "the $1 server died"; exit 1; }
		sleep 0.2
	done
	say "the $1 server is not ready after 2 minutes"
	exit 1
}
score() { # port split result [eval options...]: one eval, table to RESULT.txt
	local port=$1 split=$2 result=$3
	shift 3
	# On a GPU the eval fills the server's batch (its max_num_seqs); the
	# CPU server generates one reply at a time.
	local conc=()
	[[ "$RUNDEV" == cuda* ]] || conc=(--concurrency 1)
	"$BIN" eval --server "http://127.0.0.1:$port" --tasks "$OUT/synth/$split.jsonl" ${conc[@]+"${conc[@]}"} \
		--max-tokens "$MAX_TOKENS" --temperature 0 --out "$OUT/$result.json" "$@" | tee "$OUT/$result.txt"
}
# The teacher's results are named teacher-SPLIT, the diffusion model's
# diffusion-SPLIT (with -T when several thresholds are scored; a DIFF_RUN
# other than diffusion-run names them instead of "diffusion"); the held-out
# ones also as teacher.json and diffusion.json.
EVAL_ON=${EVAL_ON:-heldout}
[ "$EVAL_ON" != none ] || EVAL_ON=
THRESHOLD=${THRESHOLD-0.9}
t=$(stamp)
say "teacher (AR decoding, blocks of 1): $TEACHER"
started=
for split in $EVAL_ON; do
	if [ "${KEEP:-0}" != 0 ] && [ -s "$OUT/teacher-$split.json" ]; then
		continue
	fi
	[ -n "$started" ] || { serve_model teacher "$OUT/teacher-ar" "$PORT"; started=1; }
	score "$PORT" "$split" "teacher-$split"
	[ "$split" = heldout ] && cp "$OUT/teacher-heldout.json" "$OUT/teacher.json"
done
stop_server
SECS[eval_teacher]=$(($(stamp) - t))
t=$(stamp)
if [ -n "$DIFF" ] && [ -n "$EVAL_ON" ]; then
	say "diffusion model (blocks of 8): $DIFF"
	label=diffusion
	[ "$DIFF_RUN" = diffusion-run ] || label=$DIFF_RUN
	serve_model "$label" "$DIFF" "$((PORT + 1))"
	for split in $EVAL_ON; do
		for th in ${THRESHOLD:-model}; do
			opts=(--baseline "$OUT/teacher-$split.json")
			[ "$th" = model ] || opts+=(--threshold "$th")
			[ -z "${EVAL_EXTRA:-}" ] || opts+=(--extra "$EVAL_EXTRA")
			name=$label-$split
			[ "$(wc -w <<<"${THRESHOLD:-model}")" = 1 ] || name=$name-$th
			[ -z "${TAG:-}" ] || name=$name-$TAG
			score "$((PORT + 1))" "$split" "$name" "${opts[@]}"
			[ "$name" = diffusion-heldout ] && cp "$OUT/diffusion-heldout.json" "$OUT/diffusion.json"
		done
	done
	stop_server
	SECS[eval_diffusion]=$(($(stamp) - t))
fi

# Summary.
teacher_tokens=$(sed -n 's/.*"tokens_seen": *\([0-9]*\).*/\1/p' "$TEACHER/train.json" | head -n 1)
summary=$OUT/summary.txt
[ "$DIFF_RUN" = diffusion-run ] || summary=$OUT/summary-$DIFF_RUN.txt
diff_tokens=
[ -z "$DIFF" ] || diff_tokens=$(sed -n 's/.*"tokens_seen": *\([0-9]*\).*/\1/p' "$DIFF/train.json" | head -n 1)
{
	echo
	echo "proxy: teacher $teacher_tokens tokens, diffusion $diff_tokens tokens ($((100 * ${diff_tokens:-0} / ${teacher_tokens:-1}))% of the teacher's)"
	# The gate: a normalised score means little on a family the teacher
	# does not know.
	split=${EVAL_ON%% *}
	if [ -n "$split" ] && [ "${GATE:-0.9}" != 0 ]; then
		if gate=$("$BIN" eval summary --brief --gate "${GATE:-0.9}" "$OUT/teacher-$split.json" 2>&1 >/dev/null); then
			echo "proxy: the teacher passes the gate (${GATE:-0.9} on every family, $split split)"
		else
			echo "proxy: the teacher is ${gate#dllm: eval summary: } ($split split): its conversion is judged against a teacher that does not know those families"
		fi
	fi
	for k in data teacher diffusion eval_teacher eval_diffusion; do
		[ -n "${SECS[$k]:-}" ] && echo "proxy: $k ${SECS[$k]} s"
	done
	echo "proxy: total $(($(stamp) - T0)) s; results in $OUT/teacher-*.json and $OUT/diffusion-*.json"
} | tee "$summary"
