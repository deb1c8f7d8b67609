#!/usr/bin/env bash
# The MiniCPM5-2B recipe (docs/recipe.md): from the original checkpoint to a
# served block-diffusion model, one resumable script.
#
#   1 convert    HF checkpoint -> dllm model (blocks of 32) and the AR teacher (blocks of 1)
#   2 distill    the original model answers public prompts with its reasoning (dllm data distill)
#   3 prepare    the stage-1 (continued pretraining) and stage-2 (SFT) data (dllm data prepare)
#   4 train 1    block diffusion, block size warmed up 1 -> 32, ~1.05B tokens
#   5 train 2    chat/reasoning SFT with <think> traces at blocks of 32, ~197M tokens
#   6 export     the servable model directory
#   7 eval       quick check on a dev set (dllm data synth's held-out split, never a
#                benchmark split) against the AR original through the HTTP API
#   8 serve      ./serve.sh on the result
#
# Every stage prints its expected duration, skips itself when its output is
# complete (convert: dllm.json; distill: a .done marker; prepare: manifest.json
# "complete": true; train: the final model-step-N/dllm.json; export: dllm.json;
# eval: diffusion.json) and resumes after an interruption (train --resume,
# prepare and distill continue by themselves): rerun the same command.
#
# Usage:
#   scripts/minicpm5-2b.sh --from HF_DIR --teacher URL [--budget-hours H] [options]
#   scripts/minicpm5-2b.sh --rehearsal [--fresh]   # every stage on the tiny test model, CPU, 1-2 min
#   scripts/minicpm5-2b.sh --rehearsal --from DIR [--fresh] [--no-serve]
#                        # shape-level rehearsal on one GPU, ~5 min: every stage on DIR
#                        # (random weights of MiniCPM5-2B's shape; scripts/gpu-rehearsal.sh
#                        # makes them), cuda, bf16, blocks of 32, the presets' seq 4096 and
#                        # 8192, 10 + 5 steps of one sequence; the tiny corpus and budgets.
#                        # Needs ~9x DIR's weights free on OUT's disk (~46 GB; checkpoints
#                        # are removed once no later stage needs them)
#   scripts/minicpm5-2b.sh --dry-run [...]          # print the plan and run nothing
#
# Options:
#   --from DIR           the MiniCPM5-2B checkpoint, Hugging Face layout ($MINICPM5_DIR);
#                        with --rehearsal: the GPU rehearsal's model (the flag, not the variable)
#   --out DIR            work directory (out; the rehearsals use out/rehearsal, out/rehearsal-gpu)
#   --budget-hours H     wall-clock hours for the two training stages together: scales
#                        their steps, warm-ups, data budgets and the prompts to distill
#                        (keep it the same when resuming)
#   --train-tps N        measured stage-1 training tokens/s (scripts/gpu-train.sh); the
#                        default is the H200 measurement in docs/benchmarks.md: 4,700
#   --teacher URL        an OpenAI-compatible server of the ORIGINAL checkpoint for
#                        distillation (vLLM or SGLang serving HF_DIR)
#   --teacher-tps N      its generated tokens/s, all requests together (default: 20,000
#                        for --teacher, an unmeasured assumption; for --local-teacher
#                        4,000 with requests decoding together, 200 one at a time)
#   --local-teacher      distill from dllm serve on the checkpoint with blocks of 1 (AR
#                        decoding, --teacher-seqs requests together)
#   --teacher-seqs N     the local teacher decodes N requests together (dllm serve
#                        --max-num-seqs; default 64, 4 in the CPU rehearsal) and distill
#                        keeps N in flight
#   --distill-prompts N  prompts to distill in all (default: from the budget; 0: skip)
#   --eval-tasks FILE    the dev set for dllm eval (default: a dllm data synth held-out set)
#   --bench-data DIR     score the published benchmarks found in DIR instead (dllm eval
#                        --suite; docs/eval.md says how to download them): the first
#                        --eval-items questions of each, normalised against the AR original
#   --eval-items N       questions per task in the evaluation (10)
#   --gate SCORE         after each training stage, score its checkpoint as stage 7 does
#                        and stop the run when its mean normalised score is below SCORE
#   --no-serve           stop after the evaluation (the rehearsals too: no serve.sh check)
#   --port N             serve.sh's port (8000)
#   --fresh              rehearsals only: delete the work directory first
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

say() { echo "minicpm5-2b: $*" >&2; }
die() {
	say "error: $*"
	exit 1
}
need() { [ "$#" -ge 2 ] || die "$1 needs a value"; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

FROM=${MINICPM5_DIR:-}
FROM_FLAG=
OUT=
BUDGET=
TRAIN_TPS=
TRAIN_TPS_GIVEN=
TEACHER_URL=
TEACHER_TPS=
# dllm serve's AR rate, one stream (201 tok/s measured on an H200 in the
# GPU rehearsal): the quick eval's speed, and the local teacher's with
# --teacher-seqs 1.
LOCAL_TPS=200
# dllm serve's AR rate with 64 requests decoding together, sampled at
# temperature 0.6: the local teacher's. Measured on an H100
# (docs/benchmarks.md, "Batched decoding"): 11,493 tok/s for 512-token
# answers; greedy AR at batch 64 falls from 12,089 tok/s at 1k of context
# to 4,168 at 8k, and the recipe's answers run to 7,680 tokens, so 4,000.
LOCAL_BATCH_TPS=4000
LOCAL_TEACHER=0
TEACHER_SEQS=
DISTILL_N=
EVAL_TASKS=
BENCH_DATA=
EVAL_ITEMS_GIVEN=
GATE=
SERVE=1
PORT=8000
DRY=0
REHEARSAL=0
FRESH=0
while [ "$#" -gt 0 ]; do
	case "$1" in
	--from) need "$@"; FROM=$2; FROM_FLAG=1; shift 2 ;;
	--out) need "$@"; OUT=$2; shift 2 ;;
	--budget-hours) need "$@"; BUDGET=$2; shift 2 ;;
	--train-tps) need "$@"; TRAIN_TPS=$2; TRAIN_TPS_GIVEN=1; shift 2 ;;
	--teacher) need "$@"; TEACHER_URL=$2; shift 2 ;;
	--teacher-tps) need "$@"; TEACHER_TPS=$2; shift 2 ;;
	--local-teacher) LOCAL_TEACHER=1; shift ;;
	--teacher-seqs) need "$@"; TEACHER_SEQS=$2; shift 2 ;;
	--distill-prompts) need "$@"; DISTILL_N=$2; shift 2 ;;
	--eval-tasks) need "$@"; EVAL_TASKS=$2; shift 2 ;;
	--bench-data) need "$@"; BENCH_DATA=$2; shift 2 ;;
	--eval-items) need "$@"; EVAL_ITEMS_GIVEN=$2; shift 2 ;;
	--gate) need "$@"; GATE=$2; shift 2 ;;
	--no-serve) SERVE=0; shift ;;
	--port) need "$@"; PORT=$2; shift 2 ;;
	--dry-run) DRY=1; shift ;;
	--rehearsal) REHEARSAL=1; shift ;;
	--fresh) FRESH=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) die "unknown option $1 (see --help)" ;;
	esac
done
isnum() { [[ $1 =~ ^[0-9]+([.][0-9]+)?$ ]]; }
for v in "$BUDGET" "$TRAIN_TPS" "$TEACHER_TPS" "$DISTILL_N" "$PORT" "$TEACHER_SEQS"; do
	[ -z "$v" ] || isnum "$v" || die "'$v' is not a number"
done
[ -z "$BUDGET" ] || awk -v b="$BUDGET" 'BEGIN{exit !(b > 0)}' || die "--budget-hours must be > 0"
[ -z "$TEACHER_URL" ] || [ "$LOCAL_TEACHER" = 0 ] || die "--teacher and --local-teacher exclude each other"
[ -z "$TEACHER_SEQS" ] || [ "$TEACHER_SEQS" -ge 1 ] || die "--teacher-seqs must be at least 1"
[ -z "$TEACHER_SEQS" ] || [ -z "$TEACHER_URL" ] || die "--teacher-seqs is for the local teacher (--local-teacher), not --teacher"
# The rehearsals: TINY, the tiny test model on the CPU; SHAPE, --from DIR
# (MiniCPM5-2B's shape) on the GPU. Only the flag picks SHAPE: a
# $MINICPM5_DIR set for real runs must not turn --rehearsal into a GPU run.
TINY=0 SHAPE=0
if [ "$REHEARSAL" = 1 ]; then
	if [ -n "$FROM_FLAG" ]; then SHAPE=1; else TINY=1; fi
	[ -z "$BUDGET" ] || die "--budget-hours is for the real run; the rehearsals' budgets are fixed"
fi
[ "$SHAPE" = 0 ] || [ -f "$FROM/config.json" ] || die "--rehearsal --from $FROM: no config.json there (want a Hugging Face checkpoint directory)"

# --- the plan ----------------------------------------------------------------
# Figures the durations are computed from. Training: docs/training.md projects
# 3.4e14 FLOPs per 4096-token sequence (8.3e10 per token) for stage 1 and
# 1.18e11 per token at stage 2's 8192 (attention grows with the length), so
# stage 2 would run at 0.70 of stage 1's tokens/s; measured on an H200 with
# both presets' settings it runs at 0.77 (3,600 against 4,700 tokens/s:
# docs/recipe.md), the factor used here. TRAIN_TPS below is stage 1's.
AVG_ANSWER=3000  # tokens per distilled answer, reasoning included (assumed)
TOKENIZE_MBS=24  # data prepare, MB/s per core (docs/benchmarks.md: 23-26 warm)
BYTES_PER_TOKEN=3.2
REPEAT='' KEEP_CKPTS=''
if [ "$TINY" = 1 ]; then
	OUT=${OUT:-out/rehearsal}
	FROM=testdata/tiny-llama
	DEVICE=cpu DTYPE=f32
	BLOCK=4
	STEPS1=60 TOKS1=512 SEQ1=64 HOLD1=16 WARM1=6 CKPT1=20
	STEPS2=30 TOKS2=512 SEQ2=64 HOLD2=16 WARM2=3 CKPT2=10
	SIZES1=(1 2 4) FRACS1=(0 0.15 0.3)
	TRAIN_TPS=${TRAIN_TPS:-3000}  # the tiny model on a 2-core CPU (docs/training.md)
	TEACHER_TPS=${TEACHER_TPS:-100}
	DISTILL_N=${DISTILL_N:-12}
	DISTILL_MAX_TOKENS=24 DISTILL_CONCURRENCY=2 DISTILL_DROP=
	TEACHER_SEQS=${TEACHER_SEQS:-4}
	AVG_ANSWER=24
	DISTILL_SPECS=("synth|$OUT/synth/train.jsonl|messages|100")
	EVAL_ITEMS=2 EVAL_MAX_TOKENS=48
	LOCAL_TEACHER=1
elif [ "$SHAPE" = 1 ]; then
	# The real model's shapes, device, dtype and presets (sequence lengths,
	# layer checkpointing, loss chunks, file formats) with the tiny
	# rehearsal's data and budgets: one sequence a step (the presets
	# accumulate 16 and 8), so a step takes ~1.5 s at 4096 on an H200.
	# Stage 1 walks the whole block warm-up, one step per size.
	OUT=${OUT:-out/rehearsal-gpu}
	DEVICE=cuda DTYPE=bf16
	BLOCK=32
	STEPS1=10 TOKS1=4096 SEQ1=4096 HOLD1=2 WARM1=2 CKPT1=10
	STEPS2=5 TOKS2=8192 SEQ2=8192 HOLD2=2 WARM2=1 CKPT2=5
	SIZES1=(1 4 8 16 32) FRACS1=(0 0.025 0.05 0.075 0.1)
	TRAIN_TPS=${TRAIN_TPS:-4700}
	TEACHER_SEQS=${TEACHER_SEQS:-64}
	TEACHER_TPS=${TEACHER_TPS:-$([ "$TEACHER_SEQS" -gt 1 ] && echo "$LOCAL_BATCH_TPS" || echo "$LOCAL_TPS")}
	DISTILL_N=${DISTILL_N:-8}
	DISTILL_MAX_TOKENS=32 DISTILL_CONCURRENCY=2 DISTILL_DROP=
	AVG_ANSWER=32
	DISTILL_SPECS=("synth|$OUT/synth/train.jsonl|messages|100")
	EVAL_ITEMS=1 EVAL_MAX_TOKENS=32
	LOCAL_TEACHER=1
	# The tiny corpus holds ~30k tokens and 8 answers far fewer: the
	# sources repeat so that the 4096- and 8192-token sequences fill at the
	# configured shares.
	REPEAT=", repeat: true"
	# A checkpoint at this shape is 30 GB (float32 weights and two moments):
	# one per stage, and removed once no later stage needs it.
	KEEP_CKPTS=1
else
	OUT=${OUT:-out}
	DEVICE=cuda DTYPE=bf16
	BLOCK=32
	# configs/train/minicpm5-2b-block.yaml and minicpm5-2b-sft.yaml.
	STEPS1=16000 TOKS1=65536 SEQ1=4096 HOLD1=64 WARM1=300 CKPT1=500
	STEPS2=3000 TOKS2=65536 SEQ2=8192 HOLD2=32 WARM2=100 CKPT2=250
	SIZES1=(1 4 8 16 32) FRACS1=(0 0.025 0.05 0.075 0.1)
	TRAIN_TPS=${TRAIN_TPS:-4700}
	if [ -n "$TEACHER_URL" ]; then
		TEACHER_TPS=${TEACHER_TPS:-20000}
	else
		TEACHER_SEQS=${TEACHER_SEQS:-64}
		TEACHER_TPS=${TEACHER_TPS:-$([ "$TEACHER_SEQS" -gt 1 ] && echo "$LOCAL_BATCH_TPS" || echo "$LOCAL_TPS")}
	fi
	# Room for the prompt inside stage 2's 8192-token sequences.
	DISTILL_MAX_TOKENS=7680 DISTILL_CONCURRENCY=64 DISTILL_DROP=--drop-truncated
	[ "$LOCAL_TEACHER" = 1 ] && DISTILL_CONCURRENCY=$TEACHER_SEQS
	# name|prompts (file or glob)|field|share of the prompts in percent.
	# Training splits only; the guard refuses anything else (docs/recipe.md).
	DISTILL_SPECS=(
		"numina|corpora/AI-MO/NuminaMath-CoT/data/train-*.parquet|messages|50"
		"openthoughts|corpora/open-thoughts/OpenThoughts3-1.2M/data/*.parquet|conversations|50"
	)
	EVAL_ITEMS=10 EVAL_MAX_TOKENS=2048
fi
TPS2=$(awk -v t="$TRAIN_TPS" -v r="$TINY" 'BEGIN{printf "%d", (r == 1 ? t : t * 0.77)}')
full_secs=$(awk -v s1="$STEPS1" -v t1="$TOKS1" -v s2="$STEPS2" -v t2="$TOKS2" -v a="$TRAIN_TPS" -v b="$TPS2" \
	'BEGIN{printf "%.0f", s1 * t1 / a + s2 * t2 / b}')
SCALED=0
if [ -n "$BUDGET" ]; then
	# One factor for both stages, so their ratio (and the warm-up's share of
	# stage 1) stays as designed.
	f=$(awk -v h="$BUDGET" -v s="$full_secs" 'BEGIN{printf "%.6f", h * 3600 / s}')
	scale() { awk -v n="$1" -v f="$f" -v lo="$2" 'BEGIN{v = int(n * f + 0.5); printf "%d", (v < lo ? lo : v)}'; }
	STEPS1=$(scale "$STEPS1" 20) STEPS2=$(scale "$STEPS2" 10)
	WARM1=$(scale "$WARM1" 1) WARM2=$(scale "$WARM2" 1)
	CKPT1=$(awk -v c="$CKPT1" -v s="$STEPS1" 'BEGIN{v = int(s / 10); if (v < 5) v = 5; printf "%d", (v < c ? v : c)}')
	CKPT2=$(awk -v c="$CKPT2" -v s="$STEPS2" 'BEGIN{v = int(s / 10); if (v < 5) v = 5; printf "%d", (v < c ? v : c)}')
	SCALED=1
fi
TRAIN_TOKENS1=$((STEPS1 * TOKS1)) TRAIN_TOKENS2=$((STEPS2 * TOKS2))
# Prepared tokens: what training reads, the held-out sequences, 2% spare.
DATA1=$(awk -v a="$TRAIN_TOKENS1" -v h="$HOLD1" -v s="$SEQ1" 'BEGIN{printf "%.0f", (a + h * s) * 1.02}')
DATA2=$(awk -v a="$TRAIN_TOKENS2" -v h="$HOLD2" -v s="$SEQ2" 'BEGIN{printf "%.0f", (a + h * s) * 1.02}')
# Distilled answers: 15% of stage 1's tokens and 60% of stage 2's
# (configs/data/minicpm5-2b-*.yaml).
if [ -z "$DISTILL_N" ]; then
	DISTILL_N=$(awk -v a="$TRAIN_TOKENS1" -v b="$TRAIN_TOKENS2" -v n="$AVG_ANSWER" 'BEGIN{printf "%d", (0.15 * a + 0.6 * b) / n}')
fi
# block_schedule for stage 1: the warm-up at the same fractions of the run.
# SCHED1 is for people; SCHED1_YAML, a block sequence without commas, for
# --set (which splits its values at commas).
SCHED1=$(awk -v s="$STEPS1" -v sizes="${SIZES1[*]}" -v fracs="${FRACS1[*]}" 'BEGIN{
	n = split(sizes, z, " "); split(fracs, q, " "); prev = -1; out = ""
	for (i = 1; i <= n; i++) { st = int(q[i] * s + 0.5); if (st <= prev) st = prev + 1; prev = st
		out = out (i > 1 ? ", " : "") st ":" z[i] }
	printf "%s", out }')
SCHED1_YAML=$(echo "$SCHED1" | tr -d ' ' | tr ',' '\n' | awk -F: '{printf "\n- step: %s\n  size: %s", $1, $2}')

AR=$OUT/minicpm5-2b-ar
DLLM=$OUT/minicpm5-2b-dllm
DISTILL=$OUT/minicpm5-2b-distill
CPT_DATA=$OUT/minicpm5-2b-cpt-data
SFT_DATA=$OUT/minicpm5-2b-sft-data
RUN1=$OUT/minicpm5-2b-block
RUN2=$OUT/minicpm5-2b-sft
FINAL=$OUT/minicpm5-2b-final
EVAL=$OUT/minicpm5-2b-eval
CONFIGS=$OUT/configs
LOGS=$OUT/logs
step_dir() { printf '%s/model-step-%07d' "$1" "$2"; }
EXPORT1=$(step_dir "$RUN1" "$STEPS1")
EXPORT2=$(step_dir "$RUN2" "$STEPS2")

BIN=$ROOT/bin/dllm
export DLLM_TORCH_LIB=${DLLM_TORCH_LIB:-$ROOT/bin/libdllmtorch.so}
dur() { awk -v s="$1" 'BEGIN{ if (s < 90) printf "%.0f s", s; else if (s < 5400) printf "%.0f min", s / 60; else if (s < 172800) printf "%.1f h", s / 3600; else printf "%.1f days", s / 86400 }'; }
commas() { awk -v n="$1" 'BEGIN{ s = sprintf("%.0f", n); o = ""; while (length(s) > 3) { o = "," substr(s, length(s) - 2) o; s = substr(s, 1, length(s) - 3) } printf "%s%s", s, o }'; }
secs_for() { awk -v t="$1" -v r="$2" 'BEGIN{printf "%.0f", t / r}'; }

STAGE=0
declare -A SECS
T_STAGE=0
header() { # title, expected
	STAGE=$((STAGE + 1))
	echo >&2
	say "== [$STAGE/8] $1"
	say "   expected: $2"
	T_STAGE=$(date +%s)
}
finish() { # stage name: its wall time, kept for the summary and printed
	SECS[$1]=$(($(date +%s) - T_STAGE))
	[ "$DRY" = 1 ] || say "   $1 took ${SECS[$1]} s"
}
skip() {
	say "   done already ($1): skipped"
	SECS[$2]=0
}
run() { # print, and run unless --dry-run
	printf '   $' >&2
	printf ' %q' "$@" >&2
	echo >&2
	[ "$DRY" = 1 ] || "$@"
}

# --- servers (teacher, evaluation) -------------------------------------------
SERVER_PID=
stop_server() {
	if [ -n "$SERVER_PID" ]; then
		kill "$SERVER_PID" 2>/dev/null || true
		wait "$SERVER_PID" 2>/dev/null || true
		SERVER_PID=
	fi
}
on_exit() { # name the stage that failed: set -e stops at any command
	local rc=$?
	stop_server
	[ "$rc" = 0 ] || say "stopped $([ "$STAGE" = 0 ] && echo "before stage 1 (exit $rc)" || echo "in stage [$STAGE/8] (exit $rc); rerun the same command to resume")"
}
trap on_exit EXIT
free_port() { # a free loopback port (the default one when python3 is missing)
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null || echo "$1"
}
start_server() { # name model port [flags...]: dllm serve on loopback, waits for /health
	local name=$1 model=$2 port=$3
	shift 3
	local cmd=("$BIN" serve --model "$model" --host 127.0.0.1 --port "$port" --device "$DEVICE" --dtype "$DTYPE" --served-model-name "$name" "$@")
	printf '   $' >&2
	printf ' %q' "${cmd[@]}" >&2
	echo " &" >&2
	[ "$DRY" = 1 ] && return
	"${cmd[@]}" >"$LOGS/$name-serve.log" 2>&1 &
	SERVER_PID=$!
	for _ in $(seq 3000); do
		curl -sf --noproxy '*' -o /dev/null "http://127.0.0.1:$port/health" && return
		kill -0 "$SERVER_PID" 2>/dev/null || {
			tail -n 20 "$LOGS/$name-serve.log" >&2
			die "the $name server stopped (log: $LOGS/$name-serve.log)"
		}
		sleep 0.2
	done
	die "the $name server was not ready after 600 s (log: $LOGS/$name-serve.log)"
}

# --- start -------------------------------------------------------------------
if [ "$REHEARSAL" = 1 ] && [ "$FRESH" = 1 ] && [ "$DRY" = 0 ]; then
	case "$OUT" in out/*) rm -rf "$OUT" ;; *) die "--fresh deletes only directories under out/, not $OUT" ;; esac
fi
[ "$DRY" = 0 ] || FROM=${FROM:-HF_DIR}
if [ "$DRY" = 0 ]; then
	[ -n "$FROM" ] || die "--from HF_DIR is required (the MiniCPM5-2B checkpoint), or --rehearsal"
	[ -f "$FROM/config.json" ] || die "$FROM has no config.json: not a Hugging Face checkpoint"
	mkdir -p "$OUT" "$CONFIGS" "$LOGS"
	# The stages need the distill and eval commands: rebuild an older binary.
	if ! { "$BIN" data distill --help && "$BIN" eval --help; } >/dev/null 2>&1; then
		say "building bin/dllm (make dllm)"
		make --no-print-directory dllm >&2
	fi
	if [ ! -e "$DLLM_TORCH_LIB" ]; then
		# The CPU shim would train nothing on the GPU: that one is built
		# against the PyTorch wheel (docs/gpu.md; ./serve.sh does it too).
		[ "$TINY" = 1 ] || die "$DLLM_TORCH_LIB is missing: build the CUDA shim first (docs/gpu.md: make shim TORCH=...)"
		say "building the libtorch shim (make shim)"
		make --no-print-directory shim >&2
	fi
	# Fail here, not after convert and distill, when the shim is the CPU one.
	ver=$("$BIN" version 2>&1) || true
	if [ "$DEVICE" = cuda ] && ! grep -q '^cuda: [1-9]' <<<"$ver"; then
		echo "$ver" >&2
		die "libtorch sees no GPU through $DLLM_TORCH_LIB: on the GPU machine build the CUDA shim (make shim TORCH=\$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))'))"
	fi
fi
if [ "$SHAPE" = 1 ] && [ "$DRY" = 0 ] && [ ! -f "$FINAL/dllm.json" ]; then
	# The peak is at stage 2's end: stage 1's float32 export (2 W, W = the
	# bf16 weights), stage 2's checkpoint (6 W: float32 weights and AdamW's
	# two moments) and its bf16 export (W); stage 1's checkpoint (6 W) is
	# removed before. What this directory holds already counts against it.
	w=$(du -cbL "$FROM"/*.safetensors 2>/dev/null | tail -n 1 | cut -f1) || true
	[ "${w:-0}" -gt 0 ] || die "$FROM holds no *.safetensors weights"
	used=$(du -sbL "$FROM" "$OUT" 2>/dev/null | tail -n 1 | cut -f1) || true
	avail=$(df -PB1 "$OUT" | awk 'NR == 2 {print $4}')
	need=$((9 * w - ${used:-0}))
	[ "$need" -gt 0 ] || need=0
	gb() { awk -v b="$1" 'BEGIN{printf "%.1f GB", b / 1e9}'; }
	say "disk: the rehearsal needs ~$(gb "$need") more on $(df -P "$OUT" | awk 'NR == 2 {print $6}') ($(gb "$avail") free)"
	[ "$avail" -ge "$need" ] || die "not enough disk space for the GPU rehearsal: ~$(gb "$need") needed, $(gb "$avail") free under $OUT"
fi
case "$TINY$SHAPE" in
10) what="REHEARSAL on the tiny test model, CPU" ;;
01) what="GPU REHEARSAL at MiniCPM5-2B's shape from $FROM, cuda, bf16, the tiny corpus and budgets" ;;
*) what="MiniCPM5-2B from ${FROM:-HF_DIR}, GPU" ;;
esac
say "plan: $what -> $OUT"
say "  stage 1: $(commas "$STEPS1") steps x $(commas "$TOKS1") tokens = $(commas "$TRAIN_TOKENS1") tokens, blocks (step:size) $SCHED1"
say "  stage 2: $(commas "$STEPS2") steps x $(commas "$TOKS2") tokens = $(commas "$TRAIN_TOKENS2") tokens, blocks of $BLOCK"
say "  training speed: $(commas "$TRAIN_TPS") tok/s stage 1, $(commas "$TPS2") tok/s stage 2$([ -z "${TRAIN_TPS_GIVEN:-}" ] && [ "$TINY" = 0 ] && echo " (measured on an H200 with random weights of this shape, docs/benchmarks.md; pass --train-tps for your machine)")"
if [ "$SCALED" = 1 ]; then
	say "  --budget-hours $BUDGET scales the full recipe ($(dur "$full_secs") of training) by $f"
fi
say "  training total: $(dur "$(awk -v a="$TRAIN_TOKENS1" -v b="$TRAIN_TOKENS2" -v x="$TRAIN_TPS" -v y="$TPS2" 'BEGIN{printf "%.0f", a / x + b / y}')")"

# --- 1. convert --------------------------------------------------------------
header "convert $FROM" "$([ "$TINY" = 1 ] && echo "~1 s" || echo "~10 s: hard links plus a sha256 of the 5 GB checkpoint, twice (6.6 s each on the H200 machine)")"
if [ -f "$DLLM/dllm.json" ] && [ -f "$AR/dllm.json" ]; then
	skip "$DLLM/dllm.json, $AR/dllm.json" convert
else
	preset=()
	[ "$TINY" = 1 ] || preset=(--preset configs/minicpm5-2b.yaml)
	# The diffusion model to train, and the AR original as a dllm model with
	# blocks of 1 (decoding it is plain greedy/sampled AR): the distillation
	# teacher and the evaluation baseline. Both hard-link the same weights.
	[ -f "$DLLM/dllm.json" ] || run "$BIN" convert --from "$FROM" --out "$DLLM" ${preset[@]+"${preset[@]}"} --block-size "$BLOCK"
	[ -f "$AR/dllm.json" ] || run "$BIN" convert --from "$FROM" --out "$AR" ${preset[@]+"${preset[@]}"} --block-size 1
	finish convert
fi

# --- 2. distill --------------------------------------------------------------
if [ "$REHEARSAL" = 1 ] && [ "$DRY" = 0 ] && [ ! -f "$OUT/synth/tasks.json" ]; then
	# The rehearsal's prompts and dev set: exact-answer tasks (docs/proxy.md).
	"$BIN" data synth --out "$OUT/synth" --tasks v1 --train 100 --heldout 10 --seed 0 >"$LOGS/synth.log"
fi
header "distill $(commas "$DISTILL_N") prompts with the original model" \
	"$(commas "$DISTILL_N") x ~$AVG_ANSWER tokens / $(commas "$TEACHER_TPS") tok/s = $(dur "$(secs_for "$((DISTILL_N * AVG_ANSWER))" "$TEACHER_TPS")")$([ -z "$TEACHER_URL" ] && [ "$TINY" = 0 ] && echo " with dllm serve, $TEACHER_SEQS request(s) at once")$([ "$SHAPE" = 1 ] && echo ", plus ~10 s to load the teacher")"
[ "$DRY" = 1 ] || mkdir -p "$DISTILL"
todo=()
for spec in "${DISTILL_SPECS[@]}"; do
	IFS='|' read -r name _ _ _ <<<"$spec"
	[ -f "$DISTILL/$name.done" ] || todo+=("$spec")
done
if [ "$DISTILL_N" = 0 ]; then
	say "   --distill-prompts 0: no distillation; the configs' distilled sources stay empty"
	[ "$DRY" = 1 ] || : >"$DISTILL/none.distilled.jsonl"
	SECS[distill]=0
elif [ "${#todo[@]}" = 0 ]; then
	skip "$DISTILL/*.done" distill
else
	if [ -z "$TEACHER_URL" ] && [ "$LOCAL_TEACHER" = 0 ]; then
		msg="distillation needs a teacher: --teacher URL (vLLM or SGLang serving $FROM; see docs/recipe.md), or --local-teacher for dllm serve (projected $(dur "$(secs_for "$((DISTILL_N * AVG_ANSWER))" "$TEACHER_TPS")") for $(commas "$DISTILL_N") prompts), or --distill-prompts 0"
		[ "$DRY" = 1 ] || die "$msg"
		say "   (a real run stops here) $msg"
		TEACHER_URL=TEACHER_URL
	fi
	url=$TEACHER_URL
	if [ -z "$url" ]; then
		tport=$(free_port 18610)
		# N requests together, each in a KV cache slot of a prompt and an answer.
		TEACHER_SEQS=${TEACHER_SEQS:-64}
		start_server teacher "$AR" "$tport" --max-num-seqs "$TEACHER_SEQS" --max-model-len "$((DISTILL_MAX_TOKENS + 2048))"
		url=http://127.0.0.1:$tport
		[ "$TEACHER_SEQS" -gt 1 ] && DISTILL_CONCURRENCY=$TEACHER_SEQS
	fi
	for spec in "${todo[@]}"; do
		IFS='|' read -r name prompts field share <<<"$spec"
		limit=$(awk -v n="$DISTILL_N" -v s="$share" 'BEGIN{v = int(n * s / 100); printf "%d", (v < 1 ? 1 : v)}')
		if [ "$DRY" = 0 ] && ! compgen -G "$prompts" >/dev/null; then
			die "no prompts at $prompts: download the training split first (docs/recipe.md)"
		fi
		drop=()
		[ -n "$DISTILL_DROP" ] && drop=("$DISTILL_DROP")
		run "$BIN" data distill --teacher "$url" --prompts "$prompts" --prompt-field "$field" --limit "$limit" \
			--out "$DISTILL/$name.distilled.jsonl" --concurrency "$DISTILL_CONCURRENCY" --max-tokens "$DISTILL_MAX_TOKENS" \
			--temperature 0.6 --top-p 0.95 ${drop[@]+"${drop[@]}"}
		[ "$DRY" = 1 ] || date -u +%FT%TZ >"$DISTILL/$name.done"
	done
	stop_server
	finish distill
fi

# --- 3. prepare --------------------------------------------------------------
write_configs() {
	if [ "$REHEARSAL" = 0 ]; then
		# The repository's configs, pointed at this work directory.
		sed "s#\bout/minicpm5-2b#$OUT/minicpm5-2b#g" configs/data/minicpm5-2b-cpt.yaml >"$CONFIGS/cpt-data.yaml"
		sed "s#\bout/minicpm5-2b#$OUT/minicpm5-2b#g" configs/data/minicpm5-2b-sft.yaml >"$CONFIGS/sft-data.yaml"
		return
	fi
	# The same two mixtures in miniature: the tiny corpus for text, the
	# synthetic chats and the distilled answers for chat.
	cat >"$CONFIGS/cpt-data.yaml" <<EOF
tokenizer: $DLLM
out: $CPT_DATA
seq_len: $SEQ1
shard_tokens: 4096
separator: ""
chat: {enable_thinking: true}
sources:
  - {name: web, kind: text, paths: [testdata/corpus/tiny.jsonl], weight: 0.7$REPEAT}
  - {name: sft-replay, kind: chat, paths: [$OUT/synth/train.jsonl], weight: 0.15$REPEAT}
  - {name: distilled, kind: chat, paths: ["$DISTILL/*.distilled.jsonl"], weight: 0.15$REPEAT}
EOF
	cat >"$CONFIGS/sft-data.yaml" <<EOF
tokenizer: $DLLM
out: $SFT_DATA
seq_len: $SEQ2
shard_tokens: 4096
separator: ""
chat: {enable_thinking: true}
sources:
  - {name: distilled, kind: chat, paths: ["$DISTILL/*.distilled.jsonl"], weight: 0.6$REPEAT}
  - {name: synth, kind: chat, paths: [$OUT/synth/train.jsonl], weight: 0.4$REPEAT}
EOF
}
prepared() { grep -q '"complete": *true' "$1/manifest.json" 2>/dev/null; }
header "prepare the stage-1 and stage-2 data" \
	"$(commas "$((DATA1 + DATA2))") tokens at ~$TOKENIZE_MBS MB/s per core x $(nproc) cores = $(dur "$(awk -v t="$((DATA1 + DATA2))" -v b="$BYTES_PER_TOKEN" -v m="$TOKENIZE_MBS" -v c="$(nproc)" 'BEGIN{printf "%.0f", t * b / (m * 1e6 * c)}')") plus reading the corpora"
if prepared "$CPT_DATA" && prepared "$SFT_DATA"; then
	skip "manifest.json complete" prepare
else
	[ "$DRY" = 1 ] || write_configs
	total1=() total2=()
	# A budget fixes how much is prepared; without one the configs say.
	if [ "$SCALED" = 1 ] || [ "$REHEARSAL" = 1 ]; then total1=(--total-tokens "$DATA1") total2=(--total-tokens "$DATA2"); fi
	prepared "$CPT_DATA" || run "$BIN" data prepare --config "$CONFIGS/cpt-data.yaml" --tokenizer "$DLLM" --out "$CPT_DATA" ${total1[@]+"${total1[@]}"}
	prepared "$SFT_DATA" || run "$BIN" data prepare --config "$CONFIGS/sft-data.yaml" --tokenizer "$DLLM" --out "$SFT_DATA" ${total2[@]+"${total2[@]}"}
	finish prepare
fi

# --- the evaluation (stage 7, and --gate after stages 4 and 5) ---------------
[ -z "$EVAL_ITEMS_GIVEN" ] || EVAL_ITEMS=$EVAL_ITEMS_GIVEN
# The published benchmarks whose files are in --bench-data (docs/eval.md).
SUITES=
if [ -n "$BENCH_DATA" ]; then
	for s in "math-500 math-500/test.jsonl" "gpqa-diamond gpqa/gpqa_diamond.csv" "mmlu-pro mmlu-pro/data/test-00000-of-00001.parquet" "lcb-v6 livecodebench/test6.jsonl"; do
		set -- $s
		[ -f "$BENCH_DATA/$2" ] && SUITES=${SUITES:+$SUITES,}$1
	done
	[ -n "$SUITES" ] || die "--bench-data $BENCH_DATA holds none of the benchmarks' files (docs/eval.md says how to download them)"
	EVAL_MAX_TOKENS=32768
fi
if [ -z "$EVAL_TASKS" ]; then
	EVAL_TASKS=$([ "$REHEARSAL" = 1 ] && echo "$OUT/synth/heldout.jsonl" || echo "$EVAL/synth/heldout.jsonl")
fi
# Two models x 4 tasks x items x about half the cap, at dllm serve's AR rate.
eval_secs=$(awk -v n="$EVAL_ITEMS" -v m="$EVAL_MAX_TOKENS" -v r="$LOCAL_TPS" 'BEGIN{printf "%.0f", 2 * 4 * n * m / 2 / r}')
eval_args=(--tasks "$EVAL_TASKS" --concurrency 1 --max-tokens "$EVAL_MAX_TOKENS" --temperature 0 --limit "$EVAL_ITEMS")
[ -z "$SUITES" ] || eval_args=(--suite "$SUITES" --data "$BENCH_DATA" --concurrency 1 --max-tokens "$EVAL_MAX_TOKENS" --temperature 0 --limit "$EVAL_ITEMS")
# eval_model NAME MODEL OUT: the AR original scored first (once, $EVAL/ar.json),
# then MODEL, normalised against it, into OUT.
eval_model() {
	[ "$DRY" = 1 ] || mkdir -p "$EVAL"
	if [ "$REHEARSAL" = 0 ] && [ -z "$SUITES" ] && [ ! -f "$EVAL_TASKS" ]; then
		# Exact-answer reasoning tasks generated here: a dev set that is no
		# benchmark's split (docs/proxy.md).
		run "$BIN" data synth --out "$EVAL/synth" --tasks v1 --train 0 --heldout "$EVAL_ITEMS" --seed 11
	fi
	local eport
	eport=$(free_port 18620)
	if [ ! -f "$EVAL/ar.json" ]; then
		start_server ar "$AR" "$eport"
		run "$BIN" eval --server "http://127.0.0.1:$eport" "${eval_args[@]}" --out "$EVAL/ar.json.tmp"
		[ "$DRY" = 1 ] || mv "$EVAL/ar.json.tmp" "$EVAL/ar.json"
		stop_server
	fi
	start_server "$1" "$2" "$eport"
	run "$BIN" eval --server "http://127.0.0.1:$eport" "${eval_args[@]}" --baseline "$EVAL/ar.json" --out "$3.tmp"
	[ "$DRY" = 1 ] || mv "$3.tmp" "$3"
	stop_server
}
# gate STAGE MODEL: with --gate, score the stage's checkpoint and stop the
# run when its mean normalised score is below the gate.
gate() {
	[ -n "$GATE" ] || return 0
	local out=$EVAL/gate-$1.json mean
	say "   --gate $GATE: scoring $2"
	[ -f "$out" ] || eval_model "gate-$1" "$2" "$out"
	[ "$DRY" = 1 ] && return
	mean=$(python3 -c 'import json,sys; m=json.load(open(sys.argv[1])).get("mean_normalized"); print("" if m is None else m)' "$out" 2>/dev/null || true)
	[ -n "$mean" ] || die "--gate $GATE: $out has no normalised score (the AR original scores at chance on these items)"
	awk -v m="$mean" -v g="$GATE" 'BEGIN{exit !(m >= g)}' ||
		die "--gate $GATE: $1's checkpoint scores $mean normalised, below the gate: stopped (results: $out)"
	say "   --gate $GATE: $1's checkpoint scores $mean normalised: going on"
}

# --- 4, 5. train -------------------------------------------------------------
train_args() { # stage -> the dllm train arguments
	if [ "$1" = 1 ]; then
		if [ "$TINY" = 1 ]; then
			echo --config configs/train/tiny-cpu.yaml
		else
			echo --config configs/train/minicpm5-2b-block.yaml
		fi
	else
		if [ "$TINY" = 1 ]; then
			echo --config configs/train/tiny-cpu.yaml --lr 1e-3 --set min_lr=1e-4
		else
			# The preset names out/minicpm5-2b-ar as the (off by default)
			# distillation teacher: this work directory's copy instead.
			echo --config configs/train/minicpm5-2b-sft.yaml --set "distill.teacher=$AR"
		fi
	fi
}
# At the real shape, with so few steps, the files take longer than the steps
# (not measured yet; the disk's speed decides).
SHAPE_IO1='' SHAPE_IO2=''
if [ "$SHAPE" = 1 ]; then
	SHAPE_IO1=", plus ~1 min to load the model, write the 30 GB checkpoint and the 10 GB float32 export"
	SHAPE_IO2=", plus ~1 min to load stage 1's export, write the 30 GB checkpoint and the 5 GB export"
fi
# The GPU rehearsal's overrides of the presets: one sequence a step, a
# held-out set that its tiny data can fill, a log line every step, one
# checkpoint kept.
shape_args() { # stage's held-out sequences
	[ "$SHAPE" = 1 ] || return 0
	echo --grad-accum 1 --log-every 1 --set "data.hold_out=$1" --set "eval_seqs=$1" --set "keep_checkpoints=$KEEP_CKPTS"
}
# prune DIR WHY: the GPU rehearsal removes a checkpoint or an export's
# weights (30 and 10 GB) once no later stage reads them, so that it fits a
# 64 GB disk; a real run keeps everything. Stages test for dllm.json, which
# stays, so a rerun still skips the stages that are done.
prune() {
	[ "$SHAPE" = 1 ] || return 0
	if [ "$DRY" = 1 ]; then
		say "   rehearsal: then removes $1 ($2)"
	elif [ -e "$1" ]; then
		say "   rehearsal: removing $1 ($(du -sh "$1" | cut -f1); $2)"
		rm -rf "$1"
	fi
}
header "train stage 1: block diffusion, blocks (step:size) $SCHED1" \
	"$(commas "$TRAIN_TOKENS1") tokens / $(commas "$TRAIN_TPS") tok/s = $(dur "$(secs_for "$TRAIN_TOKENS1" "$TRAIN_TPS")")$SHAPE_IO1"
if [ -f "$EXPORT1/dllm.json" ]; then
	skip "$EXPORT1/dllm.json" train1
else
	read -ra base <<<"$(train_args 1) $(shape_args "$HOLD1")"
	extra=()
	if [ "$SCALED" = 1 ] || [ "$REHEARSAL" = 1 ]; then
		extra=(--steps "$STEPS1" --set "warmup_steps=$WARM1" --set "block_schedule=$SCHED1_YAML"
			--set "checkpoint_every=$CKPT1" --set "eval_every=$CKPT1" --set sample_every=0)
	fi
	# Stage 2 starts from this export: float32, so no precision is lost
	# between the stages.
	run "$BIN" train "${base[@]}" --model "$DLLM" --data "$CPT_DATA" --out "$RUN1" --resume \
		--set export_dtype=f32 ${extra[@]+"${extra[@]}"}
	[ "$DRY" = 1 ] || [ -f "$EXPORT1/dllm.json" ] || die "stage 1 ended without $EXPORT1"
	finish train1
fi
gate train1 "$EXPORT1"
prune "$RUN1/checkpoints" "stage 2 starts from the export"

header "train stage 2: chat/reasoning SFT with <think> traces, blocks of $BLOCK" \
	"$(commas "$TRAIN_TOKENS2") tokens / $(commas "$TPS2") tok/s = $(dur "$(secs_for "$TRAIN_TOKENS2" "$TPS2")")$SHAPE_IO2"
if [ -f "$EXPORT2/dllm.json" ]; then
	skip "$EXPORT2/dllm.json" train2
else
	read -ra base <<<"$(train_args 2) $(shape_args "$HOLD2")"
	extra=()
	if [ "$SCALED" = 1 ] || [ "$REHEARSAL" = 1 ]; then
		extra=(--steps "$STEPS2" --set "warmup_steps=$WARM2" --set "checkpoint_every=$CKPT2" --set "eval_every=$CKPT2" --set sample_every=0)
	fi
	run "$BIN" train "${base[@]}" --model "$EXPORT1" --data "$SFT_DATA" --out "$RUN2" --resume \
		--block-size "$BLOCK" ${extra[@]+"${extra[@]}"}
	[ "$DRY" = 1 ] || [ -f "$EXPORT2/dllm.json" ] || die "stage 2 ended without $EXPORT2"
	finish train2
fi
gate train2 "$EXPORT2"
prune "$EXPORT1/model.safetensors" "stage 2 is done"

# --- 6. export ---------------------------------------------------------------
header "export $FINAL" "$([ "$TINY" = 1 ] && echo "~1 s" || echo "~1 min: 10 GB of float32 masters read, 5 GB of bf16 written")"
if [ -f "$FINAL/dllm.json" ]; then
	skip "$FINAL/dllm.json" export
else
	run "$BIN" export --checkpoint "$RUN2" --out "$FINAL" --dtype "$DTYPE"
	finish export
fi

# --- 7. eval -----------------------------------------------------------------
header "quick eval on ${SUITES:-$EVAL_TASKS} (AR original vs diffusion model)" \
	"$([ "$TINY" = 1 ] && echo "~20 s" || echo "<= $(dur "$eval_secs")$([ "$SHAPE" = 1 ] && echo " plus ~10 s per model to load"): 2 models x 4 tasks x $EVAL_ITEMS items x ~$((EVAL_MAX_TOKENS / 2)) tokens at ~$LOCAL_TPS tok/s")"
if [ -f "$EVAL/diffusion.json" ]; then
	skip "$EVAL/diffusion.json" eval
else
	eval_model diffusion "$FINAL" "$EVAL/diffusion.json"
	finish eval
fi

# --- 8. serve ----------------------------------------------------------------
if [ "$DRY" = 0 ]; then
	echo >&2
	say "wall time per stage (0: skipped):"
	for s in convert distill prepare train1 train2 export eval; do
		say "  $(printf '%-8s' "$s") ${SECS[$s]:-0} s"
	done
fi
header "serve $FINAL" "ready in < 30 s (2.0-2.4 s measured on an H200)"
if [ "$SERVE" = 0 ]; then
	say "   --no-serve: not started (./serve.sh --model $FINAL serves the result)"
elif [ "$DRY" = 1 ]; then
	printf '   $ ./serve.sh --model %q --port %q\n' "$FINAL" "$PORT" >&2
elif [ "$REHEARSAL" = 1 ]; then
	# Start it, ask one question, stop: the rehearsal must end.
	sport=$(free_port 18630)
	./serve.sh --model "$FINAL" --host 127.0.0.1 --port "$sport" --device "$DEVICE" --dtype "$DTYPE" >"$LOGS/serve.sh.log" 2>&1 &
	SERVER_PID=$!
	for _ in $(seq 600); do
		curl -sf --noproxy '*' -o /dev/null "http://127.0.0.1:$sport/health" && break
		kill -0 "$SERVER_PID" 2>/dev/null || die "serve.sh stopped (log: $LOGS/serve.sh.log)"
		sleep 0.2
	done
	answer=$(curl -sf --noproxy '*' "http://127.0.0.1:$sport/v1/chat/completions" -H 'Content-Type: application/json' \
		-d '{"messages":[{"role":"user","content":"What is 19+30?"}],"max_tokens":16}') || die "serve.sh did not answer"
	say "   serve.sh answered: $answer"
	stop_server
else
	trap - EXIT
	exec ./serve.sh --model "$FINAL" --port "$PORT"
fi
if [ "$REHEARSAL" = 1 ] && [ "$DRY" = 0 ]; then
	say "rehearsal complete: every stage ran $([ "$TINY" = 1 ] && echo "on the tiny model" || echo "at MiniCPM5-2B's shape ($FROM)")$([ "$SERVE" = 0 ] && echo ", serve.sh skipped (--no-serve)")"
fi
