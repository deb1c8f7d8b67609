"""The skinny matmuls of a MiniCPM5-2B layer on the GPU machine (a reference
measurement with PyTorch, not the product): F.linear on (N, K) weights, as
the decoder calls them, against x @ Wt on (K, N) contiguous weights and
addmm (the decoder's residual form), at 1, 32 and 64 rows, each in a CUDA
graph that cycles over 12 copies of the weight so that the H200's 50 MB L2
cannot serve repeated reads (scripts/gpu_probe.py reuses one weight, which
flatters the larger matmuls). docs/performance.md has the figures.

    python3 scripts/gpu_gemm_probe.py
"""
import torch
import torch.nn.functional as Fn
dev, dt = "cuda", torch.bfloat16
C, F, H, Hkv, D = 2048, 6144, 16, 2, 128
def timed(fns, n=240):
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in fns: f()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for f in fns: f()
    g.replay(); torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n // len(fns)): g.replay()
    b.record(); torch.cuda.synchronize()
    return a.elapsed_time(b) / (n // len(fns) * len(fns)) * 1000
x = torch.empty(1 << 30, dtype=torch.uint8, device=dev); y = torch.empty_like(x)
bw = 2 * x.numel() / (timed([lambda: y.copy_(x)], 20) * 1e-6) / 1e9
print(f"copy bandwidth {bw:.0f} GB/s"); del x, y
shapes = {"qkv": ((H + 2 * Hkv) * D, C), "o": (C, H * D), "gate_up": (2 * F, C), "down": (C, F)}
tot = {}
for M in (1, 32, 64):
    for name, (n, k) in shapes.items():
        ws = [torch.randn(n, k, dtype=dt, device=dev) for _ in range(12)]
        wts = [w.t().contiguous() for w in ws]
        a = torch.randn(M, k, dtype=dt, device=dev)
        out = torch.empty(M, n, dtype=dt, device=dev)
        t1 = timed([lambda w=w: Fn.linear(a, w) for w in ws])
        t2 = timed([lambda w=w: torch.mm(a, w) for w in wts])
        t3 = timed([lambda w=w: torch.addmm(out, a, w.t()) for w in ws])
        fl = n * k * 2 / (bw * 1e9) * 1e6
        print(f"M={M:3d} {name:8s} linear {t1:6.1f} us  mm(K,N) {t2:6.1f} us  addmm {t3:6.1f} us  floor {fl:5.1f} us")
        for key, t in (("linear", t1), ("mm", t2), ("addmm", t3)):
            tot[(M, key)] = tot.get((M, key), 0) + t
        del ws, wts
for M in (1, 32, 64):
    print(f"M={M}: per layer linear {tot[(M,'linear')]:.1f} us, mm(K,N) {tot[(M,'mm')]:.1f} us, addmm {tot[(M,'addmm')]:.1f} us; x42 linear {tot[(M,'linear')]*42/1000:.2f} ms")
