// gpu_probe.cuh: what the standalone CUDA probes (probes/gemm_*_probe.cu)
// share: an error check, random bf16 buffers, a cuBLAS handle, the error
// of one GEMM's output against another's, and the time of a call in a CUDA
// graph that cycles over copies of its weights (so the H200's 50 MB L2
// cannot serve repeated reads).
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#define CK(x)                                                                                                    \
  do {                                                                                                           \
    auto e_ = (x);                                                                                               \
    if (e_ != 0) {                                                                                               \
      std::fprintf(stderr, "%s:%d: %s = %d\n", __FILE__, __LINE__, #x, (int)e_);                               \
      std::exit(1);                                                                                              \
    }                                                                                                            \
  } while (0)

namespace probe {

constexpr int kCopies = 12, kReps = 4; // weight copies cycled; rounds of them in a graph

__global__ void fill(__nv_bfloat16 *p, size_t n, unsigned seed, float scale) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  unsigned h = unsigned(i) * 2654435761u ^ seed;
  h ^= h >> 13, h *= 0x5bd1e995u, h ^= h >> 15;
  p[i] = __float2bfloat16(((h & 0xffff) / 65535.f - 0.5f) * scale);
}

// rand_bf16 is n device values uniform in [-scale/2, scale/2).
inline __nv_bfloat16 *rand_bf16(size_t n, unsigned seed, float scale) {
  __nv_bfloat16 *p;
  CK(cudaMalloc(&p, n * 2));
  fill<<<(n + 255) / 256, 256>>>(p, n, seed, scale);
  return p;
}

// timed is microseconds per call of f(r), r cycling over the kCopies
// weight copies, in a CUDA graph (the median of 9 replays).
inline double timed(cudaStream_t s, const std::function<void(int)> &f) {
  for (int r = 0; r < kCopies; r++) f(r); // warm, outside capture
  CK(cudaStreamSynchronize(s));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int k = 0; k < kReps; k++)
    for (int r = 0; r < kCopies; r++) f(r);
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiateWithFlags(&ge, g, 0));
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < 3; i++) CK(cudaGraphLaunch(ge, s));
  std::vector<float> ts;
  for (int i = 0; i < 9; i++) {
    cudaEventRecord(a, s);
    CK(cudaGraphLaunch(ge, s));
    cudaEventRecord(b, s);
    CK(cudaEventSynchronize(b));
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    ts.push_back(ms);
  }
  std::sort(ts.begin(), ts.end());
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ts[ts.size() / 2] * 1e3 / (kReps * kCopies);
}

// cublas_on is a cuBLAS handle on a new non-blocking stream *s, with a
// 32 MB workspace (what PyTorch gives cuBLAS on Hopper).
inline cublasHandle_t cublas_on(cudaStream_t *s) {
  CK(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking));
  cublasHandle_t h;
  CK(cublasCreate(&h));
  CK(cublasSetStream(h, *s));
  void *ws;
  CK(cudaMalloc(&ws, 32u << 20));
  CK(cublasSetWorkspace(h, ws, 32u << 20));
  return h;
}

// product_err runs want and got into o1 and o2, each starting from base (n
// values), and is the RMS of got's output less want's over that of want's
// less base: how far one GEMM's out = base + product is from another's,
// relative to the product.
inline double product_err(cudaStream_t s, const std::function<void(__nv_bfloat16 *)> &want,
                          const std::function<void(__nv_bfloat16 *)> &got, __nv_bfloat16 *o1, __nv_bfloat16 *o2,
                          const __nv_bfloat16 *base, size_t n) {
  CK(cudaMemcpy(o1, base, n * 2, cudaMemcpyDeviceToDevice));
  CK(cudaMemcpy(o2, base, n * 2, cudaMemcpyDeviceToDevice));
  want(o1);
  got(o2);
  CK(cudaStreamSynchronize(s));
  std::vector<__nv_bfloat16> g(n), w(n), b(n);
  CK(cudaMemcpy(g.data(), o2, n * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(w.data(), o1, n * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(b.data(), base, n * 2, cudaMemcpyDeviceToHost));
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double a = __bfloat162float(g[i]), c = __bfloat162float(w[i]), r = __bfloat162float(b[i]);
    num += (a - c) * (a - c), den += (c - r) * (c - r);
  }
  return std::sqrt(num / den);
}

} // namespace probe
