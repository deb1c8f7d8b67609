// Could one persistent kernel a forward stream a layer's weights faster
// than the decoder's chain of kernels? The chain's four projections move
// 94.4 MB a layer at ~2.4 TB/s (38.8 us at 1k) where
// TMA copies alone reach ~3.9; between two kernels the next one's copies
// stop after its first stages until the kernel before has ended, and
// during the attention HBM idles. A persistent kernel's copier need never
// stop: the weights depend on nothing, only the products wait for the
// phase before. This probe moves the bytes only (no products): 132 CTAs,
// one an SM, each a copier thread streaming (64, 64) boxes of every
// phase of 42 layers (QKV, output, gate-up, down; MiniCPM5-2B's shapes)
// into a ring of ST 8 KB stages, and a consumer thread freeing them, the
// phases' boxes shared out evenly (as a stream-K split would). MODE bits:
//   1  a grid barrier at each phase's end: the consumer waits for every
//      CTA's consumer (the products' dependency);
//   2  an attention stand-in after each QKV phase: the consumer idles
//      STANDIN_US (the copier does not);
//   4  the copier too waits at each barrier once it has issued PRE boxes
//      of the next phase: the chain of kernels (PDL fetches the first
//      stages, then waits for the kernel before to end).
// It prints us a layer and the rate. Run on the GPU machine:
//
//     NV=$(python3 -c 'import torch,os;print(os.path.dirname(os.path.dirname(torch.__file__)))')/nvidia/cu13/lib
//     nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/pp probes/persist_stream_probe.cu -L$NV \
//         -l:libcublas.so.13 -l:libcublasLt.so.13 -Xlinker -rpath=$NV && /tmp/pp
// (or PROBES=persist_stream_probe.cu TESTS= CTX= scripts/gpu-speed.sh)
#define DLLM_SM90A
#include "../torch/csrc/kernels.cu"
#include "../torch/csrc/attention.cu"
#include "../torch/csrc/tma.cu"

#include "gpu_probe.cuh"

#include <cuda.h>

namespace {

constexpr int kPhases = 4, kLayers = 42, kBox = 64 * 64 * 2; // bytes of a (64, 64) box
// Phase p's weights (N, K): QKV, output, gate-up, down.
__host__ __device__ constexpr int pN(int p) { return p == 0 ? 2560 : p == 2 ? 12288 : 2048; }
__host__ __device__ constexpr int pK(int p) { return p == 3 ? 6144 : 2048; }
constexpr double kLayerMB = 94.4;

struct Maps {
  CUtensorMap m[kPhases];
};

__device__ inline unsigned ld_acquire(const unsigned *p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ inline unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// persist_kernel: see the file's comment. ctr counts the consumers that
// have finished a phase (zero at launch): phase g's barrier is passed at
// (g + 1) gridDim.x.
template <int ST, int MODE>
__global__ void __launch_bounds__(64)
    persist_kernel(const __grid_constant__ Maps maps, unsigned *ctr, int layers, int standin_ns, int pre) {
  extern __shared__ __align__(16) unsigned char smem_[];
  unsigned char *smem =
      reinterpret_cast<unsigned char *>((reinterpret_cast<uintptr_t>(smem_) + 1023) & ~uintptr_t(1023));
  uint64_t *bars = reinterpret_cast<uint64_t *>(smem + ST * kBox);
  const unsigned full0 = smem_u32(bars), empty0 = smem_u32(bars + ST);
  if (threadIdx.x == 0) {
    for (int s = 0; s < ST; s++) mbar_init(full0 + 8 * s, 1), mbar_init(empty0 + 8 * s, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const unsigned G = gridDim.x, b = blockIdx.x;
  if (threadIdx.x == 0) {
    // 1. The copier: every box of this CTA's share, phase after phase.
    int c = 0;
    for (int l = 0; l < layers; l++)
      for (int p = 0; p < kPhases; p++) {
        const int g = l * kPhases + p, kt = pK(p) / 64, T = pN(p) / 64 * kt;
        const int t0 = int(int64_t(T) * b / G), t1 = int(int64_t(T) * (b + 1) / G);
        for (int t = t0; t < t1; t++, c++) {
          if ((MODE & 4) && g > 0 && t - t0 == pre)
            while (ld_acquire(ctr) < unsigned(g) * G) {
            }
          const int s = c % ST;
          if (c >= ST) mbar_wait(empty0 + 8 * s, (c / ST - 1) & 1);
          mbar_expect(full0 + 8 * s, kBox);
          tma_load2d(smem_u32(smem + s * kBox), maps.m[p], 64 * (t % kt), l * pN(p) + 64 * (t / kt), full0 + 8 * s);
        }
      }
  } else if (threadIdx.x == 32) {
    // 2. The consumer: frees each stage as it lands; the barrier after
    // each phase, the attention stand-in after QKV's.
    int c = 0;
    for (int l = 0; l < layers; l++)
      for (int p = 0; p < kPhases; p++) {
        const int g = l * kPhases + p, T = pN(p) / 64 * (pK(p) / 64);
        const int n = int(int64_t(T) * (b + 1) / G) - int(int64_t(T) * b / G);
        for (int i = 0; i < n; i++, c++) {
          mbar_wait(full0 + 8 * (c % ST), (c / ST) & 1);
          mbar_arrive(empty0 + 8 * (c % ST));
        }
        if (MODE & 1) {
          __threadfence();
          atomicAdd(ctr, 1u);
          while (ld_acquire(ctr) < unsigned(g + 1) * G) {
          }
        }
        if ((MODE & 2) && p == 0) {
          const unsigned long long t = now_ns();
          while (now_ns() - t < unsigned(standin_ns)) {
          }
        }
      }
  }
}

} // namespace

int main() {
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  Maps maps;
  for (int p = 0; p < kPhases; p++) {
    const size_t n = size_t(kLayers) * pN(p) * pK(p);
    __nv_bfloat16 *w;
    CK(cudaMalloc(&w, n * 2));
    CK(cudaMemset(w, 0, n * 2));
    if (!tmap2d(&maps.m[p], w, int64_t(kLayers) * pN(p), pK(p), 64)) {
      std::fprintf(stderr, "tensor map %d\n", p);
      return 1;
    }
  }
  unsigned *ctr;
  CK(cudaMalloc(&ctr, 4));
  cudaEvent_t a, e;
  cudaEventCreate(&a);
  cudaEventCreate(&e);
  auto run = [&](auto kern, int st, const char *what, int standin_ns, int pre) {
    const size_t sm = 1024 + size_t(st) * kBox + 16 * st;
    CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sm)));
    std::vector<float> ts;
    for (int r = 0; r < 6; r++) {
      CK(cudaMemsetAsync(ctr, 0, 4, s));
      cudaEventRecord(a, s);
      CK(launch(kern, dim3(sms), 64, sm, s, maps, ctr, kLayers, standin_ns, pre));
      cudaEventRecord(e, s);
      CK(cudaEventSynchronize(e));
      CK(cudaGetLastError());
      float ms;
      cudaEventElapsedTime(&ms, a, e);
      if (r > 0) ts.push_back(ms);
    }
    std::sort(ts.begin(), ts.end());
    const double us = ts[ts.size() / 2] * 1e3 / kLayers, bytes_us = us - standin_ns / 1e3;
    std::printf("%-58s %2d stages: %5.1f us a layer, %5.1f past the stand-in (%4.0f GB/s)\n", what, st, us, bytes_us,
                kLayerMB * 1e3 / bytes_us);
  };
  run(persist_kernel<24, 0>, 24, "copies only", 0, 0);
  run(persist_kernel<8, 0>, 8, "copies only", 0, 0);
  run(persist_kernel<24, 1>, 24, "barriers (consumer)", 0, 0);
  run(persist_kernel<24, 3>, 24, "barriers, 9 us stand-in, copier runs on", 9000, 0);
  run(persist_kernel<8, 3>, 8, "barriers, 9 us stand-in, copier runs on", 9000, 0);
  // The chain's kernels fetch ~64 KB a CTA before their wait: 8 boxes.
  run(persist_kernel<24, 7>, 24, "barriers, 9 us stand-in, copier waits after 8 boxes", 9000, 8);
  run(persist_kernel<24, 5>, 24, "barriers, copier waits after 8 boxes", 0, 8);
  return 0;
}
