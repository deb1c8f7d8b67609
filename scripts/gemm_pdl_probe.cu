// Can a GEMM of ours beat cuBLAS at 32 rows by loading its weights before
// griddepcontrol.wait, while the kernel before it still runs? A kernel
// launched with programmatic dependent launch may read anything the kernel
// before does not write; cuBLAS's kernels are not launched that way, so
// they start reading only when their predecessor is done.
//
// The probe times, in CUDA graphs cycling over 12 weight copies (so the
// 50 MB L2 cannot serve them): a stand-in for the attention that precedes
// the output projection (a kernel that holds two 80 KB CTAs an SM for
// ~8 us and reads nothing), then the projection out (32, N) += x (32, K)
// W^T through cublasGemmEx (beta 1, in place, as the decoder's addmm_) or
// through pgemm_kernel below: split-K tiles of 64 weight rows x KP of K,
// the weight tile in shared memory before the wait, x after it, mma.sync,
// the last CTA of a row slice summing the float32 partials in order. It
// prints each alone, each after the stand-in, and the error of ours
// against cuBLAS. docs/performance.md has the figures.
//
//     NV=$(python3 -c 'import torch,os;print(os.path.dirname(os.path.dirname(torch.__file__)))')/nvidia/cu13/lib
//     nvcc -O2 -std=c++17 -arch=sm_90 -o /tmp/pg scripts/gemm_pdl_probe.cu -L$NV \
//         -l:libcublas.so.13 -l:libcublasLt.so.13 -Xlinker -rpath=$NV && /tmp/pg
#include "../torch/csrc/kernels.cu" // the shim's helpers: launch, dep_wait, cp_async16, ldsm_x4, mma

#include "gpu_probe.cuh"

#include <cublas_v2.h>

#include <cmath>

namespace {

using bf16 = __nv_bfloat16;
using probe::kCopies;
using probe::rand_bf16;
using probe::timed;
constexpr int kM = 32, kNS = 64;

// The attention stand-in: 80 KB of shared memory a CTA, two CTAs an SM,
// a spin of the given cycles; it lets the next kernel launch at once, as
// the shim's attention does.
__global__ void busy_kernel(long long cycles) {
  dep_wait();
  dep_launch();
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

// pgemm_kernel: grid (N / kNS, KS = K / KP), 128 threads; warp w owns weight
// rows [16 w, 16 w + 16) of its slice and all kM rows of x. stop > 0 ends
// it early to time its parts (wrong results): 1 after the partials are
// written (no sum), 2 after the loads.
template <int KP, int KS>
__global__ void __launch_bounds__(128)
    pgemm_kernel(const bf16 *__restrict__ x, const bf16 *__restrict__ w, bf16 *out, int N, int K, float *part,
                 unsigned *count, int stop) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int CH = KP / 8; // 16-byte chunks a row
  bf16 *Ws = reinterpret_cast<bf16 *>(smem); // (kNS, KP)
  bf16 *Xs = Ws + kNS * KP;                  // (kM, KP)
  auto swz = [](int r, int c) { return r * KP + ((c ^ (r & 7)) << 3); };
  const int ns = blockIdx.x, kp = blockIdx.y;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  // 1. The weight tile, before the wait.
  const bf16 *wg = w + int64_t(ns) * kNS * K + int64_t(kp) * KP;
  for (int i = tid; i < kNS * CH; i += 128) {
    int r = i / CH, c = i % CH;
    cp_async16(smem_u32(Ws + swz(r, c)), wg + int64_t(r) * K + c * 8, true);
  }
  cp_commit();
  dep_wait();
  dep_launch();
  // 2. x's tile once the kernel before is done.
  const bf16 *xg = x + int64_t(kp) * KP;
  for (int i = tid; i < kM * CH; i += 128) {
    int r = i / CH, c = i % CH;
    cp_async16(smem_u32(Xs + swz(r, c)), xg + int64_t(r) * K + c * 8, true);
  }
  cp_commit();
  cp_wait<0>();
  __syncthreads();
  if (stop == 2) return;

  // 3. acc (16 weight rows, kM) over the tile's K.
  float acc[kM / 8][4] = {};
#pragma unroll 4
  for (int kk = 0; kk < KP / 16; kk++) {
    unsigned a[4];
    ldsm_x4(smem_u32(Ws + swz(warp * 16 + lane % 16, 2 * kk + lane / 16)), a);
#pragma unroll
    for (int p = 0; p < kM / 16; p++) {
      unsigned b[4];
      ldsm_x4(smem_u32(Xs + swz(16 * p + lane % 8 + (lane / 16) * 8, 2 * kk + (lane / 8) % 2)), b);
      mma<bf16>(acc[2 * p], a, b[0], b[1]);
      mma<bf16>(acc[2 * p + 1], a, b[2], b[3]);
    }
  }
  // Element e of acc[j]: weight row lane/4 + 8 (e/2) of the warp's 16,
  // x row 8 j + 2 (lane%4) + e%2.
  auto n_of = [&](int e) { return ns * kNS + warp * 16 + lane / 4 + 8 * (e / 2); };
  auto m_of = [&](int j, int e) { return 8 * j + 2 * (lane % 4) + e % 2; };
  if (KS == 1) {
#pragma unroll
    for (int j = 0; j < kM / 8; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        bf16 *o = out + int64_t(m_of(j, e)) * N + n_of(e);
        *o = __float2bfloat16(__bfloat162float(*o) + acc[j][e]);
      }
    return;
  }
  // 4. Split-K: partials out, the last CTA of the slice sums them in order.
  float *pp = part + int64_t(kp) * kM * N;
#pragma unroll
  for (int j = 0; j < kM / 8; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) pp[int64_t(m_of(j, e)) * N + n_of(e)] = acc[j][e];
  if (stop == 1) return;
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  if (tid == 0) last = atomicAdd(count + ns, 1u) == unsigned(KS - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();
  // All of a thread's loads in flight at once (KS is known): a loop of
  // dependent L2 reads here cost ~8 us.
  constexpr int PER = kM * kNS / 128;
  float sum[PER] = {};
#pragma unroll
  for (int k = 0; k < KS; k++) {
#pragma unroll
    for (int q = 0; q < PER; q++) {
      int i = tid + 128 * q, m = i / kNS, n = ns * kNS + i % kNS;
      sum[q] += __ldcg(part + (int64_t(k) * kM + m) * N + n);
    }
  }
#pragma unroll
  for (int q = 0; q < PER; q++) {
    int i = tid + 128 * q, m = i / kNS, n = ns * kNS + i % kNS;
    bf16 *o = out + int64_t(m) * N + n;
    *o = __float2bfloat16(__bfloat162float(*o) + sum[q]);
  }
  if (tid == 0) count[ns] = 0;
}

} // namespace

int main() {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasHandle_t bh;
  CK(cublasCreate(&bh));
  CK(cublasSetStream(bh, s));
  void *ws;
  CK(cudaMalloc(&ws, 32u << 20));
  CK(cublasSetWorkspace(bh, ws, 32u << 20));
  constexpr size_t kBusySmem = 80 * 1024;
  CK(cudaFuncSetAttribute(busy_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kBusySmem)));
  const long long cycles = 16000; // ~8 us at 1.98 GHz
  auto busy = [&] { CK(launch(busy_kernel, 2 * sm_count(), 128, kBusySmem, s, cycles)); };
  std::printf("stand-in alone: %.1f us\n", timed(s, [&](int) { busy(); }));

  struct Shape {
    const char *name;
    int n, k;
  } shapes[] = {{"o", 2048, 2048}, {"qkv", 2560, 2048}};
  for (auto &sh : shapes) {
    std::vector<bf16 *> W;
    for (int r = 0; r < kCopies; r++) W.push_back(rand_bf16(size_t(sh.n) * sh.k, 17 + r, 0.04f));
    bf16 *x = rand_bf16(size_t(kM) * sh.k, 5, 2.f), *res = rand_bf16(size_t(kM) * sh.n, 7, 1.f);
    bf16 *o1, *o2;
    CK(cudaMalloc(&o1, size_t(kM) * sh.n * 2));
    CK(cudaMalloc(&o2, size_t(kM) * sh.n * 2));
    float *part;
    unsigned *count;
    CK(cudaMalloc(&part, size_t(8) * kM * sh.n * 4));
    CK(cudaMalloc(&count, size_t(sh.n / kNS) * 4));
    CK(cudaMemset(count, 0, size_t(sh.n / kNS) * 4));
    float one = 1.f;
    auto cublas = [&](int r, bf16 *o) {
      CK(cublasGemmEx(bh, CUBLAS_OP_T, CUBLAS_OP_N, sh.n, kM, sh.k, &one, W[r], CUDA_R_16BF, sh.k, x, CUDA_R_16BF,
                      sh.k, &one, o, CUDA_R_16BF, sh.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    auto ours = [&](int r, bf16 *o, int kp, int stop = 0) {
      size_t smem = size_t(kNS + kM) * kp * 2;
      dim3 grid(sh.n / kNS, sh.k / kp);
      auto go = [&](auto kernel) {
        CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        CK(launch(kernel, grid, 128, smem, s, x, W[r], o, sh.n, sh.k, part, count, stop));
      };
      if (sh.k != 2048) std::exit(2); // KS below is 2048 / KP
      if (kp == 512) go(pgemm_kernel<512, 4>);
      else go(pgemm_kernel<256, 8>);
    };
    for (int kp : {512, 256}) {
      // Exactness: both from the same residual.
      CK(cudaMemcpy(o1, res, size_t(kM) * sh.n * 2, cudaMemcpyDeviceToDevice));
      CK(cudaMemcpy(o2, res, size_t(kM) * sh.n * 2, cudaMemcpyDeviceToDevice));
      cublas(0, o1);
      ours(0, o2, kp);
      CK(cudaStreamSynchronize(s));
      std::vector<bf16> h1(size_t(kM) * sh.n), h2(h1.size());
      CK(cudaMemcpy(h1.data(), o1, h1.size() * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(h2.data(), o2, h2.size() * 2, cudaMemcpyDeviceToHost));
      double num = 0, den = 0;
      for (size_t i = 0; i < h1.size(); i++) {
        double a = __bfloat162float(h2[i]), b = __bfloat162float(h1[i]);
        num += (a - b) * (a - b), den += b * b;
      }
      // The outputs accumulate across timed calls; only their time counts.
      double tc = timed(s, [&](int r) { cublas(r, o1); });
      double to = timed(s, [&](int r) { ours(r, o2, kp); });
      double tbc = timed(s, [&](int r) { busy(), cublas(r, o1); });
      double tbo = timed(s, [&](int r) { busy(), ours(r, o2, kp); });
      // Its parts, and without PDL (the stand-in then launches it at the end).
      double tload = timed(s, [&](int r) { ours(r, o2, kp, 2); });
      double tpart = timed(s, [&](int r) { ours(r, o2, kp, 1); });
      dtk_tune(0, -1, -1, -1);
      double tn = timed(s, [&](int r) { ours(r, o2, kp); });
      double tbn = timed(s, [&](int r) { busy(), ours(r, o2, kp); });
      dtk_tune(1, -1, -1, -1);
      std::printf("%-4s KP=%d: alone cuBLAS %5.1f ours %5.1f us; after the stand-in cuBLAS %5.1f ours %5.1f us; "
                  "ours vs cuBLAS rel err %.1e\n",
                  sh.name, kp, tc, to, tbc, tbo, std::sqrt(num / den));
      std::printf("%-4s KP=%d: ours' parts alone: loads %5.1f, + products and partials %5.1f, + their sum %5.1f us; "
                  "without PDL alone %5.1f, after the stand-in %5.1f us\n",
                  sh.name, kp, tload, tpart, to, tn, tbn);
    }
    for (auto p : W) cudaFree(p);
    cudaFree(x), cudaFree(res), cudaFree(o1), cudaFree(o2), cudaFree(part), cudaFree(count);
  }
  return 0;
}
