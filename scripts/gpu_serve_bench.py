"""Single-stream serving benchmark on the GPU machine (issue: serve on the GPU).

Makes random bf16 weights of MiniCPM5-2B's shape with transformers (tiny-llama's
tokenizer and chat template, so the mask token takes padded row 500), converts
them with `dllm convert`, starts `./serve.sh`, measures start-to-ready, then
times chat completions of 1,000 and 8,000 generated tokens at the default
threshold and at a threshold that commits whole blocks (fixed tokens per step),
and `dllm generate --ar` (block 1, plain AR decoding) on the same weights.
Last, the end-to-end point: `dllm bench decode --server` with exactly
3 tokens committed per step (the tokens_per_step extension) over a long
generation after a long prompt, and the server's GPU memory at that context.

Usage: python3 scripts/gpu_serve_bench.py [--long 8000] [--e2e-prompt 16000] [--e2e-tokens 16000] [--e2e-only]
  --e2e-prompt is dllm bench decode's --prompt-tokens (common English words: tiny-llama's
  tokenizer makes ~2.7 tokens of each);
  --e2e-only skips the chat completion timings.
"""
import argparse, json, os, shutil, subprocess, sys, time, urllib.request

import torch
from transformers import AutoConfig, LlamaForCausalLM

PORT = 8011


def post(path, body, timeout=900):
    req = urllib.request.Request(f"http://127.0.0.1:{PORT}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.time()
    with urllib.request.urlopen(req, timeout=timeout) as r:
        out = json.loads(r.read())
    return out, time.time() - t0


def health():
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=2) as r:
            return r.status
    except Exception as e:  # 503 while loading, refused before listening
        return getattr(e, "code", 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--long", type=int, default=8000)
    ap.add_argument("--e2e-prompt", type=int, default=16000)
    ap.add_argument("--e2e-tokens", type=int, default=16000)
    ap.add_argument("--e2e-only", action="store_true")
    a = ap.parse_args()
    rows = []
    ar, dm = "/tmp/minicpm-ar", "/tmp/minicpm-dllm"
    shutil.rmtree(ar, ignore_errors=True)
    shutil.rmtree(dm, ignore_errors=True)
    cfg = AutoConfig.from_pretrained("testdata/minicpm5-2b-shape/config.json")
    torch.manual_seed(0)
    with torch.device("cuda"):
        m = LlamaForCausalLM(cfg).to(torch.bfloat16)
    m.save_pretrained(ar, safe_serialization=True)
    del m
    torch.cuda.empty_cache()
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(f"testdata/tiny-llama/{f}", ar)

    t0 = time.time()
    subprocess.run(["bin/dllm", "convert", "--from", ar, "--out", dm, "--preset", "configs/minicpm5-2b.yaml"],
                   check=True)
    rows.append(("dllm convert 5 GB (hard link + full sha256)", f"{time.time() - t0:.1f} s"))

    t0 = time.time()
    srv = subprocess.Popen(["./serve.sh", "--model", dm, "--port", str(PORT), "--host", "127.0.0.1"])
    while health() != 200:
        if srv.poll() is not None:
            sys.exit(f"serve.sh exited with {srv.returncode}")
        if time.time() - t0 > 300:
            sys.exit("not ready within 300 s")
        time.sleep(0.1)
    rows.append(("serve.sh start to /health 200", f"{time.time() - t0:.1f} s"))
    print(*rows[-1], flush=True)
    msgs = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]
    _, dt = post("/v1/chat/completions", {"messages": msgs, "max_tokens": 8})
    rows.append(("first request (8 tokens)", f"{dt:.2f} s"))

    for n, th, name in () if a.e2e_only else ((1000, None, "default threshold 0.9"), (1000, 1e-6, "threshold 1e-6: whole block per step"),
                        (a.long, 1e-6, "threshold 1e-6: whole block per step"), (a.long, None, "default threshold 0.9")):
        body = {"messages": msgs, "max_tokens": n, "temperature": 0}
        if th is not None:
            body["threshold"] = th
        out, dt = post("/v1/chat/completions", body)
        u = out["usage"]["completion_tokens"]
        rows.append((f"chat {n} tokens, {name}", f"{u} tokens in {dt:.1f} s = {u / dt:.0f} tok/s ({out['choices'][0]['finish_reason']})"))
        print(*rows[-1], flush=True)
    out = subprocess.run(["bin/dllm", "bench", "decode", "--server", f"http://127.0.0.1:{PORT}",
                          "--prompt-tokens", str(a.e2e_prompt), "--max-tokens", str(a.e2e_tokens),
                          "--tokens-per-step", "3", "--requests", "1"], capture_output=True, text=True)
    print(out.stdout, out.stderr, flush=True)
    last = [l for l in out.stdout.splitlines() if l.strip()]
    rows.append((f"bench --server: ~{a.e2e_prompt} prompt + {a.e2e_tokens} tokens, 3 per step", last[-1] if last else "failed"))
    mem = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    rows.append(("GPU memory of the server after it", mem.replace("\n", "; ")))
    srv.terminate()
    srv.wait(timeout=30)

    print("\n== summary (MiniCPM5-2B shape, random bf16 weights, one H200)")
    for k, v in rows:
        print(f"{k:55s} {v}")


if __name__ == "__main__":
    main()
