"""The shim's decode attention as the GPU probes call it through ctypes
(bin/libdllmtorch.so, built with nvcc by scripts/gpu-speed.sh), declared
once for the attention probes (gpu_attn_probe.py, gpu_cudnn_attn_probe.py,
gpu_cudnn_dense_probe.py)."""
import ctypes

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
