// How long does a kernel boundary cost once the next kernel is already
// resident? A producer (64 CTAs, one an SM) spins ~20 us, writes, and
// ends; a consumer (64 CTAs on the other SMs) waits for it, then checks
// that it sees every write. Three hand-offs, each timed with %globaltimer
// from the producer's last CTA's end to the consumer's CTAs passing:
//   pdl   the consumer launched with PDL (the producer lets it launch at its
//         start) waits in griddepcontrol.wait, as every kernel of the shim;
//   flag  the same launch, but each producer CTA adds one to a counter after
//         its writes (a fence first) and the consumer polls for its launch's
//         count (the persistent kernel's grid barrier across two kernels);
//   plain no PDL: the consumer launches when the producer is done.
//
//     nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/pw probes/pdl_wait_probe.cu && /tmp/pw
// (or PROBES=pdl_wait_probe.cu TESTS= CTX= scripts/gpu-speed.sh)
#include "gpu_probe.cuh" // CK

namespace {

constexpr int kG = 64, kThreads = 128, kIters = 64;
constexpr size_t kSmem = 120 << 10; // one CTA an SM, so the two grids take different SMs

__device__ inline unsigned long long gtime() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void producer(unsigned long long *t_end, unsigned long long *cnt, int *data, int iter, bool flag) {
  extern __shared__ char smem[];
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const unsigned long long t0 = gtime();
  while (gtime() - t0 < 20000) {
  }
  smem[threadIdx.x] = 1;
  data[blockIdx.x * kThreads + threadIdx.x] = iter;
  __syncthreads();
  if (threadIdx.x == 0) {
    if (flag) {
      __threadfence();
      atomicAdd(cnt, 1ull);
    }
    t_end[iter * kG + blockIdx.x] = gtime();
  }
}

__global__ void consumer(unsigned long long *t_pass, const unsigned long long *cnt, unsigned long long target,
                         const int *data, int iter, bool flag, int *bad) {
  extern __shared__ char smem[];
  smem[threadIdx.x] = 1;
  if (flag) {
    if (threadIdx.x == 0) {
      unsigned long long v;
      do {
        asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(cnt) : "memory");
      } while (v < target);
    }
    __syncthreads();
  } else {
    asm volatile("griddepcontrol.wait;" ::: "memory");
  }
  if (threadIdx.x == 0) t_pass[iter * kG + blockIdx.x] = gtime();
  for (int i = threadIdx.x; i < kG * kThreads; i += kThreads)
    if (__ldcg(data + i) != iter) atomicAdd(bad, 1);
}

template <typename... P, typename... A> void launch(void (*k)(P...), bool pdl, cudaStream_t s, A... a) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = kG, cfg.blockDim = kThreads, cfg.dynamicSmemBytes = kSmem, cfg.stream = s;
  cudaLaunchAttribute at;
  at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at.val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cfg.attrs = &at, cfg.numAttrs = 1;
  CK(cudaLaunchKernelEx(&cfg, k, static_cast<P>(a)...));
}

} // namespace

int main() {
  CK(cudaFuncSetAttribute(producer, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
  CK(cudaFuncSetAttribute(consumer, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  unsigned long long *t_end, *t_pass, *cnt;
  int *data, *bad;
  CK(cudaMalloc(&t_end, kIters * kG * 8));
  CK(cudaMalloc(&t_pass, kIters * kG * 8));
  CK(cudaMalloc(&cnt, 8));
  CK(cudaMalloc(&data, kG * kThreads * 4));
  CK(cudaMalloc(&bad, 4));
  std::printf("%-6s %10s %10s %10s %6s   (us from the producer's last CTA's end; median of %d)\n", "mode",
              "first CTA", "median", "last CTA", "bad", kIters - 8);
  for (int mode = 0; mode < 3; mode++) {
    const bool flag = mode == 1, pdl = mode < 2;
    CK(cudaMemset(cnt, 0, 8));
    CK(cudaMemset(bad, 0, 4));
    CK(cudaMemset(data, 0xff, kG * kThreads * 4));
    CK(cudaStreamSynchronize(s));
    // The producer waits for the consumer before it (no PDL): one pair at a time.
    for (int i = 0; i < kIters; i++) {
      launch(producer, false, s, t_end, cnt, data, i, flag);
      launch(consumer, pdl, s, t_pass, cnt, (unsigned long long)(i + 1) * kG, data, i, flag, bad);
    }
    CK(cudaStreamSynchronize(s));
    std::vector<unsigned long long> te(kIters * kG), tp(kIters * kG);
    int hb = 0;
    CK(cudaMemcpy(te.data(), t_end, te.size() * 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(tp.data(), t_pass, tp.size() * 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&hb, bad, 4, cudaMemcpyDeviceToHost));
    std::vector<double> first, med, last;
    for (int i = 8; i < kIters; i++) {
      const unsigned long long end = *std::max_element(te.begin() + i * kG, te.begin() + (i + 1) * kG);
      std::vector<double> d;
      for (int b = 0; b < kG; b++) d.push_back((double(tp[i * kG + b]) - double(end)) / 1e3);
      std::sort(d.begin(), d.end());
      first.push_back(d.front()), med.push_back(d[d.size() / 2]), last.push_back(d.back());
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const char *name[] = {"pdl", "flag", "plain"};
    std::printf("%-6s %10.2f %10.2f %10.2f %6d\n", name[mode], median(first), median(med), median(last), hb);
  }
  return 0;
}
