"""The shim's attention in thread block clusters (torch/csrc/kernels.cu,
dtk_attn_cluster: the key splits of a row block merged in the cluster's
shared memory, one kernel) against its two-kernel form
(dtk_attn_decode_pos: splits through global memory and a merge kernel),
on the GPU machine through ctypes: relative error against float32
attention (the first causal rows of a fused commit masked as the decoder
masks them), then microseconds per call in a CUDA graph, for MiniCPM5-2B's
heads (16 query heads over 2 key heads, head dim 128).

    python3 scripts/gpu_attn_cluster_probe.py
"""
import ctypes

import torch

from gpu_shim import DT_BF16, attn_pos, lib, scr
from gpu_timing import timed

dev, dt = "cuda", torch.bfloat16
H, Hkv, D = 16, 2, 128
G = H // Hkv
cluster = lib.dtk_attn_cluster  # (dtype, q, kc, vc, out, T, H, Hkv, pos, causal, scale, splits, stream)
cluster.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 3 + [ctypes.c_void_p, ctypes.c_int64,
                                                                                     ctypes.c_float, ctypes.c_int64,
                                                                                     ctypes.c_void_p]


def ref(q, kc, vc, first, causal):
    """Float32 attention of q (T, H, D) at positions first.. over the
    caches: token t < causal sees keys [0, first + t], the rest all up to
    first + T - 1."""
    T = q.shape[0]
    n = first + T
    qr = q.float().permute(1, 0, 2)  # (H, T, D)
    kr = kc[:n].float().permute(1, 0, 2).repeat_interleave(G, 0)
    vr = vc[:n].float().permute(1, 0, 2).repeat_interleave(G, 0)
    s = qr @ kr.transpose(1, 2) * D ** -0.5  # (H, T, n)
    t = torch.arange(T, device=dev).unsqueeze(1)
    k = torch.arange(n, device=dev).unsqueeze(0)
    s = s.masked_fill((t < causal) & (k > first + t), float("-inf"))
    return (torch.softmax(s, -1) @ vr).permute(1, 0, 2)


bad = 0
st = lambda: torch.cuda.current_stream().cuda_stream
print(f"{'T':>3} {'keys':>6} {'causal':>6}  {'err 8':>8} {'err 16':>8} {'err two':>8}  "
      f"{'8 us':>6} {'16 us':>6} {'two us':>6}")
for T, S, causal in [(32, 32, 0), (32, 1000, 0), (32, 1056, 0), (64, 1056, 32), (1, 1056, 0), (32, 2048, 0),
                     (32, 4096, 0), (64, 4096, 32), (32, 8192, 0)]:
    first = S - T
    kc = torch.randn(S + 64, Hkv, D, dtype=dt, device=dev)
    vc = torch.randn(S + 64, Hkv, D, dtype=dt, device=dev)
    q = torch.randn(T, H, D, dtype=dt, device=dev)
    pos = torch.arange(first, S, device=dev, dtype=torch.int64)
    want = ref(q, kc, vc, first, causal)
    outs, errs, us = {}, [], []
    Smax = S + 64
    scratch = torch.empty(max(1, scr(T, H, Hkv, Smax)), dtype=torch.float32, device=dev)
    calls = {
        8: lambda o: cluster(DT_BF16, q.data_ptr(), kc.data_ptr(), vc.data_ptr(), o.data_ptr(), T, H, Hkv,
                             pos.data_ptr(), causal, D ** -0.5, 8, st()),
        16: lambda o: cluster(DT_BF16, q.data_ptr(), kc.data_ptr(), vc.data_ptr(), o.data_ptr(), T, H, Hkv,
                              pos.data_ptr(), causal, D ** -0.5, 16, st()),
        "two": lambda o: attn_pos(DT_BF16, q.data_ptr(), kc.data_ptr(), vc.data_ptr(), o.data_ptr(), T, H, Hkv, Smax,
                                 pos.data_ptr(), causal, D ** -0.5, scratch.data_ptr(), st()),
    }
    for name, f in calls.items():
        o = torch.zeros_like(q)
        rc = f(o)
        assert rc == 0, f"{name}: error {rc}"
        torch.cuda.synchronize()
        errs.append(((o.float() - want).norm() / want.norm()).item())
        us.append(timed([lambda: f(o)] * 10))
        outs[name] = o
    ok = all(e < 1.5 * errs[2] + 1e-3 for e in errs[:2])
    bad += not ok
    print(f"{T:3d} {S:6d} {causal:6d}  " + " ".join(f"{e:8.2e}" for e in errs) + "  " +
          " ".join(f"{u:6.1f}" for u in us) + ("  ok" if ok else "  BAD"), flush=True)
print("attention in clusters:", "ok" if bad == 0 else f"{bad} BAD")
