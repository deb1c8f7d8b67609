#!/usr/bin/env bash
# On the GPU machine: build the CUDA shim, run the smoke, then model parity
# against transformers and the forward benchmark (scripts/gpu_parity.py).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/gpu-smoke.sh
PYTHONUNBUFFERED=1 python3 scripts/gpu_parity.py "$@"
