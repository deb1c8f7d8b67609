// attention.cu: the decoder's attention for decode rows without a mask
// (FlashAttention 2's algorithm for one shape, split-KV, and the merge of
// the splits by log-sum-exp, also of cuDNN's chunks), a fused commit's own
// keys, and dtk_tune.

#include "kernels_common.cuh"

namespace {

// --- decode attention ----------------------------------------------------------
//
// Attention of a decode forward's rows that all see the same keys (a
// denoising block, an AR token): FlashAttention 2's algorithm for one
// shape, head dim 128, with the G query heads that share a key head folded
// into G x T rows (so each key is read once per key head, not G times) and
// the keys split over CTAs (flash-decoding) so that a short block over a
// long cache fills the GPU; a second kernel merges the splits by
// log-sum-exp. It reads q in the (T, H, D) layout and writes out in it.

constexpr int kAD = 128, kARows = 64, kAKeys = 64, kAThreads = 128;

// DLLM_ATTN_TRACE (probes/attn_phase_probe.cu only): thread 0 of each CTA
// writes %globaltimer at the kernel's steps to g_attn_trace, (CTA,
// kAttnTraceMarks) in grid order: where a call's time goes.
#ifdef DLLM_ATTN_TRACE
__device__ unsigned long long *g_attn_trace;
constexpr int kAttnTraceMarks = 5;
#define ATTN_MARK(i)                                                                                             \
  do {                                                                                                           \
    if (g_attn_trace && threadIdx.x == 0) {                                                                      \
      unsigned long long t_;                                                                                     \
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_));                                                    \
      g_attn_trace[((size_t(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x) * kAttnTraceMarks + \
                   (i)] = t_;                                                                                    \
    }                                                                                                            \
  } while (0)
#else
#define ATTN_MARK(i)
#endif

// Grid (row blocks of kARows, Hkv, splits); warp w owns rows [16 w, 16 w + 16)
// of its block. part (splits, Hkv, R, D) and lse (splits, Hkv, R) float32
// take the unmerged results when splits > 1; else out directly. With pos
// (T, the rows' positions) the keys are [0, pos[T - 1] + 1) instead of
// [0, S), read on the device, so that a CUDA graph can hold the kernel
// while the context grows: the grid is then sized for the largest S and
// splits past the keys end empty (lse -inf, part 0, weight 0 in the merge).
// The first causal tokens see only the keys up to their own position (a
// finished block's commit riding in the forward); the rest see them all.
// Warps whose rows are all past R (an AR step's 8 rows) only load.
// qfold: q and out are folded, (Hkv, R, D), as the cuDNN path keeps q;
// then with one split and lse given, the rows' log-sum-exps (base 2) go to
// lse (Hkv, R) too (a fused commit's own keys, merged with cuDNN's).
// With bd, nb sequences of a batched forward (continuous batching), the
// grid's z (nb x splits) spans them: sequence b's bd[4b .. 4b+3] are its
// first token in q, out and pos, its tokens, its first cache row (its KV
// slot) and its causal tokens; R, causal and the pointers are then its
// own, and part and lse hold Rtot rows, its from row (first token) G on.
template <typename T>
__global__ void __launch_bounds__(kAThreads)
    attn_decode_kernel(const T *__restrict__ q, const T *__restrict__ kc, const T *__restrict__ vc, T *__restrict__ out,
                       int R, int G, int H, int Hkv, int S, const int64_t *__restrict__ pos, int causal,
                       float scale_log2, float *__restrict__ part, float *__restrict__ lse, bool qfold,
                       const int64_t *__restrict__ bd, int nb, int Rtot) {
  ATTN_MARK(0);
  extern __shared__ __align__(16) unsigned char smem[];
  T *Qs = reinterpret_cast<T *>(smem); // (kARows, kAD)
  T *Ks = Qs + kARows * kAD;           // (2, kAKeys, kAD)
  T *Vs = Ks + 2 * kAKeys * kAD;       // (2, kAKeys, kAD)
  const int rb = blockIdx.x, h = blockIdx.y;
  int split = blockIdx.z, splits = gridDim.z, roff = 0;
  if (bd) { // written by the copy that starts the forward, kernels back: safe before the wait
    splits = gridDim.z / nb;
    const int64_t *d = bd + 4 * (blockIdx.z / splits);
    split = blockIdx.z % splits;
    R = static_cast<int>(d[1]) * G;
    if (rb * kARows >= R) return; // a shorter sequence than the grid's longest
    causal = static_cast<int>(d[3]);
    const int64_t t0 = d[0], k0 = d[2] * Hkv * kAD;
    q += t0 * H * kAD, out += t0 * H * kAD, pos += t0, kc += k0, vc += k0;
    roff = static_cast<int>(t0) * G;
  }
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  // The positions are written when a forward starts, several kernels back
  // (each kernel here lets the next start only once its own wait is over,
  // so the one before the one before is done): safe before the wait.
  const int first = pos ? static_cast<int>(pos[0]) : S - R / G; // the rows' first position
  if (pos) S = static_cast<int>(pos[R / G - 1] + 1);
  const int ntiles = (S + kAKeys - 1) / kAKeys, tps = (ntiles + splits - 1) / splits;
  const int t0 = split * tps, t1 = min(t0 + tps, ntiles);
  auto swz = [](int r, int c) { return r * kAD + ((c ^ (r & 7)) << 3); }; // 16 chunks a row
  // qrow is the (T, H, D) row of folded row r: token r / G, head h G + r % G.
  auto qrow = [&](int r) { return qfold ? int64_t(h) * R + r : int64_t(r / G) * H + int64_t(h) * G + r % G; };
  auto load_kv = [&](int stage, int tile) {
    for (int i = tid; i < kAKeys * 16; i += kAThreads) {
      int r = i / 16, c = i % 16, key = tile * kAKeys + r;
      bool ok = key < S;
      int64_t off = ok ? (int64_t(key) * Hkv + h) * kAD + c * 8 : 0;
      cp_async16(smem_u32(Ks + stage * kAKeys * kAD + swz(r, c)), kc + off, ok);
      cp_async16(smem_u32(Vs + stage * kAKeys * kAD + swz(r, c)), vc + off, ok);
    }
  };

  // 1. The first K and V tiles, then Q, through cp.async; rows past R and
  // keys past S are zeros (a key past S gets -inf below; V zeros keep 0 * x
  // finite). The kernel before (RoPE) writes this forward's keys, and a
  // fused commit's 32 just below them; a tile a whole tile below those is
  // older, so it comes in while that kernel still runs.
  const bool early = t0 < t1 && (t0 + 2) * kAKeys <= first;
  if (early) load_kv(0, t0);
  dep_wait();
  ATTN_MARK(1);
  dep_launch();
  for (int i = tid; i < kARows * 16; i += kAThreads) {
    int r = i / 16, c = i % 16, gr = rb * kARows + r;
    cp_async16(smem_u32(Qs + swz(r, c)), gr < R ? q + qrow(gr) * kAD + c * 8 : q, gr < R);
  }
  if (t0 < t1 && !early) load_kv(0, t0);
  cp_commit();

  float o[kAD / 8][4] = {}; // (16 rows, 128 dims) of output, unnormalised
  int lim[2]; // keys [0, lim) for rows lane/4 and lane/4 + 8: token t < causal sees up to first + t
#pragma unroll
  for (int i = 0; i < 2; i++) {
    int t = (rb * kARows + warp * 16 + lane / 4 + 8 * i) / G;
    lim[i] = t < causal ? min(first + t + 1, S) : S;
  }
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0}; // rows lane/4 and lane/4 + 8
  unsigned qf[kAD / 16][4];
  const bool active = rb * kARows + warp * 16 < R;
  for (int it = t0; it < t1; it++) {
    int stage = (it - t0) % 2;
    if (it + 1 < t1) load_kv(stage ^ 1, it + 1);
    cp_commit();
    cp_wait<1>();
    __syncthreads();
    if (!active) { // rows past R: the loads only
      __syncthreads();
      continue;
    }
    if (it == t0) {
      ATTN_MARK(2);
#pragma unroll
      for (int kk = 0; kk < kAD / 16; kk++)
        ldsm_x4(smem_u32(Qs + swz(warp * 16 + lane % 16, 2 * kk + lane / 16)), qf[kk]);
    }
    const T *Kt = Ks + stage * kAKeys * kAD, *Vt = Vs + stage * kAKeys * kAD;

    // 2. Scores s (16 rows, 64 keys) = Q K^T, as 8 tiles of 8 keys.
    float s[kAKeys / 8][4] = {};
#pragma unroll
    for (int p = 0; p < kAKeys / 16; p++) {
#pragma unroll
      for (int kk = 0; kk < kAD / 16; kk++) {
        unsigned b[4];
        ldsm_x4(smem_u32(Kt + swz(16 * p + lane % 8 + (lane / 16) * 8, 2 * kk + (lane / 8) % 2)), b);
        mma<T>(s[2 * p], qf[kk], b[0], b[1]);
        mma<T>(s[2 * p + 1], qf[kk], b[2], b[3]);
      }
    }

    // 3. Online softmax in base 2: scale, mask keys past the row's limit, new row maxima
    // (over the quad of lanes that shares a row), rescale what came before.
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < kAKeys / 8; j++) {
#pragma unroll
      for (int e = 0; e < 4; e++) {
        int key = it * kAKeys + 8 * j + 2 * (lane % 4) + (e & 1);
        s[j][e] = key < lim[e / 2] ? s[j][e] * scale_log2 : -INFINITY;
        mx[e / 2] = fmaxf(mx[e / 2], s[j][e]);
      }
    }
    float corr[2], mu[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffff, mx[i], 1));
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffff, mx[i], 2));
      float mn = fmaxf(m[i], mx[i]);
      mu[i] = mn == -INFINITY ? 0.0f : mn; // a row with no key yet stays empty
      corr[i] = exp2f(m[i] - mu[i]);
      m[i] = mn;
      l[i] *= corr[i];
    }
#pragma unroll
    for (int d = 0; d < kAD / 8; d++) {
      o[d][0] *= corr[0], o[d][1] *= corr[0], o[d][2] *= corr[1], o[d][3] *= corr[1];
    }

    // 4. P = exp2(s - m) as bf16 A fragments (the accumulator layout of two
    // 8-key tiles is the A layout of one 16-key step), then O += P V with V
    // read transposed by ldmatrix.
    unsigned pa[kAKeys / 16][4];
#pragma unroll
    for (int j = 0; j < kAKeys / 8; j++) {
      float p0 = exp2f(s[j][0] - mu[0]), p1 = exp2f(s[j][1] - mu[0]);
      float p2 = exp2f(s[j][2] - mu[1]), p3 = exp2f(s[j][3] - mu[1]);
      l[0] += p0 + p1, l[1] += p2 + p3;
      pa[j / 2][(j % 2) * 2] = pack2<T>(p0, p1);
      pa[j / 2][(j % 2) * 2 + 1] = pack2<T>(p2, p3);
    }
#pragma unroll
    for (int j = 0; j < kAKeys / 16; j++) {
#pragma unroll
      for (int d = 0; d < kAD / 16; d++) {
        unsigned b[4];
        ldsm_x4_t(smem_u32(Vt + swz(16 * j + lane % 8 + ((lane / 8) % 2) * 8, 2 * d + lane / 16)), b);
        mma<T>(o[2 * d], pa[j], b[0], b[1]);
        mma<T>(o[2 * d + 1], pa[j], b[2], b[3]);
      }
    }
    __syncthreads(); // the next iteration's load reuses this stage
  }
  cp_wait<0>();
  ATTN_MARK(3);

  // 5. Row sums over the quad; normalise; write out or the split's part.
#pragma unroll
  for (int i = 0; i < 2; i++) {
    l[i] += __shfl_xor_sync(0xffffffff, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffff, l[i], 2);
  }
#pragma unroll
  for (int i = 0; i < 2; i++) {
    int r = rb * kARows + warp * 16 + lane / 4 + 8 * i;
    if (r >= R) continue;
    float inv = l[i] > 0 ? 1.0f / l[i] : 0.0f;
    if (splits == 1) {
      T *dst = out + qrow(r) * kAD;
#pragma unroll
      for (int d = 0; d < kAD / 8; d++)
        *reinterpret_cast<unsigned *>(dst + 8 * d + 2 * (lane % 4)) = pack2<T>(o[d][2 * i] * inv, o[d][2 * i + 1] * inv);
      if (lse && lane % 4 == 0) lse[int64_t(h) * R + r] = l[i] > 0 ? m[i] + log2f(l[i]) : -INFINITY;
    } else {
      int64_t pr = (int64_t(split) * Hkv + h) * Rtot + roff + r;
      float *dst = part + pr * kAD;
#pragma unroll
      for (int d = 0; d < kAD / 8; d++)
        *reinterpret_cast<float2 *>(dst + 8 * d + 2 * (lane % 4)) = make_float2(o[d][2 * i] * inv, o[d][2 * i + 1] * inv);
      if (lane % 4 == 0) lse[pr] = l[i] > 0 ? m[i] + log2f(l[i]) : -INFINITY;
    }
  }
  ATTN_MARK(4);
}

// Grid (R, Hkv), (kAD, kMergeWays) threads: out row = sum_s w_s part_s /
// sum_s w_s with w_s = 2^(lse_s - max lse), over the splits that hold keys
// (the KV length from pos on the device when given, as in
// attn_decode_kernel), kMergeWays splits at a time and the ways summed in
// shared memory: a row's splits read one after another cost 5 us at 16
// splits, more in a graph sized for the longest context (Nsight Compute,
// H200).
constexpr int kMergeWays = 4;
template <typename T>
__global__ void __launch_bounds__(kAD * kMergeWays, 4) // four CTAs an SM: a 32-token block's 512 in one wave
    attn_merge_kernel(const float *part, const float *lse, T *out, int R, int G, int H, int Hkv, int splits, int S,
                      const int64_t *pos) {
  __shared__ float ls[kAD]; // splits <= kAD (attn_splits)
  __shared__ float wacc[kMergeWays][kAD], wsums[kMergeWays];
  const int r = blockIdx.x, h = blockIdx.y, d = threadIdx.x, way = threadIdx.y;
  if (pos) S = static_cast<int>(pos[R / G - 1] + 1); // safe before the wait (attn_decode_kernel)
  const int ntiles = (S + kAKeys - 1) / kAKeys, tps = (ntiles + splits - 1) / splits, used = (ntiles + tps - 1) / tps;
  const int tid = way * kAD + d;
  const float *p = part + int64_t(h) * R * kAD + int64_t(r) * kAD + d;
  const int64_t step = int64_t(Hkv) * R * kAD;
  dep_wait();
  dep_launch();
  // The way's partials and the row's lse values all in flight at once: one
  // trip to L2, not one for the lse values and then one for the partials.
  constexpr int kPer = 8; // 32 splits; more are read after
  float pv[kPer];
#pragma unroll
  for (int i = 0; i < kPer; i++) {
    int s = way + kMergeWays * i;
    pv[i] = s < used ? p[s * step] : 0.0f;
  }
  if (tid < used) ls[tid] = lse[(int64_t(tid) * Hkv + h) * R + r];
  __syncthreads();
  float mx = -INFINITY;
  for (int s = 0; s < used; s++) mx = fmaxf(mx, ls[s]);
  float acc = 0, wsum = 0;
#pragma unroll
  for (int i = 0; i < kPer; i++) {
    int s = way + kMergeWays * i;
    if (s >= used) break;
    float w = mx == -INFINITY ? 0.0f : exp2f(ls[s] - mx);
    acc += w * pv[i];
    wsum += w;
  }
#pragma unroll 8
  for (int s = way + kMergeWays * kPer; s < used; s += kMergeWays) {
    float w = mx == -INFINITY ? 0.0f : exp2f(ls[s] - mx);
    acc += w * p[s * step];
    wsum += w;
  }
  wacc[way][d] = acc;
  if (d == 0) wsums[way] = wsum;
  __syncthreads();
  if (way != 0) return;
  acc = 0, wsum = 0;
#pragma unroll
  for (int k = 0; k < kMergeWays; k++) acc += wacc[k][d], wsum += wsums[k];
  int64_t row = int64_t(r / G) * H + int64_t(h) * G + r % G;
  out[row * kAD + d] = cast<T>(wsum > 0 ? acc / wsum : 0.0f);
}

// attn_merge_rows_kernel is attn_merge_kernel for a batch's many rows of
// few splits (attn_decode_batch, at most kRowsMergeSplits splits): a warp
// a (row, key head), four dims a lane, the splits summed in one pass;
// (R Hkv / 4) CTAs of 4 warps. attn_merge_kernel's 512-thread CTA a row
// spent 19 us a layer on 8 sequences' 32-row blocks (4,096 rows of 4
// splits, H100), most of its threads idle.
constexpr int kRowsMergeSplits = 16;
template <typename T>
__global__ void __launch_bounds__(128)
    attn_merge_rows_kernel(const float *part, const float *lse, T *out, int R, int G, int H, int Hkv, int splits,
                           int S) {
  const int lane = threadIdx.x % 32, p = blockIdx.x * 4 + threadIdx.x / 32;
  dep_wait();
  dep_launch();
  if (p >= R * Hkv) return;
  const int r = p / Hkv, h = p % Hkv;
  const int ntiles = (S + kAKeys - 1) / kAKeys, tps = (ntiles + splits - 1) / splits, used = (ntiles + tps - 1) / tps;
  // Split s's part of (r, h) is row s Hkv R + h R + r of part, its lse the same entry of lse.
  const int64_t step = int64_t(Hkv) * R, at = int64_t(h) * R + r;
  float mx = -INFINITY;
  for (int s = lane; s < used; s += 32) mx = fmaxf(mx, lse[s * step + at]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, o));
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float wsum = 0;
#pragma unroll 4
  for (int s = 0; s < used; s++) {
    const float w = mx == -INFINITY ? 0.0f : exp2f(lse[s * step + at] - mx);
    const float4 v = reinterpret_cast<const float4 *>(part + (s * step + at) * kAD)[lane];
    acc.x += w * v.x, acc.y += w * v.y, acc.z += w * v.z, acc.w += w * v.w;
    wsum += w;
  }
  const float inv = wsum > 0 ? 1.0f / wsum : 0.0f;
  const int64_t row = int64_t(r / G) * H + int64_t(h) * G + r % G;
  *reinterpret_cast<uint2 *>(out + row * kAD + 4 * lane) =
      make_uint2(pack2<T>(acc.x * inv, acc.y * inv), pack2<T>(acc.z * inv, acc.w * inv));
}

// Grid (R, Hkv), kAD threads: the merge of an attention split over its
// keys by another kernel (cuDNN's, the splits its batch, in the decoder):
// split s's folded row r of key head h at parts[s ps + h ph + r pr] (kAD
// contiguous, in T), its natural-log lse at lse[s ls + h lh + r lr]; out
// row = sum_s w_s part_s / (sum_s w_s - pad e^-mx) with w_s = e^(lse_s -
// mx), mx the largest lse, into (T, H, kAD) at folded row r's token and
// head. pad = S - (pos[T-1] + 1) is the number of zero key and value slots
// past the context that the splits covered (their scores are exactly 0,
// so each added e^0 to a split's sum and nothing to its values).
// With own (a fused commit's own keys, kept out of the caches while the
// splits read them: see dtk_attn_merge_lse_own), one more part: own
// (Hkv, R, kAD) with base-2 log-sum-exps own_lse (Hkv, R), and every slot
// from pos[0] on is zero; then CTA (r < T, h) copies token r's key and
// value of head h from ks, vs (T, Hkv, kAD) into the caches at pos[r].
// With blockDim.y ways, way y sums splits y, y + ways, ... and the ways
// meet in shared memory (fewer dependent loads a thread).
template <typename T>
__global__ void __launch_bounds__(kAD * kMergeWays)
    attn_merge_lse_kernel(const T *parts, int64_t ps, int64_t ph, int64_t pr, const float *lse, int64_t ls,
                          int64_t lh, int64_t lr, const int64_t *pos, int Tn, int64_t S, T *out, int G, int H,
                          int splits, const T *own, const float *own_lse, T *kc, T *vc, const T *ks, const T *vs) {
  __shared__ float lw[kAD + 1]; // splits <= kAD, and own's
  __shared__ float wacc[kMergeWays][kAD], wsums[kMergeWays];
  const int r = blockIdx.x, h = blockIdx.y, d = threadIdx.x, way = threadIdx.y, ways = blockDim.y;
  const int Hkv = gridDim.y, R = Tn * G;
  dep_launch_wait();
  if (way == 0 && d < splits) lw[d] = lse[int64_t(d) * ls + int64_t(h) * lh + int64_t(r) * lr];
  if (own && way == 0 && d == 0) lw[splits] = own_lse[int64_t(h) * R + r] * 0.6931471805599453f; // to natural log
  __syncthreads();
  float mx = -INFINITY;
  for (int s = 0; s < splits + (own ? 1 : 0); s++) mx = fmaxf(mx, lw[s]);
  float acc = 0, wsum = 0;
  for (int s = way; s < splits; s += ways) {
    float w = __expf(lw[s] - mx);
    acc += w * f32(parts[int64_t(s) * ps + int64_t(h) * ph + int64_t(r) * pr + d]);
    wsum += w;
  }
  if (ways > 1) {
    wacc[way][d] = acc;
    if (d == 0) wsums[way] = wsum;
    __syncthreads();
    if (way != 0) return;
    acc = 0, wsum = 0;
    for (int k = 0; k < ways; k++) acc += wacc[k][d], wsum += wsums[k];
  }
  if (own) {
    float w = __expf(lw[splits] - mx);
    acc += w * f32(own[(int64_t(h) * R + r) * kAD + d]);
    wsum += w;
  }
  wsum -= static_cast<float>(S - (own ? pos[0] : pos[Tn - 1] + 1)) * expf(-mx);
  int64_t row = int64_t(r / G) * H + int64_t(h) * G + r % G;
  out[row * kAD + d] = cast<T>(acc / wsum);
  if (own && r < Tn) {
    const int64_t src = (int64_t(r) * Hkv + h) * kAD + d, dst = (pos[r] * Hkv + h) * kAD + d;
    kc[dst] = ks[src];
    vc[dst] = vs[src];
  }
}

// attn_merge_lse_warp_kernel is attn_merge_lse_kernel with a warp a row
// (R x Hkv of them, four a CTA) and no shared memory: lane DG w + g sums
// dims [16 g, 16 g + 16) over splits w, w + W, ..., and the W ways meet
// through shuffles, the CTA form's arithmetic in its order. Its CTAs fit
// beside tpost_kernel's (one an SM with 218 KB of shared memory; the CTA
// form's 512 threads, four an SM, fill an SM's thread slots), so that
// kernel fetches its first weights during the merge instead of after most
// of it: 8k k = 3 2.58 -> 2.50 ms (docs/performance.md).
template <typename T>
__global__ void __launch_bounds__(128)
    attn_merge_lse_warp_kernel(const T *parts, int64_t ps, int64_t ph, int64_t pr, const float *lse, int64_t ls,
                               int64_t lh, int64_t lr, const int64_t *pos, int Tn, int64_t S, T *out, int G, int H,
                               int Hkv, int splits, const T *own, const float *own_lse, T *kc, T *vc, const T *ks,
                               const T *vs) {
  constexpr int W = kMergeWays, DG = 32 / W, E = kAD / DG, F = E / W; // E dims a lane sums, F it stores
  const int lane = threadIdx.x % 32, way = lane / DG, g = lane % DG, R = Tn * G;
  const int p = blockIdx.x * 4 + threadIdx.x / 32;
  dep_launch_wait();
  if (p >= R * Hkv) return;
  const int r = p / Hkv, h = p % Hkv;

  // 1. The first 32 splits' values (this way's: a block's loads go
  // together, past the last split the last one again, weight 0), as they
  // need no log-sum-exp to be fetched.
  constexpr int J = 32 / W, Q = E * int(sizeof(T)) / 16;
  uint4 buf[J][Q];
  auto load = [&](int k) {
#pragma unroll
    for (int j = 0; j < J; j++) {
      const int s = min(32 * k + W * j + way, splits - 1);
      const uint4 *src =
          reinterpret_cast<const uint4 *>(parts + int64_t(s) * ps + int64_t(h) * ph + int64_t(r) * pr + E * g);
#pragma unroll
      for (int q = 0; q < Q; q++) buf[j][q] = src[q];
    }
  };
  load(0);

  // 2. The splits' log-sum-exps (lane l holds splits l, l + 32, ...), own's, their maximum.
  float lw[kAD / 32], mx = -INFINITY;
#pragma unroll
  for (int k = 0; k < kAD / 32; k++) {
    const int s = 32 * k + lane;
    lw[k] = s < splits ? lse[int64_t(s) * ls + int64_t(h) * lh + int64_t(r) * lr] : -INFINITY;
    mx = fmaxf(mx, lw[k]);
  }
  const float lo = own ? own_lse[int64_t(h) * R + r] * 0.6931471805599453f : -INFINITY; // to natural log
  mx = fmaxf(mx, lo);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, o));

  // 3. This way's splits in order, a block of 32 at a time.
  float acc[E] = {}, wsum = 0;
#pragma unroll
  for (int k = 0; k < kAD / 32; k++) {
    if (k > 0) {
      if (32 * k >= splits) break;
      load(k);
    }
#pragma unroll
    for (int j = 0; j < J; j++) {
      const float l = __shfl_sync(0xffffffff, lw[k], W * j + way);
      if (32 * k + W * j + way >= splits) continue;
      const float w = __expf(l - mx);
      const T *v = reinterpret_cast<const T *>(buf[j]);
#pragma unroll
      for (int e = 0; e < E; e++) acc[e] += w * f32(v[e]);
      wsum += w;
    }
  }

  // 4. The ways met in order, then own's part and the padding's weight out.
  float tot[E] = {}, ws = 0;
#pragma unroll
  for (int k = 0; k < W; k++) {
#pragma unroll
    for (int e = 0; e < E; e++) tot[e] += __shfl_sync(0xffffffff, acc[e], DG * k + g);
    ws += __shfl_sync(0xffffffff, wsum, DG * k + g);
  }
  if (own) {
    const float w = __expf(lo - mx);
    const T *o = own + (int64_t(h) * R + r) * kAD + E * g;
#pragma unroll
    for (int e = 0; e < E; e++) tot[e] += w * f32(o[e]);
    ws += w;
  }
  ws -= static_cast<float>(S - (own ? pos[0] : pos[Tn - 1] + 1)) * expf(-mx);

  // 5. Lane (w, g) stores dims [E g + F w, + F), and copies them of own's key and value into the caches.
  const int64_t row = int64_t(r / G) * H + int64_t(h) * G + r % G;
  const int d0 = E * g + F * way;
#pragma unroll
  for (int e = 0; e < F; e++) out[row * kAD + d0 + e] = cast<T>(tot[F * way + e] / ws);
  if (own && r < Tn) {
    const int64_t src = (int64_t(r) * Hkv + h) * kAD + d0, dst = (pos[r] * Hkv + h) * kAD + d0;
#pragma unroll
    for (int e = 0; e < F; e++) kc[dst + e] = ks[src + e], vc[dst + e] = vs[src + e];
  }
}

// attn_splits spreads the key tiles so that the grid has about
// g_ctas_per_sm CTAs per SM (two fit at once), each with at least
// g_min_tiles tiles, and at most g_splits_cap splits: the merge reads all
// of a row's splits, and an AR step's 16 rows over 32k keys measured 3.47
// ms a step with 132 splits against 3.22 with 66 (H200).
// A batch (nb sequences) rounds up too: rounding down measured slower
// (H100, 8k keys: 8 sequences of 32 rows 11.8 ms a step against 10.6, 32
// AR rows 12.3 against 8.1).
int attn_splits(int64_t R, int64_t Hkv, int64_t S, int64_t nb = 1) {
  int64_t base = (R + kARows - 1) / kARows * Hkv * nb, tiles = (S + kAKeys - 1) / kAKeys;
  int64_t want = (g_ctas_per_sm * sm_count() + base - 1) / base;
  if (want > g_splits_cap) want = g_splits_cap;
  int64_t most = tiles / g_min_tiles;
  int64_t splits = want < most ? want : most;
  if (splits < 1) splits = 1;
  // Equal tiles per split, and no split left without one.
  int64_t tps = (tiles + splits - 1) / splits;
  return static_cast<int>((tiles + tps - 1) / tps);
}

// attn_smem is attn_decode_kernel's dynamic shared memory, asked for once
// (above 48 KB it must be); 0 where that failed.
template <typename T> size_t attn_smem() {
  constexpr size_t smem = (kARows + 4 * kAKeys) * kAD * sizeof(T);
  static const bool ok = cudaFuncSetAttribute(attn_decode_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(smem)) == cudaSuccess;
  return ok ? smem : 0;
}

// attn_launch launches attn_decode_kernel<T> over grid with the casts its
// arguments need (scale in nats, as the callers take it).
template <typename T>
cudaError_t attn_launch(dim3 grid, size_t smem, cudaStream_t st, const void *q, const void *kc, const void *vc,
                        void *out, int64_t R, int64_t G, int64_t H, int64_t Hkv, int64_t S, const int64_t *pos,
                        int64_t causal, float scale, float *part, float *lse, bool qfold,
                        const int64_t *bd = nullptr, int64_t nb = 0, int64_t Rtot = 0) {
  return launch(attn_decode_kernel<T>, grid, kAThreads, smem, st, static_cast<const T *>(q),
                static_cast<const T *>(kc), static_cast<const T *>(vc), static_cast<T *>(out), static_cast<int>(R),
                static_cast<int>(G), static_cast<int>(H), static_cast<int>(Hkv), static_cast<int>(S), pos,
                static_cast<int>(causal), scale * 1.4426950408889634f, part, lse, qfold, bd, static_cast<int>(nb),
                static_cast<int>(bd ? Rtot : R));
}

// attn_own launches attn_decode_kernel<T> for dtk_attn_own: q folded, one
// split, the log-sum-exps to lse.
template <typename T>
int attn_own(const void *q, const void *ks, const void *vs, void *out, float *lse, int64_t Tn, int64_t H,
             int64_t Hkv, const int64_t *pos, int64_t causal, float scale, cudaStream_t st) {
  const size_t smem = attn_smem<T>();
  if (smem == 0) return cudaErrorInvalidValue;
  int64_t G = H / Hkv, R = Tn * G;
  dim3 grid(static_cast<unsigned>((R + kARows - 1) / kARows), static_cast<unsigned>(Hkv), 1);
  return attn_launch<T>(grid, smem, st, q, ks, vs, out, R, G, H, Hkv, Tn, pos, causal, scale, nullptr, lse, true);
}

template <typename T>
int attn_decode(const void *q, const void *kc, const void *vc, void *out, int64_t Tn, int64_t H, int64_t Hkv,
                int64_t S, const int64_t *pos, int64_t causal, float scale, void *scratch, cudaStream_t st) {
  const size_t smem = attn_smem<T>();
  if (smem == 0) return cudaErrorInvalidValue;
  int64_t G = H / Hkv, R = Tn * G;
  int splits = attn_splits(R, Hkv, S);
  float *part = splits > 1 ? static_cast<float *>(scratch) : nullptr;
  float *lse = splits > 1 ? part + int64_t(splits) * Hkv * R * kAD : nullptr;
  dim3 grid(static_cast<unsigned>((R + kARows - 1) / kARows), static_cast<unsigned>(Hkv), static_cast<unsigned>(splits));
  cudaError_t e = attn_launch<T>(grid, smem, st, q, kc, vc, out, R, G, H, Hkv, S, pos, causal, scale, part, lse, false);
  if (e != cudaSuccess || splits == 1) return e;
  return launch(attn_merge_kernel<T>, dim3(static_cast<unsigned>(R), static_cast<unsigned>(Hkv)),
                dim3(kAD, kMergeWays), 0, st, part, lse, static_cast<T *>(out), static_cast<int>(R),
                static_cast<int>(G), static_cast<int>(H), static_cast<int>(Hkv), splits, static_cast<int>(S), pos);
}

// attn_decode_batch is attn_decode over the nb sequences of a batched
// forward (dtk_attn_decode_batch): one grid of the longest sequence's row
// blocks for each sequence and split, the splits chosen for the longest
// context, merged over all rows at once (a shorter sequence's splits past
// its keys hold nothing: weight 0), a warp a row where the splits are few.
template <typename T>
int attn_decode_batch(const void *q, const void *kc, const void *vc, void *out, int64_t N, int64_t H, int64_t Hkv,
                      int64_t nb, const int64_t *bd, const int64_t *pos, int64_t max_n, int64_t max_s, float scale,
                      void *scratch, cudaStream_t st) {
  const size_t smem = attn_smem<T>();
  if (smem == 0) return cudaErrorInvalidValue;
  int64_t G = H / Hkv, Rtot = N * G, Rmax = max_n * G;
  int splits = attn_splits(Rmax, Hkv, max_s, nb);
  float *part = splits > 1 ? static_cast<float *>(scratch) : nullptr;
  float *lse = splits > 1 ? part + int64_t(splits) * Hkv * Rtot * kAD : nullptr;
  dim3 grid(static_cast<unsigned>((Rmax + kARows - 1) / kARows), static_cast<unsigned>(Hkv),
            static_cast<unsigned>(splits * nb));
  cudaError_t e = attn_launch<T>(grid, smem, st, q, kc, vc, out, Rmax, G, H, Hkv, max_s, pos, 0, scale, part, lse,
                                 false, bd, nb, Rtot);
  if (e != cudaSuccess || splits == 1) return e;
  if (splits <= kRowsMergeSplits)
    return launch(attn_merge_rows_kernel<T>, dim3(static_cast<unsigned>((Rtot * Hkv + 3) / 4)), dim3(128), 0, st,
                  static_cast<const float *>(part), static_cast<const float *>(lse), static_cast<T *>(out),
                  static_cast<int>(Rtot), static_cast<int>(G), static_cast<int>(H), static_cast<int>(Hkv), splits,
                  static_cast<int>(max_s));
  return launch(attn_merge_kernel<T>, dim3(static_cast<unsigned>(Rtot), static_cast<unsigned>(Hkv)),
                dim3(kAD, kMergeWays), 0, st, part, lse, static_cast<T *>(out), static_cast<int>(Rtot),
                static_cast<int>(G), static_cast<int>(H), static_cast<int>(Hkv), splits, static_cast<int>(max_s),
                static_cast<const int64_t *>(nullptr));
}

// merge_lse launches attn_merge_lse_kernel<T> for dtk_attn_merge_lse_own,
// or its warp form where warp is 1 or 2. Form 1 asks for an SM's whole
// carveout as shared memory, so that an SM set up for a merge CTA still
// takes a tpost_kernel CTA (without it, form 2, the warp form gains
// nothing).
template <typename T>
cudaError_t merge_lse(dim3 grid, dim3 block, cudaStream_t st, const void *parts, int64_t ps, int64_t ph, int64_t pr,
                      const float *lse, int64_t ls, int64_t lh, int64_t lr, const int64_t *pos, int64_t Tn, int64_t S,
                      void *out, int G, int64_t H, int64_t splits, const void *own, const float *own_lse, void *kc,
                      void *vc, const void *ks, const void *vs, bool warp) {
  if (warp) {
    static const cudaError_t set = cudaFuncSetAttribute(
        attn_merge_lse_warp_kernel<T>, cudaFuncAttributePreferredSharedMemoryCarveout, int(cudaSharedmemCarveoutMaxShared));
    if (set != cudaSuccess) return set;
    const int64_t rows = int64_t(grid.x) * grid.y;
    return launch(attn_merge_lse_warp_kernel<T>, static_cast<unsigned>((rows + 3) / 4), 128, 0, st,
                  static_cast<const T *>(parts), ps, ph, pr, lse, ls, lh, lr, pos, static_cast<int>(Tn), S,
                  static_cast<T *>(out), G, static_cast<int>(H), static_cast<int>(grid.y), static_cast<int>(splits),
                  static_cast<const T *>(own), own_lse, static_cast<T *>(kc), static_cast<T *>(vc),
                  static_cast<const T *>(ks), static_cast<const T *>(vs));
  }
  return launch(attn_merge_lse_kernel<T>, grid, block, 0, st, static_cast<const T *>(parts), ps, ph, pr, lse, ls, lh,
                lr, pos, static_cast<int>(Tn), S, static_cast<T *>(out), G, static_cast<int>(H),
                static_cast<int>(splits), static_cast<const T *>(own), own_lse, static_cast<T *>(kc),
                static_cast<T *>(vc), static_cast<const T *>(ks), static_cast<const T *>(vs));
}

} // namespace

extern "C" {

int dtk_attn_decode(int dtype, const void *q, const void *kc, const void *vc, void *out, int64_t T, int64_t H,
                    int64_t Hkv, int64_t S, float scale, void *scratch, void *stream) {
  return dtk_attn_decode_pos(dtype, q, kc, vc, out, T, H, Hkv, S, nullptr, 0, scale, scratch, stream);
}

int dtk_attn_decode_pos(int dtype, const void *q, const void *kc, const void *vc, void *out, int64_t T, int64_t H,
                        int64_t Hkv, int64_t S, const int64_t *pos, int64_t causal, float scale, void *scratch,
                        void *stream) {
  auto st = static_cast<cudaStream_t>(stream);
  auto misaligned = [](const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15) != 0; };
  if (T < 1 || Hkv < 1 || H % Hkv != 0 || S < 1 || T * H > 2147483647 || S > 2147483647 || misaligned(q) ||
      misaligned(kc) || misaligned(vc) || misaligned(out) || causal < 0 || causal > T ||
      (attn_splits(T * (H / Hkv), Hkv, S) > 1 && !scratch))
    return cudaErrorInvalidValue;
  if (dtype == kBF16)
    return attn_decode<__nv_bfloat16>(q, kc, vc, out, T, H, Hkv, S, pos, causal, scale, scratch, st);
  if (dtype == kF16) return attn_decode<__half>(q, kc, vc, out, T, H, Hkv, S, pos, causal, scale, scratch, st);
  return cudaErrorInvalidValue;
}

int dtk_attn_merge_lse(int dtype, const void *parts, int64_t ps, int64_t ph, int64_t pr, const float *lse,
                       int64_t ls, int64_t lh, int64_t lr, const int64_t *pos, int64_t S, void *out, int64_t T,
                       int64_t H, int64_t Hkv, int64_t splits, void *stream) {
  return dtk_attn_merge_lse_own(dtype, parts, ps, ph, pr, lse, ls, lh, lr, pos, S, out, T, H, Hkv, splits, nullptr,
                                nullptr, nullptr, nullptr, nullptr, nullptr, stream);
}

int dtk_attn_merge_lse_own(int dtype, const void *parts, int64_t ps, int64_t ph, int64_t pr, const float *lse,
                           int64_t ls, int64_t lh, int64_t lr, const int64_t *pos, int64_t S, void *out, int64_t T,
                           int64_t H, int64_t Hkv, int64_t splits, const void *own, const float *own_lse, void *kc,
                           void *vc, const void *ks, const void *vs, void *stream) {
  auto st = static_cast<cudaStream_t>(stream);
  if (!parts || !lse || !pos || !out || T < 1 || Hkv < 1 || H % Hkv != 0 || splits < 1 || splits > kAD ||
      T * (H / Hkv) > 2147483647 || (own && (!own_lse || !kc || !vc || !ks || !vs)))
    return cudaErrorInvalidValue;
  const int G = static_cast<int>(H / Hkv), R = static_cast<int>(T) * G;
  dim3 grid(static_cast<unsigned>(R), static_cast<unsigned>(Hkv));
  dim3 block(kAD, kMergeWays);
  // The warp form where its 16-byte loads are aligned; see merge_lse.
  const bool warp = aligned16(parts) && ps % 8 == 0 && ph % 8 == 0 && pr % 8 == 0 && (!own || aligned16(own));
  if (dtype == kBF16)
    return merge_lse<__nv_bfloat16>(grid, block, st, parts, ps, ph, pr, lse, ls, lh, lr, pos, T, S, out, G, H, splits,
                                    own, own_lse, kc, vc, ks, vs, warp);
  if (dtype == kF16)
    return merge_lse<__half>(grid, block, st, parts, ps, ph, pr, lse, ls, lh, lr, pos, T, S, out, G, H, splits, own,
                             own_lse, kc, vc, ks, vs, warp);
  return cudaErrorInvalidValue;
}

int dtk_attn_own(int dtype, const void *q, const void *ks, const void *vs, void *out, float *lse, int64_t T,
                 int64_t H, int64_t Hkv, const int64_t *pos, int64_t causal, float scale, void *stream) {
  auto st = static_cast<cudaStream_t>(stream);
  auto misaligned = [](const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15) != 0; };
  if (T < 1 || T > kAKeys || Hkv < 1 || H % Hkv != 0 || !pos || !lse || misaligned(q) || misaligned(ks) ||
      misaligned(vs) || misaligned(out) || causal < 0 || causal > T)
    return cudaErrorInvalidValue;
  if (dtype == kBF16) return attn_own<__nv_bfloat16>(q, ks, vs, out, lse, T, H, Hkv, pos, causal, scale, st);
  if (dtype == kF16) return attn_own<__half>(q, ks, vs, out, lse, T, H, Hkv, pos, causal, scale, st);
  return cudaErrorInvalidValue;
}

int dtk_attn_decode_batch(int dtype, const void *q, const void *kc, const void *vc, void *out, int64_t N, int64_t H,
                          int64_t Hkv, int64_t nb, const int64_t *bd, const int64_t *pos, int64_t max_n,
                          int64_t max_s, float scale, void *scratch, void *stream) {
  auto st = static_cast<cudaStream_t>(stream);
  auto misaligned = [](const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15) != 0; };
  if (N < 1 || nb < 1 || max_n < 1 || max_n > N || Hkv < 1 || H % Hkv != 0 || max_s < 1 || N * H > 2147483647 ||
      max_s > 2147483647 || !bd || !pos || misaligned(q) || misaligned(kc) || misaligned(vc) || misaligned(out))
    return cudaErrorInvalidValue;
  const int64_t splits = attn_splits(max_n * (H / Hkv), Hkv, max_s, nb);
  if (nb * splits > 65535 || (splits > 1 && !scratch)) return cudaErrorInvalidValue;
  if (dtype == kBF16)
    return attn_decode_batch<__nv_bfloat16>(q, kc, vc, out, N, H, Hkv, nb, bd, pos, max_n, max_s, scale, scratch, st);
  if (dtype == kF16)
    return attn_decode_batch<__half>(q, kc, vc, out, N, H, Hkv, nb, bd, pos, max_n, max_s, scale, scratch, st);
  return cudaErrorInvalidValue;
}

int64_t dtk_attn_decode_batch_scratch(int64_t N, int64_t H, int64_t Hkv, int64_t nb, int64_t max_n, int64_t max_s) {
  int64_t G = H / Hkv, splits = attn_splits(max_n * G, Hkv, max_s, nb);
  return splits > 1 ? splits * Hkv * N * G * (kAD + 1) : 0;
}

int64_t dtk_attn_decode_scratch(int64_t T, int64_t H, int64_t Hkv, int64_t S) {
  int64_t R = T * (H / Hkv), splits = attn_splits(R, Hkv, S);
  return splits > 1 ? splits * Hkv * R * (kAD + 1) : 0;
}

void dtk_tune(int pdl, int splits_cap, int ctas_per_sm, int min_tiles) {
  if (pdl >= 0) g_pdl = pdl ? 1 : 0;
  if (splits_cap > 0) g_splits_cap = splits_cap < kAD ? splits_cap : kAD;
  if (ctas_per_sm > 0) g_ctas_per_sm = ctas_per_sm;
  if (min_tiles > 0) g_min_tiles = min_tiles;
}

} // extern "C"
