// decoder.cpp: the decoder (dt_decoder_*): a whole Llama forward for
// decoding in one call over its own KV cache, FlashAttention, kernels.cu's
// kernels and CUDA graphs on a GPU. See the section comment below.

#include "shim.h"

// --- decoder ------------------------------------------------------------------
//
// The decode loop's forwards (batch 1, a few new tokens over a long KV cache)
// are launch-bound when every op crosses from Go: ~90 shim calls and ~600
// kernels for ~20 ms of which the GPU is busy for a few. The decoder runs the
// whole forward in C++ over fused weights (one QKV and one gate-up matmul),
// RoPE tables gathered by position on the device, a KV cache of its own in
// the (S, Hkv, D) layout flash attention reads, and on CUDA:
//   - FlashAttention 2 (at::_flash_attention_forward) straight on the cache:
//     GQA without repeating keys, causal masks aligned to the bottom right
//     (the commit forward), and its split-KV scheduling that spreads a long
//     cache over the SMs when the query block is short;
//   - per-layer CUDA graphs ("piecewise", as vLLM does): everything between
//     two attentions is one graph, captured once per query length T, with
//     the input ids and positions in static buffers; attention runs eagerly
//     between the graphs because its KV length changes every step; where
//     kernels.cu's attention runs, one graph for the whole forward instead
//     (per length and count of causal rows), the attention reading the KV
//     length from the positions on the device;
//   - with nvcc (DLLM_KERNELS), RMSNorm, RoPE with the cache write and
//     SiLU-mul as single kernels (kernels.cu), a GEMV for one-token
//     forwards that does the RMSNorm or SiLU-mul before it itself, and
//     kernels.cu's attention (rows that see every key, and in captured
//     forwards also leading causal rows: a commit), written straight into
//     the next graph's input; all launched
//     with programmatic dependent launch on Hopper. Residual adds ride in
//     the matmuls, in place (addmm_ with beta 1).

namespace {

struct DecLayer {
  at::Tensor n1, wqkv, bqkv, wo, n2, wgu, wdown; // weights (bqkv may be undefined)
  at::Tensor wqkv_n, wgu_n; // with fold: wqkv diag(n1), wgu diag(n2)
  at::Tensor kc, vc;                             // (Max, Hkv, D)
};

#ifdef DLLM_CUDA
// Captured is one query length's graphs: graph i computes layer i-1's
// output projection and MLP (nothing for i = 0, which embeds instead) and
// layer i's norm, QKV, RoPE and cache write (the final norm for i = L).
// A whole-forward capture has one graph and no per-layer buffers.
struct Captured {
  std::vector<std::unique_ptr<at::cuda::CUDAGraph>> g;
  at::Tensor ids, pos;        // static inputs (T) int64
  std::vector<at::Tensor> q;  // per layer (1, T, H, D): graph outputs
  std::vector<at::Tensor> ao; // per layer (T, H*D): attention outputs, graph inputs
  std::vector<at::Tensor> x;  // residual stream after each graph
  at::Tensor hn;              // (T, C) final hidden states
};
#endif

// Bucket is a cut of the KV cache for the cuDNN path (Decoder::cudnn_bucket):
// its first P Sp slots as P chunks of Sp; P = 0 for none.
struct Bucket {
  int64_t P = 0, Sp = 0;
  int64_t slots() const { return P * Sp; }
  int64_t key() const { return (P << 24) + Sp; } // Sp < 2^24, P < 2^7
};

#ifdef DLLM_CUDA
// OwnStream is a CUDA stream of one decoder's own. PyTorch's pool hands its
// streams round-robin to every caller, so a pool stream a decoder captured
// graphs on could at the same time be another thread's copy stream
// (dt_to_host_start, a request reading its picks), whose wait on its own
// event breaks the capture (cudaErrorStreamCaptureIsolation: a server's
// batch failed so under load). Non-blocking: the legacy default stream
// other threads use must not join a capture either.
struct OwnStream {
  cudaStream_t raw = nullptr;
  c10::optional<c10::cuda::CUDAStream> s;
  OwnStream() = default;
  OwnStream(const OwnStream &) = delete;
  OwnStream &operator=(const OwnStream &) = delete;
  ~OwnStream() {
    if (raw) cudaStreamDestroy(raw);
  }
  // get returns the stream, made on first use on the current device, of
  // the highest priority when high, else the lowest.
  c10::cuda::CUDAStream get(bool high) {
    if (!s) {
      int lo = 0, hi = 0;
      C10_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
      C10_CUDA_CHECK(cudaStreamCreateWithPriority(&raw, cudaStreamNonBlocking, high ? hi : lo));
      s = c10::cuda::getStreamFromExternal(raw, c10::cuda::current_device());
    }
    return *s;
  }
};
#endif

struct Decoder {
  // Keys from which attend folds grouped query heads into rows (measured on
  // an H200: 0.9 ms per step less at 32k, even at 8k, 0.2 ms more at 1k).
  static constexpr int64_t kFoldFrom = 8192;

  at::Tensor embed, norm, head, cos, sin; // cos, sin (Max, D)
  std::vector<DecLayer> layers;
  int64_t H = 0, Hkv = 0, D = 0;
  double eps = 1e-6, scale = 0;
  bool flash = false;  // attention through FlashAttention 2
  bool kernels = false; // RMSNorm, RoPE and SiLU-mul through kernels.cu
  bool attn = false;    // kernels.cu's attention for rows without a mask (head dim 128); one graph per forward
  bool fold = false;    // RMSNorm weights folded into the matmuls of forwards of 2+ tokens
  // With attn, block steps (and fused commits, their own keys apart:
  // attend_cudnn) over contexts past kCudnnFrom keys attend through cuDNN,
  // where it gains (H200: 32k 4.45 -> 3.70 ms a step, 8k 3.16 -> 2.94).
  static constexpr int64_t kCudnnFrom = 1024;
  bool cudnn = false;
  int64_t sms = 0;          // the device's SMs (cudnn_bucket's one wave)
  at::Tensor own_k, own_v, own_pos; // a fused commit's own keys and values (64, Hkv, D); 0, 1, ... 63
  int64_t written = 0;      // the cache slots [written, Max) are zero (the cuDNN path reads past the context)
  // The KV cache holds seqs slots of slot_rows rows each (forward_batch's
  // sequences; the single-sequence forwards use slot 0).
  int64_t seqs = 1, slot_rows = 0;
  at::Tensor post_bar;      // post_fused's barrier count (DTK_TMA_POST_SYNC bytes, zero at first)
  bool persistent = true;   // post_fused may run (DT_DECODER_NO_PERSISTENT turns it off)
  // Whole-forward graphs of up to this many rows with kernels: the
  // persistent kernel also runs the next layer's QKV projection.
  static constexpr int64_t kQkvAhead = 64;
  int graphs = 0;      // capture graphs for query lengths up to this
#ifdef DLLM_KERNELS
  // The device inputs of the last forward that ran from a graph's own
  // buffers (forward_host, forward_next): ids, and how many; forward_next
  // reads its canvas from their end. Null after any other forward.
  const int64_t *last_in = nullptr;
  int64_t last_n = 0;
#endif
  std::map<int64_t, int> seen; // forwards per capture key (see forward), before capture
#ifdef DLLM_CUDA
  std::map<int64_t, Captured> captured;
  OwnStream side; // captures' stream
#ifdef DLLM_CUDNN_ATTN
  OwnStream fork; // attend_cudnn's own-key stream (high priority: not side)
  at::cuda::CUDAEvent fork_in, fork_out;
#endif
  at::cuda::MempoolId_t pool{0, 0};
#endif

#ifdef DLLM_KERNELS
  static void check_launch(int err, const char *what) {
    TORCH_CHECK(err == 0, "decoder: ", what, " kernel: ", cudaGetErrorString(static_cast<cudaError_t>(err)));
  }
  static void *stream() { return c10::cuda::getCurrentCUDAStream().stream(); }
#endif

  at::Tensor norm_(const at::Tensor &x, const at::Tensor &w) {
#ifdef DLLM_KERNELS
    if (kernels) {
      auto out = at::empty_like(x);
      check_launch(dtk_rms_norm(static_cast<int>(x.scalar_type()), x.data_ptr(), w.data_ptr(), out.data_ptr(),
                                x.size(0), x.size(1), static_cast<float>(eps), stream()),
                   "rms_norm");
      return out;
    }
#endif
    return rms_norm(x, w, eps);
  }

  // lin is x (T, K) w (N, K)^T; given acc (T, N) it adds the product into
  // acc in place and returns acc: the residual add rides in the matmul
  // (beta 1) without the copy of the residual that addmm makes (1.1-1.6 us
  // a call on an H200, probes/gemm_lt_probe.cu).
  at::Tensor lin(const at::Tensor &x, const at::Tensor &w, const at::Tensor &acc = at::Tensor()) {
    return lin_in(x, w, kIn, at::Tensor(), acc);
  }

  // lin_in is lin of x's RMSNorm with weight nw (in = kInNorm) or of
  // silu(gate) * up for x = (gate, up) (in = kInSiluMul). A forward of a
  // single token (AR decoding) takes kernels.cu's GEMV, which does that
  // step itself while it stages x (one kernel instead of two) and streams
  // the weights once (measured on an H200: 35 against 39 us of matmuls a
  // layer for the plain GEMV; slower than cuBLAS from 2 rows on).
  static constexpr int kIn = 0, kInNorm = 1, kInSiluMul = 2;
  at::Tensor lin_in(const at::Tensor &x, const at::Tensor &w, int in, const at::Tensor &nw,
                    const at::Tensor &acc = at::Tensor()) {
#ifdef DLLM_KERNELS
    auto aligned = [](const at::Tensor &t) { return (reinterpret_cast<uintptr_t>(t.data_ptr()) & 15) == 0; };
    auto K = w.size(1);
    if (kernels && x.size(0) == 1 && K % 8 == 0 && K <= DTK_GEMV_MAX_K && x.size(1) == (in == kInSiluMul ? 2 * K : K) &&
        x.is_contiguous() && w.is_contiguous() && aligned(x) && aligned(w) && (!acc.defined() || acc.is_contiguous()) &&
        (in != kInNorm || (nw.is_contiguous() && aligned(nw)))) {
      static_assert(kInNorm == DTK_GEMV_NORM && kInSiluMul == DTK_GEMV_SILU_MUL, "lin_in's codes are kernels.h's");
      auto out = acc.defined() ? acc : at::empty({1, w.size(0)}, x.options());
      check_launch(dtk_gemv_in(static_cast<int>(x.scalar_type()), in, x.data_ptr(),
                               in == kInNorm ? nw.data_ptr() : nullptr, static_cast<float>(eps), w.data_ptr(),
                               acc.defined() ? acc.data_ptr() : nullptr, out.data_ptr(), w.size(0), K, stream()),
                   "gemv");
      return out;
    }
    // A block step's 2-32 rows take kernels.cu's Hopper GEMM where it takes
    // the shape (it launches early and fetches its weights while the
    // kernel before runs, which cuBLAS's kernels cannot). A fused commit's
    // 64 rows do not: their x boxes double what each CTA reads, and its QKV
    // projection took 10.2 us a layer where cuBLAS's takes 6.6.
    if (kernels && in == kIn && x.size(0) > 1 && x.size(0) <= 32 && x.is_contiguous() && w.is_contiguous() &&
        (!acc.defined() || acc.is_contiguous())) {
      auto out = acc.defined() ? acc : at::empty({x.size(0), w.size(0)}, x.options());
      int r = dtk_tma_linear(static_cast<int>(x.scalar_type()), x.data_ptr(), w.data_ptr(),
                             acc.defined() ? acc.data_ptr() : nullptr, out.data_ptr(), x.size(0), w.size(0), w.size(1),
                             stream());
      if (r != DTK_TMA_NO) {
        check_launch(r, "tma linear");
        return out;
      }
    }
#endif
    auto h = in == kInNorm ? norm_(x, nw) : in == kInSiluMul ? silu_mul_(x) : x;
    if (!acc.defined()) return at::linear(h, w);
    auto a = acc; // addmm_ on a handle to acc's storage, which the caller's const reference cannot take
    return a.addmm_(h, w.t());
  }

  // silu_mul_ is silu(gu[:, :F]) * gu[:, F:] for gu (T, 2F); given xn,
  // gu is the folded projection of xn (see folds) and gate and up are
  // scaled by xn's inverse RMS first.
  at::Tensor silu_mul_(const at::Tensor &gu, const at::Tensor &xn = at::Tensor()) {
    auto F = gu.size(1) / 2;
#ifdef DLLM_KERNELS
    if (kernels) {
      auto a = at::empty({gu.size(0), F}, gu.options());
      check_launch(dtk_silu_mul(static_cast<int>(gu.scalar_type()), gu.data_ptr(), a.data_ptr(), gu.size(0), F,
                                xn.defined() ? xn.data_ptr() : nullptr, xn.defined() ? xn.size(1) : 0,
                                static_cast<float>(eps), stream()),
                   "silu_mul");
      return a;
    }
#endif
    return at::silu(gu.narrow(1, 0, F)) * gu.narrow(1, F, F);
  }

  // folds says whether a forward of x's rows multiplies by the folded
  // weights (wqkv_n, wgu_n): RMSNorm(x) W^T = r (x (W diag(w))^T) for a
  // row's inverse RMS r, so the norm's kernel goes and the kernel after the
  // matmul (RoPE, SiLU-mul) applies r. One-token forwards keep the GEMV,
  // which normalises x as it stages it.
  bool folds(const at::Tensor &x) const { return fold && x.size(0) > 1; }

  // pre is layer l's attention input: RMSNorm, fused QKV, RoPE; it writes the
  // keys and values of positions (T) into the cache and returns q (1, T, H, D),
  // or with fold_q (kernels only) q folded for attend_cudnn: (1, Hkv, T G, D).
  // With own (kernels only) the keys and values go to own_k, own_v instead
  // and their cache rows are zeroed, for attend_cudnn with causal rows.
  // Given qparts (kernels only), the QKV projection is already done: the
  // post_fused before left it as partial products of the folded weight.
  // Given rows (T), the keys and values go to those cache rows instead of
  // positions' (forward_batch: each sequence's slot).
  at::Tensor pre(DecLayer &ly, const at::Tensor &x, const at::Tensor &positions, bool fold_q = false,
                 bool own = false, at::Tensor *keep = nullptr, const at::Tensor &qparts = at::Tensor(),
                 const at::Tensor &rows = at::Tensor()) {
    auto Tn = x.size(0);
    bool f = folds(x);
#ifdef DLLM_KERNELS
    TORCH_CHECK(!qparts.defined() || (kernels && f), "decoder: QKV parts without the folded kernels' path");
#endif
    auto qkv = qparts.defined() ? qparts
               : ly.bqkv.defined() ? at::linear(norm_(x, ly.n1), ly.wqkv, ly.bqkv)
               : f                 ? lin(x, ly.wqkv_n)
                                   : lin_in(x, ly.wqkv, kInNorm, ly.n1); // (T, (H+2Hkv)D)
#ifdef DLLM_KERNELS
    if (kernels) {
      if (keep) *keep = qkv;
      auto q = at::empty({Tn, H, D}, x.options());
      bool p = qparts.defined();
      check_launch(dtk_rope_qkv(static_cast<int>(x.scalar_type()), p ? nullptr : qkv.data_ptr(), cos.data_ptr(),
                                sin.data_ptr(), positions.data_ptr<int64_t>(),
                                rows.defined() ? rows.data_ptr<int64_t>() : nullptr, q.data_ptr(), ly.kc.data_ptr(),
                                ly.vc.data_ptr(), Tn, H, Hkv, D, f ? x.data_ptr() : nullptr, x.size(1),
                                static_cast<float>(eps), fold_q ? 1 : 0, own ? own_k.data_ptr() : nullptr,
                                own ? own_v.data_ptr() : nullptr, p ? qparts.data_ptr<float>() : nullptr,
                                p ? static_cast<int>(qparts.size(0)) : 0, stream()),
                   "rope_qkv");
      return fold_q ? q.view({1, Hkv, Tn * (H / Hkv), D}) : q.unsqueeze(0);
    }
#endif
    TORCH_CHECK(!fold_q && !own, "decoder: a folded q or own keys need the shim's kernels");
    auto q = qkv.narrow(1, 0, H * D).view({Tn, H, D});
    auto k = qkv.narrow(1, H * D, Hkv * D).view({Tn, Hkv, D});
    auto v = qkv.narrow(1, (H + Hkv) * D, Hkv * D).view({Tn, Hkv, D});
    auto c = cos.index_select(0, positions).unsqueeze(1); // (T, 1, D)
    auto s = sin.index_select(0, positions).unsqueeze(1);
    q = q * c + rotate_half(q) * s;
    k = k * c + rotate_half(k) * s;
    ly.kc.index_copy_(0, rows.defined() ? rows : positions, k);
    ly.vc.index_copy_(0, rows.defined() ? rows : positions, v);
    return q.unsqueeze(0);
  }

  // attend is softmax(q K^T) V over cache slots [0, pos+T) as a (T, Hkv,
  // G, D) view, G = H/Hkv query heads per key head (head h = kvh*G + g);
  // callers copy it into the (T, H*D) layout the output projection reads,
  // unless it is dst's storage: given dst (T, H*D), attend writes there
  // what it can without a copy of its own.
  // The first c rows attend causally (row t sees slots up to pos+t), the
  // others see all pos+T slots: c = T is a causal forward, c = 0 a block
  // that sees itself, and between the two a committed block followed by
  // the next block's first denoising step in one forward.
  // base is the first row of the sequence's KV slot (forward_batch).
  at::Tensor attend(DecLayer &ly, const at::Tensor &q, int64_t pos, int64_t c, const at::Tensor &dst = at::Tensor(),
                    int64_t base = 0) {
    auto Tn = q.size(1), S = pos + Tn, G = H / Hkv;
    double sc = attn_scale();
    auto kc = ly.kc.narrow(0, base, slot_rows), vc = ly.vc.narrow(0, base, slot_rows);
#ifdef DLLM_CUDA
    if (flash) {
      if (c > 0 && c < Tn) {
        // Two calls, each with one rule for all its rows.
        auto a = flash_part(kc, vc, q.narrow(1, 0, c), pos + c, true, sc);
        if (!dst.defined()) return at::cat({a, flash_part(kc, vc, q.narrow(1, c, Tn - c), S, false, sc)}, 0);
        dst.narrow(0, 0, c).view({c, Hkv, G, D}).copy_(a);
        auto rest = dst.narrow(0, c, Tn - c);
        auto b = flash_part(kc, vc, q.narrow(1, c, Tn - c), S, false, sc, rest);
        if (b.data_ptr() != rest.data_ptr()) rest.view({Tn - c, Hkv, G, D}).copy_(b);
        return dst.view({Tn, Hkv, G, D});
      }
      return flash_part(kc, vc, q, S, c > 0, sc, dst);
    }
#endif
    auto k = kc.narrow(0, 0, S).unsqueeze(0).transpose(1, 2); // (1, Hkv, S, D)
    auto v = vc.narrow(0, 0, S).unsqueeze(0).transpose(1, 2);
    at::Tensor y; // (1, H, T, D)
    if (c > 0 && c < Tn) {
      auto t = at::arange(Tn, q.options().dtype(at::kLong)).unsqueeze(1);
      auto j = at::arange(S, q.options().dtype(at::kLong)).unsqueeze(0);
      auto allowed = (t >= c).logical_or(j <= t + pos); // (T, S)
      y = attention(q.transpose(1, 2), k, v, allowed, false, sc, DT_ATTN_AUTO);
    } else {
      y = attention(q.transpose(1, 2), k, v, c10::nullopt, c > 0, sc, DT_ATTN_AUTO);
    }
    return y.transpose(1, 2).reshape({Tn, Hkv, G, D});
  }

  double attn_scale() const { return scale > 0 ? scale : 1.0 / std::sqrt(static_cast<double>(D)); }

#ifdef DLLM_CUDA
#ifdef DLLM_KERNELS
  // attend_all is attention of q (1, T, H, D) over the cache slots up to
  // the last row's position, which kernels.cu reads on the device: the
  // first c rows causally (as attend), the others seeing every key; (T, H*D).
  // With a bucket it runs attend_cudnn over it instead, q folded by pre.
  at::Tensor attend_all(DecLayer &ly, const at::Tensor &q, const at::Tensor &positions, int64_t c,
                        Bucket bucket = {}) {
    if (bucket.P > 0) return attend_cudnn(ly, q, positions, bucket, c);
    auto Tn = q.size(1), Smax = cos.size(0);
    auto out = at::empty({Tn, H * D}, q.options());
    auto scratch = at::empty({dtk_attn_decode_scratch(Tn, H, Hkv, Smax)}, q.options().dtype(at::kFloat));
    check_launch(dtk_attn_decode_pos(static_cast<int>(q.scalar_type()), q.data_ptr(), ly.kc.data_ptr(),
                                     ly.vc.data_ptr(), out.data_ptr(), Tn, H, Hkv, Smax,
                                     positions.data_ptr<int64_t>(), c, static_cast<float>(attn_scale()),
                                     scratch.data_ptr(), stream()),
                 "attn_decode");
    return out;
  }

  // attend_cudnn is attend_all for rows that all see every key, q folded
  // by pre (1, Hkv, T G, D), through
  // cuDNN's fused attention, which runs Hopper's tensor cores at ~2.5x the
  // shim's kernel's rate (docs/performance.md), split as the shim splits:
  // the G query heads of a key head folded into rows, the first P Sp cache
  // slots (a bucket, see cudnn_bucket) cut into P chunks that are the batch
  // of one dense call (PyTorch caches its plan, so a CUDA graph can hold
  // it; its varlen call rebuilds the plan every call in 2.11, and an
  // additive mask takes a slower kernel, 15 us at 1k), the chunks merged by
  // their log-sum-exp. The slots past the context are zero (see
  // clear_past): each scores exactly 0, adding e^0 to its chunk's sum and
  // nothing to its values, and the merge takes those off again. (T, H*D).
  // With causal rows c > 0 (a fused commit), pre kept the forward's own
  // keys out of the cache (own_k, own_v; their slots zero): cuDNN's rows
  // all see the same keys, the context before the forward, and
  // dtk_attn_own attends to the own keys with the mixed mask; the merge
  // takes that as one more split and then copies the own keys into the
  // cache.
  at::Tensor attend_cudnn(DecLayer &ly, const at::Tensor &q, const at::Tensor &positions, Bucket b,
                          int64_t c = 0) {
#ifdef DLLM_CUDNN_ATTN
    auto G = H / Hkv, R = q.size(2), Tn = R / G, P = b.P, Sp = b.Sp, Sb = b.slots();
    // Key head h's row r = token r / G, head h G + r % G; the chunks share
    // it through a batch stride of 0.
    auto qf = q.expand({P, Hkv, R, D});
    auto k = ly.kc.narrow(0, 0, Sb).view({P, Sp, Hkv, D}).permute({0, 2, 1, 3}); // (P, Hkv, Sp, D)
    auto v = ly.vc.narrow(0, 0, Sb).view({P, Sp, Hkv, D}).permute({0, 2, 1, 3});
    int dt = static_cast<int>(q.scalar_type());
    // A fused commit's own keys first: dtk_attn_own depends on RoPE alone,
    // so it runs on a stream of its own beside cuDNN's call (a fork and
    // join in the graph) instead of after it, where it would pay a whole
    // launch (cuDNN's kernel lets nothing launch early).
    at::Tensor own, own_lse;
    if (c > 0) {
      own = at::empty({Hkv, R, D}, q.options());
      own_lse = at::empty({Hkv, R}, q.options().dtype(at::kFloat));
      auto cur = c10::cuda::getCurrentCUDAStream();
      auto fk = fork.get(true);
      fork_in.record(cur);
      fork_in.block(fk);
      void *st = fk.stream();
      check_launch(dtk_attn_own(dt, q.data_ptr(), own_k.data_ptr(), own_v.data_ptr(), own.data_ptr(),
                                own_lse.data_ptr<float>(), Tn, H, Hkv, own_pos.data_ptr<int64_t>(), c,
                                static_cast<float>(attn_scale()), st),
                   "attn_own");
      fork_out.record(fk);
    }
    auto r = at::_scaled_dot_product_cudnn_attention(qf, k, v, c10::nullopt, true, 0.0, false, false, attn_scale());
    const auto &o = std::get<0>(r);   // (P, Hkv, R, D)
    const auto &lse = std::get<1>(r); // (P, Hkv, R[, 1]), natural log
    TORCH_CHECK(o.dim() == 4 && o.stride(3) == 1 && lse.scalar_type() == at::kFloat && lse.dim() >= 3,
                "attention: cuDNN's output ", o.sizes(), o.strides(), " or log-sum-exp ", lse.sizes(),
                lse.scalar_type(), " is not as expected");
    auto out = at::empty({Tn, H * D}, q.options());
    if (c > 0) {
      fork_out.block(c10::cuda::getCurrentCUDAStream());
      check_launch(dtk_attn_merge_lse_own(dt, o.data_ptr(), o.stride(0), o.stride(1), o.stride(2),
                                          lse.data_ptr<float>(), lse.stride(0), lse.stride(1), lse.stride(2),
                                          positions.data_ptr<int64_t>(), Sb, out.data_ptr(), Tn, H, Hkv, P,
                                          own.data_ptr(), own_lse.data_ptr<float>(), ly.kc.data_ptr(),
                                          ly.vc.data_ptr(), own_k.data_ptr(), own_v.data_ptr(), stream()),
                   "attn_merge_lse");
      return out;
    }
    check_launch(dtk_attn_merge_lse(dt, o.data_ptr(), o.stride(0), o.stride(1), o.stride(2), lse.data_ptr<float>(),
                                    lse.stride(0), lse.stride(1), lse.stride(2), positions.data_ptr<int64_t>(), Sb,
                                    out.data_ptr(), Tn, H, Hkv, P, stream()),
                 "attn_merge_lse");
    return out;
#else
    TORCH_CHECK(false, "attention: the cuDNN path needs libtorch 2.10 or later");
    return at::Tensor();
#endif
  }
#endif

  // flash_part is FlashAttention over slots [0, S) for q (1, T, H, D), the
  // last T of which are q's own; (T, Hkv, G, D), in dst (T, H*D) when given
  // and the path can write there.
  at::Tensor flash_part(const at::Tensor &kc, const at::Tensor &vc, const at::Tensor &q, int64_t S, bool causal,
                        double sc, const at::Tensor &dst = at::Tensor()) {
    auto Tn = q.size(1), G = H / Hkv;
#ifdef DLLM_KERNELS
    if (attn && (!causal || Tn == 1) && q.is_contiguous()) {
      auto out = dst.defined() && dst.is_contiguous() ? dst.view({Tn, H, D}) : at::empty({Tn, H, D}, q.options());
      auto scratch = at::empty({dtk_attn_decode_scratch(Tn, H, Hkv, S)}, q.options().dtype(at::kFloat));
      check_launch(dtk_attn_decode(static_cast<int>(q.scalar_type()), q.data_ptr(), kc.data_ptr(),
                                   vc.data_ptr(), out.data_ptr(), Tn, H, Hkv, S, static_cast<float>(sc),
                                   scratch.data_ptr(), stream()),
                   "attn_decode");
      return out.view({Tn, Hkv, G, D});
    }
#endif
    auto k = kc.narrow(0, 0, S).unsqueeze(0); // (1, S, Hkv, D)
    auto v = vc.narrow(0, 0, S).unsqueeze(0);
    if (!causal && G > 1 && Tn > 1 && S >= kFoldFrom) {
      // Without a causal mask every query row sees the same keys, so the
      // G heads that share a key head can be G x T rows of one head:
      // FlashAttention then reads each key head once instead of G times
      // (8x less KV traffic for MiniCPM5-2B; most of its cost at 32k).
      // Below kFoldFrom keys the extra copy of q costs more than it saves.
      auto qf = q.reshape({1, Tn, Hkv, G, D}).permute({0, 1, 3, 2, 4}).reshape({1, Tn * G, Hkv, D});
      auto r = at::_flash_attention_forward(qf, k, v, c10::nullopt, c10::nullopt, Tn * G, S, 0.0, false, false, sc);
      return std::get<0>(r).view({Tn, G, Hkv, D}).permute({0, 2, 1, 3});
    }
    auto r = at::_flash_attention_forward(q.contiguous(), k, v, c10::nullopt, c10::nullopt, Tn, S, 0.0,
                                          causal && Tn > 1, false, sc);
    return std::get<0>(r).view({Tn, Hkv, G, D});
  }
#endif

  // gate_up_silu is silu_mul_(y wgu_n^T, y) for the folded gate-up weight:
  // one kernel of kernels.cu where it takes the shape (a block step's rows
  // on a Hopper), else cuBLAS's matmul and the SiLU kernel.
  at::Tensor gate_up_silu(const at::Tensor &y, const at::Tensor &wgu_n) {
#ifdef DLLM_KERNELS
    if (kernels && y.is_contiguous() && wgu_n.is_contiguous()) {
      auto F = wgu_n.size(0) / 2;
      auto out = at::empty({y.size(0), F}, y.options());
      int r = dtk_tma_gate_up_silu(static_cast<int>(y.scalar_type()), y.data_ptr(), wgu_n.data_ptr(), out.data_ptr(),
                                   y.size(0), F, y.size(1), static_cast<float>(eps), stream());
      if (r != DTK_TMA_NO) {
        check_launch(r, "tma gate-up");
        return out;
      }
    }
#endif
    return silu_mul_(at::linear(y, wgu_n), y);
  }

  // post_fused runs post's sublayers on the residual stream x in place with
  // one persistent kernel of kernels.cu (dtk_tma_post: the output
  // projection when ao is given, gate-up and down; the TMA kernels' work
  // with each phase's weights fetched before the phase before ends) where
  // it takes the shape: a block step's rows on a Hopper with an SM for each
  // of its CTAs. False: nothing ran. Given next (the following layer) and
  // qparts, the kernel also runs next's QKV projection of the new x where
  // it can and leaves its partial products in *qparts for pre; else
  // *qparts stays undefined.
  bool post_fused(DecLayer &ly, const at::Tensor &x, const at::Tensor &ao, const DecLayer *next = nullptr,
                  at::Tensor *qparts = nullptr) {
#ifdef DLLM_KERNELS
    // Past 64 rows (prefill) the kernel never runs: no scratch for it then.
    if (!kernels || !persistent || !post_bar.defined() || x.size(0) > 64 || !x.is_contiguous() || !ly.wgu_n.is_contiguous() ||
        !ly.wdown.is_contiguous() || (ao.defined() && (!ao.is_contiguous() || !ly.wo.is_contiguous())))
      return false;
    auto M = x.size(0), C = x.size(1), F = ly.wdown.size(1);
    auto scratch = at::empty({dtk_tma_post_scratch(M, F, C)}, x.options().dtype(at::kByte));
    auto run = [&](const at::Tensor &wq, const at::Tensor &qp) {
      return dtk_tma_post(static_cast<int>(x.scalar_type()), x.data_ptr(), ao.defined() ? ao.data_ptr() : nullptr,
                          ly.wo.data_ptr(), ly.wo.size(1), ly.wgu_n.data_ptr(), ly.wdown.data_ptr(),
                          wq.defined() ? wq.data_ptr() : nullptr, wq.defined() ? wq.size(0) : 0,
                          qp.defined() ? qp.data_ptr() : nullptr, scratch.data_ptr(), post_bar.data_ptr(), M, F, C,
                          static_cast<float>(eps), stream());
    };
    int r = DTK_TMA_NO;
    if (next && qparts && !next->bqkv.defined() && next->wqkv_n.defined() && next->wqkv_n.is_contiguous()) {
      auto qp = at::empty({DTK_TMA_POST_QPARTS, M, next->wqkv_n.size(0)}, x.options().dtype(at::kFloat));
      r = run(next->wqkv_n, qp);
      if (r != DTK_TMA_NO) *qparts = qp;
    }
    if (r == DTK_TMA_NO) r = run(at::Tensor(), at::Tensor());
    if (r == DTK_TMA_NO) return false;
    check_launch(r, "tma post");
    return true;
#else
    return false;
#endif
  }

  // post is layer l's output projection and MLP on the residual stream x,
  // which it updates in place (the residual adds ride in the matmuls) and
  // returns. In place is safe: nothing reads a layer's input after its
  // post (a forward's graphs all hand the one residual buffer on).
  // Given next and qparts: see post_fused.
  at::Tensor post(DecLayer &ly, const at::Tensor &x, const at::Tensor &ao, const DecLayer *next = nullptr,
                  at::Tensor *qparts = nullptr) {
    if (folds(x) && post_fused(ly, x, ao, next, qparts)) return x;
    auto y = lin(ao, ly.wo, x);
    if (folds(y)) {
      if (post_fused(ly, y, at::Tensor(), next, qparts)) return y;
      return lin(gate_up_silu(y, ly.wgu_n), ly.wdown, y);
    }
    auto gu = lin_in(y, ly.wgu, kInNorm, ly.n2); // (T, 2F)
    return lin_in(gu, ly.wdown, kInSiluMul, at::Tensor(), y);
  }


  // eager is the forward without graphs; it returns the final hidden states.
  at::Tensor eager(const at::Tensor &ids, int64_t pos, int64_t causal) {
    auto Tn = ids.numel();
    auto positions = at::arange(pos, pos + Tn, ids.options().dtype(at::kLong));
    auto x = embed.index_select(0, ids); // (T, C)
    for (auto &ly : layers) {
      auto q = pre(ly, x, positions);
      x = post(ly, x, attend(ly, q, pos, causal).reshape({Tn, H * D}));
    }
    return norm_(x, norm);
  }

  // BatchSeq is one sequence of a batched forward: n tokens at positions
  // [pos, pos + n) of KV slot slot, the first causal of them causal.
  struct BatchSeq {
    int64_t slot, n, pos, causal;
  };

  // forward_batch runs several sequences in one forward (continuous
  // batching): every layer's pre and post (the projections, RoPE, the MLP:
  // the single-sequence forward's code) over all their rows at once, so the
  // weights are read once for the batch, each row at its own position and
  // its keys and values in its sequence's slot; attention per sequence
  // over its slot (on a GPU one call of the shim's attention for the
  // whole batch, or with another head dim two FlashAttention calls:
  // attend_varlen). ids holds the sequences' tokens one after another; it
  // returns their final hidden states in the same order.
  at::Tensor forward_batch(const at::Tensor &ids, const std::vector<BatchSeq> &b) {
    int64_t N = ids.numel(), B = static_cast<int64_t>(b.size()), off = 0, max_n = 0, max_s = 0;
    for (auto &s : b) {
      TORCH_CHECK(s.slot >= 0 && s.slot < seqs && s.n >= 1 && s.pos >= 0 && s.pos + s.n <= cos.size(0) &&
                      off + s.n <= N,
                  "decoder: batch sequence in slot ", s.slot, " of ", seqs, ", ", s.n, " tokens at ", s.pos,
                  " (context ", cos.size(0), ", ", N, " ids)");
      max_n = std::max(max_n, s.n), max_s = std::max(max_s, s.pos + s.n);
      off += s.n;
      // Slot 0 is also the single-stream forward's cache, whose cuDNN path
      // needs the slots past what was written zero (clear_past).
      if (s.slot == 0) written = std::max(written, s.pos + s.n);
    }
    TORCH_CHECK(off == N, "decoder: the batch's sequences hold ", off, " tokens, ids ", N);
#if defined(DLLM_CUDA) && defined(DLLM_KERNELS)
    last_in = nullptr; // forward_next builds on the single-stream forward's inputs only
    if (auto *g = batch_graph(N, B, max_n)) {
      // 1. The inputs into the graph's own buffers: the embeddings of the
      //    ids (zeros in the padding rows) and the table.
      g->x.narrow(0, 0, N).copy_(embed.index_select(0, ids));
      if (g->x.size(0) > N) g->x.narrow(0, N, g->x.size(0) - N).zero_(); // the layers add to x in place
      g->din.copy_(at::tensor(batch_input(b, g->x.size(0), g->B), at::kLong), true);
      // 2. The layers as recorded.
      g->g->replay();
      return g->out.narrow(0, 0, N);
    }
#endif
    auto din = at::tensor(batch_input(b, N, B), at::kLong).to(ids.device());
    return layers_batch(embed.index_select(0, ids), din, b, B, max_n, max_s);
  }

  // batch_input lays out a batched forward's inputs for the device (one
  // copy): positions (N), cache rows (N), and the sequences' table for the
  // shim's attention (4 B: first token, tokens, first cache row, causal
  // tokens). Past b's tokens and sequences, up to N and B (a graph's
  // padding), tokens write their keys and values to the caches' spare
  // last row and sequences have no tokens.
  std::vector<int64_t> batch_input(const std::vector<BatchSeq> &b, int64_t N, int64_t B) const {
    std::vector<int64_t> in(2 * N + 4 * B, 0);
    std::fill(in.begin() + N, in.begin() + 2 * N, seqs * slot_rows);
    int64_t off = 0;
    for (size_t i = 0; i < b.size(); i++) {
      auto &s = b[i];
      for (int64_t t = 0; t < s.n; t++) {
        in[off + t] = s.pos + t;
        in[N + off + t] = s.slot * slot_rows + s.pos + t;
      }
      int64_t *d = &in[2 * N + 4 * i];
      d[0] = off, d[1] = s.n, d[2] = s.slot * slot_rows, d[3] = std::clamp<int64_t>(s.causal, 0, s.n);
      off += s.n;
    }
    return in;
  }

  // layers_batch is forward_batch's layers and final norm over x (N, C),
  // din its batch_input on the device (N rows, B sequences, at most max_n
  // tokens and max_s keys a sequence); b is needed only without the
  // shim's attention.
  at::Tensor layers_batch(at::Tensor x, const at::Tensor &din, const std::vector<BatchSeq> &b, int64_t B,
                          int64_t max_n, int64_t max_s) {
    int64_t N = x.size(0);
    auto positions = din.narrow(0, 0, N), cache_rows = din.narrow(0, N, N);
#ifdef DLLM_CUDA
    Varlen vl;
    if (flash && !attn) vl = varlen(b, x.device());
#ifdef DLLM_KERNELS
    at::Tensor scratch;
    if (attn)
      scratch = at::empty({std::max<int64_t>(1, dtk_attn_decode_batch_scratch(N, H, Hkv, B, max_n, max_s))},
                          x.options().dtype(at::kFloat));
#endif
#endif
    for (auto &ly : layers) {
      auto q = pre(ly, x, positions, false, false, nullptr, at::Tensor(), cache_rows).squeeze(0); // (N, H, D)
      at::Tensor a; // (N, H*D)
#ifdef DLLM_CUDA
#ifdef DLLM_KERNELS
      if (attn) {
        a = at::empty({N, H * D}, q.options());
        check_launch(dtk_attn_decode_batch(static_cast<int>(q.scalar_type()), q.data_ptr(), ly.kc.data_ptr(),
                                           ly.vc.data_ptr(), a.data_ptr(), N, H, Hkv, B,
                                           din.data_ptr<int64_t>() + 2 * N, positions.data_ptr<int64_t>(), max_n,
                                           max_s, static_cast<float>(attn_scale()), scratch.data_ptr(), stream()),
                     "attn_decode_batch");
      }
#endif
      if (flash && !attn) a = attend_varlen(ly, q, vl);
#endif
      if (!a.defined()) {
        std::vector<at::Tensor> ao;
        int64_t off = 0;
        for (auto &s : b) {
          auto qs = q.narrow(0, off, s.n).unsqueeze(0); // (1, n, H, D)
          ao.push_back(attend(ly, qs, s.pos, std::clamp<int64_t>(s.causal, 0, s.n), at::Tensor(), s.slot * slot_rows)
                           .reshape({s.n, H * D}));
          off += s.n;
        }
        a = at::cat(ao, 0);
      }
      x = post(ly, x, a);
    }
    return norm_(x, norm);
  }

#if defined(DLLM_CUDA) && defined(DLLM_KERNELS)
  // Batched forwards of sequences of up to kBatchGraphTokens tokens (block
  // steps, AR steps; not prompt chunks) and up to kBatchGraphRows tokens in
  // all run from CUDA graphs, one per bucket of tokens and sequences, the
  // batch padded up to its bucket: an eager forward launches ~10 kernels a
  // layer from the host, which takes longer than a small batch's GPU work.
  // Past kBatchGraphRows the GPU's work hides the launches.
  static constexpr int64_t kBatchGraphTokens = 64, kBatchGraphRows = 1024;

  // BatchGraph is one bucket's graph and its own buffers.
  struct BatchGraph {
    std::unique_ptr<at::cuda::CUDAGraph> g;
    at::Tensor x, din, out; // inputs (N, C) and (2 N + 4 B) as batch_input lays them out; final hidden states (N, C)
    int64_t B = 0;
  };
  std::map<std::pair<int64_t, int64_t>, BatchGraph> batch_graphs;
  std::map<std::pair<int64_t, int64_t>, int> batch_seen;

  // batch_graph returns the graph of the bucket of a batch of N tokens in
  // B sequences of at most max_n, captured on the bucket's second use (as
  // the single-stream graphs are: the first runs eagerly, warming cuBLAS
  // for the shape), or null for an eager forward. Buckets: B rounded up to
  // a power of two; N to a power of two up to 64, then to a multiple of 64.
  BatchGraph *batch_graph(int64_t N, int64_t B, int64_t max_n) {
    if (graphs <= 0 || !attn || max_n > kBatchGraphTokens || N > kBatchGraphRows) return nullptr;
    int64_t Bb = 1, Nb = 8;
    while (Bb < B) Bb *= 2;
    while (Nb < std::min<int64_t>(N, 64)) Nb *= 2;
    if (N > 64) Nb = (N + 63) / 64 * 64;
    auto key = std::make_pair(Nb, Bb);
    auto it = batch_graphs.find(key);
    if (it != batch_graphs.end()) return &it->second;
    if (++batch_seen[key] < 2) return nullptr;
    BatchGraph bg;
    bg.B = Bb;
    auto dev = embed.device();
    on_side([&] {
      // An eager forward of the bucket's shape first (cuBLAS's workspace on
      // the side stream), then the capture; the table has no sequences
      // and every row writes the spare cache row, so neither touches a
      // sequence's keys.
      bg.x = at::zeros({Nb, embed.size(1)}, embed.options());
      bg.din = at::tensor(batch_input({}, Nb, Bb), at::kLong).to(dev);
      int64_t max_n = std::min(kBatchGraphTokens, Nb);
      layers_batch(bg.x, bg.din, {}, Bb, max_n, slot_rows);
      bg.g = std::make_unique<at::cuda::CUDAGraph>();
      bg.g->capture_begin(pool, cudaStreamCaptureModeThreadLocal);
      bg.out = layers_batch(bg.x, bg.din, {}, Bb, max_n, slot_rows);
      bg.g->capture_end();
      if (pool.first == 0 && pool.second == 0) pool = bg.g->pool();
    });
    return &(batch_graphs[key] = std::move(bg));
  }
#endif

#ifdef DLLM_CUDA
  // Varlen is a batched forward's attention plan, without the shim's
  // attention (a head dim other than 128), for FlashAttention 2's
  // variable-length form: its causal rows (each sequence's first causal,
  // seeing the keys up to their own positions) and its other rows (seeing
  // all of their sequence's keys, folded as flash_part folds them: the G
  // query heads of a key head as G rows of it, so each key is read once a
  // key head) in one call each, whatever the number of sequences. The keys
  // are the caches in place: sequence i's start at its slot's first row
  // (cu_k) and run for used_* of them (FlashAttention's seqused_k).
  struct Varlen {
    at::Tensor causal_rows, other_rows;  // (Nc), (No) int64: rows of the batch
    at::Tensor cu_qc, cu_qo, cu_k;       // (B+1) int32: query offsets (cu_qo of folded rows), slot starts
    at::Tensor used_c, used_o;           // (B) int32: keys each sequence's causal / other rows read
    int64_t max_qc = 0, max_qo = 0, max_k = 0;
  };

  Varlen varlen(const std::vector<BatchSeq> &b, at::Device dev) const {
    Varlen v;
    std::vector<int64_t> cr, orows;
    std::vector<int32_t> cu_qc{0}, cu_qo{0}, cu_k, used_c, used_o;
    int64_t row = 0, G = H / Hkv;
    for (auto &s : b) {
      int64_t c = std::clamp<int64_t>(s.causal, 0, s.n);
      for (int64_t t = 0; t < s.n; t++) (t < c ? cr : orows).push_back(row + t);
      row += s.n;
      cu_qc.push_back(cu_qc.back() + static_cast<int32_t>(c));
      cu_qo.push_back(cu_qo.back() + static_cast<int32_t>((s.n - c) * G));
      cu_k.push_back(static_cast<int32_t>(s.slot * slot_rows));
      used_c.push_back(static_cast<int32_t>(s.pos + c));
      used_o.push_back(static_cast<int32_t>(s.pos + s.n));
      v.max_qc = std::max(v.max_qc, c), v.max_qo = std::max(v.max_qo, (s.n - c) * G);
      v.max_k = std::max(v.max_k, s.pos + s.n);
    }
    cu_k.push_back(static_cast<int32_t>(seqs * slot_rows)); // read only for the length, which used_* gives
    auto i64 = [&](const std::vector<int64_t> &x) { return at::tensor(x, at::kLong).to(dev); };
    auto i32 = [&](const std::vector<int32_t> &x) { return at::tensor(x, at::kInt).to(dev); };
    v.causal_rows = i64(cr), v.other_rows = i64(orows);
    v.cu_qc = i32(cu_qc), v.cu_qo = i32(cu_qo), v.cu_k = i32(cu_k), v.used_c = i32(used_c), v.used_o = i32(used_o);
    return v;
  }

  // attend_varlen is the batch's attention of q (N, H, D) over its
  // sequences' slots by plan v; (N, H*D).
  at::Tensor attend_varlen(DecLayer &ly, const at::Tensor &q, const Varlen &v) {
    auto N = q.size(0), G = H / Hkv;
    double sc = attn_scale();
    auto out = at::empty({N, H * D}, q.options());
    if (v.causal_rows.numel() > 0) {
      auto qc = q.index_select(0, v.causal_rows); // (Nc, H, D)
      auto r = at::_flash_attention_forward(qc, ly.kc, ly.vc, v.cu_qc, v.cu_k, v.max_qc, v.max_k, 0.0, true, false,
                                            sc, c10::nullopt, c10::nullopt, v.used_c, c10::nullopt);
      out.index_copy_(0, v.causal_rows, std::get<0>(r).reshape({-1, H * D}));
    }
    if (v.other_rows.numel() > 0) {
      auto No = v.other_rows.numel();
      auto qo = q.index_select(0, v.other_rows).view({No, Hkv, G, D}).permute({0, 2, 1, 3}).reshape({No * G, Hkv, D});
      auto r = at::_flash_attention_forward(qo, ly.kc, ly.vc, v.cu_qo, v.cu_k, v.max_qo, v.max_k, 0.0, false, false,
                                            sc, c10::nullopt, c10::nullopt, v.used_o, c10::nullopt);
      out.index_copy_(0, v.other_rows, std::get<0>(r).view({No, G, Hkv, D}).permute({0, 2, 1, 3}).reshape({No, H * D}));
    }
    return out;
  }
#endif

#ifdef DLLM_CUDA
  // capture records query length T's graphs on the side stream, on which the
  // caller has just run an eager forward of the same length (so cuBLAS has
  // its workspace there). Capturing only records: nothing runs. all: one
  // graph for the whole forward (see forward), its first causal rows
  // attending causally, under capture_key(T, causal, end) for forwards
  // ending at end.
  void capture(int64_t Tn, int64_t causal, bool all, int64_t end) {
    auto dev = embed.device();
    Captured c;
    auto lo = at::TensorOptions().dtype(at::kLong).device(dev);
    c.ids = at::zeros({Tn}, lo);
    c.pos = at::arange(0, Tn, lo);
#ifdef DLLM_KERNELS
    if (all) {
      auto rows = causal_rows(Tn, causal);
      if (cudnn_bucket(Tn, causal, end).P > 0) { // cuDNN plans its call (and allocates) outside the capture
        try {
          auto q = at::zeros({1, Hkv, Tn * (H / Hkv), D}, embed.options());
          attend_cudnn(layers[0], q, c.pos, cudnn_bucket(Tn, causal, end));
        } catch (const std::exception &e) { // a cuDNN without this kernel: the shim's attention instead
          std::string m = e.what();
          std::fprintf(stderr, "dllm: cuDNN attention unavailable, using the shim's: %s\n",
                       m.substr(0, m.find('\n')).c_str());
          cudnn = false;
        }
      }
      auto bucket = cudnn_bucket(Tn, causal, end);
#ifdef DLLM_CUDNN_ATTN
      // cuDNN's call is a memset and its kernel; as a graph node between
      // RoPE and that kernel the memset costs ~5 us a layer (H200 trace,
      // docs/history.md), as a kernel node ~1. So the graph is kept
      // uninstantiated until its memset nodes are kernel nodes, which
      // depend on the QKV projection instead of RoPE and run beside RoPE. That is safe because what the memset zeroes is
      // memory the caching allocator handed cuDNN's call, which is none
      // that RoPE reads or writes: its outputs are alive then, and so is
      // its input, the QKV output, which the loop below holds until then;
      // everything older is done once the QKV projection is.
      bool fill = bucket.P > 0;
      auto g = std::make_unique<at::cuda::CUDAGraph>(fill);
#else
      auto g = std::make_unique<at::cuda::CUDAGraph>();
#endif
      g->capture_begin(pool, cudaStreamCaptureModeThreadLocal);
      auto x = embed.index_select(0, c.ids);
      at::Tensor qparts; // the next layer's QKV projection, from the layer before's post (kQkvAhead)
      for (size_t l = 0; l < layers.size(); l++) {
        auto &ly = layers[l];
        at::Tensor qkv; // held through cuDNN's call (see the memset nodes above)
        auto q = pre(ly, x, c.pos, bucket.P > 0, bucket.P > 0 && rows > 0, &qkv, qparts);
        qparts = at::Tensor();
        const DecLayer *next = kernels && Tn <= kQkvAhead && l + 1 < layers.size() ? &layers[l + 1] : nullptr;
        x = post(ly, x, attend_all(ly, q, c.pos, rows, bucket), next, next ? &qparts : nullptr);
      }
      c.hn = norm_(x, norm);
      g->capture_end();
#ifdef DLLM_CUDNN_ATTN
      if (fill) {
        int n = 0;
        check_launch(dtk_graph_fill_memsets(g->raw_cuda_graph(), &n), "graph memset nodes");
        g->instantiate();
      }
#endif
      if (pool.first == 0 && pool.second == 0) pool = g->pool();
      c.g.push_back(std::move(g));
      captured.emplace(capture_key(Tn, causal, end), std::move(c));
      return;
    }
#endif
    for (size_t l = 0; l < layers.size(); l++) c.ao.push_back(at::zeros({Tn, H * D}, embed.options()));
    for (size_t i = 0; i <= layers.size(); i++) {
      auto g = std::make_unique<at::cuda::CUDAGraph>();
      g->capture_begin(pool, cudaStreamCaptureModeThreadLocal);
      at::Tensor x = i == 0 ? embed.index_select(0, c.ids) : post(layers[i - 1], c.x[i - 1], c.ao[i - 1]);
      if (i < layers.size()) {
        c.q.push_back(pre(layers[i], x, c.pos));
      } else {
        c.hn = norm_(x, norm);
      }
      c.x.push_back(x);
      g->capture_end();
      if (pool.first == 0 && pool.second == 0) pool = g->pool();
      c.g.push_back(std::move(g));
    }
    captured.emplace(Tn, std::move(c));
  }

  // replay runs c's graphs over the inputs already in c.ids and c.pos.
  at::Tensor replay(Captured &c, int64_t pos, int64_t causal) {
    auto Tn = c.ids.numel();
    if (c.g.size() == 1) { // a whole-forward graph
      c.g[0]->replay();
      return c.hn;
    }
    for (size_t l = 0; l < layers.size(); l++) {
      c.g[l]->replay();
      auto a = attend(layers[l], c.q[l], pos, causal, c.ao[l]);
      if (a.data_ptr() != c.ao[l].data_ptr()) c.ao[l].view({Tn, Hkv, H / Hkv, D}).copy_(a);
    }
    c.g[layers.size()]->replay();
    return c.hn;
  }
#endif

#ifdef DLLM_KERNELS
  // forward_host is forward of n ids in host memory: a captured length's
  // inputs are set by one kernel that carries the ids (an AR step's host
  // time between tokens is part of its step); others go through a device
  // copy of the ids.
  at::Tensor forward_host(const int64_t *ids, int64_t n, int64_t pos, int64_t causal) {
    if (kernels && graphs > 0 && n <= graphs && n <= DTK_SET_IDS_MAX && pos >= 0 && pos + n <= cos.size(0)) {
      auto it = captured.find(capture_key(n, causal, pos + n));
      if (it != captured.end()) {
        clear_past(n, causal, pos + n);
        check_launch(dtk_set_ids(it->second.ids.data_ptr<int64_t>(), it->second.pos.data_ptr<int64_t>(), ids, n,
                                 pos, stream()),
                     "set_ids");
        last_in = it->second.ids.data_ptr<int64_t>(), last_n = n;
        return replay(it->second, pos, causal);
      }
    }
    last_in = nullptr;
    auto host = at::from_blob(const_cast<int64_t *>(ids), {n}, at::kLong);
    return forward(host.to(embed.device(), at::kLong, false, true), pos, causal);
  }
#endif

#ifdef DLLM_KERNELS
  // forward_next is the next denoising forward of a fixed-commit block of
  // n tokens at pos, queued before the host has seen the picks of the one
  // before (the last forward, whose last n inputs are the canvas): its
  // inputs come from dtk_commit_top on the device, so the host's turn
  // between the two, and the graph's launch, overlap the step before.
  // Undefined (nothing queued) where the last forward did not run from a
  // graph or this one has none yet.
  at::Tensor forward_next(int64_t n, int64_t pos, const at::Tensor &picks, int64_t mask, int64_t k, bool shift) {
    if (!(kernels && graphs > 0 && n <= graphs && n <= DTK_SET_IDS_MAX && pos >= 0 && pos + n <= cos.size(0) &&
          last_in && last_n >= n))
      return {};
    auto it = captured.find(capture_key(n, 0, pos + n));
    if (it == captured.end()) return {};
    TORCH_CHECK(picks.is_cuda() && picks.scalar_type() == at::kDouble && picks.numel() == 2 * n &&
                    picks.is_contiguous(),
                "decoder: the picks of a step of ", n, " tokens are (", 2 * n, ") float64 on the device, not ",
                picks.sizes(), " ", picks.scalar_type());
    clear_past(n, 0, pos + n);
    auto &c = it->second;
    check_launch(dtk_commit_top(last_in + (last_n - n), c.ids.data_ptr<int64_t>(), c.pos.data_ptr<int64_t>(),
                                picks.data_ptr<double>(), n, mask, k, shift ? 1 : 0, pos, stream()),
                 "commit_top");
    last_in = c.ids.data_ptr<int64_t>(), last_n = n;
    return replay(c, pos, 0);
  }
#endif

#ifdef DLLM_CUDA
  // on_side runs f, which captures graphs (capture records on the side
  // stream), on the side stream after the current stream's work and waits
  // for it; it returns the milliseconds that took. Captures are rare, so
  // plain synchronisation is cheap enough.
  template <typename F> double on_side(F f) {
    auto cur = c10::cuda::getCurrentCUDAStream();
    auto sd = side.get(false);
    cur.synchronize();
    auto t0 = std::chrono::steady_clock::now();
    {
      c10::cuda::CUDAStreamGuard sg(sd);
      f();
    }
    sd.synchronize();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
#endif

  // prepare captures the cuDNN path's graphs for block steps of T tokens
  // (no causal rows), and for fused commits (2 T tokens, T causal), at every context bucket up to upto, so that no
  // generation pays for a bucket's first forwards (~80 ms: an eager
  // forward, the capture, and cuDNN planning the new shape in PyTorch's
  // cache of the calling OS thread, which Go does not keep; ~50 ms here,
  // without the eager forwards). It returns the number captured.
  int64_t prepare(int64_t Tn, int64_t upto) {
    int64_t n = 0;
#if defined(DLLM_CUDA) && defined(DLLM_KERNELS)
    upto = std::min(upto, cos.size(0));
    if (graphs < Tn || !attn || cudnn_bucket(Tn, 0, upto).P == 0) return 0;
    on_side([&] {
      // One eager forward of the length, as capture wants (cuBLAS's
      // workspace on the side stream); its keys and values at [0, T) are
      // overwritten by the next sequence.
      // Also a fused commit's: 2 T tokens, T causal.
      bool fused = 2 * Tn <= graphs && 2 * Tn <= own_k.size(0);
      clear_past(fused ? 2 * Tn : Tn, fused ? Tn : 0, fused ? 2 * Tn : Tn);
      eager(at::zeros({Tn}, embed.options().dtype(at::kLong)), 0, 0);
      if (fused) eager(at::zeros({2 * Tn}, embed.options().dtype(at::kLong)), 0, Tn);
      // Every bucket's last context is a multiple of kCudnnTile (or upto).
      // (A bucket whose capture finds no cuDNN kernel turns the path off.)
      std::vector<int64_t> ends;
      for (int64_t e = kCudnnFrom + 1; e < upto; e = (e / kCudnnTile + 1) * kCudnnTile) ends.push_back(e);
      ends.push_back(upto);
      for (auto end : ends) {
        if (!cudnn) break;
        if (!captured.count(capture_key(Tn, 0, end))) {
          capture(Tn, 0, true, end);
          n++;
        }
        if (fused && cudnn && !captured.count(capture_key(2 * Tn, Tn, end))) {
          capture(2 * Tn, Tn, true, end);
          n++;
        }
      }
    });
#else
    (void)Tn, (void)upto;
#endif
    return n;
  }

  // capture_key says which graphs serve a forward of T tokens, the first
  // causal of them causal: with kernels.cu's attention one graph per
  // (T, causal) (negative keys), else per-layer graphs per T (attention
  // runs between them, told causal at each replay).
  // The cuDNN path's forwards have a graph per context bucket too.
  int64_t capture_key(int64_t Tn, int64_t causal, int64_t end) const {
    if (!attn) return Tn;
    return -(cudnn_bucket(Tn, causal, end).key() * (int64_t(1) << 32) + Tn * (int64_t(1) << 20) +
             causal_rows(Tn, causal));
  }

  // cudnn_bucket is the cuDNN path's cut of the cache for forwards of T
  // tokens ending at end (its graph serves every end that gives the same
  // cut), the slots past end zero; none (P = 0) where the shim's
  // attention runs: one-token forwards, forwards whose first rows attend
  // causally (a fused commit) past 64 tokens, and contexts up to
  // kCudnnFrom. A new bucket costs ~80 ms where a
  // generation first reaches it (an eager forward, the capture, and cuDNN
  // planning the new shape in PyTorch's cache of the calling OS thread),
  // ~50 ms ahead of use (prepare).
  Bucket cudnn_bucket(int64_t Tn, int64_t causal, int64_t end) const {
    if (!cudnn || Tn < 2 || end <= kCudnnFrom) return {};
    if (causal_rows(Tn, causal) > 0 && Tn > own_k.size(0)) return {};
    auto b = cut(Tn, end);
    return b.slots() <= slot_rows ? b : Bucket{};
  }

  // cut is cudnn_bucket's cut. cuDNN's kernel (9.19, Hopper) gives each
  // chunk's 128 rows of a key head a CTA, one an SM, which walks its keys
  // 128 at a time; a part tile costs more than a whole one (64 keys 8.0
  // us, 128 7.7; 320 11.3, 384 10.8: probes/gpu_cudnn_tiles_probe.py).
  // So chunks are whole tiles, as few a chunk as one wave of CTAs allows
  // (33 chunks of a 32-token block's 256 rows, 16 of a fused commit's
  // 512, on 132 SMs), and on one tile as few chunks as cover the end, in
  // steps of 4 (fewer CTAs and fewer splits to merge). Past one tile a
  // bucket is kCudnnTile x most contexts wide. At most 64 chunks, as the
  // merge takes at most 128 splits and Bucket::key 127.
  Bucket cut(int64_t Tn, int64_t end) const {
    Bucket b;
    int64_t rows = Tn * (H / Hkv);
    int64_t most = std::clamp<int64_t>(sms / (Hkv * ((rows + kCudnnTile - 1) / kCudnnTile)), 1, 64);
    int64_t t = (end + most * kCudnnTile - 1) / (most * kCudnnTile);
    b.Sp = t * kCudnnTile;
    b.P = t > 1 ? most : std::min(most, (end + 4 * kCudnnTile - 1) / (4 * kCudnnTile) * 4);
    return b;
  }

  static constexpr int64_t kCudnnTile = 128; // cuDNN's key tile

  // causal_rows is how many of T rows attend causally given causal: a
  // single token sees the same keys either way.
  static int64_t causal_rows(int64_t Tn, int64_t causal) { return Tn == 1 ? 0 : std::min(causal, Tn); }

  // logits are those of the last rows of the final hidden states h (T, C);
  // undefined for none.
  at::Tensor logits(const at::Tensor &h, int64_t rows) {
    auto Tn = h.size(0);
    TORCH_CHECK(rows >= 0 && rows <= Tn, "decoder: ", rows, " logit rows of ", Tn);
    return rows == 0 ? at::Tensor() : at::linear(h.narrow(0, Tn - rows, rows), head);
  }

  // clear_past keeps the cache slots past a forward of T tokens ending at
  // end zero where it takes the cuDNN path, which reads whole chunks past
  // the context (attend_cudnn): what a longer context left there (a
  // previous sequence) is zeroed first. A sequence's block steps end ever
  // later, so this runs about once a sequence.
  void clear_past(int64_t Tn, int64_t causal, int64_t end) {
    if (written > end && cudnn_bucket(Tn, causal, end).P > 0) {
      for (auto &ly : layers) {
        ly.kc.narrow(0, end, written - end).zero_();
        ly.vc.narrow(0, end, written - end).zero_();
      }
      written = end;
    }
    written = std::max(written, end);
  }

  // forward returns the final hidden states (T, C) of ids at [pos, pos+T).
  at::Tensor forward(const at::Tensor &ids, int64_t pos, int64_t causal) {
#ifdef DLLM_KERNELS
    last_in = nullptr;
#endif
    auto Tn = ids.numel();
    TORCH_CHECK(Tn >= 1, "decoder: no input tokens");
    TORCH_CHECK(pos >= 0 && pos + Tn <= cos.size(0), "decoder: positions [", pos, ", ", pos + Tn,
                ") exceed the context of ", cos.size(0));
    clear_past(Tn, causal, pos + Tn);
#ifdef DLLM_CUDA
    if (graphs > 0 && Tn <= graphs) {
      int64_t key = capture_key(Tn, causal, pos + Tn);
      bool all = key < 0;
      auto it = captured.find(key);
      if (it != captured.end()) {
        it->second.ids.copy_(ids);
        at::arange_out(it->second.pos, pos, pos + Tn, 1);
        return replay(it->second, pos, causal);
      }
      // The second forward of a kind captures it: prefill lengths that
      // come once are never captured.
      if (++seen[key] >= 2) {
        at::Tensor h;
        on_side([&] {
          h = eager(ids, pos, causal);
          capture(Tn, causal, all, pos + Tn);
        });
        return h;
      }
    }
#endif
    return eager(ids, pos, causal);
  }
};

} // namespace

extern "C" {

dt_err dt_decoder_new(dt_tensor embed, dt_tensor norm, dt_tensor head, const dt_tensor *layers, int n_layers,
                      int n_head, int n_kv_head, double eps, double attn_scale, dt_tensor cos, dt_tensor sin,
                      int graphs, int options, int seqs, dt_decoder *out) {
  return guard([&] {
    TORCH_CHECK(n_layers > 0 && n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0,
                "decoder: bad layer or head counts");
    auto d = std::make_unique<Decoder>();
    d->embed = T(embed);
    d->norm = T(norm);
    d->head = T(head);
    d->cos = T(cos);
    d->sin = T(sin);
    d->H = n_head;
    d->Hkv = n_kv_head;
    d->D = d->cos.size(1);
    d->eps = eps;
    d->scale = attn_scale;
    TORCH_CHECK(d->cos.dim() == 2 && d->sin.sizes() == d->cos.sizes(), "decoder: cos and sin must be (Max, D)");
    int64_t max = d->cos.size(0), slots = max; // slots: each KV cache's length
    for (int l = 0; l < n_layers; l++) {
      const dt_tensor *w = layers + 7 * l;
      DecLayer ly;
      ly.n1 = T(w[0]);
      ly.wqkv = T(w[1]);
      if (w[2]) ly.bqkv = T(w[2]);
      ly.wo = T(w[3]);
      ly.n2 = T(w[4]);
      ly.wgu = T(w[5]);
      ly.wdown = T(w[6]);
      TORCH_CHECK(ly.wqkv.size(0) == (n_head + 2 * n_kv_head) * d->D, "decoder: layer ", l,
                  ": fused QKV has ", ly.wqkv.size(0), " rows");
      d->layers.push_back(std::move(ly));
    }
    bool cuda = d->embed.is_cuda();
    auto st = d->embed.scalar_type();
    d->flash = cuda && (st == at::kBFloat16 || st == at::kHalf) && d->D % 8 == 0 && d->D <= 256;
#ifdef DLLM_KERNELS
    d->kernels = cuda && (st == at::kBFloat16 || st == at::kHalf) && d->D % 16 == 0 && d->D <= 2048 &&
                 d->cos.is_contiguous() && d->cos.scalar_type() == st;
    if (d->kernels) d->post_bar = at::zeros({DTK_TMA_POST_SYNC / 8}, d->embed.options().dtype(at::kLong));
    d->attn = d->kernels && d->flash && d->D == 128;
#ifdef DLLM_CUDNN_ATTN
    // The cuDNN path reads whole buckets, so the caches reach the last
    // bucket's end (zero past the context).
    d->cudnn = d->attn && at::globalContext().userEnabledCuDNN();
    if (d->cudnn) d->sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
    // A bucket's slots grow with its end: the caches reach the largest
    // cut at max of any forward length the graphs take.
    if (d->cudnn && max > Decoder::kCudnnFrom)
      for (int64_t Tn = 2; Tn <= std::max(graphs, 64); Tn++) slots = std::max(slots, d->cut(Tn, max).slots());
    if (d->cudnn) {
      d->own_k = at::zeros({64, d->Hkv, d->D}, d->embed.options());
      d->own_v = at::zeros({64, d->Hkv, d->D}, d->embed.options());
      d->own_pos = at::arange(64, d->embed.options().dtype(at::kLong));
    }
#endif
    // The folded copies of the QKV and gate-up weights cost their size
    // again (2.4 GB for MiniCPM5-2B: the model's own weights are views of
    // wqkv and wgu) for 3-4% faster block steps; DT_DECODER_NO_NORM_FOLD
    // keeps the RMSNorm kernels instead.
    d->persistent = !(options & DT_DECODER_NO_PERSISTENT);
    int64_t C = d->embed.size(1);
    bool foldable = d->kernels && C % 8 == 0 && !(options & DT_DECODER_NO_NORM_FOLD);
    for (auto &ly : d->layers)
      foldable = foldable && !ly.bqkv.defined() && ly.wgu.size(0) % 16 == 0 && ly.wqkv.is_contiguous() &&
                 ly.wgu.is_contiguous();
    if (foldable) {
      at::NoGradGuard ng;
      for (auto &ly : d->layers) {
        ly.wqkv_n = (ly.wqkv.to(at::kFloat) * ly.n1.to(at::kFloat)).to(st);
        ly.wgu_n = (ly.wgu.to(at::kFloat) * ly.n2.to(at::kFloat)).to(st);
      }
      d->fold = true;
    }
#endif
    d->seqs = std::max(seqs, 1);
    d->slot_rows = slots;
    for (auto &ly : d->layers) {
      // One spare row past the slots: a batched graph's padding rows write there (batch_input).
      ly.kc = at::zeros({d->seqs * slots + 1, d->Hkv, d->D}, d->embed.options());
      ly.vc = at::zeros({d->seqs * slots + 1, d->Hkv, d->D}, d->embed.options());
    }
#ifdef DLLM_CUDA
    d->graphs = cuda ? graphs : 0;
#endif
    *out = d.release();
  });
}

dt_err dt_decoder_forward(dt_decoder dec, const int64_t *ids, int64_t n, int64_t pos, int64_t causal,
                          int64_t rows, dt_tensor *logits) {
  return guard([&] {
    TORCH_CHECK(ids != nullptr && n >= 1, "decoder: no input tokens");
    auto *d = static_cast<Decoder *>(dec);
    at::NoGradGuard ng;
    causal = std::clamp<int64_t>(causal, 0, n);
#ifdef DLLM_KERNELS
    auto h = d->forward_host(ids, n, pos, causal);
#else
    auto host = at::from_blob(const_cast<int64_t *>(ids), {n}, at::kLong);
    auto h = d->forward(host.to(d->embed.device(), at::kLong, false, true), pos, causal);
#endif
    auto l = d->logits(h, rows);
    *logits = l.defined() ? W(l) : nullptr;
  });
}

dt_err dt_decoder_forward_batch(dt_decoder dec, const int64_t *ids, int n_seq, const int64_t *slot, const int64_t *n,
                                const int64_t *pos, const int64_t *causal, const int64_t *rows, dt_tensor *logits) {
  return guard([&] {
    TORCH_CHECK(ids != nullptr && n_seq >= 1, "decoder: an empty batch");
    auto *d = static_cast<Decoder *>(dec);
    at::NoGradGuard ng;
    std::vector<Decoder::BatchSeq> b(n_seq);
    int64_t N = 0, R = 0;
    for (int i = 0; i < n_seq; i++) {
      b[i] = {slot[i], n[i], pos[i], causal[i]};
      TORCH_CHECK(rows[i] >= 0 && rows[i] <= n[i], "decoder: ", rows[i], " logit rows of ", n[i]);
      N += n[i], R += rows[i];
    }
    auto host = at::from_blob(const_cast<int64_t *>(ids), {N}, at::kLong);
    auto h = d->forward_batch(host.to(d->embed.device(), at::kLong, false, true), b);
    *logits = nullptr;
    if (R == 0) return;
    if (R == N) { // every row asked for (AR steps, most block steps): no gather
      *logits = W(at::linear(h, d->head));
      return;
    }
    std::vector<at::Tensor> parts;
    int64_t off = 0;
    for (int i = 0; i < n_seq; i++) {
      if (rows[i] > 0) parts.push_back(h.narrow(0, off + n[i] - rows[i], rows[i]));
      off += n[i];
    }
    *logits = W(at::linear(at::cat(parts, 0), d->head));
  });
}

dt_err dt_decoder_forward_next(dt_decoder dec, int64_t n, int64_t pos, dt_tensor picks, int64_t mask, int64_t k,
                               int shift, int64_t rows, int *ok, dt_tensor *logits) {
  return guard([&] {
    TORCH_CHECK(n >= 1 && k >= 1, "decoder: a next step of ", n, " tokens committing ", k);
    *ok = 0;
    *logits = nullptr;
#ifdef DLLM_KERNELS
    auto *d = static_cast<Decoder *>(dec);
    at::NoGradGuard ng;
    auto h = d->forward_next(n, pos, T(picks), mask, k, shift != 0);
    if (!h.defined()) return;
    *ok = 1;
    auto l = d->logits(h, rows);
    *logits = l.defined() ? W(l) : nullptr;
#endif
  });
}

int64_t dt_decoder_graphs(dt_decoder dec) {
#ifdef DLLM_CUDA
  auto *d = static_cast<Decoder *>(dec);
  int64_t n = 0;
  for (auto &kv : d->captured) n += static_cast<int64_t>(kv.second.g.size());
  return n;
#else
  (void)dec;
  return 0;
#endif
}

dt_err dt_decoder_prepare(dt_decoder dec, int64_t n, int64_t upto, int64_t *captured) {
  return guard([&] {
    auto *d = static_cast<Decoder *>(dec);
    at::NoGradGuard ng;
    *captured = d->prepare(n, upto);
  });
}

void dt_decoder_free(dt_decoder dec) { delete static_cast<Decoder *>(dec); }

} // extern "C"

namespace {

// pick_greedy is dt_pick_greedy over first's row (1, V), when defined,
// followed by l's rows (n, V).
at::Tensor pick_greedy(const at::Tensor &first, const at::Tensor &l, int64_t mask) {
  at::NoGradGuard ng;
  TORCH_CHECK(l.dim() == 2 && l.size(0) >= 1 && l.size(1) >= 1, "pick_greedy: logits must be (n, V), not ", l.sizes());
  auto V = l.size(1);
  TORCH_CHECK(!first.defined() || (first.dim() == 2 && first.size(0) == 1 && first.size(1) == V &&
                                   first.scalar_type() == l.scalar_type() && first.device() == l.device()),
              "pick_greedy: the first row must be (1, ", V, ") of the logits' dtype and device, not ", first.sizes());
  TORCH_CHECK(mask < V, "pick_greedy: mask token ", mask, " is outside the vocabulary of ", V);
#ifdef DLLM_KERNELS
  auto st = l.scalar_type();
  if (l.is_cuda() && (st == at::kBFloat16 || st == at::kHalf || st == at::kFloat)) {
    auto lc = l.contiguous();
    auto fc = first.defined() ? first.contiguous() : first;
    c10::cuda::CUDAGuard g(lc.device());
    auto n = l.size(0) + (first.defined() ? 1 : 0);
    auto o = at::empty({2 * n}, lc.options().dtype(at::kDouble));
    auto scratch = at::empty({dtk_pick_greedy_scratch(n, V)}, lc.options().dtype(at::kByte));
    int err = dtk_pick_greedy(static_cast<int>(st), fc.defined() ? fc.data_ptr() : nullptr, lc.data_ptr(), n, V, mask,
                              o.data_ptr<double>(), scratch.data_ptr(), c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == 0, "pick_greedy kernel: ", cudaGetErrorString(static_cast<cudaError_t>(err)));
    return o;
  }
#endif
  auto all = first.defined() ? at::cat({first, l}) : l;
  auto f = all.to(at::kFloat, false, true); // a copy: the mask is written into it
  if (mask >= 0) f.narrow(1, mask, 1).fill_(-INFINITY);
  auto ids = f.argmax(1);
  auto p = (std::get<0>(f.max(1)) - f.logsumexp(1)).exp();
  return at::cat({p.to(at::kDouble), ids.to(at::kDouble)});
}

} // namespace

extern "C" {

dt_err dt_pick_greedy(dt_tensor logits, int64_t mask, dt_tensor *out) {
  return guard([&] { *out = W(pick_greedy(at::Tensor(), T(logits), mask)); });
}

dt_err dt_pick_greedy_after(dt_tensor first, dt_tensor logits, int64_t mask, dt_tensor *out) {
  return guard([&] { *out = W(pick_greedy(T(first), T(logits), mask)); });
}

} // extern "C"
