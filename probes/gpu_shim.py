"""The shim's decode attention as the GPU probes call it through ctypes
(bin/libdllmtorch.so, built with nvcc by scripts/gpu-speed.sh), declared
once for the attention probes (gpu_attn_probe.py, gpu_cudnn_attn_probe.py,
gpu_cudnn_dense_probe.py), with the float32 attention they check against."""
import ctypes

import torch

DT_BF16 = 15  # dllm_torch.h
lib = ctypes.CDLL("bin/libdllmtorch.so")
attn = lib.dtk_attn_decode  # (dtype, q, kc, vc, out, T, H, Hkv, S, scale, scratch, stream)
attn.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 4 + [ctypes.c_float] + [ctypes.c_void_p] * 2
scr = lib.dtk_attn_decode_scratch  # floats of scratch for (T, H, Hkv, S)
scr.argtypes = [ctypes.c_int64] * 4
scr.restype = ctypes.c_int64
attn_pos = lib.dtk_attn_decode_pos  # (dtype, q, kc, vc, out, T, H, Hkv, S, pos, causal, scale, scratch, stream)
attn_pos.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 4 + [ctypes.c_void_p, ctypes.c_int64,
                                                                                     ctypes.c_float] + [ctypes.c_void_p] * 2
merge_lse = lib.dtk_attn_merge_lse  # (dtype, parts, ps, ph, pr, lse, ls, lh, lr, pos, S, out, T, H, Hkv, splits, stream)
merge_lse.argtypes = [ctypes.c_int, ctypes.c_void_p] + [ctypes.c_int64] * 3 + [ctypes.c_void_p] + [ctypes.c_int64] * 3 + \
    [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p] + [ctypes.c_int64] * 4 + [ctypes.c_void_p]


def f32_attention(q, kc, vc, n):
    """Float32 attention of q (T, H, D) over the first n slots of the caches
    kc, vc (S, Hkv, D), every row seeing every key, each key head repeated
    for its H / Hkv query heads: (T, H, D)."""
    G = q.shape[1] // kc.shape[1]
    qr = q.float().permute(1, 0, 2)  # (H, T, D)
    kr = kc[:n].float().permute(1, 0, 2).repeat_interleave(G, 0)
    vr = vc[:n].float().permute(1, 0, 2).repeat_interleave(G, 0)
    p = torch.softmax(qr @ kr.transpose(1, 2) * q.shape[2] ** -0.5, -1)
    return (p @ vr).permute(1, 0, 2)
