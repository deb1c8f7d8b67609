#!/usr/bin/env bash
# On the GPU machine: build the shim against the installed PyTorch wheel and
# run the dllm binary built on the CPU machine (carried in bin/) with it.
# Usage: scripts/gpu-smoke.sh   (expects bin/dllm; prints a short report)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
TORCH=$($PY -c 'import torch,os;print(os.path.dirname(torch.__file__))')
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "torch wheel: $TORCH ($($PY -c 'import torch;print(torch.__version__)'))"
t0=$(date +%s%N)
rm -f bin/libdllmtorch.so
make -j8 --no-print-directory shim TORCH="$TORCH"
t1=$(date +%s%N)
echo "shim build: $(( (t1 - t0) / 1000000 )) ms"
t0=$(date +%s%N)
bin/dllm version
bin/dllm version --smoke --device cuda
t1=$(date +%s%N)
echo "version + smoke wall time: $(( (t1 - t0) / 1000000 )) ms"
