#!/usr/bin/env bash
# On a machine with 2 GPUs: data-parallel training over NCCL
# (docs/distributed.md). Builds the CUDA shim against the installed PyTorch
# wheel, then with bin/dllm (built elsewhere: make dllm, copied here):
#   1. speed: MiniCPM5-2B's shape on random weights and synthetic tokens
#      (as scripts/gpu-train.sh), seq 4096, bf16, layer checkpointing, blocks
#      of 32, the same global batch (1 x GRAD_ACCUM sequences a step) on 1
#      and on 2 GPUs: tokens/s, MFU and peak memory, and the scaling
#      efficiency tokens/s(2) / (2 x tokens/s(1));
#   2. loss curves: the same shape at seq 1024, CURVE_STEPS steps of 4
#      micro-batches (2 per rank on 2 GPUs), on 1 and on 2 GPUs: the largest
#      relative difference of the step losses (expected 0 up to the float32
#      order of the gradient sums; the check passes below 1e-3);
#   3. a failed rank: rank 1 exits after step 2 (DLLM_FAULT_EXIT=1:2, which
#      only a test build honours: bin/dllm-fault, built here with
#      `go build -tags dllm_fault -o bin/dllm-fault ./cmd/dllm` and carried;
#      skipped without it); the launch must end at once (start-up and two
#      steps, not the 30-minute collective timeout), naming rank 1.
# Prints a short table last. Writes no checkpoint.
#
# Usage: scripts/gpu-dist.sh
# Environment: STEPS (6), GRAD_ACCUM (8), SEQ_LEN (4096), CURVE_STEPS (10),
# PEAK_TFLOPS (989).
set -euo pipefail
cd "$(dirname "$0")/.."
# NVLink multicast stays off on these machines (it can take shared GPUs out
# of service); the ranks inherit this environment.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=${PY:-python3}
TORCH=$($PY -c 'import torch,os;print(os.path.dirname(torch.__file__))')
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "torch wheel: $TORCH ($($PY -c 'import torch;print(torch.__version__)'))"
[ "$(nvidia-smi -L | wc -l)" -ge 2 ] || { echo "gpu-dist: needs 2 GPUs" >&2; exit 1; }
[ -x bin/dllm ] || { echo "gpu-dist: bin/dllm missing: build it with make dllm and copy it here" >&2; exit 1; }
rm -f bin/libdllmtorch.so
make -j8 --no-print-directory shim TORCH="$TORCH"
ver=$(bin/dllm version)
echo "$ver"
grep -q "nccl yes" <<<"$ver" || {
	echo "gpu-dist: the shim was built without NCCL (is nccl.h under $TORCH/../nvidia/nccl/include?)" >&2
	exit 1
}
TMP=$(mktemp -d)
SHAPE=(--config configs/train/minicpm5-2b-block.yaml --init random
	--model-config testdata/minicpm5-2b-shape/config.json --synthetic --block-size 32
	--micro-batch 1 --device cuda --dtype bf16 --no-checkpoint --log-every 1
	--set checkpoint_layers=true --set peak_tflops="${PEAK_TFLOPS:-989}")
SPEED=("${SHAPE[@]}" --seq-len "${SEQ_LEN:-4096}" --steps "${STEPS:-6}" --grad-accum "${GRAD_ACCUM:-8}")
CURVE=("${SHAPE[@]}" --seq-len 1024 --steps "${CURVE_STEPS:-10}" --grad-accum 4 --lr 1e-4 --set warmup_steps=0)

# 1. Speed at 1 and 2 GPUs, the same global batch.
for n in 1 2; do
	echo "== speed, $n GPU(s)"
	bin/dllm train "${SPEED[@]}" --nproc "$n" --out "$TMP/speed$n" 2>&1 | tee "$TMP/speed$n.log"
done
# 2. Loss curves at 1 and 2 GPUs.
for n in 1 2; do
	echo "== loss curve, $n GPU(s)"
	bin/dllm train "${CURVE[@]}" --nproc "$n" --out "$TMP/curve$n" 2>&1 | tee "$TMP/curve$n.log"
done
# 3. A failed rank.
echo "== rank 1 fails after step 2"
start=$(date +%s)
set +e
if [ -x bin/dllm-fault ]; then
	DLLM_FAULT_EXIT=1:2 timeout 600 bin/dllm-fault train "${CURVE[@]}" --steps 1000 --nproc 2 --out "$TMP/fault" >"$TMP/fault.log" 2>&1
	rc=$?
else
	echo "no bin/dllm-fault: skipped" >"$TMP/fault.log"
	rc=0
fi
set -e
fault_s=$(($(date +%s) - start))
tail -3 "$TMP/fault.log"

# 4. The table.
$PY - "$TMP" "$rc" "$fault_s" <<'EOF'
import json, re, sys
tmp, rc, fault_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def metrics(name):
    return [json.loads(l) for l in open(f"{tmp}/{name}/metrics.jsonl")]

def peak(name):
    m = re.search(r"peak GPU memory ([\d.]+) GB", open(f"{tmp}/{name}.log").read())
    return f"{m.group(1)} GB" if m else "?"

print()
print("| GPUs | tokens/s | tokens/s per GPU | MFU per GPU | peak memory (rank 0) |")
print("|---|---|---|---|---|")
tps = {}
for n in (1, 2):
    rs = metrics(f"speed{n}")[1:]  # the first step warms up
    tps[n] = sum(r["tok_s"] for r in rs) / len(rs)
    mfu = sum(r["mfu"] for r in rs) / len(rs)
    print(f"| {n} | {tps[n]:,.0f} | {tps[n] / n:,.0f} | {100 * mfu:.1f}% | {peak(f'speed{n}')} |")
eff = tps[2] / (2 * tps[1])
print(f"\nscaling efficiency at 2 GPUs: {100 * eff:.1f}% ({'PASS' if eff >= 0.9 else 'FAIL'}: >= 90%)")
a, b = [r["loss"] for r in metrics("curve1")], [r["loss"] for r in metrics("curve2")]
d = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(f"loss curve, 1 vs 2 GPUs over {len(a)} steps: largest relative difference {d:.2e} ({'PASS' if d <= 1e-3 and len(a) == len(b) else 'FAIL'}: <= 1e-3)")
print("  1 GPU: " + " ".join(f"{x:.5f}" for x in a))
print("  2 GPUs: " + " ".join(f"{x:.5f}" for x in b))
log = open(f"{tmp}/fault.log").read()
ok = rc not in (0, 124) and "rank 1 failed" in log and fault_s < 600
print(f"failed rank: exit {rc} after {fault_s} s, {'PASS' if ok else 'FAIL'}: {[l for l in log.splitlines() if 'rank 1 failed' in l][-1:]}")
EOF
