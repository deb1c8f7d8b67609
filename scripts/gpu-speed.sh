#!/usr/bin/env bash
# On the GPU machine, one call for a decode-speed change: build the CUDA
# shim, run the GPU tests of the torch and model packages (the decoder's
# logits against the plain path, the shim's kernels against libtorch), then
# time the decode loop (bench decode), optionally A/B against an
# environment setting that turns a piece off. A table last.
#
# Usage: scripts/gpu-speed.sh   (expects bin/dllm, build/gpu/model.test and
# build/gpu/torch.test (and diffusion.test) built on the CPU machine: go test -c -o ... ./model)
# Environment:
#   CTX="1k 8k 32k"   contexts for bench decode ("" skips it)
#   COMMIT=3          tokens committed per denoising forward
#   TOKENS=256        timed tokens per point
#   WARMUP=96         untimed tokens before them (bench decode --warmup; a
#                     kind of forward's graph is captured on its second use)
#   TESTS='CUDA|PickGreedy'   -test.run pattern for the test binaries ("" skips)
#   AB=DLLM_TORCH_LIB=$PWD/x.so   also time another shim (one built on this
#                     machine from an earlier commit, carried back) against
#                     this tree's (empty: only as is); space-separated
#                     settings are timed one by one, a '+' joins several
#                     into one (A=0+B=0)
#   TEST_AB=DLLM_TORCH_LIB=/abs/x.so   also run the tests on another shim
#                     (same form)
#   PROBES=gpu_attn_probe.py   probes (probes/) to run first (exactness and timing;
#                     .cu ones, e.g. gemm_pdl_probe.cu, built with nvcc and
#                     stopped after 300 s: a probe with a grid barrier can hang)
#   KEEP_SHIM=1       reuse bin/libdllmtorch.so
#   AR=0              leave out the AR (block 1) points
#   BATCH="1 8 32"    also each point as that many sequences decoding
#                     together (bench decode --batch; continuous batching)
#   CPUPROFILE=1      with BATCH, a Go CPU profile of each context's batched
#                     points, $OUT/batch-CTX.prof: where the host's turn
#                     between steps goes (go tool pprof bin/dllm FILE, with
#                     the binary that ran)
set -uo pipefail
cd "$(dirname "$0")/.."
CTX=${CTX-"1k 8k 32k"}
COMMIT=${COMMIT:-3}
TOKENS=${TOKENS:-256}
WARMUP=${WARMUP:-96}
TESTS=${TESTS-'CUDA|PickGreedy'}
AB=${AB:-}
PY=${PY:-python3}
RESULTS=${OUT:-/tmp}/speed.jsonl
: > "$RESULTS"

if [ "${KEEP_SHIM:-0}" = 1 ] && [ -e bin/libdllmtorch.so ]; then
	echo "shim: keeping bin/libdllmtorch.so"
else
	TORCH=$($PY -c 'import torch,os;print(os.path.dirname(torch.__file__))') || exit 1
	rm -f bin/libdllmtorch.so build/*.o
	make -j8 --no-print-directory shim TORCH="$TORCH" >/dev/null || exit 1
	[ -n "${OUT:-}" ] && cp bin/libdllmtorch.so "$OUT/"
fi
# Probes of the shim's own kernels against PyTorch (PROBES="" skips); a
# .cu probe is built with nvcc against the wheel's cuBLAS first.
for p in ${PROBES-}; do
	case $p in
	*.cu)
		NV=$($PY -c 'import torch,os;print(os.path.dirname(os.path.dirname(torch.__file__)))')/nvidia/cu13/lib
		CU=${CUDA_HOME:-/usr/local/cuda}
		$CU/bin/nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/${p%.cu} probes/$p -L"$NV" \
			-l:libcublas.so.13 -l:libcublasLt.so.13 -Xlinker -rpath="$NV" 2>&1 | grep -E "error" &&
			echo "$p: build failed"
		[ -x /tmp/${p%.cu} ] && timeout 300 /tmp/${p%.cu} 2>&1 | sed "s/^/$p: /" ;;
	*) PYTHONPATH=probes $PY probes/$p 2>&1 | sed "s/^/$p: /" ;;
	esac
done
if [ -n "$TESTS" ]; then
	for te in "" ${TEST_AB-}; do
		[ -n "$te" ] && echo "tests with $te:"
		for pkg in torch model diffusion; do
			[ -x build/gpu/$pkg.test ] || continue
			(cd $pkg && env DLLM_TORCH_LIB=$PWD/../bin/libdllmtorch.so ${te//+/ } ../build/gpu/$pkg.test \
				-test.run "$TESTS" -test.timeout 240s -test.v 2>&1 | grep -v -E "^=== (RUN|PAUSE|CONT)" | tail -40)
		done
	done
fi
for ab in "" $AB; do
	for c in $CTX; do
		env ${ab//+/ } timeout 300 bin/dllm bench decode --config testdata/minicpm5-2b-shape/config.json \
			--device cuda --dtype bf16 --ctx "$c" --block 32 --commit "$COMMIT" $([ "${AR:-1}" = 0 ] || echo --ar) \
			--tokens "$TOKENS" --warmup "$WARMUP" --json | sed "s|^{|{\"env\":\"${ab:-as is}\",|" | tee -a "$RESULTS"
		[ -n "${BATCH:-}" ] && env ${ab//+/ } timeout 300 bin/dllm bench decode --config testdata/minicpm5-2b-shape/config.json \
			--device cuda --dtype bf16 --ctx "$c" --block 32 --commit "$COMMIT" $([ "${AR:-1}" = 0 ] || echo --ar) \
			--batch "${BATCH// /,}" --tokens "$TOKENS" --warmup "$WARMUP" --json \
			${CPUPROFILE:+--cpuprofile "${OUT:-/tmp}/batch-$c.prof"} | sed "s|^{|{\"env\":\"${ab:-as is}\",|" | tee -a "$RESULTS"
	done
done
$PY - "$RESULTS" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
print(f"{'env':>14} {'ctx':>6} {'mode':>8} {'batch':>5} {'fill':>5} {'waits':>5} {'step_ms':>8} {'p90':>6} {'host':>6} {'TPF':>5} {'tok/s':>7} {'stream':>7}")
for r in rows:
    print(f"{r['env']:>14} {r['context']:>6} {r['mode']:>8} {r.get('batch') or '-':>5} {r.get('batch_fill', 0):5.1f} {r.get('gather_waits', 0):5d} "
          f"{r['step_median_ms']:8.2f} {r['step_p90_ms']:6.2f} "
          f"{r['host_ms']:6.2f} {r['tpf']:5.2f} {r['tokens_per_s']:7.0f} {r.get('stream_tokens_per_s', r['tokens_per_s']):7.0f}")
PYEOF
