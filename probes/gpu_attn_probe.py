"""The decoder's attention kernel (torch/csrc/kernels.cu, dtk_attn_decode,
through ctypes from bin/libdllmtorch.so built with nvcc) on the GPU
machine: relative error against float32 attention (and FlashAttention's
bf16 error against the same), then microseconds per call in a CUDA graph
against FlashAttention (at::_flash_attention_forward as the decoder calls
it, with grouped heads folded into rows where that is faster), for
MiniCPM5-2B's heads (16 query heads over 2 key heads, head dim 128).
Last, a sweep of the kernel's settings (dtk_tune: programmatic dependent
launch, how the keys are split over CTAs), microseconds per call.

    python3 probes/gpu_attn_probe.py
"""
import ctypes

import torch

from gpu_shim import DT_BF16, attn, f32_attention, lib, scr
from gpu_timing import timed

dev, dt = "cuda", torch.bfloat16
H, Hkv, D = 16, 2, 128
G = H // Hkv
flash = torch.ops.aten._flash_attention_forward


def ours(q, kc, vc, S, out, scratch):
    rc = attn(DT_BF16, q.data_ptr(), kc.data_ptr(), vc.data_ptr(), out.data_ptr(), q.shape[0], H, Hkv, S,
              D ** -0.5, scratch.data_ptr(), torch.cuda.current_stream().cuda_stream)
    assert rc == 0, f"dtk_attn_decode: cuda error {rc}"


def theirs(q, kc, vc, S):
    T = q.shape[0]
    k, v = kc[:S].unsqueeze(0), vc[:S].unsqueeze(0)
    if T > 1 and S >= 8192:  # the decoder's fold
        qf = q.view(1, T, Hkv, G, D).permute(0, 1, 3, 2, 4).reshape(1, T * G, Hkv, D)
        return flash(qf, k, v, None, None, T * G, S, 0.0, False, False, scale=D ** -0.5)[0]
    return flash(q.unsqueeze(0), k, v, None, None, T, S, 0.0, False, False, scale=D ** -0.5)[0]


bad = 0
print(f"{'T':>3} {'S':>6}  {'err ours':>9} {'err flash':>9}  {'ours us':>8} {'flash us':>8}")
for T, S in [(1, 1), (1, 63), (1, 1024), (1, 32768), (32, 7), (32, 1000), (32, 1024), (32, 8192), (32, 16384),
             (32, 32768 + 5), (64, 4096), (3, 333)]:
    kc = torch.randn(S + 64, Hkv, D, dtype=dt, device=dev)
    vc = torch.randn(S + 64, Hkv, D, dtype=dt, device=dev)
    q = torch.randn(T, H, D, dtype=dt, device=dev)
    out = torch.empty_like(q)
    scratch = torch.empty(max(1, scr(T, H, Hkv, S)), dtype=torch.float32, device=dev)
    ours(q, kc, vc, S, out, scratch)
    ref = f32_attention(q, kc, vc, S)
    e = ((out.float() - ref).norm() / ref.norm()).item()
    fo = theirs(q, kc, vc, S)
    if T > 1 and S >= 8192:
        fo = fo.view(T, G, Hkv, D).permute(0, 2, 1, 3).reshape(T, H, D)
    ef = ((fo.reshape(T, H, D).float() - ref).norm() / ref.norm()).item()
    ok = e < 1.5 * ef + 1e-3
    bad += not ok
    t_ours = timed([lambda: ours(q, kc, vc, S, out, scratch)] * 10)
    t_flash = timed([lambda: theirs(q, kc, vc, S)] * 10)
    print(f"{T:3d} {S:6d}  {e:9.2e} {ef:9.2e}  {t_ours:8.1f} {t_flash:8.1f}  {'ok' if ok else 'BAD'}", flush=True)

tune = lib.dtk_tune
tune.argtypes = [ctypes.c_int] * 4
# (pdl, splits cap, CTAs per SM, min tiles per split); the first is the default.
configs = [(1, 64, 2, 1), (1, 64, 2, 2), (1, 64, 2, 4), (1, 64, 2, 8), (1, 64, 2, 16), (1, 64, 1, 1),
           (1, 16, 2, 1), (1, 8, 2, 1), (1, 4, 2, 1)]
print("sweep (pdl, cap, ctas/SM, min tiles): us per call")
print(f"{'T':>3} {'S':>6}  " + " ".join(f"{'%d/%d/%d/%d' % c:>11}" for c in configs))
for T, S in [(1, 1024), (1, 2048), (1, 4096), (1, 8192), (1, 16384), (1, 32768), (32, 1024), (32, 2048),
             (32, 4096), (32, 8192), (32, 16384), (32, 32768), (64, 1024), (64, 8192)]:
    kc = torch.randn(S, Hkv, D, dtype=dt, device=dev)
    vc = torch.randn(S, Hkv, D, dtype=dt, device=dev)
    q = torch.randn(T, H, D, dtype=dt, device=dev)
    row = []
    for c in configs:
        tune(*c)
        out = torch.empty_like(q)
        scratch = torch.empty(max(1, scr(T, H, Hkv, S)), dtype=torch.float32, device=dev)
        ours(q, kc, vc, S, out, scratch)
        if c == configs[0]:
            ref = out.clone()
        elif (out.float() - ref.float()).norm() > 1e-2 * ref.float().norm():
            bad += 1
            print(f"config {c} differs from the default at T={T} S={S}")
        row.append(timed([lambda: ours(q, kc, vc, S, out, scratch)] * 10))
    tune(*configs[0])
    print(f"{T:3d} {S:6d}  " + " ".join(f"{t:11.1f}" for t in row), flush=True)
print("attention:", "ok" if bad == 0 else f"{bad} BAD")
