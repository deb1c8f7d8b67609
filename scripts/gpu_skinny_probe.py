"""The decoder's tensor-core skinny GEMM (torch/csrc/kernels.cu, dtk_gemm,
through ctypes from bin/libdllmtorch.so built with nvcc) against cuBLAS on a
MiniCPM5-2B layer's four matmuls, on the GPU machine: relative error
against float32 (plain with the residual add, and gate-up with SiLU-mul
fused), then microseconds per call with the L2 cache defeated (12 copies
of each weight cycled in one CUDA graph, as scripts/gpu_gemm_probe.py),
cuBLAS linear/addmm, dtk_gemm with its own split choice and a sweep of
splits. docs/performance.md has the figures.

    python3 scripts/gpu_skinny_probe.py [rows ...]
"""
import ctypes
import sys

import torch
import torch.nn.functional as Fn

from gpu_timing import copy_bandwidth, timed

dev, dt = "cuda", torch.bfloat16
C, F, H, Hkv, D = 2048, 6144, 16, 2, 128
DT_BF16, PLAIN, SILU = 15, 0, 1  # dllm_torch.h, kernels.h

lib = ctypes.CDLL("bin/libdllmtorch.so")
gemm = lib.dtk_gemm
gemm.argtypes = [ctypes.c_int, ctypes.c_int] + [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 3 + \
    [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
wsf = lib.dtk_gemm_ws_floats
wsf.argtypes = [ctypes.c_int64] * 3
wsf.restype = ctypes.c_int64
gemv = lib.dtk_gemv
gemv.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 2 + [ctypes.c_void_p]

ws = torch.zeros(64 * 12288 * 32, dtype=torch.float32, device=dev)
cnt = torch.zeros(4096, dtype=torch.int32, device=dev)


def stream():
    return torch.cuda.current_stream().cuda_stream


def run(mode, a, w, r, out, splits=0):
    M, K = a.shape
    rc = gemm(DT_BF16, mode, a.data_ptr(), w.data_ptr(), None if r is None else r.data_ptr(), out.data_ptr(),
              M, w.shape[0], K, splits, ws.data_ptr(), cnt.data_ptr(), stream())
    assert rc == 0, f"dtk_gemm: cuda error {rc}"


def rel(y, ref):
    return ((y.float() - ref).norm() / ref.norm()).item()


# 1. Exactness against float32, every row count the kernel takes.
bad = 0
for M in (1, 2, 7, 16, 17, 32, 33, 48, 64):
    for name, (n, k) in {"qkv": (2560, C), "down": (C, F)}.items():
        w = torch.randn(n, k, dtype=dt, device=dev) * 0.02
        a, r = torch.randn(M, k, dtype=dt, device=dev), torch.randn(M, n, dtype=dt, device=dev)
        out = torch.empty(M, n, dtype=dt, device=dev)
        run(PLAIN, a, w, r, out)
        ref = Fn.linear(a.float(), w.float()) + r.float()
        e, eb = rel(out, ref), rel(torch.addmm(r, a, w.t()), ref)
        run(PLAIN, a, w, None, out, 1)
        e1 = rel(out, Fn.linear(a.float(), w.float()))
        ok = e < 2 * eb + 1e-3 and e1 < 2 * eb + 1e-3
        bad += not ok
        print(f"exact M={M:2d} {name:5s} plain+resid {e:.1e} (cuBLAS addmm {eb:.1e}), splits=1 {e1:.1e} {'ok' if ok else 'BAD'}")
    w = torch.randn(2 * F, C, dtype=dt, device=dev) * 0.02
    a = torch.randn(M, C, dtype=dt, device=dev)
    out = torch.empty(M, F, dtype=dt, device=dev)
    run(SILU, a, w, None, out)
    gu = Fn.linear(a.float(), w.float())
    ref = Fn.silu(gu[:, :F]) * gu[:, F:]
    gb = Fn.linear(a, w)
    e, eb = rel(out, ref), rel(Fn.silu(gb[:, :F]) * gb[:, F:], ref)
    ok = e < 2 * eb + 1e-3
    bad += not ok
    print(f"exact M={M:2d} gate_up silu {e:.1e} (cuBLAS + silu {eb:.1e}) {'ok' if ok else 'BAD'}")
torch.cuda.synchronize()
print("exactness:", "ok" if bad == 0 else f"{bad} BAD")

# 2. Time with L2 defeated.
bw = copy_bandwidth(dev)
print(f"copy bandwidth {bw:.0f} GB/s")
shapes = {"qkv": ((H + 2 * Hkv) * D, C), "o": (C, H * D), "gate_up": (2 * F, C), "down": (C, F)}
rows = [int(v) for v in sys.argv[1:]] or [1, 4, 16, 32, 64]
tot = {}
for M in rows:
    for name, (n, k) in shapes.items():
        wl = [torch.randn(n, k, dtype=dt, device=dev) * 0.02 for _ in range(12)]
        a = torch.randn(M, k, dtype=dt, device=dev)
        r = torch.randn(M, n, dtype=dt, device=dev)
        out = torch.empty(M, n, dtype=dt, device=dev)
        mode = SILU if name == "gate_up" else PLAIN
        t = {"cublas": timed([lambda w=w: torch.addmm(r, a, w.t()) for w in wl]) if mode == PLAIN else
             timed([lambda w=w: Fn.linear(a, w) for w in wl])}
        if M == 1:
            t["gemv"] = timed([lambda w=w: gemv(DT_BF16, a.data_ptr(), w.data_ptr(), r.data_ptr(), out.data_ptr(),
                                                 n, k, stream()) for w in wl])
        t["dtk"] = timed([lambda w=w: run(mode, a, w, None if mode else r, out) for w in wl])
        sweep = []
        for s in (1, 2, 4, 8, 16):
            if (k // 128) % s == 0:
                sweep.append(f"{s}:{timed([lambda w=w: run(mode, a, w, None if mode else r, out, s) for w in wl]):.1f}")
        print(f"M={M:3d} {name:8s} " + "  ".join(f"{key} {v:6.1f} us" for key, v in t.items()) +
              f"  floor {n * k * 2 / (bw * 1e9) * 1e6:5.1f} us  splits[{' '.join(sweep)}]", flush=True)
        for key, v in t.items():
            tot[(M, key)] = tot.get((M, key), 0) + v
        del wl
for M in rows:
    per = ", ".join(f"{key} {v:.1f} us" for (m, key), v in tot.items() if m == M)
    print(f"M={M}: per layer {per}")
