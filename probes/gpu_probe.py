"""Times the decoder's pieces in isolation on the GPU machine (a reference
measurement with PyTorch, not the product): each matmul of a MiniCPM5-2B
layer at 1 and 32 rows and FlashAttention over 1k-32k keys, each in a CUDA
graph replayed many times, against the time a single read of its bytes
takes at the measured copy bandwidth. docs/history.md uses it to say
where a decode step's time goes.

    python3 probes/gpu_probe.py
"""
import torch

from gpu_timing import copy_bandwidth, timed

torch.manual_seed(0)
dev, dt = "cuda", torch.bfloat16
C, F, H, Hkv, D, V, L = 2048, 6144, 16, 2, 128, 130560, 42


bw = copy_bandwidth(dev)
print(f"copy bandwidth {bw:.0f} GB/s")
rows = []
for M in (1, 32):
    per_layer = 0.0
    for name, (n, k) in {"qkv": ((H + 2 * Hkv) * D, C), "o": (C, H * D), "gate_up": (2 * F, C), "down": (C, F)}.items():
        w = torch.randn(n, k, dtype=dt, device=dev)
        a = torch.randn(M, k, dtype=dt, device=dev)
        us = timed([lambda: torch.nn.functional.linear(a, w)] * 10, 200)
        floor = w.numel() * 2 / (bw * 1e9) * 1e6
        per_layer += us
        rows.append((f"linear {name} M={M}", us, floor))
    rows.append((f"  4 matmuls x {L} layers, M={M}", per_layer * L, None))
    w = torch.randn(V, C, dtype=dt, device=dev)
    a = torch.randn(M, C, dtype=dt, device=dev)
    rows.append((f"head M={M}", timed([lambda: torch.nn.functional.linear(a, w)] * 10, 200), w.numel() * 2 / (bw * 1e9) * 1e6))
    xr = torch.randn(M, C, dtype=dt, device=dev)
    rows.append((f"add (residual) M={M}", timed([lambda: xr + xr] * 10, 200), None))
for S in (1024, 8192, 32768):
    for T in (1, 32):
        q = torch.randn(1, T, H, D, dtype=dt, device=dev)
        k = torch.randn(1, S, Hkv, D, dtype=dt, device=dev)
        v = torch.randn(1, S, Hkv, D, dtype=dt, device=dev)
        f = lambda: torch.ops.aten._flash_attention_forward(q, k, v, None, None, T, S, 0.0, T > 1, False)
        rows.append((f"flash T={T} S={S}", timed([f] * 10, 200), 2 * k.numel() * 2 / (bw * 1e9) * 1e6))
print(f"{'piece':<32} {'us':>9} {'floor us':>9}")
for name, us, floor in rows:
    print(f"{name:<32} {us:>9.1f} {'' if floor is None else f'{floor:9.1f}':>9}")
