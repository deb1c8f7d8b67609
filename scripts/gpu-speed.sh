#!/usr/bin/env bash
# On the GPU machine, one call for a decode-speed change: build the CUDA
# shim, check the decoder's own matmul kernel against float32 and time it
# against cuBLAS (scripts/gpu_skinny_probe.py), check the decoder's logits
# against the plain path (TestDecoderCUDAMatchesPlainPath), then time the
# decode loop with the kernel off (DLLM_GEMM=0) and on. A table last.
#
# Usage: scripts/gpu-speed.sh   (expects bin/dllm and build/gpu/model.test
# built on the CPU machine: go test -c -o build/gpu/model.test ./model)
# Environment:
#   CTX="1k 8k 32k"   contexts for bench decode
#   COMMIT=3          tokens committed per denoising forward
#   TOKENS=256        timed tokens per point
#   PROBE_ROWS="1 4 16 32 64"   rows for the kernel timings ("" skips)
#   KEEP_SHIM=1       reuse bin/libdllmtorch.so
set -uo pipefail
cd "$(dirname "$0")/.."
CTX=${CTX:-"1k 8k 32k"}
COMMIT=${COMMIT:-3}
TOKENS=${TOKENS:-256}
PROBE_ROWS=${PROBE_ROWS-"1 4 16 32 64"}
PY=${PY:-python3}
RESULTS=${OUT:-/tmp}/speed.jsonl
: > "$RESULTS"

if [ "${KEEP_SHIM:-0}" = 1 ] && [ -e bin/libdllmtorch.so ]; then
	echo "shim: keeping bin/libdllmtorch.so"
else
	TORCH=$($PY -c 'import torch,os;print(os.path.dirname(torch.__file__))') || exit 1
	rm -f bin/libdllmtorch.so build/kernels.o
	make --no-print-directory shim TORCH="$TORCH" >/dev/null || exit 1
	[ -n "${OUT:-}" ] && cp bin/libdllmtorch.so "$OUT/"
fi
if [ -n "$PROBE_ROWS" ]; then
	PYTHONPATH=scripts $PY scripts/gpu_skinny_probe.py $PROBE_ROWS 2>&1 | sed 's/^/probe: /'
fi
if [ -x build/gpu/model.test ]; then
	(cd model && DLLM_TORCH_LIB=$PWD/../bin/libdllmtorch.so ../build/gpu/model.test \
		-test.run 'TestDecoderCUDAMatchesPlainPath' -test.v 2>&1 | tail -40)
fi
for gemm in 0 1; do
	for c in $CTX; do
		DLLM_GEMM=$gemm timeout 300 bin/dllm bench decode --config testdata/minicpm5-2b-shape/config.json \
			--device cuda --dtype bf16 --ctx "$c" --block 32 --commit "$COMMIT" --ar \
			--tokens "$TOKENS" --json | sed "s/^{/{\"gemm\":$gemm,/" | tee -a "$RESULTS"
	done
done
$PY - "$RESULTS" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
print(f"{'gemm':>4} {'ctx':>6} {'mode':>8} {'step_ms':>8} {'p90':>6} {'host':>6} {'TPF':>5} {'tok/s':>7}")
for r in rows:
    print(f"{r['gemm']:>4} {r['context']:>6} {r['mode']:>8} {r['step_median_ms']:8.2f} {r['step_p90_ms']:6.2f} "
          f"{r['host_ms']:6.2f} {r['tpf']:5.2f} {r['tokens_per_s']:7.0f}")
PYEOF
