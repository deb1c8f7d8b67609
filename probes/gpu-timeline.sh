#!/usr/bin/env bash
# On the GPU machine: the kernels of steady-state decode forwards as they
# really ran (CUPTI's concurrent-kernel records through an injection
# library, probes/cupti/cupti_trace.cpp: CUDA graphs node by node, the overlap
# that programmatic dependent launch gives kept), summed per kernel by
# probes/gpu_timeline_summary.py: how long each ran and how much it added
# to the forward (its end minus the previous kernel's end). Expects bin/dllm
# and the CUDA shim. Environment: CTX=1k MODE="--commit 3" (or --ar),
# TOKENS=160, TAIL=0.3 (the last fraction of the recorded kernels summed:
# past the warm-up, the prefill and the captures).
set -uo pipefail
cd "$(dirname "$0")/.."
CTX=${CTX:-1k}
MODE=${MODE:-"--commit 3"}
PY=${PY:-python3}
SP=$($PY -c 'import torch,os;print(os.path.dirname(os.path.dirname(torch.__file__)))')
INC=""
LIB=""
for d in "$SP/nvidia/cu13" "$SP/nvidia/cuda_cupti" /usr/local/cuda/extras/CUPTI /usr/local/cuda; do
	[ -z "$INC" ] && [ -e "$d/include/cupti.h" ] && INC="$d/include"
	[ -z "$LIB" ] && LIB=$(ls "$d"/lib*/libcupti.so* 2>/dev/null | head -1)
done
[ -n "$INC" ] && [ -n "$LIB" ] || { echo "no CUPTI (headers: '$INC', library: '$LIB')"; exit 1; }
SO=/tmp/libcupti_trace.so
rm -f $SO
# The newest record type of each kind the headers define.
newest() { grep -ho "CUpti_Activity$1[0-9]*\b" "$INC"/cupti_activity.h | sort -V | tail -1; }
g++ -std=c++17 -O2 -shared -fPIC -DKREC="$(newest Kernel)" -DSREC="$(newest Memset)" -DCREC="$(newest Memcpy)" \
	-I"$INC" -I/usr/local/cuda/include -o $SO probes/cupti/cupti_trace.cpp "$LIB" -Wl,-rpath="$(dirname "$LIB")"
[ -e $SO ] || { echo "cupti_trace.cpp did not build against $INC"; exit 1; }
TR=${OUT:-/tmp}/trace-$CTX${MODE//[ -]/}.txt
CUDA_INJECTION64_PATH=$SO DLLM_TRACE_OUT=$TR bin/dllm bench decode --config testdata/minicpm5-2b-shape/config.json \
	--device cuda --dtype bf16 --ctx "$CTX" --block 32 $MODE --tokens "${TOKENS:-160}" 2>&1 | tail -3
$PY probes/gpu_timeline_summary.py "$TR" "${TAIL:-0.3}"
