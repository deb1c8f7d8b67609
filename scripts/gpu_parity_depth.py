"""Where dllm's bf16 logits part from transformers' (run on the GPU machine).

For random bf16 weights of MiniCPM5-2B's shape cut to 1, 2, 4, ... layers,
compares `bin/dllm logits --dtype bf16` with transformers in bf16 under
variants that each change one rounding choice (attention kernel, GQA in SDPA,
RoPE frequencies rounded from float64), and measures how far one bf16 ulp
changed in one input value moves transformers' own logits (the depth's
amplification of any rounding difference). Expects bin/dllm and the CUDA shim.

Usage: python3 scripts/gpu_parity_depth.py [--depths 1,2,4,8,42] [--tokens 16]
"""
import argparse, json, math, subprocess, sys

import torch
from transformers import AutoConfig
import transformers.integrations.sdpa_attention as sdpa_mod

from gpu_parity import hf_random_model, rel_err_rows


def dllm_logits(model_dir, ids, attention):
    out = subprocess.run(["bin/dllm", "logits", "--model", model_dir, "--ids", ",".join(map(str, ids)),
                          "--attention", attention, "--dtype", "bf16", "--device", "cuda", "--json"],
                         check=True, capture_output=True, text=True).stdout
    return torch.tensor(json.loads(out)["logits"]).unsqueeze(0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="testdata/minicpm5-2b-shape/config.json")
    ap.add_argument("--depths", default="1,2,4,8,42")
    ap.add_argument("--tokens", type=int, default=16)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    g = torch.Generator().manual_seed(1)
    rows = []
    for n in map(int, a.depths.split(",")):
        cfg = AutoConfig.from_pretrained(a.config)
        cfg.num_hidden_layers = n
        ids = torch.randint(0, cfg.vocab_size, (1, a.tokens), generator=g)
        x = ids.cuda()
        full = torch.ones(1, 1, a.tokens, a.tokens, dtype=torch.bool, device="cuda")
        m = hf_random_model(cfg)
        out = f"/tmp/depth{n}"
        m.save_pretrained(out, safe_serialization=True)
        ref = {}
        with torch.no_grad():
            run = lambda **kw: m(x, **kw).logits.float().cpu()
            ref["sdpa"] = run()
            ref["sdpa bidir"] = run(attention_mask=full)
            # SDPA with the kv heads repeated, as dllm does, instead of enable_gqa.
            keep = getattr(sdpa_mod, "use_gqa_in_sdpa", None)
            if keep is not None:
                sdpa_mod.use_gqa_in_sdpa = lambda *args, **kw: False
                ref["sdpa repeat_kv"] = run()
                sdpa_mod.use_gqa_in_sdpa = keep
            try:
                m.set_attn_implementation("eager")
                ref["eager"] = run()
                m.set_attn_implementation("sdpa")
            except Exception as err:  # noqa: BLE001 - a missing variant is reported, not fatal
                print("eager attention unavailable:", err)
            # RoPE frequencies in float64 rounded to float32, as dllm's loader makes them.
            inv = m.model.rotary_emb.inv_freq.clone()
            d, theta = cfg.head_dim, cfg.rope_theta if hasattr(cfg, "rope_theta") else cfg.rope_parameters["rope_theta"]
            f64 = torch.tensor([1 / math.pow(theta, 2 * i / d) for i in range(d // 2)], dtype=torch.float64)
            m.model.rotary_emb.register_buffer("inv_freq", f64.float().cuda(), persistent=False)
            ref["sdpa f64 rope"] = run()
            ref["sdpa f64 rope bidir"] = run(attention_mask=full)
            m.model.rotary_emb.register_buffer("inv_freq", inv, persistent=False)
            rope_ulps = (f64.float().cuda() != inv).sum().item()
            # One bf16 ulp more in one embedding value of the first token.
            emb = m.model.embed_tokens(x).clone()
            v = emb[0, 0, 0].float().item()
            emb[0, 0, 0] = torch.tensor(v, dtype=torch.float32).to(torch.bfloat16) + abs(v) * 2 ** -7
            ref["1 ulp"] = m(inputs_embeds=emb).logits.float().cpu()
            m = m.float()
            ref["f32"] = run()
        del m
        torch.cuda.empty_cache()
        got = dllm_logits(out, ids[0].tolist(), "causal")
        got_bi = dllm_logits(out, ids[0].tolist(), "bidirectional")
        e = lambda p, q: "n/a" if p is None or q is None else f"{rel_err_rows(p, q):.1e}"
        ref = {k: ref.get(k) for k in ("sdpa", "sdpa bidir", "sdpa repeat_kv", "eager", "sdpa f64 rope",
                                         "sdpa f64 rope bidir", "1 ulp", "f32")}
        rows.append((n, e(got, ref["sdpa"]), e(got, ref["sdpa repeat_kv"]), e(got, ref["eager"]),
                     e(got, ref["sdpa f64 rope"]), e(got_bi, ref["sdpa bidir"]), e(got_bi, ref["sdpa f64 rope bidir"]),
                     e(ref["sdpa"], ref["eager"]), e(ref["1 ulp"], ref["sdpa"]), e(ref["sdpa"], ref["f32"]),
                     e(got, ref["f32"]), rope_ulps))
        print(n, rows[-1], flush=True)
    print("\n== dllm bf16 vs transformers bf16 by depth (worst row of ||a-b||/||b||)")
    head = ("layers", "vs sdpa", "vs sdpa+repeat_kv", "vs eager", "vs sdpa+f64 rope", "bidir vs sdpa+mask",
            "bidir vs sdpa+mask+f64 rope", "HF sdpa vs eager", "HF 1-ulp input", "HF bf16 vs f32", "dllm bf16 vs f32",
            "inv_freq ulps differ")
    print(" | ".join(head))
    for r in rows:
        print(" | ".join(str(c) for c in r))


if __name__ == "__main__":
    main()
