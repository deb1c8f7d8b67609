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
constexpr int kF16 = 5, kBF16 = 15;

__device__ inline float f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline float f32(__half x) { return __half2float(x); }
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

template <typename T> int rms_norm(const void *x, const void *w, void *out, int64_t rows, int64_t C, float eps,
                                   cudaStream_t s) {
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
  int64_t n = Tn * F;
  int blocks = static_cast<int>((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
  silu_mul_kernel<T><<<blocks, 256, 0, s>>>(static_cast<const T *>(gu), static_cast<T *>(out), Tn, F);
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

} // extern "C"
