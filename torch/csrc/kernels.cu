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
#ifdef DLLM_SM90A
#include <cuda.h> // CUtensorMap
#endif

#include <algorithm>
#include <atomic>
#include <cstdio>
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

// dep_launch_wait lets the next kernel launch before this one's own wait
// (the TMA GEMMs, the cuDNN path's merge): the next kernel still waits for
// this one to finish; it only takes its place and starts fetching weights
// sooner (8k block step 2.73-2.74 -> 2.68-2.69 ms, H200).
__device__ inline void dep_launch_wait() {
  dep_launch();
  dep_wait();
}

// Settings dtk_tune changes for probes; the defaults are what the decoder
// runs with. g_pdl < 0: from the device (compute capability 9 or later).
int g_pdl = -1;
int g_splits_cap = 64, g_ctas_per_sm = 2, g_min_tiles = 1;

bool pdl_on() {
  if (g_pdl < 0) {
    int dev = 0, major = 0;
    g_pdl = cudaGetDevice(&dev) == cudaSuccess &&
                    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                    major >= 9
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

constexpr int kRopeParts = DTK_TMA_POST_QPARTS; // dtk_rope_qkv's parts at most: the persistent kernel's

// Grid (T, heads / (blockDim / (D/2))): each block takes token t and
// blockDim / (D/2) consecutive heads of the fused output, D/2 threads a
// head, each rotating the pair (i, i + D/2). NORM: qkv is the projection of
// x itself, not of its RMSNorm (the norm's weight is folded into the
// projection's columns, see dtk_rope_qkv), so each value is first scaled by
// x_t's inverse RMS and rounded, which is what the projection of the
// normalised row gives up to rounding. With ks (and vs): token t's key
// and value go to row t of those (T, Hkv, D) instead, and their cache rows
// are zeroed (the decoder's cuDNN path for a fused commit).
template <typename T, bool NORM>
__global__ void rope_qkv_kernel(const T *qkv, const T *cos, const T *sin, const int64_t *pos, T *q, T *kc, T *vc,
                                int64_t H, int64_t Hkv, int64_t D, const T *x, int C, float eps, bool fold, T *ks,
                                T *vs, const float *parts, int nparts) {
  const int64_t t = blockIdx.x, half = D / 2, i = threadIdx.x % half;
  const int64_t h = int64_t(blockIdx.y) * (blockDim.x / half) + threadIdx.x / half;
  const bool spare = h >= H + 2 * Hkv, value = !spare && h >= H + Hkv; // spare: the last block's extra heads
  // The positions (written when the forward starts, several kernels back:
  // see attn_decode_kernel) and the tables are read before the wait; x (the
  // input of the projection just before) only after it: a TMA GEMM lets
  // this kernel launch before its own wait, so x's writer, the kernel
  // before that, may still be running (the persistent kernel's last CTAs).
  int64_t p = 0;
  float c1 = 0, c2 = 0, s1 = 0, s2 = 0;
  if (!spare) {
    p = pos[t];
    if (!value) {
      const T *c = cos + p * D, *s = sin + p * D;
      c1 = f32(c[i]), c2 = f32(c[i + half]), s1 = f32(s[i]), s2 = f32(s[i + half]);
    }
  }
  dep_wait();
  dep_launch();
  // The projection's two values this thread takes, loaded before x's sum
  // of squares so that the loads overlap. From parts: their sum in order,
  // rounded, as the split-K GEMM's cluster sums them.
  float v1 = 0, v2 = 0;
  if (!spare) {
    if (parts) {
      const int64_t N = (H + 2 * Hkv) * D, T_ = gridDim.x;
      const float *p0 = parts + t * N + h * D;
      float a1[kRopeParts], a2[kRopeParts];
#pragma unroll
      for (int q = 0; q < kRopeParts; q++)
        if (q < nparts) a1[q] = __ldcg(p0 + q * T_ * N + i), a2[q] = __ldcg(p0 + q * T_ * N + i + half);
#pragma unroll
      for (int q = 0; q < kRopeParts; q++)
        if (q < nparts) v1 += a1[q], v2 += a2[q];
      v1 = round<T>(v1), v2 = round<T>(v2);
    } else {
      const T *src = qkv + (t * (H + 2 * Hkv) + h) * D;
      v1 = f32(src[i]), v2 = f32(src[i + half]);
    }
  }
  const float r = NORM ? inv_rms(x + t * C, C, eps) : 1.0f; // every thread: block_sum's barriers
  if (spare) return;
  auto scaled = [&](float v) { return NORM ? round<T>(v * r) : v; };
  const float in1 = scaled(v1), in2 = scaled(v2);
  // A key or value head's cache row, and where the head goes.
  const int64_t kv = value ? h - H - Hkv : h - H;
  T *cache = h < H ? nullptr : (value ? vc : kc) + (p * Hkv + kv) * D;
  T *side = h < H ? nullptr : value ? vs : ks;
  if (value) { // copied as is
    T *dst = side ? side + (t * Hkv + kv) * D : cache;
    dst[i] = cast<T>(in1);
    dst[i + half] = cast<T>(in2);
    if (side) cache[i] = cache[i + half] = cast<T>(0.0f);
    return;
  }
  // Folded: key head h / G's row t G + h % G, as the cuDNN path reads q.
  const int64_t G = H / Hkv, qrow = fold ? (h / G * gridDim.x + t) * G + h % G : t * H + h;
  T *dst = h < H ? q + qrow * D : side ? side + (t * Hkv + kv) * D : cache;
  // x*cos + rotate_half(x)*sin with x = (in1, in2), rotate_half(x) = (-in2, in1).
  dst[i] = cast<T>(round<T>(in1 * c1) + round<T>(-in2 * s1));
  dst[i + half] = cast<T>(round<T>(in2 * c2) + round<T>(in1 * s2));
  if (h >= H && side) cache[i] = cache[i + half] = cast<T>(0.0f);
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
  const float r = inv_rms(x + t * C, C, eps); // after the wait, as in rope_qkv_kernel
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
int rope_qkv(const void *qkv, const void *cos, const void *sin, const int64_t *pos, void *q, void *kc, void *vc,
             int64_t Tn, int64_t H, int64_t Hkv, int64_t D, const void *x, int64_t C, float eps, bool fold, void *ks,
             void *vs, const float *parts, int nparts, cudaStream_t s) {
  if (!x) {
    dim3 grid(Tn, H + 2 * Hkv);
    return launch(rope_qkv_kernel<T, false>, grid, static_cast<unsigned>(D / 2), 0, s, static_cast<const T *>(qkv),
                  static_cast<const T *>(cos), static_cast<const T *>(sin), pos, static_cast<T *>(q),
                  static_cast<T *>(kc), static_cast<T *>(vc), H, Hkv, D, static_cast<const T *>(nullptr), 0, eps,
                  fold, static_cast<T *>(ks), static_cast<T *>(vs), parts, nparts);
  }
  // Several heads a block, so that fewer blocks each read x's row.
  int64_t hb = D / 2 >= 256 ? 1 : 256 / (D / 2), heads = H + 2 * Hkv;
  dim3 grid(Tn, (heads + hb - 1) / hb);
  return launch(rope_qkv_kernel<T, true>, grid, static_cast<unsigned>(hb * (D / 2)), 0, s,
                static_cast<const T *>(qkv), static_cast<const T *>(cos), static_cast<const T *>(sin), pos,
                static_cast<T *>(q), static_cast<T *>(kc), static_cast<T *>(vc), H, Hkv, D,
                static_cast<const T *>(x), static_cast<int>(C), eps, fold, static_cast<T *>(ks), static_cast<T *>(vs),
                parts, nparts);
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

// aligned16: p may be read 16 bytes at a time.
bool aligned16(const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

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
template <typename T>
__global__ void __launch_bounds__(kAThreads)
    attn_decode_kernel(const T *__restrict__ q, const T *__restrict__ kc, const T *__restrict__ vc, T *__restrict__ out,
                       int R, int G, int H, int Hkv, int S, const int64_t *__restrict__ pos, int causal,
                       float scale_log2, float *__restrict__ part, float *__restrict__ lse, bool qfold) {
  ATTN_MARK(0);
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
      int64_t pr = (int64_t(split) * Hkv + h) * R + r;
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
                        int64_t causal, float scale, float *part, float *lse, bool qfold) {
  return launch(attn_decode_kernel<T>, grid, kAThreads, smem, st, static_cast<const T *>(q),
                static_cast<const T *>(kc), static_cast<const T *>(vc), static_cast<T *>(out), static_cast<int>(R),
                static_cast<int>(G), static_cast<int>(H), static_cast<int>(Hkv), static_cast<int>(S), pos,
                static_cast<int>(causal), scale * 1.4426950408889634f, part, lse, qfold);
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

#ifdef DLLM_SM90A
// --- TMA GEMM for block steps (2-32 rows) -------------------------------------
//
// out (M, N) = [res +] x (M, K) W^T for M <= 32 on Hopper, for the matmuls of
// a denoising block step, where cuBLAS's kernels cannot launch before the
// kernel ahead of them is done (they do not wait on griddepcontrol). These
// do: launched with PDL, each fetches its first weights while the kernel
// before still runs, then waits. The weights (and x) come into a ring of
// shared memory stages by TMA tensor copies of their own layouts (128-byte
// swizzle, no repacking), a copier warp ahead of one warpgroup that
// multiplies with wgmma (x as the 64-row A operand: x's box is 32 rows,
// zeros past M; the operand's rows 32-63 read whatever follows the box, and
// every row past M is dropped). K is split over a thread
// block cluster whose partial products meet in shared memory; each CTA
// sums 1/KS of them in rank order (deterministic). Measured against cuBLAS
// with probes/gemm_bulk_probe.cu (docs/history.md). Needs sm_90a (DLLM_SM90A: the Makefile builds it where nvcc
// knows the target); elsewhere the kernels trap and the host never
// launches them.

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DLLM_TMA_DEVICE 1
#endif
// The helpers go unused where the kernels' bodies are traps (sm_80, sm_90).
#pragma nv_diag_suppress 177

__device__ inline void mbar_init(unsigned bar, unsigned count) {
#ifdef DLLM_TMA_DEVICE
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
#endif
}
// mbar_expect arrives on bar, telling it bytes more will land by TMA.
__device__ inline void mbar_expect(unsigned bar, unsigned bytes) {
#ifdef DLLM_TMA_DEVICE
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
#endif
}
__device__ inline void mbar_arrive(unsigned bar) {
#ifdef DLLM_TMA_DEVICE
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
#endif
}
// mbar_wait returns once bar's phase of the given parity has completed.
__device__ inline void mbar_wait(unsigned bar, unsigned parity) {
#ifdef DLLM_TMA_DEVICE
  unsigned done;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
  } while (!done);
#endif
}
// tma_load2d copies the box at (c0 inner, c1 outer) of map's tensor into
// shared dst (map's swizzle), completing on bar.
__device__ inline void tma_load2d(unsigned dst, const CUtensorMap &map, int c0, int c1, unsigned bar) {
#ifdef DLLM_TMA_DEVICE
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
#endif
}
__device__ inline unsigned cluster_rank() {
  unsigned r = 0;
#ifdef DLLM_TMA_DEVICE
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
#endif
  return r;
}
__device__ inline void cluster_sync() {
#ifdef DLLM_TMA_DEVICE
  asm volatile("barrier.cluster.arrive.aligned;\nbarrier.cluster.wait.aligned;" ::: "memory");
#endif
}
// ld_peer4 is four floats at shared address a of the cluster's CTA rank.
__device__ inline float4 ld_peer4(unsigned a, unsigned rank) {
  float4 v = make_float4(0, 0, 0, 0);
#ifdef DLLM_TMA_DEVICE
  unsigned r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(r)
               : "memory");
#endif
  return v;
}
// sw128_desc is the wgmma descriptor of a K-major operand in shared memory
// with 128-byte swizzling (what TMA's 128-byte swizzle writes): rows of 64
// values (128 bytes) eight to a 1024-byte atom, the 16-byte chunk c of row
// r stored at chunk c ^ (r % 8); addr is where its 16-value k step starts
// (atom base + 32 k bytes).
__device__ inline uint64_t sw128_desc(unsigned addr) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}
__device__ inline void wg_fence() {
#ifdef DLLM_TMA_DEVICE
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ inline void wg_commit() {
#ifdef DLLM_TMA_DEVICE
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// wg_wait1 waits until at most one of this warp's wgmma groups is pending.
__device__ inline void wg_wait1() {
#ifdef DLLM_TMA_DEVICE
  asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
#endif
}
// wg_wait waits for all of them; d, their accumulator, is then tied to the
// wait (an empty asm on each register) so that nothing reads it before.
template <int NJ> __device__ inline void wg_wait(float (&d)[NJ][4]) {
#ifdef DLLM_TMA_DEVICE
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
#pragma unroll
  for (int j = 0; j < NJ; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) asm volatile("" : "+f"(d[j][e])::"memory");
}
// wgmma_ss is d (64 x NW, float32; warp w's rows 16 w .. 16 w + 15 in
// mma.sync's accumulator layout, d[j] the 8 columns 8 j ..) += a (64 x 16)
// b (NW x 16)^T, bf16, both K-major in shared memory (descriptors); one
// register operand per accumulator value, so one asm form per tile height:
// 32-row wgmmas for every height (one form) re-read x's tile per call and
// cost 6% end to end (docs/history.md).
template <int NW> __device__ inline void wgmma_ss(float (&d)[NW / 8][4], uint64_t a, uint64_t b);
template <> __device__ inline void wgmma_ss<64>(float (&d)[8][4], uint64_t a, uint64_t b) {
#ifdef DLLM_TMA_DEVICE
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
               "%32, %33, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
               : "l"(a), "l"(b), "r"(1));
#endif
}
template <> __device__ inline void wgmma_ss<80>(float (&d)[10][4], uint64_t a, uint64_t b) {
#ifdef DLLM_TMA_DEVICE
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %42, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n80k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39}, "
               "%40, %41, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3])
               : "l"(a), "l"(b), "r"(1));
#endif
}
template <> __device__ inline void wgmma_ss<96>(float (&d)[12][4], uint64_t a, uint64_t b) {
#ifdef DLLM_TMA_DEVICE
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47}, "
               "%48, %49, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3])
               : "l"(a), "l"(b), "r"(1));
#endif
}
template <> __device__ inline void wgmma_ss<128>(float (&d)[16][4], uint64_t a, uint64_t b) {
#ifdef DLLM_TMA_DEVICE
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
               "%64, %65, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
               : "l"(a), "l"(b), "r"(1));
#endif
}

// ring_init sets up a copy ring's barriers (thread 0, then the block
// waits): full[s] completes when stage s has landed, empty[s] when the
// four multiplying warps are done with it.
__device__ inline void ring_init(unsigned full0, unsigned empty0, int stages) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; s++) mbar_init(full0 + 8 * s, 1), mbar_init(empty0 + 8 * s, 4);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
}

// mma_chunk waits for chunk c's stage (at wb, x's tile at xb) and issues
// its four k steps, d += x w^T, as one wgmma group.
template <int NW>
__device__ inline void mma_chunk(float (&d)[NW / 8][4], int c, int stages, unsigned full0, unsigned wb, unsigned xb) {
  mbar_wait(full0 + 8 * (c % stages), (c / stages) & 1);
  wg_fence();
#pragma unroll
  for (int ks = 0; ks < 4; ks++) wgmma_ss<NW>(d, sw128_desc(xb + 32 * ks), sw128_desc(wb + 32 * ks));
  wg_commit();
}

// release_prev waits for chunk c - 1's products and frees its stage: one
// group stays in flight while the next is issued.
__device__ inline void release_prev(int c, int stages, unsigned empty0) {
  wg_wait1();
  __syncwarp();
  if (threadIdx.x % 32 == 0 && c > 0) mbar_arrive(empty0 + 8 * ((c - 1) % stages));
}

// cluster_sum_out ends a split-K GEMM: the four multiplying warps put their
// partial products d (rows < M) in red (M, NW), then each of the cluster's
// KS CTAs sums 1/KS of the slice's outputs over the ranks in order
// (deterministic) and writes out = [res +] sum for weight slice nt. All
// 160 threads call it.
template <int NW, int KS>
__device__ inline void cluster_sum_out(const float (&d)[NW / 8][4], float *red, const __nv_bfloat16 *res,
                                       __nv_bfloat16 *out, int M, int N, int nt, int rank) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  if (warp < 4) {
#pragma unroll
    for (int j = 0; j < NW / 8; j++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int m = 16 * warp + g + 8 * h;
        if (m < M) *reinterpret_cast<float2 *>(red + m * NW + 8 * j + 2 * t) = make_float2(d[j][2 * h], d[j][2 * h + 1]);
      }
  }
  if (KS > 1)
    cluster_sync();
  else
    __syncthreads();
  const int E = M * NW, per = (E / 4 + KS - 1) / KS * 4; // floats, in fours
  for (int i = rank * per + 4 * tid; i < min(E, (rank + 1) * per); i += 4 * 160) {
    float4 v = make_float4(0, 0, 0, 0);
    for (int q = 0; q < KS; q++) {
      float4 p = KS > 1 ? ld_peer4(smem_u32(red + i), q) : *reinterpret_cast<float4 *>(red + i);
      v.x += p.x, v.y += p.y, v.z += p.z, v.w += p.w;
    }
    const size_t o = size_t(i / NW) * N + nt * NW + i % NW;
    if (res) {
      const float2 r0 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(res + o));
      const float2 r1 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(res + o + 2));
      v.x += r0.x, v.y += r0.y, v.z += r1.x, v.w += r1.y;
    }
    *reinterpret_cast<__nv_bfloat162 *>(out + o) = __floats2bfloat162_rn(v.x, v.y);
    *reinterpret_cast<__nv_bfloat162 *>(out + o + 2) = __floats2bfloat162_rn(v.z, v.w);
  }
  if (KS > 1) cluster_sync(); // peers may still read this CTA's partials
}

constexpr int kTmaRows = 32; // x's box: M <= 32 (a block step; tpost_kernel's XR 64 takes a fused commit)
// Copy stages of each TMA GEMM's ring: more fetch more of a GEMM's
// weights before its PDL wait, while the kernel before runs, but two
// kernels' CTAs share an SM only while their shared memory fits together
// (measured on an H200: 8 for QKV and output took a 1k step from 2.43 to
// 2.35 ms; gate-up 4 or 8 and other down counts were slower).
constexpr int kLinStages = 8, kGateUpStages = 6, kDownStages = 4;

// tgemm_kernel: out = [res +] x W^T (res may be out, or null). Grid (N / NW,
// KS) in clusters of the KS CTAs of a weight slice; 160 threads: warps 0-3
// multiply, warp 4 issues the copies. CTA rank r takes the CH = K / 64 / KS
// chunks of K from r CH, through ST stages, each the weights' (NW, 64) box
// and x's (32, 64) box.
template <int NW, int KS, int ST>
__global__ void __launch_bounds__(160)
    tgemm_kernel(const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap xmap,
                 const __nv_bfloat16 *res, __nv_bfloat16 *out, int M, int N, int K) {
#ifdef DLLM_TMA_DEVICE
  constexpr int kW = NW * 128, kStage = kW + kTmaRows * 128; // bytes
  extern __shared__ __align__(16) unsigned char smem_[];
  unsigned char *smem =
      reinterpret_cast<unsigned char *>((reinterpret_cast<uintptr_t>(smem_) + 1023) & ~uintptr_t(1023));
  float *red = reinterpret_cast<float *>(smem + ST * kStage); // (M, NW) partial products
  uint64_t *bars = reinterpret_cast<uint64_t *>(red + kTmaRows * NW);
  const unsigned full0 = smem_u32(bars), empty0 = smem_u32(bars + ST);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int nt = blockIdx.x, rank = KS > 1 ? int(cluster_rank()) : 0;
  const int CH = K / 64 / KS, k0 = rank * CH * 64;

  ring_init(full0, empty0, ST);

  float d[NW / 8][4] = {};
  if (warp == 4) {
    // 2. The copier: the first stages' weights before the PDL wait (nothing
    // before writes them), x's after; then each stage as it frees.
    if (lane == 0)
      for (int c = 0; c < CH && c < ST; c++) {
        mbar_expect(full0 + 8 * c, kStage);
        tma_load2d(smem_u32(smem + c * kStage), wmap, k0 + 64 * c, nt * NW, full0 + 8 * c);
      }
    dep_launch_wait();
    if (lane == 0) {
      for (int c = 0; c < CH && c < ST; c++)
        tma_load2d(smem_u32(smem + c * kStage + kW), xmap, k0 + 64 * c, 0, full0 + 8 * c);
      for (int c = ST; c < CH; c++) {
        const int s = c % ST;
        mbar_wait(empty0 + 8 * s, (c / ST - 1) & 1);
        mbar_expect(full0 + 8 * s, kStage);
        tma_load2d(smem_u32(smem + s * kStage), wmap, k0 + 64 * c, nt * NW, full0 + 8 * s);
        tma_load2d(smem_u32(smem + s * kStage + kW), xmap, k0 + 64 * c, 0, full0 + 8 * s);
      }
    }
    __syncwarp(); // the cluster barrier below wants whole warps
  } else {
    // 3. The multipliers: one chunk's products in flight while the next
    // chunk's are issued.
    dep_launch_wait();
    for (int c = 0; c < CH; c++) {
      const unsigned wb = smem_u32(smem + (c % ST) * kStage);
      mma_chunk<NW>(d, c, ST, full0, wb, wb + kW);
      release_prev(c, ST, empty0);
    }
    wg_wait(d);
  }
  // 4. The sum over the cluster; rows past M are dropped.
  cluster_sum_out<NW, KS>(d, red, res, out, M, N, nt, rank);
#else
  __trap();
#endif
}
template <int NW, int ST> constexpr size_t tgemm_smem() {
  return 1024 + size_t(ST) * (NW + kTmaRows) * 128 + kTmaRows * NW * 4 + 16 * ST;
}

// x_squares adds to ss[i] the squares of the 16 values of x's row tid / 4
// + 32 i (< M) that thread tid % 4 takes from a stage's (XR, 64) x box at
// xs (the 128-byte swizzle only moves a row's 16-byte chunks).
template <int XR = kTmaRows>
__device__ inline void x_squares(float (&ss)[XR / 32], const unsigned char *xs, int M) {
  const int q = threadIdx.x % 4;
#pragma unroll
  for (int r = 0; r < XR / 32; r++) {
    const int row = threadIdx.x / 4 + 32 * r;
    if (row >= M) continue;
    const uint4 *xr = reinterpret_cast<const uint4 *>(xs + row * 128 + q * 32);
#pragma unroll
    for (int h = 0; h < 2; h++) {
      uint4 v = xr[h];
      const __nv_bfloat16 *e = reinterpret_cast<const __nv_bfloat16 *>(&v);
#pragma unroll
      for (int i = 0; i < 8; i++) ss[r] += f32(e[i]) * f32(e[i]);
    }
  }
}

// x_rinv sums x_squares's ss over the four threads of each row and writes
// the rows' inverse RMS over K values to rinv.
template <int XR = kTmaRows> __device__ inline void x_rinv(float (&ss)[XR / 32], float *rinv, int K, float eps) {
#pragma unroll
  for (int r = 0; r < XR / 32; r++) {
    float v = ss[r];
    v += __shfl_xor_sync(0xffffffff, v, 1);
    v += __shfl_xor_sync(0xffffffff, v, 2);
    if (threadIdx.x % 4 == 0) rinv[threadIdx.x / 4 + 32 * r] = rsqrtf(v / static_cast<float>(K) + eps);
  }
}

// silu_spread is gate-up's SiLU step spread over the four multiplying
// warps: d (gate 48 and up 48 columns of the 64-row tile) holds rows 0-31
// in warps 0 and 1 only (XR 32), whose threads would each compute 24
// outputs as a chain no other warp hides. Their products go through red
// (XR, 104) in shared memory, then each thread takes runs of 4 outputs of
// one row into out (M, F) at column j0, scaled by rinv as
// silu_mul_norm_kernel does after cuBLAS's bf16 output. Threads 0-127 call
// it.
template <int XR = kTmaRows>
__device__ inline void silu_spread(const float (&d)[12][4], float *red, const float *rinv, __nv_bfloat16 *out, int M,
                                   int F, int j0) {
  using T = __nv_bfloat16;
  constexpr int NH = 48, RS = 2 * NH + 8; // floats a row; the pad halves bank conflicts
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  if (16 * warp < XR) {
#pragma unroll
    for (int j = 0; j < 2 * NH / 8; j++)
#pragma unroll
      for (int h = 0; h < 2; h++)
        *reinterpret_cast<float2 *>(red + (16 * warp + g + 8 * h) * RS + 8 * j + 2 * t) =
            make_float2(d[j][2 * h], d[j][2 * h + 1]);
  }
  asm volatile("bar.sync 1, 128;" ::: "memory");
  // A thread's (at most) three runs are loaded first and then computed in
  // one unrolled body, so that their chains (roundings, exp, IEEE division)
  // interleave: each warp is alone on its sub-partition here.
  constexpr int kRuns = XR * (NH / 4) / 128;
  float gu[kRuns][2][4], r[kRuns];
#pragma unroll
  for (int i = 0; i < kRuns; i++) {
    const int u = tid + 128 * i, m = min(u / (NH / 4), M - 1), c = 4 * (u % (NH / 4));
    r[i] = rinv[m];
#pragma unroll
    for (int e = 0; e < 4; e++) gu[i][0][e] = red[m * RS + c + e], gu[i][1][e] = red[m * RS + NH + c + e];
  }
#pragma unroll
  for (int i = 0; i < kRuns; i++) {
    const int u = tid + 128 * i, m = u / (NH / 4), c = 4 * (u % (NH / 4));
    float y[4];
#pragma unroll
    for (int e = 0; e < 4; e++) {
      float gv = round<T>(round<T>(gu[i][0][e]) * r[i]), uv = round<T>(round<T>(gu[i][1][e]) * r[i]);
      y[e] = round<T>(gv / (1.0f + __expf(-gv))) * uv;
    }
    __nv_bfloat162 o2[2] = {__floats2bfloat162_rn(y[0], y[1]), __floats2bfloat162_rn(y[2], y[3])};
    if (m < M) *reinterpret_cast<uint2 *>(out + size_t(m) * F + j0 + c) = *reinterpret_cast<const uint2 *>(o2);
  }
}

// tgemm_gu_kernel is tgemm_kernel for the MLP's gate-up projection with
// silu_mul_norm_kernel's step in its epilogue: w is the fused (gate; up)
// weight with the RMSNorm's weight folded in (2F, K), and out (M, F) =
// silu(g) u with g and u scaled by x's inverse RMS, rounded as there. CTA j
// takes gate rows [48 j, 48 j + 48) and the same up rows (two boxes a
// chunk, one 96-row tile) over all of K, so it owns its outputs; it sums
// x's squares from the tiles it multiplies.
template <int ST>
__global__ void __launch_bounds__(160)
    tgemm_gu_kernel(const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap xmap,
                    __nv_bfloat16 *out, int M, int F, int K, float eps) {
#ifdef DLLM_TMA_DEVICE
  using T = __nv_bfloat16;
  constexpr int NH = 48, NW = 2 * NH, kH = NH * 128, kW = NW * 128, kStage = kW + kTmaRows * 128;
  extern __shared__ __align__(16) unsigned char smem_[];
  unsigned char *smem =
      reinterpret_cast<unsigned char *>((reinterpret_cast<uintptr_t>(smem_) + 1023) & ~uintptr_t(1023));
  float *rinv = reinterpret_cast<float *>(smem + (ST + 1) * kStage); // past the ring and x's overhang
  uint64_t *bars = reinterpret_cast<uint64_t *>(rinv + kTmaRows);
  const unsigned full0 = smem_u32(bars), empty0 = smem_u32(bars + ST);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, j0 = blockIdx.x * NH, CH = K / 64;
  ring_init(full0, empty0, ST);
  float d[NW / 8][4] = {};
  if (warp == 4) {
    auto wload = [&](int c, int s) {
      tma_load2d(smem_u32(smem + s * kStage), wmap, 64 * c, j0, full0 + 8 * s);
      tma_load2d(smem_u32(smem + s * kStage + kH), wmap, 64 * c, F + j0, full0 + 8 * s);
    };
    if (lane == 0)
      for (int c = 0; c < CH && c < ST; c++) mbar_expect(full0 + 8 * c, kStage), wload(c, c);
    dep_launch_wait();
    if (lane == 0) {
      for (int c = 0; c < CH && c < ST; c++)
        tma_load2d(smem_u32(smem + c * kStage + kW), xmap, 64 * c, 0, full0 + 8 * c);
      for (int c = ST; c < CH; c++) {
        const int s = c % ST;
        mbar_wait(empty0 + 8 * s, (c / ST - 1) & 1);
        mbar_expect(full0 + 8 * s, kStage);
        wload(c, s);
        tma_load2d(smem_u32(smem + s * kStage + kW), xmap, 64 * c, 0, full0 + 8 * s);
      }
    }
    __syncwarp();
    return;
  }
  dep_launch_wait();
  float ss[1] = {};
  for (int c = 0; c < CH; c++) {
    const int s = c % ST;
    const unsigned wb = smem_u32(smem + s * kStage);
    mma_chunk<NW>(d, c, ST, full0, wb, wb + kW);
    x_squares(ss, smem + s * kStage + kW, M);
    release_prev(c, ST, empty0);
  }
  wg_wait(d);
  x_rinv(ss, rinv, K, eps);
  asm volatile("bar.sync 1, 128;" ::: "memory"); // the multiplying warps only
  const int g = lane / 4, t = lane % 4;
  // The ring is free once every warp has passed the barrier above.
  silu_spread(d, reinterpret_cast<float *>(smem), rinv, out, M, F, j0);
#else
  __trap();
#endif
}
template <int ST> constexpr size_t tgemm_gu_smem() { return 1024 + size_t(ST + 1) * (96 + kTmaRows) * 128 + kTmaRows * 4 + 16 * ST; }

// --- A block step's post-attention sublayers in one persistent kernel ---------
//
// tpost_kernel is, in one grid of F / 48 CTAs (one an SM, no clusters: at
// one CTA an SM the H200 holds only 15 clusters of 8, an earlier
// fused MLP), what three kernels did: the output projection with
// the residual add (tgemm_kernel<64, 4>; optional), gate-up with its SiLU
// step (tgemm_gu_kernel) and the down projection with the residual add
// (tgemm_kernel<128, 8>); optionally also the next layer's QKV
// projection (tgemm_kernel<64, 4>, its parts summed by RoPE). What
// crosses CTAs goes through global memory (L2): the projections' float32 partial products over K, summed after a
// grid barrier in rank order with the residual as cluster_sum_out does
// (each CTA C / G columns), and gate-up's outputs h. So the result is the
// kernels' bit for bit, each CTA multiplying the same chunks in the same
// order. (Summing each slice in the CTA that stores its last part, found
// with a counter, saves two barriers but was slower: one CTA sums 8 parts
// of 128 columns in ~5 us; probes/mlp_probe.cu.)
// What it gains: the copier never waits for a phase to end before
// fetching the next phase's weights, which depend on nothing (the output
// projection's all and gate-up's first before the PDL wait, during the
// attention; the down projection's while gate-up's last products, its SiLU
// step and the barrier run), and fewer kernel boundaries. The grid must be
// resident at once (dtk_tma_post checks the SMs); it lets the next kernel
// launch only after its first barrier, so that kernel cannot take an SM
// one of this grid's CTAs still waits for.

__device__ inline unsigned long long ld_acquire_u64(const unsigned long long *p) {
  unsigned long long v = 0;
#ifdef DLLM_TMA_DEVICE
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
#endif
  return v;
}
// proxy_fence_global orders this thread's generic accesses to global
// memory with the async proxy's (TMA reads h and y, written by plain
// stores).
__device__ inline void proxy_fence_global() {
#ifdef DLLM_TMA_DEVICE
  asm volatile("fence.proxy.async.global;" ::: "memory");
#endif
}

// grid_sync returns once every CTA's multiplying warps (threads 0-127)
// have called it, their writes before it visible after it. *bar counts
// arrivals over every barrier of every launch (64 bits: it never wraps):
// the arrival that finds it at old waits for the multiple of n past old.
// No reset, so no second atomic after the last arrival (a reset and a
// generation bump took ~1.9 us from the last arrival to the release,
// probes/mlp_probe.cu).
__device__ inline void grid_sync(unsigned long long *bar, unsigned n) {
  asm volatile("bar.sync 1, 128;" ::: "memory");
  if (threadIdx.x == 0) {
    unsigned long long old = 0;
#ifdef DLLM_TMA_DEVICE
    asm volatile("atom.add.release.gpu.global.u64 %0, [%1], 1;" : "=l"(old) : "l"(bar) : "memory");
#endif
    const unsigned long long target = (old / n + 1) * n;
    while (ld_acquire_u64(bar) < target) {
    }
  }
  asm volatile("bar.sync 1, 128;" ::: "memory");
}

// A stage holds the down projection's (128, 64) weight box and x's (XR,
// 64) at kPostW; gate-up's two (48, 64) boxes take 96 of the 128 rows,
// the output projection's one 64.
constexpr int kPostND = 128, kPostKS = 8, kPostOS = 4, kPostW = kPostND * 128;
// The next layer's QKV projection as the last phase: 80-row slices, K in
// four parts (MiniCPM5-2B's 2560 rows: 32 slices, 128 CTAs).
constexpr int kPostNQ = 80, kPostQS = DTK_TMA_POST_QPARTS;
__host__ __device__ constexpr int post_stage(int XR) { return kPostW + XR * 128; }

// DLLM_MLP_TRACE (probes/mlp_probe.cu only): thread 0 writes
// %globaltimer at the kernel's steps to g_mlp_trace, (launch, CTA, 11) by
// the barrier count.
#ifdef DLLM_MLP_TRACE
__device__ unsigned long long *g_mlp_trace;
constexpr int kMlpTraceLaunches = 64, kMlpTraceMarks = 11;
__device__ inline unsigned long long gtimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
#define MLP_MARK(i)                                                                                             \
  do {                                                                                                          \
    if (g_mlp_trace && threadIdx.x == 0)                                                                      \
      g_mlp_trace[(size_t(launch_no % kMlpTraceLaunches) * gridDim.x + blockIdx.x) * kMlpTraceMarks + (i)] =   \
          gtimer();                                                                                             \
  } while (0)
// g_mlp_skip (the probe's timing experiments only; results then wrong):
// bit 1 gate-up's products, bit 2 gate-up's y boxes, bit 4 gate-up's
// weight boxes, bit 8 its sums of squares are left out.
__device__ int g_mlp_skip;
#define MLP_SKIP(bit) (g_mlp_skip & (bit))
// g_mlp_steps: thread 0's clock64 cycles in each step of gate-up's chunk
// loop (0 the stage's wait, 1 the products' issue, 2 the sums of squares,
// 3 the wait for the chunk before and the release) and the down
// projection's (4 wait, 5 issue, 6 release), summed over the chunks,
// (launch, CTA, 8) as g_mlp_trace.
__device__ long long *g_mlp_steps;
constexpr int kMlpSteps = 8;
#else
#define MLP_MARK(i)
#define MLP_SKIP(bit) 0
#endif

// StepClock is g_mlp_steps's tally (empty outside DLLM_MLP_TRACE builds).
struct StepClock {
#ifdef DLLM_MLP_TRACE
  static constexpr bool on = true;
  long long t = 0, acc[kMlpSteps] = {};
  __device__ void start() { t = clock64(); }
  __device__ void mark(int i) {
    const long long n = clock64();
    acc[i] += n - t;
    t = n;
  }
  __device__ void store(unsigned launch) const {
    if (g_mlp_steps && threadIdx.x == 0)
      for (int i = 0; i < kMlpSteps; i++)
        g_mlp_steps[(size_t(launch % kMlpTraceLaunches) * gridDim.x + blockIdx.x) * kMlpSteps + i] = acc[i];
  }
#else
  static constexpr bool on = false;
  __device__ void start() {}
  __device__ void mark(int) {}
  __device__ void store(unsigned) const {}
#endif
};

// PostMaps: the tensor maps of tpost_kernel's operands.
struct PostMaps {
  CUtensorMap o, ao; // output projection (C, Ko) in (64, 64) boxes; attention output (M, Ko)
  CUtensorMap gu, x; // gate-up (2F, C) in (48, 64) boxes; the residual stream y (M, C)
  CUtensorMap dn, h; // down (C, F) in (128, 64) boxes; gate-up's outputs (M, F)
  CUtensorMap q;     // the next layer's folded QKV weight (Nq, C) in (80, 64) boxes (read with has_q)
};

// part_store writes the accumulator rows < M (warp w holds rows 16 w ..,
// those past x's box garbage) to part (KS, M, C) as K part r's columns
// [n0, n0 + 8 NJ).
template <int NJ>
__device__ inline void part_store(const float (&d)[NJ][4], float *part, int M, int C, int r, int n0) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  if (16 * warp >= M) return;
#pragma unroll
  for (int j = 0; j < NJ; j++)
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
      const int m = 16 * warp + g + 8 * hh;
      if (m < M)
        *reinterpret_cast<float2 *>(part + (size_t(r) * M + m) * C + n0 + 8 * j + 2 * t) =
            make_float2(d[j][2 * hh], d[j][2 * hh + 1]);
    }
}

// tpost_kernel: see above. has_o: the output projection first (y += ao
// Wo^T); h and part scratch; y the residual stream, updated in place. x's
// boxes (ao, y, h) are XR rows: M <= XR. With qpart: after one more
// barrier the next layer's QKV projection of the new y, its folded
// weight (Nq, C) fetched while the down projection and its sum run, as
// float32 partial products over K (kPostQS, M, Nq) that dtk_rope_qkv
// sums: the QKV GEMM's kernel and its boundary go (the next kernel, RoPE,
// is small enough to wait on this grid's SMs).
template <int ST, int XR = kTmaRows>
__global__ void __launch_bounds__(160, 1)
    tpost_kernel(const __grid_constant__ PostMaps maps, bool has_o, __nv_bfloat16 *h, float *part, __nv_bfloat16 *y,
                 unsigned long long *bar, int M, int F, int C, int Ko, float eps, float *qpart, int Nq) {
#ifdef DLLM_TMA_DEVICE
  using T = __nv_bfloat16;
  constexpr int NH = 48, NG = 2 * NH, NO = 64, ND = kPostND, kH = NH * 128, kW = kPostW, RS = NG + 8;
  constexpr int kStage = post_stage(XR), kOver = (64 - XR) * 128;
  constexpr int kOBytes = NO * 128 + XR * 128, kGuBytes = 2 * kH + XR * 128, kDnBytes = kStage;
  extern __shared__ __align__(16) unsigned char smem_[];
  unsigned char *smem =
      reinterpret_cast<unsigned char *>((reinterpret_cast<uintptr_t>(smem_) + 1023) & ~uintptr_t(1023));
  // Past the ring and x's overhang (the 64-row A operand reads 64 - XR
  // rows on): gate-up's products for the SiLU step (the ring holds down
  // weights by then), the inverse RMS, the ring's barriers.
  float *red = reinterpret_cast<float *>(smem + ST * kStage + kOver); // (XR, RS)
  float *rinv = red + XR * RS;
  uint64_t *bars = reinterpret_cast<uint64_t *>(rinv + XR);
  const unsigned full0 = smem_u32(bars), empty0 = smem_u32(bars + ST);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, G = gridDim.x, b = blockIdx.x;
  // The phases' chunks are numbered on through the ring: the output
  // projection's CHo (slice no, K part ro), gate-up's CHg (gate rows [j0,
  // j0 + 48) and the same up rows), the down projection's CHd (slice nd,
  // K part rd).
  const int CHo = has_o ? Ko / 64 / kPostOS : 0, no = b / kPostOS, ro = b % kPostOS, ko0 = ro * CHo * 64;
  const int CHg = C / 64, j0 = b * NH, cg = CHo;
  const int CHd = F / 64 / kPostKS, nd = b / kPostKS, rd = b % kPostKS, kd0 = rd * CHd * 64, cd = CHo + CHg;
  const bool has_q = qpart != nullptr;
  const int CHq = has_q ? C / 64 / kPostQS : 0, nq = b / kPostQS, rq = b % kPostQS, kq0 = rq * CHq * 64,
            cq = cd + CHd;
  auto stage = [&](int c) { return smem_u32(smem + (c % ST) * kStage); };
  auto full = [&](int c) { return full0 + 8 * (c % ST); };
#ifdef DLLM_MLP_TRACE
  const unsigned long long t_start = gtimer();
  unsigned launch_no = 0;
#endif
  ring_init(full0, empty0, ST);

  if (warp == 4) {
    // 1. The copier. Weights go as soon as their stage is free; the
    // activations (ao, then y for gate-up, then h) once they exist: ao
    // after the PDL wait, y after the output projection's sum (named
    // barrier 3 with the multipliers), h after gate-up's (barrier 2). A
    // phase's weights issued ahead of its activations are at most those
    // whose stages the phase before frees (so that the copier never waits
    // for a stage that only its own later copies would free).
    auto wait_free = [&](int c) {
      if (c >= ST) mbar_wait(empty0 + 8 * (c % ST), (c / ST - 1) & 1);
    };
    auto o_w = [&](int i) {
      mbar_expect(full(i), kOBytes);
      tma_load2d(stage(i), maps.o, ko0 + 64 * i, no * NO, full(i));
    };
    auto gu_w = [&](int j) {
      const int c = cg + j;
      mbar_expect(full(c), kGuBytes - (MLP_SKIP(2) ? XR * 128 : 0) - (MLP_SKIP(4) ? 2 * kH : 0));
      if (MLP_SKIP(4)) return;
      tma_load2d(stage(c), maps.gu, 64 * j, j0, full(c));
      tma_load2d(stage(c) + kH, maps.gu, 64 * j, F + j0, full(c));
    };
    auto gu_x = [&](int j) {
      if (!MLP_SKIP(2)) tma_load2d(stage(cg + j) + kW, maps.x, 64 * j, 0, full(cg + j));
    };
    auto dn_w = [&](int i) {
      const int c = cd + i;
      mbar_expect(full(c), kDnBytes);
      tma_load2d(stage(c), maps.dn, kd0 + 64 * i, nd * ND, full(c));
    };
    auto q_w = [&](int j) {
      const int c = cq + j;
      mbar_expect(full(c), kPostNQ * 128 + XR * 128);
      tma_load2d(stage(c), maps.q, kq0 + 64 * j, nq * kPostNQ, full(c));
    };
    const int preg = min(ST, CHg), pred = min(ST, CHd);
    int g_issued = 0;
    if (lane == 0) {
      for (int i = 0; i < CHo; i++) o_w(i);
      for (; g_issued < preg && cg + g_issued < ST; g_issued++) gu_w(g_issued);
    }
    dep_wait();
    if (lane == 0) {
      for (int i = 0; i < CHo; i++) tma_load2d(stage(i) + kW, maps.ao, ko0 + 64 * i, 0, full(i));
      for (; g_issued < preg; g_issued++) wait_free(cg + g_issued), gu_w(g_issued);
    }
    __syncwarp();
    if (has_o) asm volatile("bar.sync 3, 160;" ::: "memory");
    if (lane == 0) {
      if (has_o) proxy_fence_global();
      for (int j = 0; j < preg; j++) gu_x(j);
      for (int j = preg; j < CHg; j++) {
        wait_free(cg + j);
        gu_w(j);
        gu_x(j);
      }
      for (int i = 0; i < pred; i++) wait_free(cd + i), dn_w(i);
    }
    __syncwarp();
    asm volatile("bar.sync 2, 160;" ::: "memory");
    if (lane == 0) {
      proxy_fence_global();
      for (int i = 0; i < pred; i++) tma_load2d(stage(cd + i) + kW, maps.h, kd0 + 64 * i, 0, full(cd + i));
      for (int i = pred; i < CHd; i++) {
        wait_free(cd + i);
        dn_w(i);
        tma_load2d(stage(cd + i) + kW, maps.h, kd0 + 64 * i, 0, full(cd + i));
      }
      // The QKV weights take the stages the down projection's first chunks
      // free; y's boxes come after its sum (named barrier 4).
      for (int j = 0; j < CHq; j++) wait_free(cq + j), q_w(j);
    }
    __syncwarp();
    if (has_q) {
      asm volatile("bar.sync 4, 160;" ::: "memory");
      if (lane == 0) {
        proxy_fence_global();
        for (int j = 0; j < CHq; j++) tma_load2d(stage(cq + j) + kW, maps.x, kq0 + 64 * j, 0, full(cq + j));
      }
      __syncwarp();
    }
    return;
  }

  // The multipliers. rel frees chunk c - 1's stage once chunk c's products
  // are issued (one group stays in flight), except at a phase's first
  // chunk: each phase frees its last chunk's stage once its products are
  // done.
  auto rel = [&](int c, bool first) {
    wg_wait1();
    __syncwarp();
    if (lane == 0 && !first) mbar_arrive(empty0 + 8 * ((c - 1) % ST));
  };
  auto rel_last = [&](int c) {
    __syncwarp();
    if (lane == 0) mbar_arrive(empty0 + 8 * (c % ST));
  };
  const int g = lane / 4, t = lane % 4;
  // sum_into_y: this CTA's C / G columns of every row, the KS parts summed
  // in order, then the residual, into y.
  auto sum_into_y = [&](int KS) {
    const int per = C / G;
    for (int u = tid; u < M * (per / 4); u += 128) {
      const int m = u / (per / 4), col = b * per + 4 * (u % (per / 4));
      float4 v = make_float4(0, 0, 0, 0);
      for (int q = 0; q < KS; q++) {
        const float4 p = __ldcg(reinterpret_cast<const float4 *>(part + (size_t(q) * M + m) * C + col));
        v.x += p.x, v.y += p.y, v.z += p.z, v.w += p.w;
      }
      T *o = y + size_t(m) * C + col;
      const uint2 rr = __ldcg(reinterpret_cast<const uint2 *>(o));
      const float2 r0 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&rr.x));
      const float2 r1 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&rr.y));
      v.x += r0.x, v.y += r0.y, v.z += r1.x, v.w += r1.y;
      __nv_bfloat162 o2[2] = {__floats2bfloat162_rn(v.x, v.y), __floats2bfloat162_rn(v.z, v.w)};
      *reinterpret_cast<uint2 *>(o) = *reinterpret_cast<const uint2 *>(o2);
    }
  };
  dep_wait();
#ifdef DLLM_MLP_TRACE
  launch_no = unsigned(ld_acquire_u64(bar) / (uint64_t((has_o ? 4 : 2) + (has_q ? 1 : 0)) * gridDim.x));
  if (g_mlp_trace && tid == 0)
    g_mlp_trace[(size_t(launch_no % kMlpTraceLaunches) * gridDim.x + blockIdx.x) * kMlpTraceMarks] = t_start;
#endif
  MLP_MARK(1);
  StepClock sc;

  // 2. The output projection: y += ao Wo^T (its parts, a barrier, the sum).
  if (has_o) {
    float d[NO / 8][4] = {};
    for (int i = 0; i < CHo; i++) {
      mma_chunk<NO>(d, i, ST, full0, stage(i), stage(i) + kW);
      rel(i, i == 0);
    }
    wg_wait(d);
    rel_last(CHo - 1);
    part_store(d, part, M, C, ro, no * NO);
    grid_sync(bar, G);
    dep_launch(); // every CTA of this grid is resident now
    MLP_MARK(8);
    sum_into_y(kPostOS);
    proxy_fence_global(); // y is read by other CTAs' TMA copies
    grid_sync(bar, G);
    MLP_MARK(9);
    asm volatile("bar.sync 3, 160;" ::: "memory");
  }

  // 3. Gate-up with its SiLU step (tgemm_gu_kernel's spread form), into h.
  {
    float d[NG / 8][4] = {};
    float ss[XR / 32] = {};
    sc.start();
    for (int j = 0; j < CHg; j++) {
      const int c = cg + j;
      if (StepClock::on) mbar_wait(full(c), (c / ST) & 1); // MLP_SKIP's builds: always
      sc.mark(0);
      if (!MLP_SKIP(1)) {
        mma_chunk<NG>(d, c, ST, full0, stage(c), stage(c) + kW);
        sc.mark(1);
        if (!MLP_SKIP(8)) x_squares<XR>(ss, smem + (c % ST) * kStage + kW, M);
      }
      sc.mark(2);
      rel(c, j == 0);
      sc.mark(3);
    }
    wg_wait(d);
    MLP_MARK(2);
    rel_last(cg + CHg - 1);
    x_rinv<XR>(ss, rinv, C, eps);
    MLP_MARK(10);
    silu_spread<XR>(d, red, rinv, h, M, F, j0); // its barrier also makes rinv visible
    MLP_MARK(3);
    proxy_fence_global(); // h is read by other CTAs' TMA copies
  }
  grid_sync(bar, G);
  MLP_MARK(4);
  if (!has_o) dep_launch();
  asm volatile("bar.sync 2, 160;" ::: "memory");

  // 4. The down projection: y += h Wd^T (its parts, a barrier, the sum).
  {
    float d[ND / 8][4] = {};
    sc.start();
    for (int i = 0; i < CHd; i++) {
      const int c = cd + i;
      if (StepClock::on) mbar_wait(full(c), (c / ST) & 1);
      sc.mark(4);
      mma_chunk<ND>(d, c, ST, full0, stage(c), stage(c) + kW);
      sc.mark(5);
      rel(c, i == 0);
      sc.mark(6);
    }
    wg_wait(d);
    MLP_MARK(5);
    if (has_q) rel_last(cd + CHd - 1);
    part_store(d, part, M, C, rd, nd * ND);
  }
  grid_sync(bar, G);
  MLP_MARK(6);
  sum_into_y(kPostKS);
  MLP_MARK(7);

  // 5. The next layer's QKV projection of y (its parts; RoPE sums them).
  if (has_q) {
    proxy_fence_global(); // y is read by other CTAs' TMA copies
    grid_sync(bar, G);
    asm volatile("bar.sync 4, 160;" ::: "memory");
    float d[kPostNQ / 8][4] = {};
    for (int j = 0; j < CHq; j++) {
      const int c = cq + j;
      mma_chunk<kPostNQ>(d, c, ST, full0, stage(c), stage(c) + kW);
      rel(c, j == 0);
    }
    wg_wait(d);
    part_store(d, qpart, M, Nq, rq, nq * kPostNQ);
  }
#ifdef DLLM_MLP_TRACE
  sc.store(launch_no);
#endif
#else
  __trap();
#endif
}
template <int ST, int XR = kTmaRows> constexpr size_t tpost_smem() {
  return 1024 + size_t(ST) * post_stage(XR) + (64 - XR) * 128 + XR * (96 + 8) * 4 + XR * 4 + 16 * ST;
}

// The driver's cuTensorMapEncodeTiled, found through the runtime (the shim
// links no libcuda of its own).
using EncodeTiled = CUresult (*)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                 const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
EncodeTiled encoder() {
  static EncodeTiled fn = [] {
    void *p = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      p = nullptr;
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return fn;
}

// tmap2d is the tensor map of a row-major (rows, cols) bf16 matrix read in
// (box_rows, 64) boxes with the 128-byte swizzle (rows past the end: zeros).
bool tmap2d(CUtensorMap *m, const void *p, int64_t rows, int64_t cols, int box_rows) {
  cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)}, strides[1] = {cuuint64_t(cols) * 2};
  cuuint32_t box[2] = {64, cuuint32_t(box_rows)}, es[2] = {1, 1};
  return encoder()(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void *>(p), dims, strides, box, es,
                   CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// tma_on: the device is a Hopper of compute capability 9.0 (sm_90a's
// target) and the driver encodes tensor maps.
bool tma_on() {
  static const bool on = [] {
    int dev = 0, major = 0, minor = 0;
    return cudaGetDevice(&dev) == cudaSuccess &&
           cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
           cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess && major == 9 &&
           minor == 0 && encoder() != nullptr;
  }();
  return on;
}

// tgemm launches tgemm_kernel<NW, KS, ST> for the maps.
template <int NW, int KS, int ST>
int tgemm(const CUtensorMap &wm, const CUtensorMap &xm, const void *res, void *out, int64_t M, int64_t N, int64_t K,
          cudaStream_t s) {
  constexpr size_t smem = tgemm_smem<NW, ST>();
  static const cudaError_t set =
      cudaFuncSetAttribute(tgemm_kernel<NW, KS, ST>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (set != cudaSuccess) return set;
  return launch_in(tgemm_kernel<NW, KS, ST>, dim3(static_cast<unsigned>(N / NW), KS), 160, smem, s, unsigned(KS), wm,
                   xm, static_cast<const __nv_bfloat16 *>(res), static_cast<__nv_bfloat16 *>(out), static_cast<int>(M),
                   static_cast<int>(N), static_cast<int>(K));
}

// tgemm_gu launches tgemm_gu_kernel<ST>.
template <int ST>
int tgemm_gu(const CUtensorMap &wm, const CUtensorMap &xm, __nv_bfloat16 *out, int64_t M, int64_t F, int64_t K,
             float eps, cudaStream_t s) {
  constexpr size_t smem = tgemm_gu_smem<ST>();
  static const cudaError_t set =
      cudaFuncSetAttribute(tgemm_gu_kernel<ST>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (set != cudaSuccess) return set;
  return launch(tgemm_gu_kernel<ST>, dim3(static_cast<unsigned>(F / 48)), 160, smem, s, wm, xm, out,
                static_cast<int>(M), static_cast<int>(F), static_cast<int>(K), eps);
}

// tpost launches tpost_kernel<ST, XR> over G CTAs, or says DTK_TMA_NO
// where the device cannot hold them all at once (the grid barriers would
// wait for ever).
template <int ST, int XR = kTmaRows>
int tpost(const PostMaps &maps, bool has_o, void *h, void *part, void *y, void *bar, int G, int64_t M, int64_t F,
          int64_t C, int64_t Ko, float eps, float *qpart, int64_t Nq, cudaStream_t s) {
  constexpr size_t smem = tpost_smem<ST, XR>();
  static const bool ok = [&] {
    int dev = 0, sms = 0, per = 0;
    return cudaFuncSetAttribute(tpost_kernel<ST, XR>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) ==
               cudaSuccess &&
           cudaGetDevice(&dev) == cudaSuccess &&
           cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
           cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, tpost_kernel<ST, XR>, 160, smem) == cudaSuccess &&
           per >= 1 && sms >= G;
  }();
  if (!ok) return DTK_TMA_NO;
  return launch(tpost_kernel<ST, XR>, dim3(static_cast<unsigned>(G)), 160, smem, s, maps, has_o,
                static_cast<__nv_bfloat16 *>(h), static_cast<float *>(part), static_cast<__nv_bfloat16 *>(y),
                static_cast<unsigned long long *>(bar), static_cast<int>(M), static_cast<int>(F), static_cast<int>(C),
                static_cast<int>(Ko), eps, qpart, static_cast<int>(Nq));
}

#pragma nv_diag_default 177
// tma_rows is the x box that M rows take in the persistent kernel:
// kTmaRows, 64 for a fused commit's 33-64 rows, else 0 (none).
int tma_rows(int64_t M) { return M >= 1 && M <= kTmaRows ? kTmaRows : M <= 64 ? 64 : 0; }
#endif // DLLM_SM90A

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
                 float eps, int fold_q, void *kside, void *vside, const float *parts, int nparts, void *stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (D % 2 != 0 || D / 2 > 1024 || (x && !x_ok(x, C, dtype)) || Hkv < 1 || H % Hkv != 0 || !kside != !vside ||
      (parts && (nparts < 1 || nparts > kRopeParts)) || (!parts && !qkv))
    return cudaErrorInvalidValue;
  if (dtype == kBF16)
    return rope_qkv<__nv_bfloat16>(qkv, cos, sin, pos, q, kcache, vcache, T, H, Hkv, D, x, C, eps, fold_q != 0,
                                   kside, vside, parts, nparts, s);
  if (dtype == kF16)
    return rope_qkv<__half>(qkv, cos, sin, pos, q, kcache, vcache, T, H, Hkv, D, x, C, eps, fold_q != 0, kside,
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

int dtk_tma_linear(int dtype, const void *x, const void *w, const void *resid, void *out, int64_t M, int64_t N,
                   int64_t K, void *stream) {
#ifdef DLLM_SM90A
  if (!tma_on() || dtype != kBF16 || M < 1 || M > kTmaRows || K % 64 != 0 || !aligned16(x) || !aligned16(w) ||
      !aligned16(out) || (resid && !aligned16(resid)))
    return DTK_TMA_NO;
  auto s = static_cast<cudaStream_t>(stream);
  CUtensorMap wm, xm;
  // The down projection's shape (K 6144) takes 128-row slices and K in
  // eight; the others 64-row slices and K in four (the probe's best).
  if (K >= 4096 && N % 128 == 0 && (K / 64) % 8 == 0) {
    if (!tmap2d(&wm, w, N, K, 128) || !tmap2d(&xm, x, M, K, kTmaRows)) return cudaErrorInvalidValue;
    return tgemm<128, 8, kDownStages>(wm, xm, resid, out, M, N, K, s);
  }
  if (N % 64 == 0 && (K / 64) % 4 == 0) {
    if (!tmap2d(&wm, w, N, K, 64) || !tmap2d(&xm, x, M, K, kTmaRows)) return cudaErrorInvalidValue;
    return tgemm<64, 4, kLinStages>(wm, xm, resid, out, M, N, K, s);
  }
#endif
  return DTK_TMA_NO;
}

int dtk_tma_gate_up_silu(int dtype, const void *x, const void *w, void *out, int64_t M, int64_t F, int64_t K,
                         float eps, void *stream) {
#ifdef DLLM_SM90A
  if (!tma_on() || dtype != kBF16 || M < 1 || M > kTmaRows || K % 64 != 0 || F % 48 != 0 || !aligned16(x) ||
      !aligned16(w) || !aligned16(out))
    return DTK_TMA_NO;
  CUtensorMap wm, xm;
  if (!tmap2d(&wm, w, 2 * F, K, 48) || !tmap2d(&xm, x, M, K, kTmaRows)) return cudaErrorInvalidValue;
  auto s = static_cast<cudaStream_t>(stream);
  auto o = static_cast<__nv_bfloat16 *>(out);
  return tgemm_gu<kGateUpStages>(wm, xm, o, M, F, K, eps, s);
#else
  return DTK_TMA_NO;
#endif
}

int dtk_tma_post(int dtype, void *y, const void *ao, const void *wo, int64_t Ko, const void *wgu, const void *wdown,
                 const void *wqkv, int64_t Nq, void *qpart, void *scratch, void *sync, int64_t M, int64_t F, int64_t C,
                 float eps, void *stream) {
#ifdef DLLM_SM90A
  // The grid: F / 48 gate-up slices; as many down parts (C / 128 slices of
  // 8 K parts) and output projection parts (C / 64 slices of 4).
  // MiniCPM5-2B: 128 CTAs.
  const int64_t G = F / 48;
  const bool has_o = ao != nullptr;
  const int xr = tma_rows(M);
  if (!tma_on() || dtype != kBF16 || xr == 0 || C % 128 != 0 ||
      F % 48 != 0 || (F / 64) % kPostKS != 0 || C / kPostND * kPostKS != G || C % (4 * G) != 0 ||
      (has_o && (C / 64 * kPostOS != G || Ko % (64 * kPostOS) != 0 || !aligned16(ao) || !aligned16(wo))) ||
      !aligned16(y) || !aligned16(wgu) || !aligned16(wdown) || !aligned16(scratch) || !sync ||
      reinterpret_cast<uintptr_t>(sync) % 8 != 0)
    return DTK_TMA_NO;
  // The next layer's QKV phase: a slice and K part for each CTA.
  if (wqkv && (!qpart || Nq % kPostNQ != 0 || Nq / kPostNQ * kPostQS != G ||
               (C / 64) % kPostQS != 0 || !aligned16(wqkv) || !aligned16(qpart)))
    return DTK_TMA_NO;
  auto h = static_cast<char *>(scratch);
  auto part = h + M * F * 2;
  PostMaps maps;
  if ((has_o && (!tmap2d(&maps.o, wo, C, Ko, 64) || !tmap2d(&maps.ao, ao, M, Ko, xr))) ||
      !tmap2d(&maps.gu, wgu, 2 * F, C, 48) || !tmap2d(&maps.x, y, M, C, xr) ||
      !tmap2d(&maps.dn, wdown, C, F, kPostND) || !tmap2d(&maps.h, h, M, F, xr) ||
      (wqkv && !tmap2d(&maps.q, wqkv, Nq, C, kPostNQ)))
    return cudaErrorInvalidValue;
  if (!has_o) maps.o = maps.ao = maps.x; // unread
  if (!wqkv) maps.q = maps.x;
  // A fused commit's 64 rows: 8 stages (the output projection's 8 chunks a
  // CTA, fetched at once), as 10 of 24 KB do not fit.
  if (xr == 64)
    return tpost<8, 64>(maps, has_o, h, part, y, sync, int(G), M, F, C, has_o ? Ko : 0, eps,
                        wqkv ? static_cast<float *>(qpart) : nullptr, Nq, static_cast<cudaStream_t>(stream));
  return tpost<10>(maps, has_o, h, part, y, sync, int(G), M, F, C, has_o ? Ko : 0, eps,
                   wqkv ? static_cast<float *>(qpart) : nullptr, Nq, static_cast<cudaStream_t>(stream));
#else
  return DTK_TMA_NO;
#endif
}

int64_t dtk_tma_post_scratch(int64_t M, int64_t F, int64_t C) {
#ifdef DLLM_SM90A
  return (M * F * 2 + 15) / 16 * 16 + int64_t(kPostKS) * M * C * 4;
#else
  return 0; // dtk_tma_post never runs
#endif
}

} // extern "C"
