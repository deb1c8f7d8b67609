#!/usr/bin/env bash
# Start the dllm OpenAI-compatible server in the foreground (docs/serve.md).
#
#   ./serve.sh [--model DIR] [--host HOST] [--port PORT] [--device auto|cpu|cuda] [dllm serve options...]
#
# Environment: DLLM_MODEL, HOST, PORT, DLLM_DEVICE (same as the flags; flags
# win), DLLM_HOME (default ~/.cache/dllm), DLLM_API_KEY (the key clients
# must send; or pass --api-key-file FILE). Without a model it serves, in this
# order: models/default in this repository, $DLLM_HOME/default, else the
# built-in demo model: models/demo (a small diffusion model trained on
# the proxy's synthetic tasks, docs/proxy.md), or without it the tiny
# random test model (it answers gibberish, but answers).
#
# It needs no network. It uses bin/dllm and bin/libdllmtorch.so as they are;
# only when one is missing (or, with a GPU present, the shim cannot use it)
# does it build with make, which needs Go and g++ (and for the GPU a PyTorch
# wheel: python3 -c 'import torch'). Options it does not know go to dllm serve.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$ROOT"

say() { echo "serve.sh: $*" >&2; }
die() {
	say "error: $1"
	exit "${2:-1}"
}

MODEL=${DLLM_MODEL:-}
HOST=${HOST:-0.0.0.0}
PORT=${PORT:-8000}
DEVICE=${DLLM_DEVICE:-auto}
DLLM_HOME=${DLLM_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/dllm}
PASS=()
need() { [ "$#" -ge 2 ] || die "$1 needs a value" 2; }
while [ "$#" -gt 0 ]; do
	case "$1" in
	--model) need "$@"; MODEL=$2; shift 2 ;;
	--model=*) MODEL=${1#*=}; shift ;;
	--host) need "$@"; HOST=$2; shift 2 ;;
	--host=*) HOST=${1#*=}; shift ;;
	--port) need "$@"; PORT=$2; shift 2 ;;
	--port=*) PORT=${1#*=}; shift ;;
	--device) need "$@"; DEVICE=$2; shift 2 ;;
	--device=*) DEVICE=${1#*=}; shift ;;
	-h | --help)
		sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
		exit 0
		;;
	*) PASS+=("$1"); shift ;;
	esac
done
case "$PORT" in '' | *[!0-9]*) die "port '$PORT' is not a number" 2 ;; esac
case "$DEVICE" in auto | cpu | cuda | cuda:[0-9]*) ;; *) die "--device '$DEVICE': want auto, cpu, cuda or cuda:N" 2 ;; esac

# --- the binary and the libtorch shim -------------------------------------
BIN=$ROOT/bin/dllm
SHIM=${DLLM_TORCH_LIB:-$ROOT/bin/libdllmtorch.so}
export DLLM_TORCH_LIB=$SHIM

if [ ! -x "$BIN" ]; then
	command -v go >/dev/null || die "bin/dllm is missing and Go is not installed to build it (see README.md)"
	say "bin/dllm is missing; building it (make dllm)"
	make --no-print-directory dllm >&2 || die "building bin/dllm failed"
fi

have_gpu() { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }
# shim_cuda prints the number of GPUs the shim sees, or "none" if it cannot be loaded.
shim_cuda() {
	local out
	[ -e "$SHIM" ] || { echo none; return; }
	out=$("$BIN" version 2>/dev/null) || { echo none; return; }
	case "$out" in *"libtorch: not available"*) echo none; return ;; esac
	echo "$out" | sed -n 's/^cuda: \([0-9][0-9]*\) device.*/\1/p' | grep . || echo 0
}
build_cuda_shim() {
	local torch
	torch=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))' 2>/dev/null) || return 1
	command -v "${CXX:-g++}" >/dev/null || return 1
	say "building the CUDA shim against PyTorch at $torch (make shim TORCH=...; about 20 s)"
	[ "$SHIM" = "$ROOT/bin/libdllmtorch.so" ] || die "DLLM_TORCH_LIB=$SHIM cannot use the GPU; unset it to let serve.sh build bin/libdllmtorch.so"
	rm -f "$SHIM"
	make --no-print-directory shim TORCH="$torch" >&2
}

WANT_GPU=no
case "$DEVICE" in
cuda*)
	have_gpu || die "--device $DEVICE was asked for, but nvidia-smi sees no GPU"
	WANT_GPU=yes
	;;
auto) have_gpu && WANT_GPU=yes ;;
esac
GPUS=$(shim_cuda)
if [ "$WANT_GPU" = yes ] && { [ "$GPUS" = none ] || [ "$GPUS" = 0 ]; }; then
	# A CPU-only or unusable shim on a GPU machine: the one build worth doing.
	if ! build_cuda_shim; then
		[ "$DEVICE" = auto ] || die "--device $DEVICE: no CUDA-capable shim and no PyTorch wheel (python3 -c 'import torch') or g++ to build one"
		say "warning: a GPU is present but the shim cannot use it and cannot be rebuilt here; serving on the CPU"
	fi
	GPUS=$(shim_cuda)
fi
if [ "$GPUS" = none ] && [ "$SHIM" = "$ROOT/bin/libdllmtorch.so" ]; then
	# Missing, or built for another libtorch or an older ABI: a broken build.
	if command -v "${CXX:-g++}" >/dev/null && [ -e /usr/include/torch/csrc/api/include/torch/torch.h ]; then
		say "bin/libdllmtorch.so is missing or unusable; building the CPU shim (make shim, a few minutes)"
		rm -f "$SHIM"
		make --no-print-directory shim >&2 || die "building the shim failed"
		GPUS=$(shim_cuda)
	fi
fi
if [ "$GPUS" = none ]; then
	[ "$GPUS" != none ] || die "cannot load the libtorch shim $SHIM: $("$BIN" version --smoke 2>&1 | tail -n 4 | tr '\n' ' ')"
fi
case "$DEVICE" in
cuda*) [ "$GPUS" -gt 0 ] || die "--device $DEVICE was asked for, but there is no usable GPU (nvidia-smi and the shim see none)" ;;
esac

# --- the model -------------------------------------------------------------
DEMO=no
if [ -z "$MODEL" ]; then
	for d in "$ROOT/models/default" "$DLLM_HOME/default"; do
		if [ -e "$d/dllm.json" ]; then
			MODEL=$d
			break
		fi
	done
fi
if [ -z "$MODEL" ] && [ -e "$ROOT/models/demo/dllm.json" ]; then
	# The built-in demo: the proxy's small diffusion model (docs/proxy.md).
	DEMO=trained
	MODEL=$ROOT/models/demo
fi
if [ -z "$MODEL" ]; then
	DEMO=yes
	MODEL=$DLLM_HOME/demo-tiny-llama
	if [ ! -e "$MODEL/dllm.json" ]; then
		say "no model given or installed; making the built-in demo model in $MODEL"
		mkdir -p "$DLLM_HOME"
		rm -rf "$MODEL"
		out=$("$BIN" convert --from "$ROOT/testdata/tiny-llama" --out "$MODEL" --block-size 4 --hash fast 2>&1) ||
			die "making the demo model failed: $out"
	fi
fi
[ -d "$MODEL" ] || die "model directory '$MODEL' does not exist" 2
[ -e "$MODEL/config.json" ] || die "'$MODEL' is not a model directory (no config.json)" 2
[ -e "$MODEL/dllm.json" ] || die "'$MODEL' has no dllm.json: it is not a dllm model. Convert a HuggingFace checkpoint first: bin/dllm convert --from '$MODEL' --out DIR" 2
if [ "$DEMO" = trained ]; then
	say "serving the built-in DEMO model (models/demo: 0.92M parameters, trained only on sums, sorting, shop"
	say "ledgers, word problems and small Python functions; ask it e.g. 'Sort in ascending order: 6, 5, 74, 94')."
	say "Give a real one with --model DIR or DLLM_MODEL, or install it at models/default"
fi
if [ "$DEMO" = yes ]; then
	say "serving the DEMO model (tiny, random weights: its text is gibberish)."
	say "give a real one with --model DIR or DLLM_MODEL, or install it at models/default"
fi

# --- run ---------------------------------------------------------------------
# exec: signals reach the server and its exit status is the script's. The
# server itself logs "ready" with its URL once the model is loaded; a check
# from here could not tell it from another program answering on the port.
exec "$BIN" serve --model "$MODEL" --host "$HOST" --port "$PORT" --device "$DEVICE" ${PASS[@]+"${PASS[@]}"}
