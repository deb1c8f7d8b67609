"""Would cuDNN's fused attention (PyTorch's CUDNN_ATTENTION SDPA backend,
Hopper kernels) beat the shim's decode attention for a 32-token block?
On the GPU machine, for MiniCPM5-2B's heads (16 query heads over 2 key
heads, head dim 128) at 1k, 8k and 32k keys: microseconds per call in a
CUDA graph of the shim's kernel with its merge (dtk_attn_decode), against
cuDNN and FlashAttention 2 with the key heads' 8 query heads folded into
256 rows and the keys split into `splits` chunks as the batch (the merge
by log-sum-exp not counted), with the log-sum-exp they would need; TFLOP/s
by the dense count. A first look, not a decoder change.

    PYTHONPATH=scripts python3 probes/gpu_cudnn_attn_probe.py
"""
import torch

from gpu_shim import DT_BF16, attn, scr
from gpu_timing import timed

dev, dt = "cuda", torch.bfloat16
H, Hkv, D, T = 16, 2, 128, 32
R = T * H // Hkv  # folded rows a key head
cudnn = torch.ops.aten._scaled_dot_product_cudnn_attention
flash = torch.ops.aten._scaled_dot_product_flash_attention
print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")


def try_time(fn):
    try:
        fn()
        torch.cuda.synchronize()
        return timed([fn])
    except Exception as e:  # noqa: BLE001 - a backend that refuses the shape
        print(f"  ({type(e).__name__}: {str(e).splitlines()[0][:100]})")
        return float("nan")


print(f"{'S':>6} {'splits':>6} {'ours':>7} {'cudnn':>7} {'flash2':>7}  TFLOP/s ours / cudnn / flash2")
for S in (1024, 8192, 32768):
    kc = torch.randn(S, Hkv, D, dtype=dt, device=dev)
    vc = torch.randn(S, Hkv, D, dtype=dt, device=dev)
    q = torch.randn(T, H, D, dtype=dt, device=dev)
    out = torch.empty_like(q)
    scratch = torch.empty(max(1, scr(T, H, Hkv, S)), dtype=torch.float32, device=dev)
    st = torch.cuda.current_stream().cuda_stream
    t_ours = timed([lambda: attn(DT_BF16, q.data_ptr(), kc.data_ptr(), vc.data_ptr(), out.data_ptr(), T, H, Hkv, S,
                                 D ** -0.5, scratch.data_ptr(), torch.cuda.current_stream().cuda_stream)])
    flop = 4 * Hkv * R * S * D
    for splits in (1, 8, 16, 32, 64):
        if S % splits or S // splits < 64:
            continue
        n = S // splits
        # (splits, Hkv, R, D): row r of key head h is token r // 8, head 8 h + r % 8.
        qs = q.view(T, Hkv, H // Hkv, D).permute(1, 0, 2, 3).reshape(1, Hkv, R, D).expand(splits, -1, -1, -1).contiguous()
        ks = kc.view(splits, n, Hkv, D).permute(0, 2, 1, 3)
        vs = vc.view(splits, n, Hkv, D).permute(0, 2, 1, 3)
        t_c = try_time(lambda: cudnn(qs, ks, vs, None, True, 0.0, False, False, scale=D ** -0.5))
        t_f = try_time(lambda: flash(qs, ks, vs, 0.0, False, False, scale=D ** -0.5))
        tf = lambda t: flop / (t * 1e-6) / 1e12
        print(f"{S:6d} {splits:6d} {t_ours:7.2f} {t_c:7.2f} {t_f:7.2f}  {tf(t_ours):5.0f} / {tf(t_c):5.0f} / {tf(t_f):5.0f}")
