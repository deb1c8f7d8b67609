// kernels_common.cuh: what the kernel files share (kernels.cu,
// attention.cu, tma.cu): the dtype codes, rounding as HF's float ops round,
// programmatic dependent launch (dep_wait, launch_in), block sums, the
// tensor-core and cp.async helpers, and dtk_tune's settings. Internal to
// the shim.
#pragma once

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

namespace dllm_kernels {
inline int g_pdl = -1;
inline int g_splits_cap = 64, g_ctas_per_sm = 2, g_min_tiles = 1;
} // namespace dllm_kernels

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

// Settings dtk_tune changes for probes, one copy for every file of the
// kernels (inline variables); the defaults are what the decoder runs with.
// g_pdl < 0: from the device (compute capability 9 or later).
using dllm_kernels::g_pdl, dllm_kernels::g_splits_cap, dllm_kernels::g_ctas_per_sm, dllm_kernels::g_min_tiles;

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

} // namespace
