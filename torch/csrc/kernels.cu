// kernels.cu: the elementwise and row-wise steps of the decoder's layer as
// single kernels. Done with libtorch ops they are ~30 launches per layer
// (an HF-exact RMSNorm alone is eight), which at a few microseconds each is
// most of a decode step; here they are three. The arithmetic rounds to the
// model dtype exactly where HF's float ops do, so results stay within the
// plain path's rounding.

#include "kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

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

// One block per row; blockDim.x threads stride over the C columns.
template <typename T>
__global__ void rms_norm_kernel(const T *x, const T *w, T *out, int64_t C, float eps) {
  const T *xr = x + blockIdx.x * C;
  T *yr = out + blockIdx.x * C;
  float ss = 0;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    float v = f32(xr[i]);
    ss += v * v;
  }
  // Block sum: warp shuffles, then one value per warp through shared memory.
  __shared__ float part[32];
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffff, ss, o);
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) part[warp] = ss;
  __syncthreads();
  if (warp == 0) {
    ss = lane < (blockDim.x + 31) / 32 ? part[lane] : 0;
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffff, ss, o);
    if (lane == 0) part[0] = ss;
  }
  __syncthreads();
  float r = rsqrtf(part[0] / static_cast<float>(C) + eps);
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
  __shared__ float part[32];
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffff, ss, o);
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) part[warp] = ss;
  __syncthreads();
  if (warp == 0) {
    ss = lane < (blockDim.x + 31) / 32 ? part[lane] : 0;
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffff, ss, o);
    if (lane == 0) part[0] = ss;
  }
  __syncthreads();
  float r = rsqrtf(part[0] / static_cast<float>(chunks * E) + eps);
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

// Grid (T, H + 2 Hkv): one block per token and head of the fused output,
// D/2 threads, each rotating the pair (i, i + D/2).
template <typename T>
__global__ void rope_qkv_kernel(const T *qkv, const T *cos, const T *sin, const int64_t *pos, T *q, T *kc, T *vc,
                                int64_t H, int64_t Hkv, int64_t D) {
  int64_t t = blockIdx.x, h = blockIdx.y, half = D / 2, i = threadIdx.x;
  const T *src = qkv + (t * (H + 2 * Hkv) + h) * D;
  int64_t p = pos[t];
  if (h >= H + Hkv) { // a value head: copied as is
    T *dst = vc + (p * Hkv + (h - H - Hkv)) * D;
    dst[i] = src[i];
    dst[i + half] = src[i + half];
    return;
  }
  T *dst = h < H ? q + (t * H + h) * D : kc + (p * Hkv + (h - H)) * D;
  const T *c = cos + p * D, *s = sin + p * D;
  float x1 = f32(src[i]), x2 = f32(src[i + half]);
  // x*cos + rotate_half(x)*sin with rotate_half(x) = (-x2, x1).
  dst[i] = cast<T>(round<T>(x1 * f32(c[i])) + round<T>(-x2 * f32(s[i])));
  dst[i + half] = cast<T>(round<T>(x2 * f32(c[i + half])) + round<T>(x1 * f32(s[i + half])));
}

// silu_mul_vec_kernel is silu_mul_kernel 16 bytes at a time (F % 8 == 0).
template <typename T> __global__ void silu_mul_vec_kernel(const T *gu, T *out, int64_t T_, int64_t F) {
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
  int64_t n = T_ * F;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x) {
    int64_t t = k / F, j = k % F;
    float g = f32(gu[t * 2 * F + j]), u = f32(gu[t * 2 * F + F + j]);
    out[k] = cast<T>(round<T>(g / (1.0f + __expf(-g))) * u);
  }
}

// One warp per weight row n: each lane streams 8 elements (16 bytes) of the
// row at a time, unrolled so that several loads are in flight, and dots
// them with the same 8 elements of x, which the block first copies into
// shared memory; a warp sum, then lane 0 writes out[n].
template <typename T>
__global__ void gemv_kernel(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ resid,
                            T *__restrict__ out, int64_t N, int64_t K) {
  extern __shared__ uint4 xs[]; // K / 8 chunks of x
  int64_t chunks = K / 8;
  const uint4 *xg = reinterpret_cast<const uint4 *>(x);
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) xs[c] = xg[c];
  __syncthreads();
  int64_t n = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (n >= N) return;
  const uint4 *wr = reinterpret_cast<const uint4 *>(w + n * K);
  float acc = 0;
#pragma unroll 8
  for (int64_t c = lane; c < chunks; c += 32) {
    uint4 wv = __ldg(wr + c), xv = xs[c];
    const T *we = reinterpret_cast<const T *>(&wv), *xe = reinterpret_cast<const T *>(&xv);
#pragma unroll
    for (int e = 0; e < 8; e++) acc += f32(we[e]) * f32(xe[e]);
  }
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffff, acc, o);
  if (lane == 0) out[n] = cast<T>(acc + (resid ? f32(resid[n]) : 0.0f));
}

template <typename T>
int gemv(const void *x, const void *w, const void *resid, void *out, int64_t N, int64_t K, cudaStream_t s) {
  constexpr int warps = 8;
  auto grid = static_cast<unsigned>((N + warps - 1) / warps);
  size_t smem = static_cast<size_t>(K) * sizeof(T);
  gemv_kernel<T><<<grid, warps * 32, smem, s>>>(static_cast<const T *>(x), static_cast<const T *>(w),
                                                static_cast<const T *>(resid), static_cast<T *>(out), N, K);
  return cudaGetLastError();
}

template <typename T, int V> int rms_norm_vec(const void *x, const void *w, void *out, int64_t rows, int chunks,
                                              float eps, cudaStream_t s) {
  int threads = (chunks + V - 1) / V;
  threads = (threads + 31) / 32 * 32;
  rms_norm_vec_kernel<T, V><<<rows, threads, 0, s>>>(static_cast<const T *>(x), static_cast<const T *>(w),
                                                     static_cast<T *>(out), chunks, eps);
  return cudaGetLastError();
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
  rms_norm_kernel<T><<<rows, 256, 0, s>>>(static_cast<const T *>(x), static_cast<const T *>(w),
                                          static_cast<T *>(out), C, eps);
  return cudaGetLastError();
}

template <typename T>
int rope_qkv(const void *qkv, const void *cos, const void *sin, const int64_t *pos, void *q, void *kc, void *vc,
             int64_t Tn, int64_t H, int64_t Hkv, int64_t D, cudaStream_t s) {
  dim3 grid(Tn, H + 2 * Hkv);
  rope_qkv_kernel<T><<<grid, D / 2, 0, s>>>(static_cast<const T *>(qkv), static_cast<const T *>(cos),
                                            static_cast<const T *>(sin), pos, static_cast<T *>(q),
                                            static_cast<T *>(kc), static_cast<T *>(vc), H, Hkv, D);
  return cudaGetLastError();
}

template <typename T> int silu_mul(const void *gu, void *out, int64_t Tn, int64_t F, cudaStream_t s) {
  constexpr int E = 16 / sizeof(T);
  auto aligned = [](const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  if (F % E == 0 && aligned(gu) && aligned(out)) {
    int64_t n = Tn * F / E;
    int blocks = static_cast<int>((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
    silu_mul_vec_kernel<T><<<blocks, 256, 0, s>>>(static_cast<const T *>(gu), static_cast<T *>(out), Tn, F);
    return cudaGetLastError();
  }
  int64_t n = Tn * F;
  int blocks = static_cast<int>((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
  silu_mul_kernel<T><<<blocks, 256, 0, s>>>(static_cast<const T *>(gu), static_cast<T *>(out), Tn, F);
  return cudaGetLastError();
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

__device__ inline float block_sum(float s) {
  __shared__ float ss[32];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) ss[warp] = s;
  __syncthreads();
  s = 0;
  for (int w = 0; w < blockDim.x / 32; w++) s += ss[w];
  return s;
}

// Grid (n rows, slices of slice columns); -inf and the mask column count as
// absent. Threads take whole 16-byte chunks when vec (then slice % E == 0).
template <typename T>
__global__ void pick_part_kernel(const T *logits, int64_t V, int64_t slice, int64_t mask, bool vec, Part *parts) {
  constexpr int E = 16 / sizeof(T);
  const T *row = logits + blockIdx.x * V;
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
  if (threadIdx.x == 0) parts[blockIdx.x * gridDim.y + blockIdx.y] = Part{m, s, a};
}

// One thread per row merges its slices in order: p = 1 / sum exp(x - max).
__global__ void pick_merge_kernel(const Part *parts, int n, int slices, double *out) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
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
int pick_greedy(const void *logits, int64_t n, int64_t V, int64_t mask, double *out, void *scratch, cudaStream_t s) {
  constexpr int E = 16 / sizeof(T);
  int64_t slices = pick_slices(V), slice = (V + slices - 1) / slices;
  bool vec = (reinterpret_cast<uintptr_t>(logits) & 15) == 0 && V % E == 0;
  if (vec) slice = (slice + E - 1) / E * E;
  auto *parts = static_cast<Part *>(scratch);
  pick_part_kernel<T><<<dim3(static_cast<unsigned>(n), static_cast<unsigned>(slices)), kPickThreads, 0, s>>>(
      static_cast<const T *>(logits), V, slice, mask, vec, parts);
  pick_merge_kernel<<<static_cast<unsigned>((n + 127) / 128), 128, 0, s>>>(parts, static_cast<int>(n),
                                                                           static_cast<int>(slices), out);
  return cudaGetLastError();
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

int dtk_rope_qkv(int dtype, const void *qkv, const void *cos, const void *sin, const int64_t *pos, void *q,
                 void *kcache, void *vcache, int64_t T, int64_t H, int64_t Hkv, int64_t D, void *stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (D % 2 != 0 || D / 2 > 1024) return cudaErrorInvalidValue;
  if (dtype == kBF16) return rope_qkv<__nv_bfloat16>(qkv, cos, sin, pos, q, kcache, vcache, T, H, Hkv, D, s);
  if (dtype == kF16) return rope_qkv<__half>(qkv, cos, sin, pos, q, kcache, vcache, T, H, Hkv, D, s);
  return cudaErrorInvalidValue;
}

int dtk_silu_mul(int dtype, const void *gu, void *out, int64_t T, int64_t F, void *stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (dtype == kBF16) return silu_mul<__nv_bfloat16>(gu, out, T, F, s);
  if (dtype == kF16) return silu_mul<__half>(gu, out, T, F, s);
  return cudaErrorInvalidValue;
}

int dtk_gemv(int dtype, const void *x, const void *w, const void *resid, void *out, int64_t N, int64_t K,
             void *stream) {
  auto s = static_cast<cudaStream_t>(stream);
  auto misaligned = [](const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15) != 0; };
  if (K % 8 != 0 || K > DTK_GEMV_MAX_K || misaligned(x) || misaligned(w)) return cudaErrorInvalidValue;
  if (dtype == kBF16) return gemv<__nv_bfloat16>(x, w, resid, out, N, K, s);
  if (dtype == kF16) return gemv<__half>(x, w, resid, out, N, K, s);
  return cudaErrorInvalidValue;
}

int dtk_pick_greedy(int dtype, const void *logits, int64_t n, int64_t V, int64_t mask, double *out, void *scratch,
                    void *stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (n < 1 || n > 65535 || V < 1 || scratch == nullptr) return cudaErrorInvalidValue;
  if (dtype == kBF16) return pick_greedy<__nv_bfloat16>(logits, n, V, mask, out, scratch, s);
  if (dtype == kF16) return pick_greedy<__half>(logits, n, V, mask, out, scratch, s);
  if (dtype == kF32) return pick_greedy<float>(logits, n, V, mask, out, scratch, s);
  return cudaErrorInvalidValue;
}

int64_t dtk_pick_greedy_scratch(int64_t n, int64_t V) { return n * pick_slices(V) * static_cast<int64_t>(sizeof(Part)); }

} // extern "C"
