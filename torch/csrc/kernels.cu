// kernels.cu: the decoder's own CUDA kernels. The elementwise and row-wise
// steps of a layer as single kernels (done with libtorch ops they are ~30
// launches per layer; an HF-exact RMSNorm alone is eight), rounding to the
// model dtype exactly where HF's float ops do; a one-row GEMV for AR steps;
// the sampler's greedy pick in one pass over the logits; and attention for
// decode rows without a mask (FlashAttention 2's algorithm, split-KV).

#include "kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

// DT_F16 and DT_BF16 in dllm_torch.h.
constexpr int kF16 = 5, kF32 = 6, kBF16 = 15;

__device__ inline float f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline float f32(__half x) { return __half2float(x); }
__device__ inline float f32(float x) { return x; }
template <typename T> __device__ inline T cast(float x);
template <> __device__ inline __nv_bfloat16 cast<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <> __device__ inline __half cast<__half>(float x) { return __float2half(x); }
// round is x rounded to T and back: one dtype op's result.
template <typename T> __device__ inline float round(float x) { return f32(cast<T>(x)); }

// Programmatic dependent launch (Hopper's griddepcontrol): each kernel here
// is launched with it (launch below), so it may start while the kernel
// before it in the stream drains; dep_wait, first thing in every kernel,
// holds it until that kernel is complete and its writes are visible.
// dep_launch lets the next PDL-launched kernel start early (it only waits
// inside). Without PDL both are no-ops.
__device__ inline void dep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ inline void dep_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Settings dtk_tune changes for probes; the defaults are what the decoder
// runs with. g_pdl < 0: from the device (compute capability 9 or later)
// and DLLM_PDL (0 turns it off, to measure).
int g_pdl = -1;
int g_splits_cap = 64, g_ctas_per_sm = 2, g_min_tiles = 1;

bool pdl_on() {
  if (g_pdl < 0) {
    int dev = 0, major = 0;
    const char *e = std::getenv("DLLM_PDL");
    g_pdl = cudaGetDevice(&dev) == cudaSuccess &&
                    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                    major >= 9 && !(e && std::string(e) == "0")
                ? 1
                : 0;
  }
  return g_pdl == 1;
}

// launch_in runs kernel over grid x block with smem bytes of dynamic shared
// memory on s, with programmatic dependent launch where pdl_on, in
// thread block clusters of (1, cluster_y, 1) CTAs when cluster_y > 1.
template <typename... Params, typename... Args>
cudaError_t launch_in(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                      unsigned cluster_y, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl_on() ? 1 : 0;
  attr[1].id = cudaLaunchAttributeClusterDimension;
  attr[1].val.clusterDim.x = 1, attr[1].val.clusterDim.y = cluster_y, attr[1].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = cluster_y > 1 ? 2 : 1;
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(args)...);
}

// launch is launch_in without clusters.
template <typename... Params, typename... Args>
cudaError_t launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, Args... args) {
  return launch_in(kernel, grid, block, smem, s, 1u, args...);
}

// block_sum is the sum of s over the block (whole warps), returned to every
// thread; once per kernel, as its shared memory is not reused.
__device__ inline float block_sum(float s) {
  __shared__ float ss[32];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) ss[warp] = s;
  __syncthreads();
  s = 0;
  for (int w = 0; w < (blockDim.x + 31) / 32; w++) s += ss[w];
  return s;
}

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

// Grid (T, heads / (blockDim / (D/2))): each block takes token t and
// blockDim / (D/2) consecutive heads of the fused output, D/2 threads a
// head, each rotating the pair (i, i + D/2). NORM: qkv is the projection of
// x itself, not of its RMSNorm (the norm's weight is folded into the
// projection's columns, see dtk_rope_qkv), so each value is first scaled by
// x_t's inverse RMS and rounded, which is what the projection of the
// normalised row gives up to rounding.
template <typename T, bool NORM>
__global__ void rope_qkv_kernel(const T *qkv, const T *cos, const T *sin, const int64_t *pos, T *q, T *kc, T *vc,
                                int64_t H, int64_t Hkv, int64_t D, const T *x, int C, float eps, bool fold) {
  const int64_t t = blockIdx.x, half = D / 2, i = threadIdx.x % half;
  const int64_t h = int64_t(blockIdx.y) * (blockDim.x / half) + threadIdx.x / half;
  // The positions (written when the forward starts, several kernels back:
  // see attn_decode_kernel), the tables and x (the input of the projection
  // just before) are read before the wait.
  const float r = NORM ? inv_rms(x + t * C, C, eps) : 1.0f;
  if (h >= H + 2 * Hkv) { // a block's spare heads (the last block)
    dep_wait();
    dep_launch();
    return;
  }
  const T *src = qkv + (t * (H + 2 * Hkv) + h) * D;
  auto in = [&](int64_t j) { return NORM ? round<T>(f32(src[j]) * r) : f32(src[j]); };
  int64_t p = pos[t];
  if (h >= H + Hkv) { // a value head: copied as is
    dep_wait();
    dep_launch();
    T *dst = vc + (p * Hkv + (h - H - Hkv)) * D;
    dst[i] = cast<T>(in(i));
    dst[i + half] = cast<T>(in(i + half));
    return;
  }
  const T *c = cos + p * D, *s = sin + p * D;
  float c1 = f32(c[i]), c2 = f32(c[i + half]), s1 = f32(s[i]), s2 = f32(s[i + half]);
  dep_wait();
  dep_launch();
  // Folded: key head h / G's row t G + h % G, as the cuDNN path reads q.
  const int64_t G = H / Hkv, qrow = fold ? (h / G * gridDim.x + t) * G + h % G : t * H + h;
  T *dst = h < H ? q + qrow * D : kc + (p * Hkv + (h - H)) * D;
  float x1 = in(i), x2 = in(i + half);
  // x*cos + rotate_half(x)*sin with rotate_half(x) = (-x2, x1).
  dst[i] = cast<T>(round<T>(x1 * c1) + round<T>(-x2 * s1));
  dst[i + half] = cast<T>(round<T>(x2 * c2) + round<T>(x1 * s2));
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
  const float r = inv_rms(x + t * C, C, eps); // x: the input of the projection before, as in rope_qkv_kernel
  dep_wait();
  dep_launch();
  if (j >= fc) return;
  const uint4 *g4 = reinterpret_cast<const uint4 *>(gu) + t * 2 * fc;
  uint4 gv = g4[j], uv = g4[fc + j], y;
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
                const T *__restrict__ aux, float eps) { // resid may be out (an add in place)
  constexpr int E = 8;
  extern __shared__ uint4 xs[]; // K / 8 chunks of the input
  const int64_t chunks = K / E, n = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const uint4 *wr = reinterpret_cast<const uint4 *>(w + (n < N ? n : 0) * K);
  uint4 wv[KC > 0 ? KC : 1];
#pragma unroll
  for (int i = 0; i < KC; i++) wv[i] = __ldg(wr + lane + 32 * i);
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
    const uint4 *ag = reinterpret_cast<const uint4 *>(aux);
    for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) { // each thread its own chunks again
      uint4 v = xs[c], av = ag[c], y;
      const T *e = reinterpret_cast<const T *>(&v), *ae = reinterpret_cast<const T *>(&av);
      T *ye = reinterpret_cast<T *>(&y);
#pragma unroll
      for (int i = 0; i < E; i++) ye[i] = cast<T>(f32(ae[i]) * round<T>(f32(e[i]) * r));
      xs[c] = y;
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
  if (lane == 0) out[n] = cast<T>(acc + (resid ? f32(resid[n]) : 0.0f));
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
int rope_qkv(const void *qkv, const void *cos, const void *sin, const int64_t *pos, void *q, void *kc, void *vc,
             int64_t Tn, int64_t H, int64_t Hkv, int64_t D, const void *x, int64_t C, float eps, bool fold,
             cudaStream_t s) {
  if (!x) {
    dim3 grid(Tn, H + 2 * Hkv);
    return launch(rope_qkv_kernel<T, false>, grid, static_cast<unsigned>(D / 2), 0, s, static_cast<const T *>(qkv),
                  static_cast<const T *>(cos), static_cast<const T *>(sin), pos, static_cast<T *>(q),
                  static_cast<T *>(kc), static_cast<T *>(vc), H, Hkv, D, static_cast<const T *>(nullptr), 0, eps,
                  fold);
  }
  // Several heads a block, so that fewer blocks each read x's row.
  int64_t hb = D / 2 >= 256 ? 1 : 256 / (D / 2), heads = H + 2 * Hkv;
  dim3 grid(Tn, (heads + hb - 1) / hb);
  return launch(rope_qkv_kernel<T, true>, grid, static_cast<unsigned>(hb * (D / 2)), 0, s,
                static_cast<const T *>(qkv), static_cast<const T *>(cos), static_cast<const T *>(sin), pos,
                static_cast<T *>(q), static_cast<T *>(kc), static_cast<T *>(vc), H, Hkv, D,
                static_cast<const T *>(x), static_cast<int>(C), eps, fold);
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

// --- tensor-core helpers -------------------------------------------------------

__device__ inline unsigned smem_u32(const void *p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

// cp_async16 copies 16 bytes from global to shared memory, or writes 16
// zero bytes when !full.
__device__ inline void cp_async16(unsigned dst, const void *src, bool full) {
  int n = full ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ inline void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ inline void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// ldsm_x4 loads four 8x8 b16 matrices (lanes 8i..8i+7 address matrix i's
// rows); ldsm_x4_t transposes each.
__device__ inline void ldsm_x4(unsigned addr, unsigned *r) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ inline void ldsm_x4_t(unsigned addr, unsigned *r) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// mma is d (16x8, float32) += a (16x16) b (16x8) for one warp.
template <typename T> __device__ inline void mma(float *d, const unsigned *a, unsigned b0, unsigned b1);
template <> __device__ inline void mma<__nv_bfloat16>(float *d, const unsigned *a, unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <> __device__ inline void mma<__half>(float *d, const unsigned *a, unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// pack2 rounds (lo, hi) to two T in one register, lo in the low half.
template <typename T> __device__ inline unsigned pack2(float lo, float hi);
template <> __device__ inline unsigned pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<unsigned *>(&v);
}
template <> __device__ inline unsigned pack2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<unsigned *>(&v);
}

int sm_count() {
  static int n = 0;
  if (n == 0) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      n = 108;
  }
  return n;
}

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
template <typename T>
__global__ void __launch_bounds__(kAThreads)
    attn_decode_kernel(const T *__restrict__ q, const T *__restrict__ kc, const T *__restrict__ vc, T *__restrict__ out,
                       int R, int G, int H, int Hkv, int S, const int64_t *__restrict__ pos, int causal,
                       float scale_log2, float *__restrict__ part, float *__restrict__ lse) {
  extern __shared__ __align__(16) unsigned char smem[];
  T *Qs = reinterpret_cast<T *>(smem); // (kARows, kAD)
  T *Ks = Qs + kARows * kAD;           // (2, kAKeys, kAD)
  T *Vs = Ks + 2 * kAKeys * kAD;       // (2, kAKeys, kAD)
  const int rb = blockIdx.x, h = blockIdx.y, split = blockIdx.z, splits = gridDim.z;
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
  auto qrow = [&](int r) { return int64_t(r / G) * H + int64_t(h) * G + r % G; };
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
    } else {
      int64_t pr = (int64_t(split) * Hkv + h) * R + r;
      float *dst = part + pr * kAD;
#pragma unroll
      for (int d = 0; d < kAD / 8; d++)
        *reinterpret_cast<float2 *>(dst + 8 * d + 2 * (lane % 4)) = make_float2(o[d][2 * i] * inv, o[d][2 * i + 1] * inv);
      if (lane % 4 == 0) lse[pr] = l[i] > 0 ? m[i] + log2f(l[i]) : -INFINITY;
    }
  }
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

// Grid (R, Hkv), kAD threads: the merge of an attention split over its
// keys by another kernel (cuDNN's, the splits its batch, in the decoder):
// split s's folded row r of key head h at parts[s ps + h ph + r pr] (kAD
// contiguous, in T), its natural-log lse at lse[s ls + h lh + r lr]; out
// row = sum_s w_s part_s / (sum_s w_s - pad e^-mx) with w_s = e^(lse_s -
// mx), mx the largest lse, into (T, H, kAD) at folded row r's token and
// head. pad = S - (pos[T-1] + 1) is the number of zero key and value slots
// past the context that the splits covered (their scores are exactly 0,
// so each added e^0 to a split's sum and nothing to its values).
template <typename T>
__global__ void __launch_bounds__(kAD)
    attn_merge_lse_kernel(const T *parts, int64_t ps, int64_t ph, int64_t pr, const float *lse, int64_t ls,
                          int64_t lh, int64_t lr, const int64_t *pos, int Tn, int64_t S, T *out, int G, int H,
                          int splits) {
  __shared__ float lw[kAD]; // splits <= kAD
  const int r = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
  dep_wait();
  dep_launch();
  if (d < splits) lw[d] = lse[int64_t(d) * ls + int64_t(h) * lh + int64_t(r) * lr];
  __syncthreads();
  float mx = -INFINITY;
  for (int s = 0; s < splits; s++) mx = fmaxf(mx, lw[s]);
  float acc = 0, wsum = 0;
  for (int s = 0; s < splits; s++) {
    float w = __expf(lw[s] - mx);
    acc += w * f32(parts[int64_t(s) * ps + int64_t(h) * ph + int64_t(r) * pr + d]);
    wsum += w;
  }
  wsum -= static_cast<float>(S - (pos[Tn - 1] + 1)) * expf(-mx);
  int64_t row = int64_t(r / G) * H + int64_t(h) * G + r % G;
  out[row * kAD + d] = cast<T>(acc / wsum);
}

// attn_splits spreads the key tiles so that the grid has about
// g_ctas_per_sm CTAs per SM (two fit at once), each with at least
// g_min_tiles tiles, and at most g_splits_cap splits: the merge reads all
// of a row's splits, and an AR step's 16 rows over 32k keys measured 3.47
// ms a step with 132 splits against 3.22 with 66 (H200).
int attn_splits(int64_t R, int64_t Hkv, int64_t S) {
  int64_t base = (R + kARows - 1) / kARows * Hkv, tiles = (S + kAKeys - 1) / kAKeys;
  int64_t want = (g_ctas_per_sm * sm_count() + base - 1) / base;
  if (want > g_splits_cap) want = g_splits_cap;
  int64_t most = tiles / g_min_tiles;
  int64_t splits = want < most ? want : most;
  if (splits < 1) splits = 1;
  // Equal tiles per split, and no split left without one.
  int64_t tps = (tiles + splits - 1) / splits;
  return static_cast<int>((tiles + tps - 1) / tps);
}

template <typename T>
int attn_decode(const void *q, const void *kc, const void *vc, void *out, int64_t Tn, int64_t H, int64_t Hkv,
                int64_t S, const int64_t *pos, int64_t causal, float scale, void *scratch, cudaStream_t st) {
  constexpr size_t smem = (kARows + 4 * kAKeys) * kAD * sizeof(T);
  static bool attr = false; // above 48 KB dynamic shared memory must be asked for
  if (!attr) {
    cudaError_t e = cudaFuncSetAttribute(attn_decode_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem));
    if (e != cudaSuccess) return e;
    attr = true;
  }
  int64_t G = H / Hkv, R = Tn * G;
  int splits = attn_splits(R, Hkv, S);
  float *part = static_cast<float *>(scratch);
  float *lse = part + int64_t(splits) * Hkv * R * kAD;
  dim3 grid(static_cast<unsigned>((R + kARows - 1) / kARows), static_cast<unsigned>(Hkv), static_cast<unsigned>(splits));
  cudaError_t e = launch(attn_decode_kernel<T>, grid, kAThreads, smem, st, static_cast<const T *>(q),
                         static_cast<const T *>(kc), static_cast<const T *>(vc), static_cast<T *>(out),
                         static_cast<int>(R), static_cast<int>(G), static_cast<int>(H), static_cast<int>(Hkv),
                         static_cast<int>(S), pos, static_cast<int>(causal), scale * 1.4426950408889634f, part, lse);
  if (e != cudaSuccess || splits == 1) return e;
  return launch(attn_merge_kernel<T>, dim3(static_cast<unsigned>(R), static_cast<unsigned>(Hkv)),
                dim3(kAD, kMergeWays), 0, st, part, lse, static_cast<T *>(out), static_cast<int>(R),
                static_cast<int>(G), static_cast<int>(H), static_cast<int>(Hkv), splits, static_cast<int>(S), pos);
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

int dtk_rope_qkv(int dtype, const void *qkv, const void *cos, const void *sin, const int64_t *pos, void *q,
                 void *kcache, void *vcache, int64_t T, int64_t H, int64_t Hkv, int64_t D, const void *x, int64_t C,
                 float eps, int fold_q, void *stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (D % 2 != 0 || D / 2 > 1024 || (x && !x_ok(x, C, dtype)) || Hkv < 1 || H % Hkv != 0)
    return cudaErrorInvalidValue;
  if (dtype == kBF16)
    return rope_qkv<__nv_bfloat16>(qkv, cos, sin, pos, q, kcache, vcache, T, H, Hkv, D, x, C, eps, fold_q != 0, s);
  if (dtype == kF16)
    return rope_qkv<__half>(qkv, cos, sin, pos, q, kcache, vcache, T, H, Hkv, D, x, C, eps, fold_q != 0, s);
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
  auto st = static_cast<cudaStream_t>(stream);
  if (!parts || !lse || !pos || !out || T < 1 || Hkv < 1 || H % Hkv != 0 || splits < 1 || splits > kAD ||
      T * (H / Hkv) > 2147483647)
    return cudaErrorInvalidValue;
  const int G = static_cast<int>(H / Hkv), R = static_cast<int>(T) * G;
  dim3 grid(static_cast<unsigned>(R), static_cast<unsigned>(Hkv));
  if (dtype == kBF16)
    return launch(attn_merge_lse_kernel<__nv_bfloat16>, grid, kAD, 0, st, static_cast<const __nv_bfloat16 *>(parts),
                  ps, ph, pr, lse, ls, lh, lr, pos, static_cast<int>(T), S, static_cast<__nv_bfloat16 *>(out), G,
                  static_cast<int>(H), static_cast<int>(splits));
  if (dtype == kF16)
    return launch(attn_merge_lse_kernel<__half>, grid, kAD, 0, st, static_cast<const __half *>(parts), ps, ph, pr,
                  lse, ls, lh, lr, pos, static_cast<int>(T), S, static_cast<__half *>(out), G, static_cast<int>(H),
                  static_cast<int>(splits));
  return cudaErrorInvalidValue;
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
    // 2. A kernel node on the memset's incoming edges, then its outgoing
    //    edges, then the memset goes (default edges: the kernel reads
    //    nothing, so nothing may start it early).
    void *args[] = {&dst, &pitch, &row_bytes, &height, &word, &vec};
    cudaKernelNodeParams kp = {};
    kp.func = reinterpret_cast<void *>(fill_kernel);
    kp.blockDim = dim3(256);
    kp.gridDim = dim3(static_cast<unsigned>(std::min<size_t>((units + 255) / 256, 1024)));
    kp.kernelParams = args;
    cudaGraphNode_t k;
    if ((e = cudaGraphAddKernelNode(&k, g, in.data(), in.size(), &kp)) != cudaSuccess) return e;
    for (auto o : out) {
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
