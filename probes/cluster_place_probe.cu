// Where the hardware puts the CTAs of a clustered launch on the H200, and
// what that costs a bandwidth-bound kernel: each CTA of a 128-CTA grid
// streams its share of 25 MB (the down projection's weights) with 16-byte
// loads, launched as 16 clusters of 8, 32 of 4, 64 of 2 and unclustered,
// with dynamic shared memory that lets 1 or 2 CTAs share an SM. Prints the
// SMs holding 2 CTAs and the median time (cudaEvent times of the kernel
// alone, its launch included). docs/history.md has the figures.
// nvcc -O2 -arch=sm_90 -o /tmp/cp
// probes/cluster_place_probe.cu && /tmp/cp
#include <algorithm>
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>

__global__ void stream(const uint4 *w, size_t per, int *smid, float *sink) {
  extern __shared__ int s[];
  const int b = blockIdx.y * gridDim.x + blockIdx.x;
  if (threadIdx.x == 0) {
    int id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    smid[b] = id;
    s[0] = 0;
  }
  const uint4 *p = w + size_t(b) * per;
  unsigned acc = 0;
  // 8 loads in flight a thread (64 KB a CTA), as a TMA ring keeps.
  for (size_t i = threadIdx.x; i < per; i += 8 * blockDim.x) {
    uint4 v[8];
#pragma unroll
    for (int u = 0; u < 8; u++) v[u] = __ldcs(p + i + u * blockDim.x);
#pragma unroll
    for (int u = 0; u < 8; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x12345678u) sink[0] = float(acc) + s[0];
}

int main() {
  const size_t bytes = 25165824, n = bytes / 16;
  uint4 *w;
  int *smid;
  float *sink;
  cudaMalloc(&w, 8 * bytes);
  cudaMemset(w, 1, 8 * bytes); // 8 copies read in turn: none is in the L2 cache when read
  cudaMalloc(&smid, 4096);
  cudaMalloc(&sink, 16);
  cudaFuncSetAttribute(stream, cudaFuncAttributeMaxDynamicSharedMemorySize, 200000);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  // 99,392 bytes (the down projection's) allow two CTAs an SM, 124,000 one.
  for (int smem : {99392, 124000})
    for (int cl : {8, 4, 2, 1}) {
      const int ctas = 128;
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(1, ctas);
      cfg.blockDim = dim3(512);
      cfg.dynamicSmemBytes = smem;
      cudaLaunchAttribute at[1];
      at[0].id = cudaLaunchAttributeClusterDimension;
      at[0].val.clusterDim.x = 1, at[0].val.clusterDim.y = cl, at[0].val.clusterDim.z = 1;
      cfg.attrs = at;
      cfg.numAttrs = cl > 1 ? 1 : 0;
      std::vector<float> ms;
      int doubled = 0; // SMs that ran two of a launch's CTAs (at once, or one after the other)
      for (int r = 0; r < 60; r++) {
        cudaEventRecord(a);
        cudaError_t e = cudaLaunchKernelEx(&cfg, stream, (const uint4 *)w + (r % 8) * n, n / ctas, smid, sink);
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        if (e != cudaSuccess) {
          printf("launch: %s\n", cudaGetErrorString(e));
          break;
        }
        float t;
        cudaEventElapsedTime(&t, a, b);
        ms.push_back(t);
        std::vector<int> h(ctas), cnt(256, 0);
        cudaMemcpy(h.data(), smid, ctas * 4, cudaMemcpyDeviceToHost);
        for (int x : h) cnt[x]++;
        int d = 0;
        for (int c : cnt) d += c > 1;
        doubled = std::max(doubled, d);
      }
      std::sort(ms.begin(), ms.end());
      const float med = ms.size() ? ms[ms.size() / 2] : 0.f;
      printf("smem %6d cluster %d: most SMs with 2+ CTAs %3d, median %.2f us (%.2f TB/s)\n", smem, cl, doubled,
             med * 1000, med > 0 ? bytes / (med * 1e9) : 0.f);
    }
}
