"""The decoder's cuDNN attention path, checked and timed before it is
trusted (branch next/cudnn-attn): for a 32-token block over a cache of Max
slots (16 query heads over 2 key heads, head dim 128), the keys [0, n) cut
into P splits that are the sequences of one varlen cuDNN call
(aten::_cudnn_attention_forward with device-side cumulative lengths from
dtk_attn_split_keys, so one CUDA graph serves every n), the block's rows
folded and repeated per split, then dtk_attn_merge_lse. Checks it against
float32 attention eagerly and after a graph captured at one n is replayed
at others, then times it in graphs against the shim's own kernel as the
decoder calls it (dtk_attn_decode_pos, sized for Max). If cuDNN's time
follows Max (its max_k, fixed in a graph) rather than n, the decoder needs
a graph per context bucket instead of one for all.

    PYTHONPATH=scripts python3 scripts/gpu_cudnn_varlen_probe.py
"""
import ctypes

import torch

from gpu_timing import timed

dev, dt = "cuda", torch.bfloat16
H, Hkv, D, T = 16, 2, 128, 32
G = H // Hkv
R = T * G
DT_BF16 = 15
lib = ctypes.CDLL("bin/libdllmtorch.so")
vp, i64 = ctypes.c_void_p, ctypes.c_int64
lib.dtk_attn_split_keys.argtypes = [vp, i64, i64, vp, vp]
lib.dtk_attn_merge_lse.argtypes = [ctypes.c_int, vp, vp, i64, i64, vp, i64, i64, i64, i64, vp]
lib.dtk_attn_decode_pos.argtypes = [ctypes.c_int] + [vp] * 4 + [i64] * 4 + [vp, i64, ctypes.c_float, vp, vp]
lib.dtk_attn_decode_scratch.argtypes = [i64] * 4
lib.dtk_attn_decode_scratch.restype = i64
op = torch.ops.aten._cudnn_attention_forward
stream = lambda: torch.cuda.current_stream().cuda_stream
print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
shown = False


class Path:
    """The cuDNN path's buffers for P splits over a cache of Max slots."""

    def __init__(self, P, kc, vc, q, pos, out):
        self.P, self.kc, self.vc, self.q, self.pos, self.out = P, kc, vc, q, pos, out
        self.cum_q = torch.arange(0, (P + 1) * R, R, dtype=torch.int32, device=dev)
        self.cum_k = torch.zeros(P + 1, dtype=torch.int32, device=dev)
        self.max_k = (kc.shape[0] + P - 1) // P

    def __call__(self):
        global shown
        assert lib.dtk_attn_split_keys(self.pos.data_ptr(), T, self.P, self.cum_k.data_ptr(), stream()) == 0
        qf = self.q.view(T, Hkv, G, D).permute(0, 2, 1, 3).unsqueeze(0).expand(self.P, T, G, Hkv, D)
        qf = qf.reshape(self.P * R, Hkv, D)
        res = op(qf, self.kc, self.vc, None, self.cum_q, self.cum_k, R, self.max_k, True, 0.0, False, False,
                 scale=D ** -0.5)
        parts, lse = res[0], res[1]
        if not shown:
            print(f"  parts {tuple(parts.shape)} {parts.stride()} {parts.dtype}; lse {tuple(lse.shape)} "
                  f"{lse.stride()} {lse.dtype}")
            shown = True
        parts = parts.contiguous()
        l2 = lse.squeeze()
        if l2.shape == (Hkv, self.P * R):
            lh, lr = l2.stride()
        elif l2.shape == (self.P * R, Hkv):
            lr, lh = l2.stride()
        else:
            raise SystemExit(f"lse shape {tuple(lse.shape)} is neither (Hkv, rows) nor (rows, Hkv)")
        assert lib.dtk_attn_merge_lse(DT_BF16, parts.data_ptr(), l2.data_ptr(), lh, lr, self.out.data_ptr(), T, H,
                                      Hkv, self.P, stream()) == 0


def reference(q, kc, vc, n):
    qr = q.float().permute(1, 0, 2)  # (H, T, D)
    kr = kc[:n].float().permute(1, 0, 2).repeat_interleave(G, 0)
    vr = vc[:n].float().permute(1, 0, 2).repeat_interleave(G, 0)
    p = torch.softmax(qr @ kr.transpose(1, 2) * D ** -0.5, -1)
    return (p @ vr).permute(1, 0, 2)  # (T, H, D)


def rel(a, b):
    return ((a.float() - b).norm() / b.norm()).item()


bad = 0
Max = 32768 + 64
kc = torch.randn(Max, Hkv, D, dtype=dt, device=dev)
vc = torch.randn(Max, Hkv, D, dtype=dt, device=dev)
q = torch.randn(T, H, D, dtype=dt, device=dev)
out = torch.empty(T, H, D, dtype=dt, device=dev)
pos = torch.zeros(T, dtype=torch.int64, device=dev)
setn = lambda n: pos.copy_(torch.arange(n - T, n, device=dev))
print("exactness (relative error against float32; bf16 SDPA's own for scale):")
for P in (16, 32):
    path = Path(P, kc, vc, q, pos, out)
    for n in (100, 1000, 8192, 32768):
        setn(n)
        path()
        torch.cuda.synchronize()
        ref = reference(q, kc, vc, n)
        e = rel(out, ref)
        sd = torch.nn.functional.scaled_dot_product_attention(
            q.permute(1, 0, 2).unsqueeze(0), kc[:n].permute(1, 0, 2).unsqueeze(0), vc[:n].permute(1, 0, 2).unsqueeze(0),
            enable_gqa=True).squeeze(0).permute(1, 0, 2)
        es = rel(sd, ref)
        ok = e < 2 * es + 2e-3
        bad += not ok
        print(f"  eager P={P:2d} n={n:6d}: {e:.2e} (sdpa {es:.2e}) {'ok' if ok else 'FAIL'}")
    # One graph, captured at n = 1000, replayed as the context grows.
    setn(1000)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        path()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        path()
    for n in (1000, 5000, 32768, 2000):
        setn(n)
        out.zero_()
        g.replay()
        torch.cuda.synchronize()
        e = rel(out, reference(q, kc, vc, n))
        ok = e < 1e-2
        bad += not ok
        print(f"  graph P={P:2d} captured at n=1000, replayed at n={n:6d}: {e:.2e} {'ok' if ok else 'FAIL'}")

print("us per call in a CUDA graph (the shim's kernel sized for Max, as the decoder calls it):")
print(f"{'Max':>7} {'n':>6} {'ours':>7} " + " ".join(f"{'P=' + str(P):>7}" for P in (16, 32, 64)))
for Max in (32768 + 64, 131072):
    kc = torch.randn(Max, Hkv, D, dtype=dt, device=dev)
    vc = torch.randn(Max, Hkv, D, dtype=dt, device=dev)
    scratch = torch.empty(max(1, lib.dtk_attn_decode_scratch(T, H, Hkv, Max)), dtype=torch.float32, device=dev)
    paths = {P: Path(P, kc, vc, q, pos, out) for P in (16, 32, 64)}
    for n in (1024, 8192, 32768):
        setn(n)
        ours = lambda: lib.dtk_attn_decode_pos(DT_BF16, q.data_ptr(), kc.data_ptr(), vc.data_ptr(), out.data_ptr(), T,
                                               H, Hkv, Max, pos.data_ptr(), 0, D ** -0.5, scratch.data_ptr(), stream())
        row = [timed([ours])] + [timed([paths[P]]) for P in (16, 32, 64)]
        print(f"{Max:7d} {n:6d} " + " ".join(f"{t:7.2f}" for t in row))
print("cudnn varlen path:", "ok" if bad == 0 else f"{bad} FAILED")
