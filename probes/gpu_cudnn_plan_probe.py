"""How long cuDNN takes to plan its fused attention for a new shape (the
decoder's cuDNN path meets a new one at each context bucket): the first
call of aten::_scaled_dot_product_cudnn_attention per (P chunks, Sp keys)
for a 32-token block's 256 folded rows, against a repeated call.

    python3 probes/gpu_cudnn_plan_probe.py
"""
import time

import torch

dev, dt, Hkv, R, D = "cuda", torch.bfloat16, 2, 256, 128
op = torch.ops.aten._scaled_dot_product_cudnn_attention
kc = torch.randn(65536, Hkv, D, dtype=dt, device=dev)
q1 = torch.randn(1, Hkv, R, D, dtype=dt, device=dev)


def call(P, Sp):
    k = kc[:P * Sp].view(P, Sp, Hkv, D).permute(0, 2, 1, 3)
    torch.cuda.synchronize()
    t = time.perf_counter()
    op(q1.expand(P, -1, -1, -1), k, k, None, True, 0.0, False, False, scale=D ** -0.5)
    torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3


call(32, 64)
for P, Sp in ((32, 192), (32, 256), (32, 320), (32, 1024), (32, 1088), (16, 256), (24, 256), (40, 256)):
    first = call(P, Sp)
    print(f"P={P:3d} Sp={Sp:5d}: first call {first:7.1f} ms, again {call(P, Sp):5.2f} ms")
