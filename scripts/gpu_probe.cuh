// gpu_probe.cuh: what the standalone CUDA probes (scripts/gemm_lt_probe.cu,
// scripts/gemm_pdl_probe.cu) share: an error check, random bf16 buffers,
// and the time of a call in a CUDA graph that cycles over copies of its
// weights (so the H200's 50 MB L2 cannot serve repeated reads).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
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

} // namespace probe
