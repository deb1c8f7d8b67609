"""cuDNN's fused attention for the decoder's block steps, as the decoder
would call it from a CUDA graph per context bucket (branch
next/cudnn-attn): for a 32-token block (16 query heads over 2 key heads,
head dim 128) the 8 query heads of a key head folded into 256 rows, the
bucket's Sb cache slots cut into P chunks of Sp keys that are the batch of
one dense aten::_scaled_dot_product_cudnn_attention call (cached by
PyTorch, so graph-capturable; PyTorch 2.11's varlen call rebuilds cuDNN's
plan every call and breaks a capture), no mask: the slots past the context
are zero, so each scores exactly 0 and dtk_attn_merge_lse, merging the
chunks, takes their e^0 off the sum. Checks it against float32 attention
eagerly and from a graph replayed at other contexts in its bucket, and on
rows whose every score is negative (where taking the padding off cancels
most of the sum), then times it in graphs against the shim's kernel as the
decoder calls it (dtk_attn_decode_pos, sized for 32k).

    PYTHONPATH=scripts python3 probes/gpu_cudnn_dense_probe.py
"""
import torch

from gpu_shim import DT_BF16, attn_pos, f32_attention, merge_lse, scr
from gpu_timing import timed

dev, dt = "cuda", torch.bfloat16
H, Hkv, D, T = 16, 2, 128, 32
G = H // Hkv
R = T * G
op = torch.ops.aten._scaled_dot_product_cudnn_attention
stream = lambda: torch.cuda.current_stream().cuda_stream
print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
Max = 32768 + 64
kc = torch.randn(Max, Hkv, D, dtype=dt, device=dev)
vc = torch.randn(Max, Hkv, D, dtype=dt, device=dev)
q = torch.randn(T, H, D, dtype=dt, device=dev) * 2  # peakier softmax than unit scores
out = torch.empty(T, H, D, dtype=dt, device=dev)
pos = torch.zeros(T, dtype=torch.int64, device=dev)
kz, vz = kc.clone(), vc.clone()  # the cache the path reads: zero past the context


def setn(n):
    pos.copy_(torch.arange(n - T, n, device=dev))
    kz.copy_(kc)
    vz.copy_(vc)
    kz[n:].zero_()
    vz[n:].zero_()


class Dense:
    """The path for a bucket of P chunks of Sp keys: qmode 'expand' gives
    cuDNN the folded q with a batch stride of 0, 'copy' a copy per chunk."""

    def __init__(self, P, Sp, qmode):
        self.P, self.Sp, self.Sb, self.qmode = P, Sp, P * Sp, qmode
        self.k = kz[:self.Sb].view(P, Sp, Hkv, D).permute(0, 2, 1, 3)
        self.v = vz[:self.Sb].view(P, Sp, Hkv, D).permute(0, 2, 1, 3)
        self.qf = torch.empty(P, Hkv, R, D, dtype=dt, device=dev)
        self.q1 = torch.empty(1, Hkv, R, D, dtype=dt, device=dev)

    def cudnn(self):
        # (1, Hkv, R, D): key head h's row r is token r // G, head h G + r % G.
        self.q1.copy_(q.view(T, Hkv, G, D).permute(1, 0, 2, 3).reshape(1, Hkv, R, D))
        if self.qmode == "copy":
            self.qf.copy_(self.q1.expand(self.P, -1, -1, -1))
            qf = self.qf
        else:
            qf = self.q1.expand(self.P, -1, -1, -1)
        return op(qf, self.k, self.v, None, True, 0.0, False, False, scale=D ** -0.5)

    def __call__(self):
        res = self.cudnn()
        o, lse = res[0], res[1]
        assert o.stride(3) == 1 and lse.dim() in (3, 4), (o.stride(), lse.shape)
        assert merge_lse(DT_BF16, o.data_ptr(), o.stride(0), o.stride(1), o.stride(2), lse.data_ptr(), lse.stride(0),
                         lse.stride(1), lse.stride(2), pos.data_ptr(), self.Sb, out.data_ptr(), T, H, Hkv, self.P,
                         stream()) == 0
        return o, lse


def reference(n):
    return f32_attention(q, kc, vc, n)


def rel(a, b):
    return ((a.float() - b).norm() / b.norm()).item()


def sdpa_err(n):
    sd = torch.nn.functional.scaled_dot_product_attention(
        q.permute(1, 0, 2).unsqueeze(0), kc[:n].permute(1, 0, 2).unsqueeze(0), vc[:n].permute(1, 0, 2).unsqueeze(0),
        enable_gqa=True).squeeze(0).permute(1, 0, 2)
    return rel(sd, reference(n))


bad = 0
qmodes = []
print("exactness (relative error against float32; bf16 SDPA's own for scale):")
for qmode in ("expand", "copy"):
    try:
        setn(1000)
        o, lse = Dense(8, 256, qmode)()
        torch.cuda.synchronize()
        print(f"  q {qmode}: parts {tuple(o.shape)} {o.stride()}; lse {tuple(lse.shape)} {lse.stride()} {lse.dtype}")
        qmodes.append(qmode)
    except Exception as e:  # noqa: BLE001 - cuDNN refusing a layout is a finding
        print(f"  q {qmode}: refused: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
for qmode in qmodes:
    for P, Sp in ((8, 256), (32, 1024)):
        path = Dense(P, Sp, qmode)
        Sb = P * Sp
        for n in (40, Sp + 1, Sb // 2 + 7, Sb - 100, Sb):
            setn(n)
            path()
            torch.cuda.synchronize()
            e, es = rel(out, reference(n)), sdpa_err(n)
            ok = e < 2 * es + 2e-3
            bad += not ok
            print(f"  {qmode:6s} P={P:2d} Sp={Sp:4d} n={n:6d}: {e:.2e} (sdpa {es:.2e}) {'ok' if ok else 'FAIL'}")
        # One graph for the bucket, captured at one context, replayed at others.
        setn(Sb // 2)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            path()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            path()
        for n in (Sb, 100, Sb - 1, Sb // 3):
            setn(n)
            out.zero_()
            g.replay()
            torch.cuda.synchronize()
            e = rel(out, reference(n))
            ok = e < 2 * sdpa_err(n) + 2e-3
            bad += not ok
            print(f"  {qmode:6s} P={P:2d} Sp={Sp:4d} graph captured at n={Sb // 2}, replayed at n={n:6d}: {e:.2e} "
                  f"{'ok' if ok else 'FAIL'}")
# Rows whose scores are all negative: q against the keys' common direction.
u = torch.randn(D, device=dev)
u /= u.norm()
q0 = q.clone()
kc += (8 * u).to(dt)  # every key leans along u
path = Dense(8, 256, qmodes[0]) if qmodes else None
for lean in (2.0, 4.0, 8.0):
    q.copy_((q0.float() * 0.05 - lean / (8 * D ** -0.5) * u).to(dt))  # scores about -lean
    for n in (1000, 1500):
        setn(n)
        path()
        torch.cuda.synchronize()
        ref = reference(n)
        mxs = (q.float().permute(1, 0, 2) @ kc[:n].float().permute(1, 2, 0).repeat_interleave(G, 0)).max().item()
        e, es = rel(out, ref), sdpa_err(n)
        print(f"  negative scores (largest {mxs * D ** -0.5:6.2f}), n={n}, {2048 - n} zero slots: {e:.2e} "
              f"(sdpa {es:.2e})")
kc -= (8 * u).to(dt)
q.copy_(q0)
print("cudnn dense path:", "ok" if bad == 0 else f"{bad} FAILED")
if not qmodes:
    raise SystemExit(1)

print("us per call in a CUDA graph: the shim's kernel sized for 32k at n = Sb; the path (q fold, cuDNN, merge)")
print("for a bucket of Sb keys in P chunks of Sp, with its cuDNN call alone after the /")
Sps = (128, 256, 512, 1024)
print(f"{'Sb':>6} {'ours':>6} " + " ".join(f"{'Sp=' + str(s) + ' ' + m:>16}" for s in Sps for m in qmodes[:1]))
scratch = torch.empty(max(1, scr(T, H, Hkv, Max)), dtype=torch.float32, device=dev)
for Sb in (1024, 2048, 4096, 6144, 8192, 12288, 16384, 24576, 32768):
    setn(Sb)
    ours = timed([lambda: attn_pos(DT_BF16, q.data_ptr(), kc.data_ptr(), vc.data_ptr(), out.data_ptr(), T, H, Hkv,
                                   Max, pos.data_ptr(), 0, D ** -0.5, scratch.data_ptr(), stream())])
    row = []
    for Sp in Sps:
        if Sb % Sp or Sb // Sp > 128:
            row.append("")
            continue
        p = Dense(Sb // Sp, Sp, qmodes[0])
        row.append(f"{timed([p]):7.2f}/{timed([p.cudnn]):6.2f}")
    print(f"{Sb:6d} {ours:6.2f} " + " ".join(f"{c:>16}" for c in row))
if "copy" in qmodes and qmodes[0] != "copy":
    print("q copy instead, Sp=1024:", " ".join(
        f"{Sb}: {timed([Dense(Sb // 1024, 1024, 'copy')]):.2f}" for Sb in (8192, 32768)))
