// block_attn.cpp: attention over the noisy+clean block layout as
// FlashAttention calls plus a small dense part, with its own backward.
//
// The layout's mask (block_attn.h) is three quarters empty, and SDPA under
// an explicit mask computes every score of it with the memory-efficient
// kernel. Split into parts FlashAttention can do without a mask:
//   1. clean rows over clean keys: causal inside each document segment;
//   2. noisy rows over the clean keys j <= i - block: causal, bottom-right
//      aligned, over the segment's keys with its last `block` removed;
//   3. noisy row i = b*block + r over the clean keys of block b-1 at offsets
//      above r (what 2 leaves out of "every earlier block") and the noisy
//      keys of block b: a (block x 2*block) dense part per block.
// Parts 2 and 3 are disjoint and together are the noisy row's keys; their
// outputs merge by log-sum-exp. The backward uses the merged output and
// log-sum-exp for every part (FlashAttention's backward takes them as
// given, which is what makes a merge of its calls exact).
#include "block_attn.h"

#include <cmath>
#include <limits>
#include <tuple>

namespace dllm {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr double kInf = std::numeric_limits<double>::infinity();

// acc is the type the merge and the dense part compute in: float32, or
// float64 for float64 inputs (the CPU tests).
at::ScalarType acc(const at::Tensor &t) { return at::promote_types(t.scalar_type(), at::kFloat); }

at::Tensor int32_on(const std::vector<int64_t> &v, at::Device dev) {
  std::vector<int32_t> w(v.begin(), v.end());
  return at::tensor(w, at::TensorOptions().dtype(at::kInt)).to(dev);
}

// Part is one FlashAttention-style call: out (Nq, H, D), lse (Nq, H)
// float32 with rows that see no key at -inf, and what its backward needs.
struct Part {
  at::Tensor out, lse;
  at::Tensor raw, rng, unused; // the kernel's own lse layout and RNG state
};

// Reference maths for one varlen call, per segment: q (Nq, H, D), k and v
// (Nk, Hkv, D); causal is bottom-right aligned (row u of a segment sees key
// w <= u + nk - nq). Used where FlashAttention is not (the CPU, float32).
Part ref_fwd(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const std::vector<int64_t> &sq,
             const std::vector<int64_t> &sk, bool causal, double scale) {
  auto H = q.size(1), G = H / k.size(1);
  auto out = at::zeros_like(q);
  auto lse = at::full({q.size(0), H}, -kInf, q.options().dtype(acc(q)));
  int64_t oq = 0, ok = 0;
  for (size_t z = 0; z < sq.size(); z++) {
    auto nq = sq[z], nk = sk[z];
    if (nq > 0 && nk > 0) {
      auto qh = q.narrow(0, oq, nq).permute({1, 0, 2});                                 // (H, nq, D)
      auto kh = k.narrow(0, ok, nk).permute({1, 0, 2}).repeat_interleave(G, 0);         // (H, nk, D)
      auto vh = v.narrow(0, ok, nk).permute({1, 0, 2}).repeat_interleave(G, 0);
      auto s = at::bmm(qh, kh.transpose(1, 2)) * scale;                                 // (H, nq, nk)
      if (causal) s = s.masked_fill(at::ones({nq, nk}, q.options().dtype(at::kBool)).tril(nk - nq).logical_not(), -kInf);
      auto l = at::logsumexp(s, -1, true);                                               // (H, nq, 1)
      auto p = (s - l.masked_fill(l.isinf(), 0)).exp();
      out.narrow(0, oq, nq).copy_(at::bmm(p, vh).permute({1, 0, 2}));
      lse.narrow(0, oq, nq).copy_(l.squeeze(-1).t());
    }
    oq += nq;
    ok += nk;
  }
  return {out, lse, {}, {}, {}};
}

// ref_bwd is ref_fwd's backward given the final out and lse (Nq, H).
std::tuple<at::Tensor, at::Tensor, at::Tensor> ref_bwd(const at::Tensor &dout, const at::Tensor &q, const at::Tensor &k,
                                                       const at::Tensor &v, const at::Tensor &out, const at::Tensor &lse,
                                                       const std::vector<int64_t> &sq, const std::vector<int64_t> &sk,
                                                       bool causal, double scale) {
  auto H = q.size(1), Hkv = k.size(1), G = H / Hkv, D = q.size(2);
  auto dq = at::zeros_like(q), dk = at::zeros_like(k), dv = at::zeros_like(v);
  int64_t oq = 0, ok = 0;
  for (size_t z = 0; z < sq.size(); z++) {
    auto nq = sq[z], nk = sk[z];
    if (nq > 0 && nk > 0) {
      auto qh = q.narrow(0, oq, nq).permute({1, 0, 2});
      auto kh = k.narrow(0, ok, nk).permute({1, 0, 2}).repeat_interleave(G, 0);
      auto vh = v.narrow(0, ok, nk).permute({1, 0, 2}).repeat_interleave(G, 0);
      auto doh = dout.narrow(0, oq, nq).permute({1, 0, 2});                               // (H, nq, D)
      auto s = at::bmm(qh, kh.transpose(1, 2)) * scale;
      if (causal) s = s.masked_fill(at::ones({nq, nk}, q.options().dtype(at::kBool)).tril(nk - nq).logical_not(), -kInf);
      auto p = (s - lse.narrow(0, oq, nq).t().unsqueeze(-1).to(s.scalar_type())).exp();   // (H, nq, nk)
      auto rowdot = (dout.narrow(0, oq, nq) * out.narrow(0, oq, nq)).sum(-1).t().unsqueeze(-1); // (H, nq, 1)
      auto ds = p * (at::bmm(doh, vh.transpose(1, 2)) - rowdot);
      dq.narrow(0, oq, nq).copy_((at::bmm(ds, kh) * scale).permute({1, 0, 2}));
      auto dkh = (at::bmm(ds.transpose(1, 2), qh) * scale).view({Hkv, G, nk, D}).sum(1);  // (Hkv, nk, D)
      auto dvh = at::bmm(p.transpose(1, 2), doh).view({Hkv, G, nk, D}).sum(1);
      dk.narrow(0, ok, nk).copy_(dkh.permute({1, 0, 2}));
      dv.narrow(0, ok, nk).copy_(dvh.permute({1, 0, 2}));
    }
    oq += nq;
    ok += nk;
  }
  return {dq, dk, dv};
}

#ifdef DLLM_CUDA
// flash_ok says whether FlashAttention takes q: CUDA, half types, head
// sizes it was built for; other inputs take the reference maths.
bool flash_ok(const at::Tensor &q) {
  auto st = q.scalar_type();
  return q.is_cuda() && (st == at::kBFloat16 || st == at::kHalf) && q.size(-1) % 8 == 0 && q.size(-1) <= 256;
}

// The kernel returns lse as (H, Nq) for packed rows or (nseq, H, M) padded
// per segment, depending on the version; these convert to and from (Nq, H).
at::Tensor padded_rows(const std::vector<int64_t> &sq, int64_t M, at::Device dev) {
  std::vector<int64_t> idx;
  for (size_t z = 0; z < sq.size(); z++)
    for (int64_t u = 0; u < sq[z]; u++) idx.push_back(static_cast<int64_t>(z) * M + u);
  return at::tensor(idx, at::TensorOptions().dtype(at::kLong)).to(dev);
}

at::Tensor lse_packed(const at::Tensor &raw, const std::vector<int64_t> &sq) {
  at::Tensor l;
  if (raw.dim() == 2) {
    l = raw.t();
  } else {
    auto H = raw.size(1), M = raw.size(2);
    l = raw.permute({0, 2, 1}).reshape({-1, H}).index_select(0, padded_rows(sq, M, raw.device()));
  }
  return l.masked_fill(l.isinf(), -kInf).contiguous(); // no key: +inf from the kernel
}

at::Tensor lse_raw(const at::Tensor &packed, const at::Tensor &like, const std::vector<int64_t> &sq) {
  if (like.dim() == 2) return packed.t().contiguous();
  auto n = like.size(0), H = like.size(1), M = like.size(2);
  auto flat = at::zeros({n * M, H}, like.options());
  flat.index_copy_(0, padded_rows(sq, M, like.device()), packed);
  return flat.view({n, M, H}).permute({0, 2, 1}).contiguous();
}
#endif

Part flash_fwd(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const at::Tensor &cu_q,
               const at::Tensor &cu_k, const std::vector<int64_t> &sq, const std::vector<int64_t> &sk, int64_t max_q,
               int64_t max_k, bool causal, double scale) {
#ifdef DLLM_CUDA
  if (flash_ok(q)) {
    auto r = at::_flash_attention_forward(q, k, v, cu_q, cu_k, max_q, max_k, 0.0, causal, false, scale);
    auto raw = std::get<1>(r);
    return {std::get<0>(r), lse_packed(raw, sq), raw, std::get<2>(r), std::get<3>(r)};
  }
#endif
  (void)cu_q, (void)cu_k, (void)max_q, (void)max_k;
  return ref_fwd(q, k, v, sq, sk, causal, scale);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_bwd(const at::Tensor &dout, const at::Tensor &q,
                                                         const at::Tensor &k, const at::Tensor &v,
                                                         const at::Tensor &out, const at::Tensor &lse,
                                                         const at::Tensor &raw, const at::Tensor &rng,
                                                         const at::Tensor &unused, const at::Tensor &cu_q,
                                                         const at::Tensor &cu_k, const std::vector<int64_t> &sq,
                                                         const std::vector<int64_t> &sk, int64_t max_q, int64_t max_k,
                                                         bool causal, double scale) {
#ifdef DLLM_CUDA
  if (flash_ok(q))
    return at::_flash_attention_backward(dout, q, k, v, out, lse_raw(lse, raw, sq), cu_q, cu_k, max_q, max_k, 0.0,
                                         causal, rng, unused, scale);
#endif
  (void)raw, (void)rng, (void)unused, (void)cu_q, (void)cu_k, (void)max_q, (void)max_k;
  return ref_bwd(dout, q, k, v, out, lse, sq, sk, causal, scale);
}

// Local is part 3's operands: per (row, block, kv head) the block's queries
// qd (N, G*bs, D) and keys and values kd, vd (N, 2*bs, D), N = B*nb*Hkv,
// in acc, rows padded to whole blocks; s the masked scores.
struct Local {
  at::Tensor qd, kd, vd, s;
};

Local local_operands(const at::Tensor &qn, const at::Tensor &kn, const at::Tensor &vn, const at::Tensor &kc,
                     const at::Tensor &vc, const BlockLayout &lay, double scale) {
  auto B = lay.B, L = lay.L, bs = lay.block, nb = (L + bs - 1) / bs, Lp = nb * bs;
  auto H = qn.size(1), Hkv = kn.size(1), G = H / Hkv, D = qn.size(2);
  auto pad = [&](const at::Tensor &t) { // (B*L, h, D) -> (B, Lp, h, D) in acc
    auto x = t.view({B, L, t.size(1), D}).to(acc(t));
    return Lp > L ? at::constant_pad_nd(x, {0, 0, 0, 0, 0, Lp - L}) : x;
  };
  auto keys = [&](const at::Tensor &clean, const at::Tensor &noisy) { // (N, 2bs, D)
    auto c = pad(clean);
    auto prev = at::cat({at::zeros({B, bs, Hkv, D}, c.options()), c.narrow(1, 0, Lp - bs)}, 1); // block b-1 at b
    auto both = at::cat({prev.view({B, nb, bs, Hkv, D}), pad(noisy).view({B, nb, bs, Hkv, D})}, 2);
    return both.permute({0, 1, 3, 2, 4}).reshape({B * nb * Hkv, 2 * bs, D});
  };
  Local o;
  o.qd = pad(qn).view({B, nb, bs, Hkv, G, D}).permute({0, 1, 3, 4, 2, 5}).reshape({B * nb * Hkv, G * bs, D});
  o.kd = keys(kc, kn);
  o.vd = keys(vc, vn);
  auto s = (at::bmm(o.qd, o.kd.transpose(1, 2)) * scale).view({B, nb, Hkv, G, bs, 2 * bs});
  o.s = s.masked_fill(lay.local.view({B, nb, 1, 1, bs, 2 * bs}).logical_not(), -kInf);
  return o;
}

// to_rows turns per-block (B, nb, Hkv, G, bs, ...) into rows (B*L, H, ...).
at::Tensor to_rows(const at::Tensor &t, const BlockLayout &lay) {
  auto B = lay.B, L = lay.L, bs = lay.block, nb = t.size(1), Hkv = t.size(2), G = t.size(3);
  auto rest = t.dim() == 6 ? t.size(5) : 1;
  auto x = (t.dim() == 6 ? t : t.unsqueeze(-1)).permute({0, 1, 4, 2, 3, 5}).reshape({B, nb * bs, Hkv * G, rest});
  x = x.narrow(1, 0, L).reshape({B * L, Hkv * G, rest});
  return t.dim() == 6 ? x : x.squeeze(-1);
}

// from_rows is to_rows' inverse for (B*L, H) or (B*L, H, D), padding rows
// with fill.
at::Tensor from_rows(const at::Tensor &t, const BlockLayout &lay, int64_t Hkv, double fill) {
  auto B = lay.B, L = lay.L, bs = lay.block, nb = (L + bs - 1) / bs, Lp = nb * bs;
  auto H = t.size(1), G = H / Hkv, rest = t.dim() == 3 ? t.size(2) : 1;
  auto x = t.reshape({B, L, H, rest}).to(acc(t));
  if (Lp > L) x = at::constant_pad_nd(x, {0, 0, 0, 0, 0, Lp - L}, fill);
  x = x.view({B, nb, bs, Hkv, G, rest}).permute({0, 1, 3, 4, 2, 5});
  return t.dim() == 3 ? x.reshape({B * nb * Hkv, G * bs, rest}) : x.reshape({B, nb, Hkv, G, bs});
}

void save_layout(AutogradContext *ctx, const BlockLayout &l) {
  auto &d = ctx->saved_data;
  d["B"] = l.B, d["L"] = l.L, d["block"] = l.block, d["max_seg"] = l.max_seg, d["max_k"] = l.max_k;
  d["total_k"] = l.total_k, d["cu"] = l.cu, d["cu_k"] = l.cu_k, d["idx_k"] = l.idx_k, d["local"] = l.local;
  d["seg"] = c10::List<int64_t>(l.seg), d["seg_k"] = c10::List<int64_t>(l.seg_k);
}

BlockLayout load_layout(AutogradContext *ctx) {
  auto &d = ctx->saved_data;
  BlockLayout l;
  l.B = d["B"].toInt(), l.L = d["L"].toInt(), l.block = d["block"].toInt();
  l.max_seg = d["max_seg"].toInt(), l.max_k = d["max_k"].toInt(), l.total_k = d["total_k"].toInt();
  l.cu = d["cu"].toTensor(), l.cu_k = d["cu_k"].toTensor(), l.idx_k = d["idx_k"].toTensor();
  l.local = d["local"].toTensor();
  l.seg = d["seg"].toIntVector(), l.seg_k = d["seg_k"].toIntVector();
  return l;
}

// half is rows [from, from+L) of t (B, 2L, h, D), packed as (B*L, h, D).
at::Tensor half(const at::Tensor &t, int64_t L, int64_t from) {
  return t.narrow(1, from, L).reshape({t.size(0) * L, t.size(2), t.size(3)});
}

struct BlockAttn : public torch::autograd::Function<BlockAttn> {
  static at::Tensor forward(AutogradContext *ctx, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                            const BlockLayout *layp, double scale) {
    const auto &lay = *layp;
    auto B = q.size(0), L = lay.L, H = q.size(2), D = q.size(3);
    auto qn = half(q, L, 0), kn = half(k, L, 0), vn = half(v, L, 0); // noisy rows
    auto qc = half(q, L, L), kc = half(k, L, L), vc = half(v, L, L); // clean rows
    // 1. Clean rows: causal inside each document.
    auto c = flash_fwd(qc, kc, vc, lay.cu, lay.cu, lay.seg, lay.seg, lay.max_seg, lay.max_seg, true, scale);
    // 2. Noisy rows over the clean keys at least a block back.
    Part e;
    if (lay.total_k > 0)
      e = flash_fwd(qn, kc.index_select(0, lay.idx_k), vc.index_select(0, lay.idx_k), lay.cu, lay.cu_k, lay.seg,
                    lay.seg_k, lay.max_seg, lay.max_k, true, scale);
    // 3. The rest of each noisy row's keys, dense per block, in acc.
    auto lo = local_operands(qn, kn, vn, kc, vc, lay, scale);
    auto l3 = at::logsumexp(lo.s, -1, true); // (B, nb, Hkv, G, bs, 1)
    auto p3 = (lo.s - l3.masked_fill(l3.isinf(), 0)).exp();
    auto s = lo.s.sizes();
    auto o3 = at::bmm(p3.view({s[0] * s[1] * s[2], s[3] * s[4], s[5]}), lo.vd).view({s[0], s[1], s[2], s[3], s[4], D});
    auto on = to_rows(o3, lay), ln = to_rows(l3.squeeze(-1), lay); // (B*L, H, D), (B*L, H)
    // 4. Merge 2 and 3 by log-sum-exp.
    if (e.out.defined()) {
      auto m = at::logaddexp(e.lse, ln);
      on = e.out.to(on.scalar_type()) * (e.lse - m).exp().unsqueeze(-1) + on * (ln - m).exp().unsqueeze(-1);
      ln = m;
    }
    auto y = at::cat({on.to(q.scalar_type()).view({B, L, H, D}), c.out.view({B, L, H, D})}, 1);
    ctx->save_for_backward({q, k, v, y, ln, c.lse, c.raw, c.rng, c.unused, e.raw, e.rng, e.unused});
    ctx->saved_data["scale"] = scale;
    save_layout(ctx, lay);
    return y;
  }

  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    auto sv = ctx->get_saved_variables();
    auto &q = sv[0], &k = sv[1], &v = sv[2], &ln = sv[4];
    auto lay = load_layout(ctx);
    auto scale = ctx->saved_data["scale"].toDouble();
    auto B = q.size(0), L = lay.L, H = q.size(2), Hkv = k.size(2), D = q.size(3);
    auto dy = grads[0].contiguous();
    auto qn = half(q, L, 0), kn = half(k, L, 0), vn = half(v, L, 0); // noisy rows
    auto qc = half(q, L, L), kc = half(k, L, L), vc = half(v, L, L); // clean rows
    auto dyn = half(dy, L, 0), dyc = half(dy, L, L), yn = half(sv[3], L, 0), yc = half(sv[3], L, L);
    // 1. Clean rows.
    auto [dqc, dkc, dvc] = flash_bwd(dyc, qc, kc, vc, yc, sv[5], sv[6], sv[7], sv[8], lay.cu, lay.cu, lay.seg,
                                     lay.seg, lay.max_seg, lay.max_seg, true, scale);
    auto at_ = acc(q);
    auto dkc_acc = dkc.to(at_), dvc_acc = dvc.to(at_);
    auto dqn = at::zeros({B * L, H, D}, q.options().dtype(at_));
    // 2. Noisy rows over the clean keys a block back, with the merged lse.
    if (lay.total_k > 0) {
      auto [dq2, dk2, dv2] = flash_bwd(dyn, qn, kc.index_select(0, lay.idx_k), vc.index_select(0, lay.idx_k), yn, ln,
                                       sv[9], sv[10], sv[11], lay.cu, lay.cu_k, lay.seg, lay.seg_k, lay.max_seg,
                                       lay.max_k, true, scale);
      dqn += dq2.to(at_);
      dkc_acc.index_add_(0, lay.idx_k, dk2.to(at_));
      dvc_acc.index_add_(0, lay.idx_k, dv2.to(at_));
    }
    // 3. The dense part: P = exp(s - merged lse), dS = P * (dO V^T - rowsum(dO * O)).
    auto lo = local_operands(qn, kn, vn, kc, vc, lay, scale);
    auto sz = lo.s.sizes();
    auto N = sz[0] * sz[1] * sz[2], R = sz[3] * sz[4], bs = lay.block, nb = sz[1], Lp = nb * bs;
    auto p = (lo.s - from_rows(ln, lay, Hkv, kInf).unsqueeze(-1)).exp().view({N, R, 2 * bs});
    auto dO = from_rows(dyn, lay, Hkv, 0), O = from_rows(yn, lay, Hkv, 0); // (N, R, D)
    auto ds = p * (at::bmm(dO, lo.vd.transpose(1, 2)) - (dO * O).sum(-1, true));
    auto dq3 = (at::bmm(ds, lo.kd) * scale).view({sz[0], sz[1], sz[2], sz[3], sz[4], D});
    dqn += to_rows(dq3, lay);
    auto back = [&](const at::Tensor &g, at::Tensor &clean_acc) { // g (N, 2bs, D) -> noisy rows, clean added
      auto x = g.view({B, nb, Hkv, 2 * bs, D}).permute({0, 1, 3, 2, 4});                    // (B, nb, 2bs, Hkv, D)
      auto prev = x.narrow(2, 0, bs).reshape({B, Lp, Hkv, D}).narrow(1, bs, Lp - bs);       // clean rows [0, Lp-bs)
      clean_acc.view({B, L, Hkv, D}).narrow(1, 0, Lp - bs).add_(prev);
      return x.narrow(2, bs, bs).reshape({B, Lp, Hkv, D}).narrow(1, 0, L);                  // noisy rows
    };
    auto dkn = back(at::bmm(ds.transpose(1, 2), lo.qd) * scale, dkc_acc);
    auto dvn = back(at::bmm(p.transpose(1, 2), dO), dvc_acc);
    auto st = q.scalar_type();
    auto dq = at::cat({dqn.to(st).view({B, L, H, D}), dqc.view({B, L, H, D})}, 1);
    auto dk = at::cat({dkn.to(st), dkc_acc.to(st).view({B, L, Hkv, D})}, 1);
    auto dv = at::cat({dvn.to(st), dvc_acc.to(st).view({B, L, Hkv, D})}, 1);
    return {dq, dk, dv, at::Tensor(), at::Tensor()};
  }
};

} // namespace

BlockLayout make_block_layout(const at::Tensor &docs, int64_t block, at::Device dev) {
  TORCH_CHECK(docs.dim() == 2 && docs.scalar_type() == at::kLong && docs.device().is_cpu(),
              "block layout: docs must be (B, L) int64 on the CPU");
  TORCH_CHECK(block >= 1, "block layout: block size ", block, " < 1");
  auto d = docs.contiguous();
  BlockLayout l;
  l.B = d.size(0), l.L = d.size(1), l.block = block;
  TORCH_CHECK(l.L >= 1, "block layout: empty rows");
  auto B = l.B, L = l.L, bs = block, nb = (L + bs - 1) / bs;
  const int64_t *p = d.data_ptr<int64_t>();
  std::vector<int64_t> cu{0}, cu_k{0}, idx;
  for (int64_t b = 0; b < B; b++) {
    for (int64_t s = 0; s < L;) {
      int64_t e = s + 1;
      while (e < L && p[b * L + e] == p[b * L + s]) e++;
      auto n = e - s, nk = std::max<int64_t>(0, n - bs);
      l.seg.push_back(n), l.seg_k.push_back(nk);
      cu.push_back(cu.back() + n), cu_k.push_back(cu_k.back() + nk);
      for (int64_t w = 0; w < nk; w++) idx.push_back(b * L + s + w);
      l.max_seg = std::max(l.max_seg, n), l.max_k = std::max(l.max_k, nk);
      s = e;
    }
  }
  l.total_k = static_cast<int64_t>(idx.size());
  l.cu = int32_on(cu, dev), l.cu_k = int32_on(cu_k, dev);
  l.idx_k = at::tensor(idx, at::TensorOptions().dtype(at::kLong)).to(dev);
  // The dense part: noisy row r of block b sees clean keys of block b-1 at
  // offsets t > r and the noisy keys of block b, all in its own document.
  auto m = at::zeros({B, nb, bs, 2 * bs}, at::TensorOptions().dtype(at::kBool));
  auto mp = m.data_ptr<bool>();
  for (int64_t b = 0; b < B; b++)
    for (int64_t k = 0; k < nb; k++)
      for (int64_t r = 0; r < bs; r++) {
        auto i = k * bs + r;
        if (i >= L) break;
        auto row = mp + ((b * nb + k) * bs + r) * 2 * bs;
        for (int64_t t = r + 1; k > 0 && t < bs; t++) row[t] = p[b * L + (k - 1) * bs + t] == p[b * L + i];
        for (int64_t t = 0; t < bs && k * bs + t < L; t++) row[bs + t] = p[b * L + k * bs + t] == p[b * L + i];
      }
  l.local = m.to(dev);
  return l;
}

at::Tensor block_layout_attention(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                                  const BlockLayout &lay, double scale) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "block layout attention: q, k, v must be (B, T, h, D)");
  TORCH_CHECK(q.size(0) == lay.B && q.size(1) == 2 * lay.L, "block layout attention: q is ", q.sizes(),
              " but the layout is ", lay.B, " rows of 2 x ", lay.L);
  TORCH_CHECK(q.size(2) % k.size(2) == 0, "block layout attention: query heads not a multiple of kv heads");
  return BlockAttn::apply(q.contiguous(), k.contiguous(), v.contiguous(), &lay, scale);
}

} // namespace dllm
