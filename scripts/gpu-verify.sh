#!/usr/bin/env bash
# On the GPU machine: start-to-ready of `dllm serve` with the weights check
# (--verify) on and off, on random MiniCPM5-2B-shape bf16 weights made with
# transformers (testdata/minicpm5-2b-shape), from a warm and, where the
# container may drop it, a cold page cache; then a copy with one flipped
# bit, which must be refused. Expects bin/dllm built on the CPU machine; the
# figures are in docs/serve.md (--verify). Usage: scripts/gpu-verify.sh
set -euo pipefail
cd "$(dirname "$0")/.."
el() { python3 -c "import sys,time;print(round(time.time()-float(sys.argv[1]),2))" "$1"; }
nvidia-smi --query-gpu=name --format=csv,noheader
bin/dllm version 2>&1 | grep -q '^cuda: [1-9]' || scripts/gpu-smoke.sh 2>&1 | grep -E "shim build|^cuda" || true
W=out/w; M=out/m
[ -f $W/model.safetensors ] || python3 - "$W" >/dev/null 2>&1 <<'PY'
import shutil, sys, torch
from transformers import AutoConfig, LlamaForCausalLM
out = sys.argv[1]
cfg = AutoConfig.from_pretrained("testdata/minicpm5-2b-shape/config.json")
torch.manual_seed(0)
with torch.device("cuda"):
    m = LlamaForCausalLM(cfg).to(torch.bfloat16)
m.save_pretrained(out, safe_serialization=True)
for f in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(f"testdata/tiny-llama/{f}", out)
PY
ls -la $W | grep safetensors
rm -rf $M; t=$(date +%s.%N); bin/dllm convert --from $W --out $M --hash full >/dev/null 2>&1; echo "convert --hash full: $(el $t) s"
grep -A1 weights_sha256 $M/dllm.json | cut -c1-120 || true
nproc; grep -m1 'model name' /proc/cpuinfo; grep -c sha_ni /proc/cpuinfo || true
ready() { # $1 = extra flags; prints seconds from start to /health 200
	local t0=$(date +%s.%N)
	bin/dllm serve --model $M --host 127.0.0.1 --port 8123 $1 >out/serve.log 2>&1 &
	local pid=$!
	until curl -sf -o /dev/null http://127.0.0.1:8123/health; do sleep 0.05; kill -0 $pid 2>/dev/null || { tail -5 out/serve.log; return 1; }; done
	echo "$1: ready in $(el $t0) s; $(grep -o 'load_time=[^ ]*' out/serve.log)"
	kill $pid; wait $pid || true
}
for i in 1 2; do ready "--verify=false"; ready "--verify=true"; done
# Cold page cache, if this container may drop it.
if sync && echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then
	ready "--verify=true"; sync; echo 3 > /proc/sys/vm/drop_caches; ready "--verify=false"
else echo "cannot drop the page cache"; fi
# A damaged copy must be refused.
python3 -c "
import os; p='$M/model.safetensors'; b=bytearray(open(p,'rb').read()); b[-1000]^=1; os.remove(p); open(p,'wb').write(b)"
t=$(date +%s.%N); bin/dllm serve --model $M --port 8124 2>&1 | tail -2 | cut -c1-200 || true; echo "refused after $(el $t) s"
