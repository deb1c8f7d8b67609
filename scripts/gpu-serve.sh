#!/usr/bin/env bash
# On the GPU machine: build the CUDA shim, then the serving benchmark
# (scripts/gpu_serve_bench.py). Expects bin/dllm built on the CPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/gpu-smoke.sh
PYTHONUNBUFFERED=1 python3 scripts/gpu_serve_bench.py "$@"
