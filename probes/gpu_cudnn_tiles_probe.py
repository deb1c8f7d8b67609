"""How cuDNN's fused attention call in the decoder (attend_cudnn) costs by
the keys of a chunk: on the GPU machine, microseconds per call in a CUDA
graph of `_scaled_dot_product_cudnn_attention` shaped as the decoder calls
it (q folded into R rows a key head and shared by the P chunks through a
batch stride of 0; the chunks Sp consecutive cache slots of (S, Hkv, D)),
for Sp from 64 to 640 and P of 16, 32 and 33 (33 chunks of a 256-row block
are 132 CTAs of 128 rows: the H200's SMs). If the time steps with every
128 keys, a bucket whose chunks end on a 128-key tile saves a tile's time
at contexts just past a multiple of P x 128.

    PYTHONPATH=scripts python3 probes/gpu_cudnn_tiles_probe.py
"""
import torch

from gpu_timing import timed

dev, dt = "cuda", torch.bfloat16
H, Hkv, D = 16, 2, 128
cudnn = torch.ops.aten._scaled_dot_product_cudnn_attention
print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}, "
      f"{torch.cuda.get_device_properties(0).multi_processor_count} SMs")

sps = (64, 128, 192, 256, 320, 384, 448, 512, 640)
for R in (256, 512):
    print(f"\nR = {R} rows a key head ({R // (H // Hkv)} tokens); us a call by keys a chunk (Sp)")
    print(f"{'P':>4} " + " ".join(f"{sp:>6}" for sp in sps))
    for P in (16, 32, 33):
        kc = torch.randn(P * max(sps), Hkv, D, dtype=dt, device=dev)
        vc = torch.randn_like(kc)
        q = torch.randn(1, Hkv, R, D, dtype=dt, device=dev)
        qf = q.expand(P, Hkv, R, D)
        row = []
        for sp in sps:
            k = kc[:P * sp].view(P, sp, Hkv, D).permute(0, 2, 1, 3)
            v = vc[:P * sp].view(P, sp, Hkv, D).permute(0, 2, 1, 3)
            row.append(timed([lambda: cudnn(qf, k, v, None, True, 0.0, False, False, scale=D ** -0.5)]))
        print(f"{P:4d} " + " ".join(f"{t:6.2f}" for t in row))
