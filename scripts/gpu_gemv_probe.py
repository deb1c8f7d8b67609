"""The decoder's one-row GEMV (torch/csrc/kernels.cu, dtk_gemv, called
through ctypes from bin/libdllmtorch.so built with nvcc) against cuBLAS's
F.linear for each matmul of a MiniCPM5-2B layer at one row, in CUDA graphs
that cycle over 12 copies of each weight (L2 cannot hold them), with the
kernel's relative error against a float32 matmul. docs/performance.md has
the figures.

    python3 scripts/gpu_gemv_probe.py   (after make shim TORCH=...)
"""
import ctypes, torch
import torch.nn.functional as Fn
lib = ctypes.CDLL("bin/libdllmtorch.so")
lib.dtk_gemv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                         ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
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
shapes = {"qkv": ((H + 2 * Hkv) * D, C), "o": (C, H * D), "gate_up": (2 * F, C), "down": (C, F)}
for M in (1,):  # the kernel takes one row
    tl = tg = 0
    for name, (n, k) in shapes.items():
        ws = [torch.randn(n, k, dtype=dt, device=dev) * 0.02 for _ in range(12)]
        a = torch.randn(M, k, dtype=dt, device=dev)
        out = torch.empty(M, n, dtype=dt, device=dev)
        def gv(w):
            r = lib.dtk_gemv(15, a.data_ptr(), w.data_ptr(), None, out.data_ptr(), n, k, torch.cuda.current_stream().cuda_stream)
            assert r == 0, r
        t1 = timed([lambda w=w: Fn.linear(a, w) for w in ws])
        t2 = timed([lambda w=w: gv(w) for w in ws])
        gv(ws[0]); torch.cuda.synchronize()
        ref = Fn.linear(a.float(), ws[0].float())
        err = ((out.float() - ref).norm() / ref.norm()).item()
        gbs = n * k * 2 / (t2 * 1e-6) / 1e9
        print(f"M={M} {name:8s} linear {t1:6.1f} us  gemv {t2:6.1f} us ({gbs:5.0f} GB/s)  rel err {err:.1e}")
        tl += t1; tg += t2
    print(f"M={M}: per layer linear {tl:.1f} us, gemv {tg:.1f} us")
