"""The skinny matmuls of a MiniCPM5-2B layer on the GPU machine: F.linear on
(N, K) weights, as the decoder calls them, against x @ Wt on (K, N)
contiguous weights and addmm (the decoder's residual form), at 1, 32 and 64
rows, and at one row the decoder's own GEMV (torch/csrc/kernels.cu,
dtk_gemv, through ctypes from bin/libdllmtorch.so when it was built with
nvcc) with its relative error against float32. Each runs in a CUDA graph
that cycles over 12 copies of the weight so that the H200's 50 MB L2
cannot serve repeated reads (probes/gpu_probe.py reuses one weight, which
flatters the larger matmuls). docs/history.md has the figures.

    python3 probes/gpu_gemm_probe.py
"""
import ctypes

import torch
import torch.nn.functional as Fn

from gpu_timing import copy_bandwidth, timed

dev, dt = "cuda", torch.bfloat16
C, F, H, Hkv, D = 2048, 6144, 16, 2, 128
DT_BF16 = 15  # dllm_torch.h

try:
    lib = ctypes.CDLL("bin/libdllmtorch.so")
    gemv = lib.dtk_gemv
    gemv.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 2 + [ctypes.c_void_p]
except (OSError, AttributeError):
    gemv = None  # no shim here, or one built without nvcc


bw = copy_bandwidth(dev)
print(f"copy bandwidth {bw:.0f} GB/s")
shapes = {"qkv": ((H + 2 * Hkv) * D, C), "o": (C, H * D), "gate_up": (2 * F, C), "down": (C, F)}
tot = {}
for M in (1, 32, 64):
    for name, (n, k) in shapes.items():
        ws = [torch.randn(n, k, dtype=dt, device=dev) * 0.02 for _ in range(12)]
        wts = [w.t().contiguous() for w in ws]
        a = torch.randn(M, k, dtype=dt, device=dev)
        out = torch.empty(M, n, dtype=dt, device=dev)
        t = {
            "linear": timed([lambda w=w: Fn.linear(a, w) for w in ws]),
            "mm(K,N)": timed([lambda w=w: torch.mm(a, w) for w in wts]),
            "addmm": timed([lambda w=w: torch.addmm(out, a, w.t()) for w in ws]),
        }
        extra = ""
        if gemv is not None and M == 1:
            stream = lambda: torch.cuda.current_stream().cuda_stream

            def run(w):
                assert gemv(DT_BF16, a.data_ptr(), w.data_ptr(), None, out.data_ptr(), n, k, stream()) == 0

            t["gemv"] = timed([lambda w=w: run(w) for w in ws])
            run(ws[0])
            torch.cuda.synchronize()
            ref = Fn.linear(a.float(), ws[0].float())
            extra = f"  (gemv {n * k * 2 / t['gemv'] / 1e3:.0f} GB/s, rel err {((out.float() - ref).norm() / ref.norm()).item():.1e})"
        print(f"M={M:3d} {name:8s} " + "  ".join(f"{key} {v:6.1f} us" for key, v in t.items()) +
              f"  floor {n * k * 2 / (bw * 1e9) * 1e6:5.1f} us" + extra)
        for key, v in t.items():
            tot[(M, key)] = tot.get((M, key), 0) + v
        del ws, wts
for M in (1, 32, 64):
    per = ", ".join(f"{key} {v:.1f} us" for (m, key), v in tot.items() if m == M)
    print(f"M={M}: per layer {per}; x42 linear {tot[(M, 'linear')] * 42 / 1000:.2f} ms")

# The GEMV with the step before it folded in (dtk_gemv_in): RMSNorm before
# the QKV and gate-up matmuls, SiLU(gate) * up before the down matmul. Its
# output must equal the two kernels in turn (dtk_rms_norm or dtk_silu_mul,
# then dtk_gemv) bit for bit; times for one call against the pair.
if gemv is not None and hasattr(lib, "dtk_gemv_in"):
    gin = lib.dtk_gemv_in
    gin.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float] + \
        [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 2 + [ctypes.c_void_p]
    norm = lib.dtk_rms_norm
    norm.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 2 + [ctypes.c_float, ctypes.c_void_p]
    silu = lib.dtk_silu_mul
    silu.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 2 + [ctypes.c_int64] * 2 + [ctypes.c_void_p]
    st = lambda: torch.cuda.current_stream().cuda_stream
    eps = 1e-6
    for name, (n, k), mode in [("qkv", shapes["qkv"], 1), ("gate_up", shapes["gate_up"], 1),
                               ("down", shapes["down"], 2)]:
        ws = [torch.randn(n, k, dtype=dt, device=dev) * 0.02 for _ in range(12)]
        x = torch.randn(1, k * (2 if mode == 2 else 1), dtype=dt, device=dev)
        nw = torch.rand(k, dtype=dt, device=dev) + 0.5
        mid = torch.empty(1, k, dtype=dt, device=dev)
        a, b = torch.empty(1, n, dtype=dt, device=dev), torch.empty(1, n, dtype=dt, device=dev)

        def fused(w):
            assert gin(DT_BF16, mode, x.data_ptr(), nw.data_ptr(), eps, w.data_ptr(), None, a.data_ptr(), n, k,
                       st()) == 0

        def pair(w):
            if mode == 1:
                assert norm(DT_BF16, x.data_ptr(), nw.data_ptr(), mid.data_ptr(), 1, k, eps, st()) == 0
            else:
                assert silu(DT_BF16, x.data_ptr(), mid.data_ptr(), 1, k, st()) == 0
            assert gemv(DT_BF16, mid.data_ptr(), w.data_ptr(), None, b.data_ptr(), n, k, st()) == 0

        fused(ws[0])
        pair(ws[0])
        torch.cuda.synchronize()
        same = torch.equal(a, b)
        tf, tp = timed([lambda w=w: fused(w) for w in ws]), timed([lambda w=w: pair(w) for w in ws])
        print(f"gemv_in {name:8s} ({'norm' if mode == 1 else 'silu'}): fused {tf:5.1f} us, two kernels {tp:5.1f} us, "
              f"{'equal' if same else 'DIFFERENT'}")
