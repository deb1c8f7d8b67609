// lc_edge_probe.cu: is a programmatic graph edge from a kernel's
// launch-completion port safe and early? Kernel A (48 CTAs, no
// griddepcontrol, as cuDNN's) spins, then writes; kernel B (128 CTAs)
// enters, does griddepcontrol.wait, then checks A's writes; kernel C bumps
// the generation A writes. Per edge kind (default, launch completion):
// B's reads that missed A's writes (must be 0), and %globaltimer medians
// of B's first entry and of its last CTA past the wait, from A's last
// store. Usage: PROBES=lc_edge_probe.cu scripts/gpu-speed.sh (it builds
// the probe with nvcc against the wheel's cuBLAS, which gpu_probe.cuh, the
// probes' shared error check, includes).
#include "gpu_probe.cuh"

__device__ unsigned long long now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// stamps: [0] A's last store (max), [1] B's first entry (min), [2] B's last past the wait (max).
__global__ void a_kernel(int *data, const int *gen, unsigned long long *stamps, unsigned spin) {
  const unsigned long long t0 = now();
  while (now() - t0 < spin) {
  }
  data[blockIdx.x * blockDim.x + threadIdx.x] = *gen + 1;
  __syncthreads();
  if (threadIdx.x == 0) atomicMax(&stamps[0], now());
}

__global__ void b_kernel(const int *data, const int *gen, int n, unsigned *bad, unsigned long long *stamps) {
  if (threadIdx.x == 0) atomicMin(&stamps[1], now());
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const int want = *gen + 1;
  unsigned miss = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) miss += data[i] != want;
  if (miss) atomicAdd(bad, miss);
  __syncthreads();
  if (threadIdx.x == 0) atomicMax(&stamps[2], now());
}

__global__ void c_kernel(int *gen, unsigned long long *stamps, unsigned long long *log, int it) {
  *gen += 1;
  log[3 * it] = stamps[0], log[3 * it + 1] = stamps[1], log[3 * it + 2] = stamps[2];
  stamps[0] = 0, stamps[1] = ~0ull, stamps[2] = 0;
}

int main() {
  const int nA = 48, nB = 128, threads = 128, n = nA * threads, iters = 400;
  int *data, *gen;
  unsigned *bad;
  unsigned long long *stamps, *log;
  CK(cudaMalloc(&data, n * sizeof(int)));
  CK(cudaMalloc(&gen, sizeof(int)));
  CK(cudaMalloc(&bad, sizeof(unsigned)));
  CK(cudaMalloc(&stamps, 3 * sizeof(unsigned long long)));
  CK(cudaMalloc(&log, 3 * iters * sizeof(unsigned long long)));
  for (unsigned spin : {5000u, 20000u})
    for (int lc = 0; lc < 2; lc++) {
      CK(cudaMemset(data, 0, n * sizeof(int)));
      CK(cudaMemset(gen, 0, sizeof(int)));
      CK(cudaMemset(bad, 0, sizeof(unsigned)));
      unsigned long long init[3] = {0, ~0ull, 0};
      CK(cudaMemcpy(stamps, init, sizeof init, cudaMemcpyHostToDevice));
      cudaGraph_t g;
      CK(cudaGraphCreate(&g, 0));
      std::vector<cudaGraphNode_t> last;
      for (int it = 0; it < iters; it++) {
        cudaKernelNodeParams pa = {}, pb = {}, pc = {};
        void *aa[] = {&data, &gen, &stamps, &spin};
        int nn = n;
        void *ba[] = {&data, &gen, &nn, &bad, &stamps};
        int itv = it;
        void *ca[] = {&gen, &stamps, &log, &itv};
        pa.func = (void *)a_kernel, pa.gridDim = dim3(nA), pa.blockDim = dim3(threads), pa.kernelParams = aa;
        pb.func = (void *)b_kernel, pb.gridDim = dim3(nB), pb.blockDim = dim3(threads), pb.kernelParams = ba;
        pc.func = (void *)c_kernel, pc.gridDim = dim3(1), pc.blockDim = dim3(1), pc.kernelParams = ca;
        cudaGraphNode_t a, b, c;
        CK(cudaGraphAddKernelNode(&a, g, last.data(), last.size(), &pa));
        CK(cudaGraphAddKernelNode(&b, g, nullptr, 0, &pb));
        cudaGraphEdgeData ed = {};
        if (lc) ed.from_port = cudaGraphKernelNodePortLaunchCompletion, ed.type = cudaGraphDependencyTypeProgrammatic;
        CK(cudaGraphAddDependencies(g, &a, &b, &ed, 1));
        CK(cudaGraphAddKernelNode(&c, g, &b, 1, &pc));
        last = {c};
      }
      cudaGraphExec_t ge;
      CK(cudaGraphInstantiate(&ge, g, 0));
      for (int rep = 0; rep < 3; rep++) CK(cudaGraphLaunch(ge, 0));
      CK(cudaDeviceSynchronize());
      unsigned b = 0;
      std::vector<unsigned long long> h(3 * iters);
      CK(cudaMemcpy(&b, bad, sizeof b, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(h.data(), log, h.size() * sizeof h[0], cudaMemcpyDeviceToHost));
      std::vector<double> entry, pass;
      for (int it = 0; it < iters; it++) {
        entry.push_back((double(h[3 * it + 1]) - double(h[3 * it])) / 1000);
        pass.push_back((double(h[3 * it + 2]) - double(h[3 * it])) / 1000);
      }
      std::sort(entry.begin(), entry.end());
      std::sort(pass.begin(), pass.end());
      std::printf("spin %5u ns, %-18s edge: stale reads %u; B's first entry %+.2f us, B's last CTA done %+.2f us "
                  "(medians from A's last store; p90 %+.2f)\n",
                  spin, lc ? "launch-completion" : "default", b, entry[iters / 2], pass[iters / 2],
                  pass[iters * 9 / 10]);
      CK(cudaGraphExecDestroy(ge));
      CK(cudaGraphDestroy(g));
    }
  return 0;
}
