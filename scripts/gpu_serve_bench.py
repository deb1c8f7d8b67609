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
                                          [--serve-args "--max-num-seqs 64 --max-model-len 9216"] [--clients 1,8,32,64]
  --e2e-prompt is dllm bench decode's --prompt-tokens (common English words: tiny-llama's
  tokenizer makes ~2.7 tokens of each);
  --e2e-only skips the chat completion timings;
  --serve-args are passed to serve.sh (continuous batching: --max-num-seqs);
  --clients adds `dllm bench decode --server --clients` (that many streaming
  clients at once, 3 tokens a step, --clients-tokens each after a
  --clients-prompt prompt) and skips the single-stream points;
  --distill N instead serves the weights converted with blocks of 1 (the
  recipe's AR teacher) with --serve-args and times `dllm data distill` of N
  prompts against it (--clients-tokens an answer, the concurrency the
  server reports);
  --load SECONDS instead runs `dllm bench load` (the reliability load: 64
  clients of whole, streamed, abandoned and malformed requests) for that
  long against serve.sh with --serve-args and --debug-stats, and prints its
  table (unexpected answers, queue order, the server's resources).
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
    ap.add_argument("--serve-args", default="")
    ap.add_argument("--clients", default="")
    ap.add_argument("--clients-prompt", type=int, default=300)
    ap.add_argument("--clients-tokens", type=int, default=1024)
    ap.add_argument("--distill", type=int, default=0)
    ap.add_argument("--load", type=int, default=0)
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

    if a.distill:
        # The recipe's teacher: the AR original as a dllm model with blocks of 1.
        shutil.rmtree(dm, ignore_errors=True)
        subprocess.run(["bin/dllm", "convert", "--from", ar, "--out", dm, "--preset", "configs/minicpm5-2b.yaml",
                        "--block-size", "1"], check=True)
    t0 = time.time()
    srv = subprocess.Popen(["./serve.sh", "--model", dm, "--port", str(PORT), "--host", "127.0.0.1", *a.serve_args.split(),
                            *(["--debug-stats"] if a.load else [])])
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

    if a.distill:
        words = "the of and to in is that for it as was with be by on not he this are or his".split()
        with open("/tmp/distill-prompts.jsonl", "w") as f:
            for i in range(a.distill):
                text = " ".join(words[(i * 7 + j) % len(words)] for j in range(a.clients_prompt // 2))
                f.write(json.dumps({"id": f"p{i}", "messages": [{"role": "user", "content": "Continue: " + text}]}) + "\n")
        if os.path.exists("/tmp/distill-out.jsonl"):
            os.remove("/tmp/distill-out.jsonl")
        t0 = time.time()
        out = subprocess.run(["bin/dllm", "data", "distill", "--teacher", f"http://127.0.0.1:{PORT}",
                              "--prompts", "/tmp/distill-prompts.jsonl", "--out", "/tmp/distill-out.jsonl",
                              "--max-tokens", str(a.clients_tokens), "--temperature", "0.6"], capture_output=True, text=True)
        dt = time.time() - t0
        print(out.stdout, out.stderr[-3000:], flush=True)
        toks = 0
        with open("/tmp/distill-out.jsonl") as f:
            for line in f:
                toks += json.loads(line).get("usage", {}).get("completion_tokens", 0)
        rows.append((f"distill {a.distill} prompts from the AR teacher ({a.serve_args or 'one stream'})",
                     f"{toks} answer tokens (usage) in {dt:.1f} s = {toks / dt:.0f} tok/s; last log: "
                     + (out.stderr.strip().splitlines() or ["-"])[-1]))
        a.clients = ""
    if a.load:
        out = subprocess.run(["bin/dllm", "bench", "load", "--server", f"http://127.0.0.1:{PORT}", "--clients", "64",
                              "--duration", f"{a.load}s"], capture_output=True, text=True)
        print(out.stdout, out.stderr[-3000:], flush=True)
        rows.append((f"bench load, 64 clients, {a.load} s ({a.serve_args or 'one stream'})", f"exit {out.returncode}"))
        a.clients = ""
    if a.clients:
        out = subprocess.run(["bin/dllm", "bench", "decode", "--server", f"http://127.0.0.1:{PORT}", "--clients", a.clients,
                              "--prompt-tokens", str(a.clients_prompt), "--max-tokens", str(a.clients_tokens),
                              "--tokens-per-step", "3", "--requests", "2"], capture_output=True, text=True)
        print(out.stdout, out.stderr, flush=True)
        for l in out.stdout.splitlines()[1:]:
            rows.append((f"{l.split()[0]} clients at once (clients, requests, tokens, tok/s, stream tok/s, ttft ms, s)", l))
    if not (a.clients or a.distill or a.load):
        single_stream(a, msgs, rows)
    srv.terminate()
    srv.wait(timeout=30)
    print("\n== summary (MiniCPM5-2B shape, random bf16 weights)")
    for k, v in rows:
        print(f"{k:55s} {v}")


def single_stream(a, msgs, rows):
    """The chat completion timings and the end-to-end point of one stream."""
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


if __name__ == "__main__":
    main()
