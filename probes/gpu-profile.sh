#!/usr/bin/env bash
# On the GPU machine: each kernel of steady-state decode forwards timed on
# its own with Nsight Compute (ncu serialises kernels, so the sum is GPU
# work without the gaps between kernels; bench decode's step time minus it
# is what the gaps cost). Expects bin/dllm and the CUDA shim (make shim
# TORCH=...). Environment: CTX=1k MODE="--commit 3" (or --ar) SKIP=8000
# COUNT=940 (kernels: skip the prefill and graph captures, then about two
# forwards; the summary's calls per forward say how many it caught).
# NCU_FLAGS="--cache-control none --clock-control none" times kernels warm (as in a replay).
set -uo pipefail
cd "$(dirname "$0")/.."
CTX=${CTX:-1k}
MODE=${MODE:-"--commit 3"}
SKIP=${SKIP:-8000}
COUNT=${COUNT:-940}
NCU=${NCU:-/usr/local/cuda/bin/ncu}
CSV=${OUT:-/tmp}/ncu-$CTX${MODE//[ -]/}.csv
$NCU --csv ${NCU_FLAGS:-} --metrics gpu__time_duration.sum --launch-skip "$SKIP" --launch-count "$COUNT" \
	bin/dllm bench decode --config testdata/minicpm5-2b-shape/config.json --device cuda --dtype bf16 \
	--ctx "$CTX" --block 32 $MODE --tokens 256 > "$CSV" 2>/dev/null
python3 probes/gpu_ncu_summary.py "$CSV" "$(( COUNT / 470 ))"
