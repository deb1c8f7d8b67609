// kernels.cu: the decoder's own CUDA kernels for the elementwise and
// row-wise steps of a layer as single kernels (done with libtorch ops they
// are ~30 launches per layer; an HF-exact RMSNorm alone is eight), rounding
// to the model dtype exactly where HF's float ops do: RMSNorm, RoPE,
// SiLU-mul; a one-row GEMV for AR steps; a captured forward's inputs; the
// sampler's greedy pick in one pass over the logits; and the rewrite of a
// CUDA graph's memset nodes. Attention is attention.cu, the Hopper GEMMs
// and the persistent kernel tma.cu; what they share kernels_common.cuh.

#include "kernels_common.cuh"

#include <vector>

namespace {

// One block per row; blockDim.x threads stride over the C columns.
template <typename T>
__global__ void rms_norm_kernel(const T *x, const T *w, T *out, int64_t C, float eps) {
  dep_wait();
  dep_launch();
  const T *xr = x + blockIdx.x * C;
  T *yr = out + blockIdx.x * C;
  float ss = 0;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    float v = f32(xr[i]);
    ss += v * v;
  }
  float r = rsqrtf(block_sum(ss) / static_cast<float>(C) + eps);
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    yr[i] = cast<T>(f32(w[i]) * round<T>(f32(xr[i]) * r));
  }
}

// The same with the row held in registers: each thread loads V 16-byte
// chunks once (C = 2048 in bf16 is one chunk for each of 256 threads), so
// the row crosses the memory system once each way. Measured on an H200 with
// Nsight Compute, the loop above took 8.5 us for 32 rows of 2048, twice a
// layer.
template <typename T, int V>
__global__ void rms_norm_vec_kernel(const T *x, const T *w, T *out, int chunks, float eps) {
  dep_wait();
  dep_launch();
  constexpr int E = 16 / sizeof(T);
  const uint4 *xr = reinterpret_cast<const uint4 *>(x) + int64_t(blockIdx.x) * chunks;
  uint4 *yr = reinterpret_cast<uint4 *>(out) + int64_t(blockIdx.x) * chunks;
  const uint4 *wr = reinterpret_cast<const uint4 *>(w);
  uint4 v[V];
  float ss = 0;
#pragma unroll
  for (int j = 0; j < V; j++) {
    int c = threadIdx.x + j * blockDim.x;
    if (c >= chunks) continue;
    v[j] = xr[c];
    const T *e = reinterpret_cast<const T *>(&v[j]);
#pragma unroll
    for (int i = 0; i < E; i++) ss += f32(e[i]) * f32(e[i]);
  }
  float r = rsqrtf(block_sum(ss) / static_cast<float>(chunks * E) + eps);
#pragma unroll
  for (int j = 0; j < V; j++) {
    int c = threadIdx.x + j * blockDim.x;
    if (c >= chunks) continue;
    uint4 wv = wr[c], y;
    const T *e = reinterpret_cast<const T *>(&v[j]), *we = reinterpret_cast<const T *>(&wv);
    T *ye = reinterpret_cast<T *>(&y);
#pragma unroll
    for (int i = 0; i < E; i++) ye[i] = cast<T>(f32(we[i]) * round<T>(f32(e[i]) * r));
    yr[c] = y;
  }
}

// inv_rms is 1 / sqrt(mean(x^2) + eps) of the row x (C values, a multiple
// of 16 bytes, 16-byte aligned), for every thread of the block; summed in
// float32 as rms_norm_vec_kernel sums. Once per kernel (block_sum).
template <typename T> __device__ inline float inv_rms(const T *x, int C, float eps) {
  constexpr int E = 16 / sizeof(T);
  float ss = 0;
  for (int c = threadIdx.x; c < C / E; c += blockDim.x) {
    uint4 v = reinterpret_cast<const uint4 *>(x)[c];
    const T *e = reinterpret_cast<const T *>(&v);
#pragma unroll
    for (int i = 0; i < E; i++) ss += f32(e[i]) * f32(e[i]);
  }
  return rsqrtf(block_sum(ss) / static_cast<float>(C) + eps);
}

constexpr int kRopeParts = DTK_TMA_POST_QPARTS; // dtk_rope_qkv's parts at most: the persistent kernel's

// Grid (T, heads / hb): each block takes token t and hb consecutive heads
// of the fused output, D / (2E) threads a head (E values in 16 bytes),
// thread j of a head rotating the E pairs (i, i + D/2) from i = j E on, 16
// bytes a load and a store: a batched forward's 1,024 tokens in one wave
// with one read of x's row a token, where a thread a pair and five blocks
// a token (each reading x) took 25 us a layer (H100). NORM: qkv is the
// projection of x itself, not of its RMSNorm (the norm's weight is folded
// into the projection's columns, see dtk_rope_qkv), so each value is first
// scaled by x_t's inverse RMS and rounded, which is what the projection of
// the normalised row gives up to rounding. With ks (and vs): token t's key
// and value go to row t of those (T, Hkv, D) instead, and their cache rows
// are zeroed (the decoder's cuDNN path for a fused commit). With rows,
// token t's key and value go to cache row rows[t] instead of pos[t] (a
// batched forward's sequence slots). Threads past hb heads (blockDim is
// whole warps, for block_sum) and heads past the last only join the sum.
template <typename T, bool NORM>
__global__ void rope_qkv_kernel(const T *qkv, const T *cos, const T *sin, const int64_t *pos, const int64_t *rows,
                                T *q, T *kc, T *vc, int64_t H, int64_t Hkv, int64_t D, const T *x, int C, float eps,
                                bool fold, T *ks, T *vs, const float *parts, int nparts, int hb) {
  constexpr int E = 16 / sizeof(T);
  using V = uint4; // E values of T
  const int64_t t = blockIdx.x, half = D / 2, tph = half / E;
  const int64_t h = int64_t(blockIdx.y) * hb + threadIdx.x / tph, i = threadIdx.x % tph * E;
  const bool spare = threadIdx.x >= hb * tph || h >= H + 2 * Hkv, value = !spare && h >= H + Hkv;
  auto ld = [](const T *p) { return *reinterpret_cast<const V *>(p); };
  auto el = [](const V &v, int e) { return f32(reinterpret_cast<const T *>(&v)[e]); };
  // The positions (written when the forward starts, several kernels back:
  // see attn_decode_kernel) and the tables are read before the wait; x (the
  // input of the projection just before) only after it: a TMA GEMM lets
  // this kernel launch before its own wait, so x's writer, the kernel
  // before that, may still be running (the persistent kernel's last CTAs).
  int64_t p = 0, row = 0;
  V c1 = {}, c2 = {}, s1 = {}, s2 = {};
  if (!spare) {
    p = pos[t];
    row = rows ? rows[t] : p;
    if (!value) {
      const T *c = cos + p * D + i, *s = sin + p * D + i;
      c1 = ld(c), c2 = ld(c + half), s1 = ld(s), s2 = ld(s + half);
    }
  }
  dep_wait();
  dep_launch();
  // The projection's values this thread takes, loaded before x's sum of
  // squares so that the loads overlap. From parts: their sum in order,
  // rounded, as the split-K GEMM's cluster sums them.
  float v1[E] = {}, v2[E] = {};
  if (!spare) {
    if (parts) {
      const int64_t N = (H + 2 * Hkv) * D, T_ = gridDim.x;
      const float *p0 = parts + t * N + h * D + i;
#pragma unroll
      for (int k = 0; k < kRopeParts; k++)
        if (k < nparts)
#pragma unroll
          for (int f = 0; f < E / 4; f++) {
            const float4 b1 = __ldcg(reinterpret_cast<const float4 *>(p0 + k * T_ * N) + f),
                         b2 = __ldcg(reinterpret_cast<const float4 *>(p0 + k * T_ * N + half) + f);
            v1[4 * f] += b1.x, v1[4 * f + 1] += b1.y, v1[4 * f + 2] += b1.z, v1[4 * f + 3] += b1.w;
            v2[4 * f] += b2.x, v2[4 * f + 1] += b2.y, v2[4 * f + 2] += b2.z, v2[4 * f + 3] += b2.w;
          }
#pragma unroll
      for (int e = 0; e < E; e++) v1[e] = round<T>(v1[e]), v2[e] = round<T>(v2[e]);
    } else {
      const T *src = qkv + (t * (H + 2 * Hkv) + h) * D + i;
      V w1 = ld(src), w2 = ld(src + half);
#pragma unroll
      for (int e = 0; e < E; e++) v1[e] = el(w1, e), v2[e] = el(w2, e);
    }
  }
  const float r = NORM ? inv_rms(x + t * C, C, eps) : 1.0f; // every thread: block_sum's barriers
  if (spare) return;
  if (NORM) {
#pragma unroll
    for (int e = 0; e < E; e++) v1[e] = round<T>(v1[e] * r), v2[e] = round<T>(v2[e] * r);
  }
  // A key or value head's cache row, and where the head goes.
  const int64_t kv = value ? h - H - Hkv : h - H;
  T *cache = h < H ? nullptr : (value ? vc : kc) + (row * Hkv + kv) * D + i;
  T *side = h < H ? nullptr : value ? vs : ks;
  V o1, o2;
  T *e1 = reinterpret_cast<T *>(&o1), *e2 = reinterpret_cast<T *>(&o2);
  if (value) { // copied as is
#pragma unroll
    for (int e = 0; e < E; e++) e1[e] = cast<T>(v1[e]), e2[e] = cast<T>(v2[e]);
  } else {
    // x*cos + rotate_half(x)*sin with x = (v1, v2), rotate_half(x) = (-v2, v1).
#pragma unroll
    for (int e = 0; e < E; e++) {
      e1[e] = cast<T>(round<T>(v1[e] * el(c1, e)) + round<T>(-v2[e] * el(s1, e)));
      e2[e] = cast<T>(round<T>(v2[e] * el(c2, e)) + round<T>(v1[e] * el(s2, e)));
    }
  }
  // Folded: key head h / G's row t G + h % G, as the cuDNN path reads q.
  const int64_t G = H / Hkv, qrow = fold ? (h / G * gridDim.x + t) * G + h % G : t * H + h;
  T *dst = h < H ? q + qrow * D + i : side ? side + (t * Hkv + kv) * D + i : cache;
  *reinterpret_cast<V *>(dst) = o1;
  *reinterpret_cast<V *>(dst + half) = o2;
  if (side) *reinterpret_cast<V *>(cache) = *reinterpret_cast<V *>(cache + half) = V{};
}

// silu_mul_vec_kernel is silu_mul_kernel 16 bytes at a time (F % 8 == 0).
template <typename T> __global__ void silu_mul_vec_kernel(const T *gu, T *out, int64_t T_, int64_t F) {
  dep_wait();
  dep_launch();
  constexpr int E = 16 / sizeof(T);
  int64_t fc = F / E, n = T_ * fc;
  const uint4 *g4 = reinterpret_cast<const uint4 *>(gu);
  uint4 *o4 = reinterpret_cast<uint4 *>(out);
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x) {
    int64_t t = k / fc, j = k % fc;
    uint4 gv = g4[t * 2 * fc + j], uv = g4[t * 2 * fc + fc + j], y;
    const T *ge = reinterpret_cast<const T *>(&gv), *ue = reinterpret_cast<const T *>(&uv);
    T *ye = reinterpret_cast<T *>(&y);
#pragma unroll
    for (int i = 0; i < E; i++) {
      float g = f32(ge[i]);
      ye[i] = cast<T>(round<T>(g / (1.0f + __expf(-g))) * f32(ue[i]));
    }
    o4[k] = y;
  }
}

template <typename T> __global__ void silu_mul_kernel(const T *gu, T *out, int64_t T_, int64_t F) {
  dep_wait();
  dep_launch();
  int64_t n = T_ * F;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x) {
    int64_t t = k / F, j = k % F;
    float g = f32(gu[t * 2 * F + j]), u = f32(gu[t * 2 * F + F + j]);
    out[k] = cast<T>(round<T>(g / (1.0f + __expf(-g))) * u);
  }
}

// silu_mul_kernel with the RMSNorm folded away as in rope_qkv_kernel: gu is
// the projection of x itself, so gate and up are first scaled by x_t's
// inverse RMS and rounded. Grid (T, chunks of a row / blockDim), 16 bytes
// a thread.
template <typename T>
__global__ void silu_mul_norm_kernel(const T *gu, T *out, int64_t F, const T *x, int C, float eps) {
  constexpr int E = 16 / sizeof(T);
  const int64_t t = blockIdx.x, fc = F / E, j = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  dep_wait();
  dep_launch();
  // Gate and up are loaded before x's sum of squares, so that the loads
  // overlap (x after the wait, as in rope_qkv_kernel).
  const uint4 *g4 = reinterpret_cast<const uint4 *>(gu) + t * 2 * fc;
  uint4 gv = {}, uv = {}, y;
  if (j < fc) gv = g4[j], uv = g4[fc + j];
  const float r = inv_rms(x + t * C, C, eps);
  if (j >= fc) return;
  const T *ge = reinterpret_cast<const T *>(&gv), *ue = reinterpret_cast<const T *>(&uv);
  T *ye = reinterpret_cast<T *>(&y);
#pragma unroll
  for (int i = 0; i < E; i++) {
    float g = round<T>(f32(ge[i]) * r), u = round<T>(f32(ue[i]) * r);
    ye[i] = cast<T>(round<T>(g / (1.0f + __expf(-g))) * u);
  }
  reinterpret_cast<uint4 *>(out)[t * fc + j] = y;
}

// The one-row GEMV's input, staged in shared memory: x as it is; x through
// RMSNorm (weight aux, eps; rounding as rms_norm_vec_kernel); or x = (gate,
// up), 2K values, through SiLU(gate) * up (as silu_mul_vec_kernel). The
// last two fold an AR step's small kernels into the matmul after them
// (DTK_GEMV_PLAIN, DTK_GEMV_NORM, DTK_GEMV_SILU_MUL in kernels.h).

// One warp per weight row n: each lane streams 8 elements (16 bytes) of the
// row at a time, unrolled so that several loads are in flight, and dots
// them with the same 8 elements of x, which the block first stages in
// shared memory; a warp sum, then lane 0 writes out[n]. With KC = K / 256
// known at compile time the lane's whole share of the row is loaded into
// registers before dep_wait: the weights do not depend on the kernel
// before, so their first loads overlap its end.
template <typename T, int IN, int KC>
__global__ void __launch_bounds__(256)
    gemv_kernel(const T *__restrict__ x, const T *__restrict__ w, const T *resid, T *out, int64_t N, int64_t K,
                const T *__restrict__ aux, float eps) { // resid may be out (an add in place), read before the wait
  constexpr int E = 8;
  extern __shared__ uint4 xs[]; // K / 8 chunks of the input
  const int64_t chunks = K / E, n = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const uint4 *wr = reinterpret_cast<const uint4 *>(w + (n < N ? n : 0) * K);
  uint4 wv[KC > 0 ? KC : 1];
#pragma unroll
  for (int i = 0; i < KC; i++) wv[i] = __ldg(wr + lane + 32 * i);
  // The norm's weights too (this thread's chunks of them, KC / 8 with the
  // block's 256 threads): read after the norm's block sum they were a
  // second trip to L2 on the chain.
  constexpr int AC = IN == DTK_GEMV_NORM && KC > 0 ? (KC + 7) / 8 : 1;
  uint4 av[AC];
  if (IN == DTK_GEMV_NORM && KC > 0) {
#pragma unroll
    for (int i = 0; i < AC; i++)
      if (threadIdx.x + i * blockDim.x < chunks)
        av[i] = __ldg(reinterpret_cast<const uint4 *>(aux) + threadIdx.x + i * blockDim.x);
  }
  // And the row's residual (lane 0's): the decoder's is the residual
  // stream, last written two kernels back at the latest (an AR layer's
  // output GEMV, before gate-up, before down), which is done once the
  // kernel before has passed its own wait; through L2 (__ldcg), as an
  // L1 line of it could predate that write. So resid must not be what
  // the kernel just before writes.
  const float rv = resid && lane == 0 && n < N ? f32(__ldcg(resid + n)) : 0.0f;
  dep_wait();
  dep_launch();

  // 1. Stage the input.
  const uint4 *xg = reinterpret_cast<const uint4 *>(x);
  float ss = 0;
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
    uint4 v = xg[c], y;
    const T *e = reinterpret_cast<const T *>(&v);
    if (IN == DTK_GEMV_SILU_MUL) {
      uint4 uv = xg[chunks + c];
      const T *ue = reinterpret_cast<const T *>(&uv);
      T *ye = reinterpret_cast<T *>(&y);
#pragma unroll
      for (int i = 0; i < E; i++) {
        float g = f32(e[i]);
        ye[i] = cast<T>(round<T>(g / (1.0f + __expf(-g))) * f32(ue[i]));
      }
      v = y;
    } else if (IN == DTK_GEMV_NORM) {
#pragma unroll
      for (int i = 0; i < E; i++) ss += f32(e[i]) * f32(e[i]);
    }
    xs[c] = v;
  }
  if (IN == DTK_GEMV_NORM) {
    float r = rsqrtf(block_sum(ss) / static_cast<float>(K) + eps); // block_sum synchronises
    auto scale = [&](int64_t c, uint4 a) { // each thread its own chunks again
      uint4 v = xs[c], y;
      const T *e = reinterpret_cast<const T *>(&v), *ae = reinterpret_cast<const T *>(&a);
      T *ye = reinterpret_cast<T *>(&y);
#pragma unroll
      for (int i = 0; i < E; i++) ye[i] = cast<T>(f32(ae[i]) * round<T>(f32(e[i]) * r));
      xs[c] = y;
    };
    if (KC > 0) {
#pragma unroll
      for (int i = 0; i < AC; i++)
        if (threadIdx.x + i * blockDim.x < chunks) scale(threadIdx.x + i * blockDim.x, av[i]);
    } else {
      for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) scale(c, reinterpret_cast<const uint4 *>(aux)[c]);
    }
  }
  __syncthreads();
  if (n >= N) return;

  // 2. The row's dot product, in the same order either way.
  float acc = 0;
  auto dot = [&](uint4 a, uint4 b) {
    const T *ae = reinterpret_cast<const T *>(&a), *be = reinterpret_cast<const T *>(&b);
#pragma unroll
    for (int e = 0; e < E; e++) acc += f32(ae[e]) * f32(be[e]);
  };
  if (KC > 0) {
#pragma unroll
    for (int i = 0; i < KC; i++) dot(wv[i], xs[lane + 32 * i]);
  } else {
#pragma unroll 8
    for (int64_t c = lane; c < chunks; c += 32) dot(__ldg(wr + c), xs[c]);
  }
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffff, acc, o);
  if (lane == 0) out[n] = cast<T>(acc + rv);
}

template <typename T, int IN>
int gemv(const void *x, const void *aux, float eps, const void *w, const void *resid, void *out, int64_t N, int64_t K,
         cudaStream_t s) {
  constexpr int warps = 8;
  auto grid = static_cast<unsigned>((N + warps - 1) / warps);
  size_t smem = static_cast<size_t>(K) * sizeof(T);
  auto go = [&](auto kernel) {
    return launch(kernel, grid, warps * 32, smem, s, static_cast<const T *>(x), static_cast<const T *>(w),
                  static_cast<const T *>(resid), static_cast<T *>(out), N, K, static_cast<const T *>(aux), eps);
  };
  // MiniCPM5-2B's K: 2048 (hidden) and 6144 (MLP).
  if (K == 2048) return go(gemv_kernel<T, IN, 8>);
  if (K == 4096) return go(gemv_kernel<T, IN, 16>);
  if (K == 6144) return go(gemv_kernel<T, IN, 24>);
  return go(gemv_kernel<T, IN, 0>);
}

template <typename T, int V> int rms_norm_vec(const void *x, const void *w, void *out, int64_t rows, int chunks,
                                              float eps, cudaStream_t s) {
  int threads = (chunks + V - 1) / V;
  threads = (threads + 31) / 32 * 32;
  return launch(rms_norm_vec_kernel<T, V>, dim3(static_cast<unsigned>(rows)), threads, 0, s,
                static_cast<const T *>(x), static_cast<const T *>(w), static_cast<T *>(out), chunks, eps);
}

template <typename T> int rms_norm(const void *x, const void *w, void *out, int64_t rows, int64_t C, float eps,
                                   cudaStream_t s) {
  constexpr int E = 16 / sizeof(T);
  auto aligned = [](const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  if (C % E == 0 && aligned(x) && aligned(w) && aligned(out)) {
    int64_t chunks = C / E;
    if (chunks <= 1024) return rms_norm_vec<T, 1>(x, w, out, rows, static_cast<int>(chunks), eps, s);
    if (chunks <= 2048) return rms_norm_vec<T, 2>(x, w, out, rows, static_cast<int>(chunks), eps, s);
    if (chunks <= 4096) return rms_norm_vec<T, 4>(x, w, out, rows, static_cast<int>(chunks), eps, s);
  }
  return launch(rms_norm_kernel<T>, dim3(static_cast<unsigned>(rows)), 256, 0, s, static_cast<const T *>(x),
                static_cast<const T *>(w), static_cast<T *>(out), C, eps);
}

template <typename T>
int rope_qkv(const void *qkv, const void *cos, const void *sin, const int64_t *pos, const int64_t *rows, void *q,
             void *kc, void *vc, int64_t Tn, int64_t H, int64_t Hkv, int64_t D, const void *x, int64_t C, float eps, bool fold, void *ks,
             void *vs, const float *parts, int nparts, cudaStream_t s) {
  // All heads of a token in one block where they fit 1,024 threads.
  constexpr int E = 16 / sizeof(T);
  const int64_t tph = D / 2 / E, heads = H + 2 * Hkv, hb = heads * tph <= 1024 ? heads : 1024 / tph;
  const dim3 grid(static_cast<unsigned>(Tn), static_cast<unsigned>((heads + hb - 1) / hb));
  const unsigned threads = static_cast<unsigned>((hb * tph + 31) / 32 * 32);
  auto kernel = x ? rope_qkv_kernel<T, true> : rope_qkv_kernel<T, false>;
  return launch(kernel, grid, threads, 0, s, static_cast<const T *>(qkv), static_cast<const T *>(cos),
                static_cast<const T *>(sin), pos, rows, static_cast<T *>(q), static_cast<T *>(kc),
                static_cast<T *>(vc), H, Hkv, D, static_cast<const T *>(x), static_cast<int>(C), eps, fold,
                static_cast<T *>(ks), static_cast<T *>(vs), parts, nparts, static_cast<int>(hb));
}

template <typename T>
int silu_mul(const void *gu, void *out, int64_t Tn, int64_t F, const void *x, int64_t C, float eps, cudaStream_t s) {
  constexpr int E = 16 / sizeof(T);
  auto aligned = [](const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  if (x) {
    int64_t fc = F / E;
    dim3 grid(Tn, (fc + 255) / 256);
    return launch(silu_mul_norm_kernel<T>, grid, 256, 0, s, static_cast<const T *>(gu), static_cast<T *>(out), F,
                  static_cast<const T *>(x), static_cast<int>(C), eps);
  }
  if (F % E == 0 && aligned(gu) && aligned(out)) {
    int64_t n = Tn * F / E;
    int blocks = static_cast<int>((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
    return launch(silu_mul_vec_kernel<T>, blocks, 256, 0, s, static_cast<const T *>(gu), static_cast<T *>(out), Tn,
                  F);
  }
  int64_t n = Tn * F;
  int blocks = static_cast<int>((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
  return launch(silu_mul_kernel<T>, blocks, 256, 0, s, static_cast<const T *>(gu), static_cast<T *>(out), Tn, F);
}

// --- a captured forward's inputs ----------------------------------------------

struct IdArgs {
  int64_t v[DTK_SET_IDS_MAX];
};

__global__ void set_ids_kernel(int64_t *ids, int64_t *pos, IdArgs in, int n, int64_t p0) {
  dep_wait();
  dep_launch();
  int t = threadIdx.x;
  if (t < n) ids[t] = in.v[t], pos[t] = p0 + t;
}

// commit_top_kernel is the host's canvas.commitTop for the next step of a
// fixed-commit block on the device: of the n ids of from, those equal to
// mask (still masked) take the ids picked for them (picks (2n) float64:
// probabilities, then ids) where they are among the k most probable
// (position 0 first with shift; the first on a tie); the canvas goes to
// to (from itself allowed) and pos gets p0, p0 + 1, ... A block of 64.
__global__ void commit_top_kernel(const int64_t *from, int64_t *to, int64_t *pos, const double *picks, int n,
                                  int64_t mask, int k, bool shift, int64_t p0) {
  __shared__ int64_t cur[DTK_SET_IDS_MAX];
  __shared__ double rank[DTK_SET_IDS_MAX];
  const int i = threadIdx.x;
  dep_wait();
  dep_launch();
  if (i < n) cur[i] = from[i], rank[i] = shift && i == 0 ? INFINITY : picks[i];
  __syncthreads();
  if (i >= n) return;
  int64_t v = cur[i];
  if (v == mask) {
    int above = 0;
    for (int j = 0; j < n; j++) above += cur[j] == mask && (rank[j] > rank[i] || (rank[j] == rank[i] && j < i));
    if (above < k) v = static_cast<int64_t>(picks[n + i]);
  }
  to[i] = v, pos[i] = p0 + i;
}

// --- greedy pick -------------------------------------------------------------
//
// The sampler's greedy step needs, per row of logits, the argmax and its
// softmax probability. As libtorch ops that is a float32 copy of the
// logits, argmax, max and a log-sum-exp (five reductions over 32 x 130k
// values: ~190 us a forward on an H200, Nsight Compute). Here each row is
// cut into slices, one block each (a block per row leaves most SMs idle
// and was 35 us): the block's max and first argmax, then its sum of
// exp(x - max) in a second pass over the same (now cached) slice; a second
// kernel merges a row's slices in order, so the result does not depend on
// scheduling.

constexpr int kPickThreads = 256, kPickSlice = 16384; // columns per block at most

// Part is one slice's (max, sum of exp(x - max), first index of the max).
struct Part {
  float m, s;
  long long a;
};

// block_max reduces (m, a) over the block: the largest m, the first a of it.
__device__ inline void block_max(float &m, long long &a) {
  __shared__ float sm[32];
  __shared__ long long sa[32];
  for (int o = 16; o > 0; o >>= 1) {
    float m2 = __shfl_xor_sync(0xffffffff, m, o);
    long long a2 = __shfl_xor_sync(0xffffffff, a, o);
    if (m2 > m || (m2 == m && a2 >= 0 && (a < 0 || a2 < a))) m = m2, a = a2;
  }
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) sm[warp] = m, sa[warp] = a;
  __syncthreads();
  m = -INFINITY, a = -1;
  for (int w = 0; w < blockDim.x / 32; w++)
    if (sm[w] > m || (sm[w] == m && sa[w] >= 0 && (a < 0 || sa[w] < a))) m = sm[w], a = sa[w];
  __syncthreads();
}

// Grid (n rows, slices of slice columns); -inf and the mask column count as
// absent. Threads take whole 16-byte chunks when vec (then slice % E == 0).
// Given first, row 0 is first and row r > 0 is logits' row r - 1.
template <typename T>
__global__ void pick_part_kernel(const T *first, const T *logits, int64_t V, int64_t slice, int64_t mask, bool vec,
                                 Part *parts) {
  dep_wait();
  dep_launch();
  constexpr int E = 16 / sizeof(T);
  const T *row = !first ? logits + blockIdx.x * V : blockIdx.x == 0 ? first : logits + (blockIdx.x - 1) * V;
  int64_t j0 = blockIdx.y * slice, j1 = j0 + slice < V ? j0 + slice : V;
  auto each = [&](auto f) {
    if (vec) {
      for (int64_t c = j0 / E + threadIdx.x; c < j1 / E; c += blockDim.x) {
        uint4 v = reinterpret_cast<const uint4 *>(row)[c];
        const T *e = reinterpret_cast<const T *>(&v);
#pragma unroll
        for (int i = 0; i < E; i++) f(f32(e[i]), c * E + i);
      }
    } else {
      for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) f(f32(row[j]), j);
    }
  };
  float m = -INFINITY;
  long long a = -1;
  each([&](float x, int64_t j) {
    if (x > m && j != mask) m = x, a = j; // increasing j per thread: the first of equals stays
  });
  block_max(m, a);
  float s = 0;
  if (a >= 0) {
    each([&](float x, int64_t j) {
      if (j != mask) s += __expf(x - m); // exp(-inf) = 0
    });
  }
  s = block_sum(s);
  if (threadIdx.x == 0) parts[int64_t(blockIdx.x) * gridDim.y + blockIdx.y] = Part{m, s, a};
}

// One thread per row merges its slices in order: p = 1 / sum exp(x - max).
__global__ void pick_merge_kernel(const Part *parts, int64_t n, int slices, double *out) {
  dep_wait();
  dep_launch();
  int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= n) return;
  float m = -INFINITY, s = 0;
  long long a = -1;
  for (int k = 0; k < slices; k++) {
    Part p = parts[r * slices + k];
    if (p.a < 0) continue;
    if (a < 0) {
      m = p.m, s = p.s, a = p.a;
    } else if (p.m > m) {
      s = s * __expf(m - p.m) + p.s, m = p.m, a = p.a;
    } else {
      s += p.s * __expf(p.m - m); // equal maxima: the earlier slice's index stays
    }
  }
  out[r] = a < 0 ? 0.0 : 1.0 / s;
  out[n + r] = static_cast<double>(a);
}

int64_t pick_slices(int64_t V) { return (V + kPickSlice - 1) / kPickSlice; }

template <typename T>
int pick_greedy(const void *first, const void *logits, int64_t n, int64_t V, int64_t mask, double *out, void *scratch,
                cudaStream_t s) {
  constexpr int E = 16 / sizeof(T);
  int64_t slices = pick_slices(V), slice = (V + slices - 1) / slices;
  bool vec = ((reinterpret_cast<uintptr_t>(logits) | reinterpret_cast<uintptr_t>(first)) & 15) == 0 && V % E == 0;
  if (vec) slice = (slice + E - 1) / E * E;
  auto *parts = static_cast<Part *>(scratch);
  cudaError_t e = launch(pick_part_kernel<T>, dim3(static_cast<unsigned>(n), static_cast<unsigned>(slices)),
                         kPickThreads, 0, s, static_cast<const T *>(first), static_cast<const T *>(logits), V, slice,
                         mask, vec, parts);
  if (e != cudaSuccess) return e;
  return launch(pick_merge_kernel, static_cast<unsigned>((n + 127) / 128), 128, 0, s, parts, n,
                static_cast<int>(slices), out);
}

// fill_kernel is a memset node's work (dtk_graph_fill_memsets): height
// rows of row_bytes bytes, pitch bytes apart, each 4-byte period of a row
// the bytes of word; 16 bytes a store where vec says dst, pitch and
// row_bytes allow it.
__global__ void fill_kernel(char *dst, size_t pitch, size_t row_bytes, size_t height, unsigned word, int vec) {
  size_t unit = vec ? 16 : 1, per_row = row_bytes / unit, n = per_row * height;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    size_t row = i / per_row, col = (i % per_row) * unit;
    char *p = dst + row * pitch + col;
    if (vec)
      *reinterpret_cast<uint4 *>(p) = make_uint4(word, word, word, word);
    else
      *p = static_cast<char>(word >> (8 * (col % 4)));
  }
}

// graph_neighbours is node's dependencies (in) or dependent nodes.
cudaError_t graph_neighbours(cudaGraphNode_t node, bool in, std::vector<cudaGraphNode_t> &out) {
  size_t n = 0;
#if CUDART_VERSION >= 13000
  cudaError_t e = in ? cudaGraphNodeGetDependencies(node, nullptr, nullptr, &n)
                     : cudaGraphNodeGetDependentNodes(node, nullptr, nullptr, &n);
  if (e != cudaSuccess) return e;
  out.resize(n);
  std::vector<cudaGraphEdgeData> data(n);
  return in ? cudaGraphNodeGetDependencies(node, out.data(), data.data(), &n)
            : cudaGraphNodeGetDependentNodes(node, out.data(), data.data(), &n);
#else
  cudaError_t e = in ? cudaGraphNodeGetDependencies(node, nullptr, &n) : cudaGraphNodeGetDependentNodes(node, nullptr, &n);
  if (e != cudaSuccess) return e;
  out.resize(n);
  return in ? cudaGraphNodeGetDependencies(node, out.data(), &n) : cudaGraphNodeGetDependentNodes(node, out.data(), &n);
#endif
}

} // namespace

extern "C" {


int dtk_rms_norm(int dtype, const void *x, const void *w, void *out, int64_t rows, int64_t C, float eps,
                 void *stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (dtype == kBF16) return rms_norm<__nv_bfloat16>(x, w, out, rows, C, eps, s);
  if (dtype == kF16) return rms_norm<__half>(x, w, out, rows, C, eps, s);
  return cudaErrorInvalidValue;
}

// x_ok: x (rows of C values) can be read 16 bytes at a time, as inv_rms does.
static bool x_ok(const void *x, int64_t C, int dtype) {
  int64_t E = dtype == kF32 ? 4 : 8;
  return (reinterpret_cast<uintptr_t>(x) & 15) == 0 && C > 0 && C % E == 0 && C <= 2147483647;
}

int dtk_rope_qkv(int dtype, const void *qkv, const void *cos, const void *sin, const int64_t *pos,
                 const int64_t *rows, void *q, void *kcache, void *vcache, int64_t T, int64_t H, int64_t Hkv, int64_t D, const void *x, int64_t C,
                 float eps, int fold_q, void *kside, void *vside, const float *parts, int nparts, void *stream) {
  auto s = static_cast<cudaStream_t>(stream);
  auto misaligned = [](const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15) != 0; };
  if (D % 16 != 0 || D > 16384 || (x && !x_ok(x, C, dtype)) || Hkv < 1 || H % Hkv != 0 || !kside != !vside ||
      (parts && (nparts < 1 || nparts > kRopeParts)) || (!parts && !qkv) || misaligned(qkv) || misaligned(cos) ||
      misaligned(sin) || misaligned(q) || misaligned(kcache) || misaligned(vcache) || misaligned(kside) ||
      misaligned(vside) || misaligned(parts))
    return cudaErrorInvalidValue;
  if (dtype == kBF16)
    return rope_qkv<__nv_bfloat16>(qkv, cos, sin, pos, rows, q, kcache, vcache, T, H, Hkv, D, x, C, eps, fold_q != 0,
                                   kside, vside, parts, nparts, s);
  if (dtype == kF16)
    return rope_qkv<__half>(qkv, cos, sin, pos, rows, q, kcache, vcache, T, H, Hkv, D, x, C, eps, fold_q != 0, kside,
                            vside, parts, nparts, s);
  return cudaErrorInvalidValue;
}

int dtk_silu_mul(int dtype, const void *gu, void *out, int64_t T, int64_t F, const void *x, int64_t C, float eps,
                 void *stream) {
  auto s = static_cast<cudaStream_t>(stream);
  auto aligned = [](const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  if (x && (!x_ok(x, C, dtype) || F % 8 != 0 || !aligned(gu) || !aligned(out))) return cudaErrorInvalidValue;
  if (dtype == kBF16) return silu_mul<__nv_bfloat16>(gu, out, T, F, x, C, eps, s);
  if (dtype == kF16) return silu_mul<__half>(gu, out, T, F, x, C, eps, s);
  return cudaErrorInvalidValue;
}

int dtk_gemv(int dtype, const void *x, const void *w, const void *resid, void *out, int64_t N, int64_t K,
             void *stream) {
  return dtk_gemv_in(dtype, DTK_GEMV_PLAIN, x, nullptr, 0.0f, w, resid, out, N, K, stream);
}

int dtk_gemv_in(int dtype, int in, const void *x, const void *aux, float eps, const void *w, const void *resid,
                void *out, int64_t N, int64_t K, void *stream) {
  auto s = static_cast<cudaStream_t>(stream);
  auto misaligned = [](const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15) != 0; };
  if (K % 8 != 0 || K > DTK_GEMV_MAX_K || misaligned(x) || misaligned(w) || in < DTK_GEMV_PLAIN ||
      in > DTK_GEMV_SILU_MUL || (in == DTK_GEMV_NORM && (!aux || misaligned(aux))))
    return cudaErrorInvalidValue;
  if (dtype == kBF16) {
    if (in == DTK_GEMV_NORM) return gemv<__nv_bfloat16, DTK_GEMV_NORM>(x, aux, eps, w, resid, out, N, K, s);
    if (in == DTK_GEMV_SILU_MUL) return gemv<__nv_bfloat16, DTK_GEMV_SILU_MUL>(x, aux, eps, w, resid, out, N, K, s);
    return gemv<__nv_bfloat16, DTK_GEMV_PLAIN>(x, aux, eps, w, resid, out, N, K, s);
  }
  if (dtype == kF16) {
    if (in == DTK_GEMV_NORM) return gemv<__half, DTK_GEMV_NORM>(x, aux, eps, w, resid, out, N, K, s);
    if (in == DTK_GEMV_SILU_MUL) return gemv<__half, DTK_GEMV_SILU_MUL>(x, aux, eps, w, resid, out, N, K, s);
    return gemv<__half, DTK_GEMV_PLAIN>(x, aux, eps, w, resid, out, N, K, s);
  }
  return cudaErrorInvalidValue;
}

int dtk_commit_top(const int64_t *from, int64_t *to, int64_t *pos, const double *picks, int64_t n, int64_t mask,
                   int64_t k, int shift, int64_t p0, void *stream) {
  if (n < 1 || n > DTK_SET_IDS_MAX || k < 1) return cudaErrorInvalidValue;
  return launch(commit_top_kernel, 1, DTK_SET_IDS_MAX, 0, static_cast<cudaStream_t>(stream), from, to, pos, picks,
                static_cast<int>(n), mask, static_cast<int>(std::min<int64_t>(k, n)), shift != 0, p0);
}


int dtk_set_ids(int64_t *ids, int64_t *pos, const int64_t *host_ids, int64_t n, int64_t p0, void *stream) {
  if (n < 1 || n > DTK_SET_IDS_MAX || !host_ids) return cudaErrorInvalidValue;
  IdArgs a = {};
  for (int64_t t = 0; t < n; t++) a.v[t] = host_ids[t];
  return launch(set_ids_kernel, 1, DTK_SET_IDS_MAX, 0, static_cast<cudaStream_t>(stream), ids, pos, a,
                static_cast<int>(n), p0);
}

int dtk_pick_greedy(int dtype, const void *first, const void *logits, int64_t n, int64_t V, int64_t mask, double *out,
                    void *scratch, void *stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (n < 1 || n > 2147483647 || V < 1 || pick_slices(V) > 65535 || scratch == nullptr) return cudaErrorInvalidValue;
  if (dtype == kBF16) return pick_greedy<__nv_bfloat16>(first, logits, n, V, mask, out, scratch, s);
  if (dtype == kF16) return pick_greedy<__half>(first, logits, n, V, mask, out, scratch, s);
  if (dtype == kF32) return pick_greedy<float>(first, logits, n, V, mask, out, scratch, s);
  return cudaErrorInvalidValue;
}

int64_t dtk_pick_greedy_scratch(int64_t n, int64_t V) { return n * pick_slices(V) * static_cast<int64_t>(sizeof(Part)); }

// is_rope says whether f is one of rope_qkv_kernel's instances.
static bool is_rope(const void *f) {
  for (const void *r : {reinterpret_cast<const void *>(rope_qkv_kernel<__nv_bfloat16, false>),
                        reinterpret_cast<const void *>(rope_qkv_kernel<__nv_bfloat16, true>),
                        reinterpret_cast<const void *>(rope_qkv_kernel<__half, false>),
                        reinterpret_cast<const void *>(rope_qkv_kernel<__half, true>)})
    if (f == r) return true;
  return false;
}

int dtk_graph_fill_memsets(void *graph, int *replaced) {
  auto g = static_cast<cudaGraph_t>(graph);
  *replaced = 0;
  size_t n = 0;
  cudaError_t e = cudaGraphGetNodes(g, nullptr, &n);
  if (e != cudaSuccess) return e;
  std::vector<cudaGraphNode_t> nodes(n);
  if ((e = cudaGraphGetNodes(g, nodes.data(), &n)) != cudaSuccess) return e;
  for (auto node : nodes) {
    cudaGraphNodeType t;
    if ((e = cudaGraphNodeGetType(node, &t)) != cudaSuccess) return e;
    if (t != cudaGraphNodeTypeMemset) continue;
    cudaMemsetParams p;
    std::vector<cudaGraphNode_t> in, out;
    if ((e = cudaGraphMemsetNodeGetParams(node, &p)) != cudaSuccess || (e = graph_neighbours(node, true, in)) ||
        (e = graph_neighbours(node, false, out)))
      return e;
    // 1. The kernel's arguments: the value's bytes repeated over 4.
    unsigned v = p.value, word = p.elementSize == 1 ? (v & 0xff) * 0x01010101u
                                 : p.elementSize == 2 ? (v & 0xffff) * 0x00010001u
                                                      : v;
    char *dst = static_cast<char *>(p.dst);
    size_t row_bytes = p.width * p.elementSize, height = p.height ? p.height : 1;
    size_t pitch = height > 1 ? p.pitch : row_bytes;
    int vec = (reinterpret_cast<uintptr_t>(dst) | pitch | row_bytes) % 16 == 0;
    size_t units = row_bytes / (vec ? 16 : 1) * height;
    // 2. A kernel node on the memset's incoming edges (lifted: on theirs,
    //    and those nodes then precede the memset's dependents directly),
    //    then its outgoing edges, then the memset goes (default edges: the
    //    kernel reads nothing, so nothing may start it early).
    std::vector<cudaGraphNode_t> from;
    bool up = true; // lifted only after RoPE, the case the decoder knows safe
    for (auto i : in) {
      cudaKernelNodeParams rp = {};
      cudaGraphNodeType it;
      if (cudaGraphNodeGetType(i, &it) != cudaSuccess || it != cudaGraphNodeTypeKernel ||
          cudaGraphKernelNodeGetParams(i, &rp) != cudaSuccess || !is_rope(rp.func))
        up = false;
    }
    for (auto i : in) {
      std::vector<cudaGraphNode_t> src{i};
      if (up && (e = graph_neighbours(i, true, src)) != cudaSuccess) return e;
      for (auto u : src)
        if (std::find(from.begin(), from.end(), u) == from.end()) from.push_back(u);
    }
    void *args[] = {&dst, &pitch, &row_bytes, &height, &word, &vec};
    cudaKernelNodeParams kp = {};
    kp.func = reinterpret_cast<void *>(fill_kernel);
    kp.blockDim = dim3(256);
    kp.gridDim = dim3(static_cast<unsigned>(std::min<size_t>((units + 255) / 256, 1024)));
    kp.kernelParams = args;
    cudaGraphNode_t k;
    if ((e = cudaGraphAddKernelNode(&k, g, from.data(), from.size(), &kp)) != cudaSuccess) return e;
    for (auto o : out) {
      for (auto i : up ? in : std::vector<cudaGraphNode_t>{}) {
#if CUDART_VERSION >= 13000
        e = cudaGraphAddDependencies(g, &i, &o, nullptr, 1);
#else
        e = cudaGraphAddDependencies(g, &i, &o, 1);
#endif
        if (e != cudaSuccess) return e;
      }
#if CUDART_VERSION >= 13000
      e = cudaGraphAddDependencies(g, &k, &o, nullptr, 1);
#else
      e = cudaGraphAddDependencies(g, &k, &o, 1);
#endif
      if (e != cudaSuccess) return e;
    }
    if ((e = cudaGraphDestroyNode(node)) != cudaSuccess) return e;
    ++*replaced;
  }
  return cudaSuccess;
}

} // extern "C"
