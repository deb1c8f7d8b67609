#!/usr/bin/env bash
# On the GPU machine: build the shim against the installed PyTorch wheel and
# run a few steps of block-diffusion training at MiniCPM5-2B's real size:
# random weights of its shape (testdata/minicpm5-2b-shape/config.json),
# synthetic token sequences (no corpus needed), seq 4096 in the 2L
# noisy+clean layout, bf16 compute over float32 masters, layer
# checkpointing, blocks of 32. Prints tokens/s and MFU per step, then the
# average and the peak GPU memory. Writes no checkpoint.
#
# Usage: scripts/gpu-train.sh   (expects bin/dllm from the CPU machine, or Go)
# Environment: STEPS (10), MICRO_BATCH (1), GRAD_ACCUM (1), SEQ_LEN (4096),
# BLOCK (32), CKPT (true: layer checkpointing), KEEP (0: with CKPT, the last
# KEEP layers keep their activations), PEAK_TFLOPS (989), KEEP_SHIM (1: reuse
# bin/libdllmtorch.so from an earlier run).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
TORCH=$($PY -c 'import torch,os;print(os.path.dirname(torch.__file__))')
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "torch wheel: $TORCH ($($PY -c 'import torch;print(torch.__version__)'))"
[ "${KEEP_SHIM:-0}" = 1 ] || rm -f bin/libdllmtorch.so
make -j8 --no-print-directory shim TORCH="$TORCH"
[ -x bin/dllm ] || make --no-print-directory dllm
bin/dllm version
OUT=$(mktemp -d)/gpu-train
# The preset, then the speed-run overrides.
bin/dllm train --config configs/train/minicpm5-2b-block.yaml \
	--init random --model-config testdata/minicpm5-2b-shape/config.json \
	--synthetic --seq-len "${SEQ_LEN:-4096}" --block-size "${BLOCK:-32}" \
	--steps "${STEPS:-10}" --micro-batch "${MICRO_BATCH:-1}" --grad-accum "${GRAD_ACCUM:-1}" \
	--device cuda --dtype bf16 --out "$OUT" --no-checkpoint --log-every 1 \
	--set checkpoint_layers="${CKPT:-true}" --set keep_layers="${KEEP:-0}" --set peak_tflops="${PEAK_TFLOPS:-989}"
