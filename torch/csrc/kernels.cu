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


// --- skinny GEMM on tensor cores ---------------------------------------------
//
// A decode step multiplies 1-64 rows by weights of 8-50 MB: the time is
// reading the weight, so the kernel is shaped for bandwidth, as Marlin is.
// Each CTA owns a 64-row slice of w (kBN) and a range of K, streamed in
// 128-wide K blocks through a kStages-deep cp.async pipeline (16 KB of
// weight per stage, XOR-swizzled so ldmatrix is conflict-free). The eight
// warps split each K block: warp w multiplies its 16 columns of the whole
// slice (as mma.sync's A operand, 16 weight rows at a time) by the same
// columns of every row of x (the B operand, 8 rows at a time), so shared
// memory is read once per stage; the warps' sums meet in shared memory at
// the end. Split-K spreads the few slices of the smaller weights over
// every SM; the last CTA of a slice to finish (a counter per slice) sums
// the float32 partials in split order and applies the epilogue.

constexpr int kBN = 64, kBK = 128, kStages = 4, kWarps = 8, kThreads = kWarps * 32;

__device__ inline unsigned smem_u32(const void *p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

// cp_async16 copies 16 bytes, or writes 16 zero bytes when !full.
__device__ inline void cp_async16(unsigned dst, const void *src, bool full) {
  int n = full ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ inline void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ inline void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ inline void ldsm_x4(unsigned addr, unsigned *r) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
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

// swz is the element offset of 16-byte chunk c of row r in a tile of kBK
// wide rows: the chunk index XOR the row's low bits, so the eight rows one
// ldmatrix reads at the same chunk land in eight different bank groups.
__device__ inline int swz(int r, int c) { return r * kBK + ((c ^ (r & 7)) << 3); }

// gemm_smem is the dynamic shared memory of a CTA for NT tiles of 8 rows of
// x: the pipeline, then reused for the warps' partial sums.
template <typename T, int NT> constexpr size_t gemm_smem() {
  size_t pipe = size_t(kStages) * (kBN + 16 * ((NT + 1) / 2)) * kBK * sizeof(T);
  size_t red = size_t(kWarps) * kBN * (8 * NT + 1) * sizeof(float);
  return pipe > red ? pipe : red;
}

// Grid (N / kBN slices, splits); split s covers K blocks [s nk, (s+1) nk).
// NT is the number of 8-row tiles of x (M <= 8 NT).
template <typename T, int NT>
__global__ void __launch_bounds__(kThreads, NT <= 4 ? 2 : 1)
    gemm_kernel(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ resid, T *__restrict__ out,
                int M, int64_t N, int64_t K, int mode, int nk, float *__restrict__ ws, int *__restrict__ counters) {
  constexpr int XR = 16 * ((NT + 1) / 2); // rows of x in shared memory, zero past M
  constexpr int CH = kBK / 8;             // 16-byte chunks per row
  constexpr int TP = 8 * NT + 1;          // padded row of the partial sums
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ int last;
  T *Ws = reinterpret_cast<T *>(smem); // (kStages, kBN, kBK)
  T *Xs = Ws + kStages * kBN * kBK;    // (kStages, XR, kBK)
  const int tile = blockIdx.x, split = blockIdx.y, tiles = gridDim.x, splits = gridDim.y;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t half = N / 2, k0 = int64_t(split) * nk * kBK;

  // Each thread copies chunk c of rows r0 + 16 j. A SILU slice is 32 rows
  // of gate and the same 32 rows of up.
  const int r0 = tid / CH, c = tid % CH;
  constexpr int RS = kThreads / CH; // rows per pass
  const T *wp[kBN / RS];
#pragma unroll
  for (int j = 0; j < kBN / RS; j++) {
    int r = r0 + RS * j;
    int64_t row = mode == DTK_GEMM_SILU ? (r < 32 ? tile * 32 + r : half + tile * 32 + r - 32) : int64_t(tile) * kBN + r;
    wp[j] = w + row * K + k0 + c * 8;
  }
  auto load = [&](int stage, int kb) {
    T *ws_ = Ws + stage * kBN * kBK, *xs = Xs + stage * XR * kBK;
    int64_t kofs = int64_t(kb) * kBK;
#pragma unroll
    for (int j = 0; j < kBN / RS; j++) cp_async16(smem_u32(ws_ + swz(r0 + RS * j, c)), wp[j] + kofs, true);
#pragma unroll
    for (int j = 0; j < (XR + RS - 1) / RS; j++) {
      int r = r0 + RS * j;
      if (r < XR) cp_async16(smem_u32(xs + swz(r, c)), r < M ? x + r * K + k0 + kofs + c * 8 : x, r < M);
    }
  };

  // 1. Main loop: kStages - 1 blocks in flight while one is multiplied;
  // warp w takes the block's columns [16 w, 16 w + 16).
  float acc[kBN / 16][NT][4] = {};
#pragma unroll
  for (int s = 0; s < kStages - 1; s++) {
    if (s < nk) load(s, s);
    cp_commit();
  }
  for (int kb = 0; kb < nk; kb++) {
    cp_wait<kStages - 2>();
    __syncthreads(); // block kb is in; every warp is done with block kb - 1's stage
    if (kb + kStages - 1 < nk) load((kb + kStages - 1) % kStages, kb + kStages - 1);
    cp_commit();
    const T *wsb = Ws + (kb % kStages) * kBN * kBK, *xs = Xs + (kb % kStages) * XR * kBK;
    unsigned xf[(NT + 1) / 2][4]; // 16 rows of x each: b0, b1 of two 8-row tiles
#pragma unroll
    for (int p = 0; p < (NT + 1) / 2; p++)
      ldsm_x4(smem_u32(xs + swz(16 * p + lane % 8 + (lane / 16) * 8, 2 * warp + (lane / 8) % 2)), xf[p]);
#pragma unroll
    for (int i = 0; i < kBN / 16; i++) {
      unsigned wf[4];
      ldsm_x4(smem_u32(wsb + swz(16 * i + lane % 16, 2 * warp + lane / 16)), wf);
#pragma unroll
      for (int j = 0; j < NT; j++) mma<T>(acc[i][j], wf, xf[j / 2][(j % 2) * 2], xf[j / 2][(j % 2) * 2 + 1]);
    }
  }
  cp_wait<0>();
  __syncthreads(); // the pipeline's memory becomes the partial sums

  // 2. Each warp's (kBN, 8 NT) sums into shared memory; own(m, n) is the
  // CTA's product for row m of x and row n of the slice.
  float *red = reinterpret_cast<float *>(smem); // (kWarps, kBN, TP)
#pragma unroll
  for (int i = 0; i < kBN / 16; i++) {
#pragma unroll
    for (int j = 0; j < NT; j++) {
      float *d = red + (warp * kBN + 16 * i + lane / 4) * TP + 8 * j + 2 * (lane % 4);
      d[0] = acc[i][j][0], d[1] = acc[i][j][1], d[8 * TP] = acc[i][j][2], d[8 * TP + 1] = acc[i][j][3];
    }
  }
  __syncthreads();
  auto own = [&](int m, int n) {
    float v = 0;
#pragma unroll
    for (int q = 0; q < kWarps; q++) v += red[(q * kBN + n) * TP + m];
    return v;
  };

  // 3. Split-K: publish the partial (M, kBN) tile; the last CTA of the
  // slice goes on with the sum of all of them in split order.
  if (splits > 1) {
    float *part = ws + (int64_t(split) * tiles + tile) * M * kBN;
    for (int i = tid; i < M * kBN; i += kThreads) part[i] = own(i / kBN, i % kBN);
    __threadfence();
    __syncthreads();
    if (tid == 0) last = atomicAdd(counters + tile, 1) == splits - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    if (tid == 0) counters[tile] = 0; // ready for the next call
  }
  auto val = [&](int m, int n) {
    if (splits == 1) return own(m, n);
    float v = 0;
    for (int p = 0; p < splits; p++) v += __ldcg(ws + ((int64_t(p) * tiles + tile) * M + m) * kBN + n);
    return v;
  };

  // 4. Epilogue.
  if (mode == DTK_GEMM_SILU) {
    for (int i = tid; i < M * 32; i += kThreads) {
      int m = i / 32, col = i % 32;
      float g = round<T>(val(m, col)), u = round<T>(val(m, 32 + col));
      out[m * half + tile * 32 + col] = cast<T>(round<T>(g / (1.0f + __expf(-g))) * u);
    }
  } else {
    for (int i = tid; i < M * kBN; i += kThreads) {
      int m = i / kBN, col = i % kBN;
      int64_t o = m * N + int64_t(tile) * kBN + col;
      out[o] = cast<T>(val(m, col) + (resid ? f32(resid[o]) : 0.0f));
    }
  }
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

// gemm_splits is the largest split of K's blocks (at least two blocks each)
// that keeps the grid within four CTAs per SM: enough CTAs that every SM
// streams weight at once, without partial sums that cost more traffic than
// they save.
int gemm_splits(int64_t N, int64_t K) {
  int64_t tiles = N / kBN, kb = K / kBK, best = 1;
  for (int64_t s = 1; s <= kb / 2; s++)
    if (kb % s == 0 && tiles * s <= 4 * sm_count()) best = s;
  return static_cast<int>(best);
}

template <typename T, int NT>
int gemm(int mode, const void *x, const void *w, const void *resid, void *out, int64_t M, int64_t N, int64_t K,
         int splits, float *ws, int *counters, cudaStream_t s) {
  constexpr size_t smem = gemm_smem<T, NT>();
  static bool attr = false; // above 48 KB dynamic shared memory must be asked for
  if (!attr) {
    cudaError_t e = cudaFuncSetAttribute(gemm_kernel<T, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem));
    if (e != cudaSuccess) return e;
    attr = true;
  }
  dim3 grid(static_cast<unsigned>(N / kBN), static_cast<unsigned>(splits));
  gemm_kernel<T, NT><<<grid, kThreads, smem, s>>>(static_cast<const T *>(x), static_cast<const T *>(w),
                                                   static_cast<const T *>(resid), static_cast<T *>(out),
                                                   static_cast<int>(M), N, K, mode, static_cast<int>(K / kBK / splits),
                                                   ws, counters);
  return cudaGetLastError();
}

template <typename T>
int gemm_rows(int mode, const void *x, const void *w, const void *resid, void *out, int64_t M, int64_t N, int64_t K,
              int splits, float *ws, int *counters, cudaStream_t s) {
  if (M <= 8) return gemm<T, 1>(mode, x, w, resid, out, M, N, K, splits, ws, counters, s);
  if (M <= 16) return gemm<T, 2>(mode, x, w, resid, out, M, N, K, splits, ws, counters, s);
  if (M <= 32) return gemm<T, 4>(mode, x, w, resid, out, M, N, K, splits, ws, counters, s);
  return gemm<T, 8>(mode, x, w, resid, out, M, N, K, splits, ws, counters, s);
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

int dtk_gemm(int dtype, int mode, const void *x, const void *w, const void *resid, void *out, int64_t M, int64_t N,
             int64_t K, int splits, float *ws, int *counters, void *stream) {
  auto s = static_cast<cudaStream_t>(stream);
  auto misaligned = [](const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15) != 0; };
  if (M < 1 || M > DTK_GEMM_MAX_M || K % kBK != 0 || N % kBN != 0 || misaligned(x) || misaligned(w) ||
      (mode != DTK_GEMM_PLAIN && mode != DTK_GEMM_SILU))
    return cudaErrorInvalidValue;
  if (splits <= 0) splits = gemm_splits(N, K);
  if ((K / kBK) % splits != 0 || (splits > 1 && (ws == nullptr || counters == nullptr))) return cudaErrorInvalidValue;
  if (dtype == kBF16) return gemm_rows<__nv_bfloat16>(mode, x, w, resid, out, M, N, K, splits, ws, counters, s);
  if (dtype == kF16) return gemm_rows<__half>(mode, x, w, resid, out, M, N, K, splits, ws, counters, s);
  return cudaErrorInvalidValue;
}

int64_t dtk_gemm_ws_floats(int64_t M, int64_t N, int64_t K) {
  if (N % kBN != 0 || K % kBK != 0) return 0;
  int splits = gemm_splits(N, K);
  return splits > 1 ? splits * M * N : 0;
}

} // extern "C"
