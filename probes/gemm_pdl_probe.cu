// Can a GEMM of ours beat cuBLAS at 32 rows by loading its weights before
// griddepcontrol.wait, while the kernel before it still runs? A kernel
// launched with programmatic dependent launch may read anything the kernel
// before does not write; cuBLAS's kernels are not launched that way, so
// they start reading only when their predecessor is done.
//
// The probe times, in CUDA graphs cycling over 12 weight copies (so the
// 50 MB L2 cannot serve them): a stand-in for the attention that precedes
// the output projection (a kernel that holds two 80 KB CTAs an SM for
// ~8 us and reads nothing), then a layer's four projections out (M, N) +=
// x (M, K) W^T at 32 and 64 rows through cublasGemmEx (beta 1, in place, as
// the decoder's addmm_) or through two GEMMs of ours whose split-K
// partial products are summed in a thread block cluster's shared memory:
// cgemm_kernel (one weight tile a CTA, loaded before the wait) and
// skgemm_kernel (persistent, the weights through a cp.async ring). It
// prints each alone, after the stand-in (also with an all-shared L1
// carveout), without its sums, without PDL, and its error against
// cuBLAS. docs/history.md has the figures (a first cut that summed
// through global memory is in its history, commit 30e822c).
//
//     NV=$(python3 -c 'import torch,os;print(os.path.dirname(os.path.dirname(torch.__file__)))')/nvidia/cu13/lib
//     nvcc -O2 -std=c++17 -arch=sm_90 -o /tmp/pg probes/gemm_pdl_probe.cu -L$NV \
//         -l:libcublas.so.13 -l:libcublasLt.so.13 -Xlinker -rpath=$NV && /tmp/pg
#include "../torch/csrc/kernels.cu" // the shim's helpers: launch_in, dep_wait, cp_async16, ldsm_x4, mma
#include "../torch/csrc/attention.cu"
#include "../torch/csrc/tma.cu"

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

// Thread block clusters (Hopper): the CTAs of a cluster run at once and may
// read each other's shared memory (cluster_rank and cluster_sync are the
// shim's).
// ld_peer2 is two floats at shared address a of the cluster's CTA rank.
__device__ inline float2 ld_peer2(unsigned a, unsigned rank) {
  unsigned r;
  float2 v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
  asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(r));
  return v;
}

// cgemm_kernel: out (M, N) += x (M, K) W^T, one tile a CTA. Grid (N / kNS,
// KS) in clusters of the KS CTAs of a 64-row weight slice (1, KS, 1); 128
// threads, warp w owns weight rows [16 w, 16 w + 16) of its slice and all
// M rows of x. Each CTA takes KP = K / KS of K: its weight tile comes into
// shared memory before the wait, x's after. The KS partial products meet
// in shared memory: after a cluster barrier each CTA sums 1/KS of the
// slice's outputs over the KS CTAs in rank order (deterministic) and adds
// them to out. stop = 1 ends it after the products (wrong results; times
// the rest).
template <int M, int KP, int KS>
__global__ void __launch_bounds__(128)
    cgemm_kernel(const bf16 *__restrict__ x, const bf16 *__restrict__ w, bf16 *out, int N, int K, int stop) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int CH = KP / 8;  // 16-byte chunks a row
  constexpr int PP = kNS + 4; // the partials' pitch (floats): no bank conflicts writing them
  bf16 *Ws = reinterpret_cast<bf16 *>(smem);  // (kNS, KP)
  bf16 *Xs = Ws + kNS * KP;                   // (M, KP)
  float *P = reinterpret_cast<float *>(smem); // (M, PP) after the products, over Ws
  static_assert(M * PP * 4 <= kNS * KP * 2, "partials fit where the weights were");
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
  // 2. x's tile and this CTA's share of the residual once the kernel before is done.
  const bf16 *xg = x + int64_t(kp) * KP;
  for (int i = tid; i < M * CH; i += 128) {
    int r = i / CH, c = i % CH;
    cp_async16(smem_u32(Xs + swz(r, c)), xg + int64_t(r) * K + c * 8, true);
  }
  cp_commit();
  constexpr int SHARE = M * kNS / 2 / KS, V = (SHARE + 127) / 128; // float2 a CTA, a thread
  static_assert(M * kNS / 2 % KS == 0, "shares split evenly");
  const unsigned rank = cluster_rank();
  int off[V];
  __nv_bfloat162 res[V];
  bf16 *o[V];
#pragma unroll
  for (int v = 0; v < V; v++) {
    int j = tid + 128 * v, i = 2 * (int(rank) * SHARE + (j < SHARE ? j : 0)), m = i / kNS, nl = i % kNS;
    off[v] = m * PP + nl;
    o[v] = j < SHARE ? out + int64_t(m) * N + ns * kNS + nl : nullptr;
    if (o[v]) res[v] = *reinterpret_cast<const __nv_bfloat162 *>(o[v]);
  }
  cp_wait<0>();
  __syncthreads();

  // 3. acc (16 weight rows, M) over the tile's K.
  float acc[M / 8][4] = {};
#pragma unroll 4
  for (int kk = 0; kk < KP / 16; kk++) {
    unsigned a[4];
    ldsm_x4(smem_u32(Ws + swz(warp * 16 + lane % 16, 2 * kk + lane / 16)), a);
#pragma unroll
    for (int p = 0; p < M / 16; p++) {
      unsigned b[4];
      ldsm_x4(smem_u32(Xs + swz(16 * p + lane % 8 + (lane / 16) * 8, 2 * kk + (lane / 8) % 2)), b);
      mma<bf16>(acc[2 * p], a, b[0], b[1]);
      mma<bf16>(acc[2 * p + 1], a, b[2], b[3]);
    }
  }
  if (stop == 1) return;
  // 4. The partials into shared memory: element e of acc[j] is weight row
  // 16 warp + lane/4 + 8 (e/2) of the slice, x row 8 j + 2 (lane%4) + e%2.
  __syncthreads(); // every warp is done with Ws
#pragma unroll
  for (int j = 0; j < M / 8; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) P[(8 * j + 2 * (lane % 4) + e % 2) * PP + warp * 16 + lane / 4 + 8 * (e / 2)] = acc[j][e];
  // 5. This CTA's share of the outputs, summed over the cluster in rank order.
  cluster_sync();
  float2 sum[V] = {};
#pragma unroll
  for (int r = 0; r < KS; r++)
#pragma unroll
    for (int v = 0; v < V; v++) {
      float2 p = ld_peer2(smem_u32(P + off[v]), r);
      sum[v].x += p.x, sum[v].y += p.y;
    }
#pragma unroll
  for (int v = 0; v < V; v++) {
    if (!o[v]) continue;
    float2 r = __bfloat1622float2(res[v]);
    *reinterpret_cast<__nv_bfloat162 *>(o[v]) = __floats2bfloat162_rn(r.x + sum[v].x, r.y + sum[v].y);
  }
  cluster_sync(); // peers may still read this CTA's partials
}

// skgemm_kernel: out (M, N) += x (M, K) W^T for a few rows of x. Grid (G,
// KS) in clusters of the KS CTAs of a column (1, KS, 1); 128 threads. CTA
// rank r of cluster g owns K range [r KR, (r + 1) KR) and, in turn, the
// weight slices g, g + G, ... of kNS rows each: its x range is staged once
// in shared memory, the slices' weights stream through a ring of ST chunks
// of kNS x KC (cp.async), the first ST - 1 issued before the wait. Warp w
// takes weight rows [16 w, 16 w + 16) of a slice and all M rows of x
// (mma.sync). After a slice the KS partial products meet in shared memory:
// a cluster barrier, then each CTA sums 1/KS of the slice's outputs over
// the KS CTAs in rank order (deterministic) and adds them to out, while the
// ring keeps loading the next slice. stop = 1 skips the sums (wrong
// results; times the rest).
template <int M, int KR, int ST, int KS>
__global__ void __launch_bounds__(128)
    skgemm_kernel(const bf16 *__restrict__ x, const bf16 *__restrict__ w, bf16 *out, int N, int K, int stop) {
  constexpr int KC = 128, CPS = KR / KC; // K per ring chunk, chunks a slice
  constexpr int PP = kNS + 4;            // the partials' pitch (floats): no bank conflicts writing them
  constexpr int SHARE = M * kNS / 2 / KS, V = (SHARE + 127) / 128; // float2 outputs a CTA sums a slice; a thread
  static_assert(M * kNS / 2 % KS == 0, "the sums split evenly");
  extern __shared__ __align__(16) unsigned char smem[];
  bf16 *Ws = reinterpret_cast<bf16 *>(smem);                // (ST, kNS, KC)
  bf16 *Xs = Ws + ST * kNS * KC;                            // (M, KR)
  float *P = reinterpret_cast<float *>(Xs + M * KR);        // (2, M, PP): a slice's partials, double-buffered
  const int G = gridDim.x, g = blockIdx.x;
  const unsigned rank = cluster_rank();
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int slices = N / kNS, mine = (slices - g + G - 1) / G, items = mine * CPS;
  const int64_t k0 = int64_t(rank) * KR;

  // 1. Ring chunk t: weight rows of slice g + G (t / CPS), K chunk t % CPS.
  auto load_w = [&](int t) {
    if (t < items) {
      const bf16 *src = w + (int64_t(g + G * (t / CPS)) * kNS) * K + k0 + (t % CPS) * KC;
      bf16 *dst = Ws + (t % ST) * kNS * KC;
      for (int i = tid; i < kNS * KC / 8; i += 128) {
        int r = i / (KC / 8), c = i % (KC / 8);
        cp_async16(smem_u32(dst + r * KC + ((c ^ (r & 7)) << 3)), src + int64_t(r) * K + c * 8, true);
      }
    }
    cp_commit();
  };
  for (int t = 0; t < ST - 1; t++) load_w(t);
  dep_wait();
  dep_launch();
  // 2. x's range, all loads in flight, then into shared memory.
  {
    constexpr int XV = M * KR / 8 / 128;
    static_assert(M * KR / 8 % 128 == 0, "x's range splits over the threads");
    uint4 v[XV];
#pragma unroll
    for (int q = 0; q < XV; q++) {
      int i = tid + 128 * q, r = i / (KR / 8), c = i % (KR / 8);
      v[q] = __ldg(reinterpret_cast<const uint4 *>(x + int64_t(r) * K + k0 + c * 8));
    }
#pragma unroll
    for (int q = 0; q < XV; q++) {
      int i = tid + 128 * q, r = i / (KR / 8), c = i % (KR / 8);
      *reinterpret_cast<uint4 *>(Xs + r * KR + ((c ^ (r & 7)) << 3)) = v[q];
    }
  }

  // 3. The ring: products chunk by chunk, a slice's sums after its last.
  float acc[M / 8][4] = {};
  __nv_bfloat162 res[V];
  for (int t = 0; t < items; t++) {
    cp_wait<ST - 2>();
    __syncthreads(); // chunk t is in; every warp is done with chunk t - 1's slot
    load_w(t + ST - 1);
    const int slice = g + G * (t / CPS), c = t % CPS;
    if (c == 0) { // the residual for this slice's sums, read early
#pragma unroll
      for (int v = 0; v < V; v++) {
        int j = tid + 128 * v, i = 2 * (int(rank) * SHARE + j), m = i / kNS, n = slice * kNS + i % kNS;
        if (j < SHARE) res[v] = *reinterpret_cast<const __nv_bfloat162 *>(out + int64_t(m) * N + n);
      }
    }
    const bf16 *Wt = Ws + (t % ST) * kNS * KC;
#pragma unroll
    for (int kk = 0; kk < KC / 16; kk++) {
      unsigned a[4];
      ldsm_x4(smem_u32(Wt + (warp * 16 + lane % 16) * KC + (((2 * kk + lane / 16) ^ (lane % 8)) << 3)), a);
      const int xc = c * (KC / 8) + 2 * kk; // x's chunk of this k step
#pragma unroll
      for (int p = 0; p < M / 16; p++) {
        unsigned b[4];
        int r = 16 * p + lane % 8 + (lane / 16) * 8;
        ldsm_x4(smem_u32(Xs + r * KR + (((xc + (lane / 8) % 2) ^ (r & 7)) << 3)), b);
        mma<bf16>(acc[2 * p], a, b[0], b[1]);
        mma<bf16>(acc[2 * p + 1], a, b[2], b[3]);
      }
    }
    if (c != CPS - 1 || stop == 1) continue;
    // 4. The slice's partials: element e of acc[j] is weight row 16 warp +
    // lane/4 + 8 (e/2), x row 8 j + 2 (lane%4) + e%2.
    float *Pb = P + ((t / CPS) & 1) * M * PP;
#pragma unroll
    for (int j = 0; j < M / 8; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        Pb[(8 * j + 2 * (lane % 4) + e % 2) * PP + warp * 16 + lane / 4 + 8 * (e / 2)] = acc[j][e];
        acc[j][e] = 0;
      }
    cluster_sync(); // every CTA's partials are in (the other buffer is reused only after the next one)
#pragma unroll
    for (int v = 0; v < V; v++) {
      int j = tid + 128 * v, i = 2 * (int(rank) * SHARE + j), m = i / kNS, nl = i % kNS;
      if (j >= SHARE) break;
      float2 sum = {0, 0};
#pragma unroll
      for (int r = 0; r < KS; r++) {
        float2 p = ld_peer2(smem_u32(Pb + m * PP + nl), r);
        sum.x += p.x, sum.y += p.y;
      }
      float2 r0 = __bfloat1622float2(res[v]);
      *reinterpret_cast<__nv_bfloat162 *>(out + int64_t(m) * N + slice * kNS + nl) =
          __floats2bfloat162_rn(r0.x + sum.x, r0.y + sum.y);
    }
  }
  cluster_sync(); // peers may still read this CTA's last partials
}

} // namespace

int main() {
  cudaStream_t s;
  cublasHandle_t bh = probe::cublas_on(&s);
  constexpr size_t kBusySmem = 80 * 1024;
  CK(cudaFuncSetAttribute(busy_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kBusySmem)));
  const long long cycles = 16000; // ~8 us at 1.98 GHz
  auto busy = [&] { CK(launch(busy_kernel, 2 * sm_count(), 128, kBusySmem, s, cycles)); };
  // The shared memory carveout: an SM whose L1/shared split differs from
  // what the next kernel asks for cannot take that kernel's CTAs until it
  // is empty, which defeats an early launch. 100: all shared.
  int carve = -1;
  auto set_carve = [&](auto kernel) { CK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, carve)); };
  std::printf("stand-in alone: %.1f us\n", timed(s, [&](int) { busy(); }));

  struct Cfg { // st > 0: skgemm_kernel (kr of K a CTA, st ring stages, g clusters); st = 0: cgemm_kernel
    int m, kr, st, ks, g;
  };
  struct Shape {
    const char *name;
    int n, k;
    std::vector<Cfg> cfgs;
  } shapes[] = {
      {"o", 2048, 2048, {{32, 512, 0, 4, 0}, {32, 256, 0, 8, 0}, {64, 256, 0, 8, 0}, {32, 256, 4, 8, 32},
                         {32, 512, 3, 4, 32}, {32, 256, 3, 8, 16}, {64, 256, 3, 8, 16}}},
      {"qkv", 2560, 2048, {{32, 512, 0, 4, 0}, {32, 256, 0, 8, 0}, {64, 256, 0, 8, 0}, {32, 256, 4, 8, 20},
                           {32, 512, 3, 4, 40}, {32, 256, 4, 8, 32}, {64, 256, 3, 8, 20}}},
      {"gate_up", 12288, 2048, {{32, 512, 0, 4, 0}, {32, 256, 0, 8, 0}, {32, 256, 4, 8, 32}, {32, 512, 3, 4, 64},
                                {32, 256, 4, 8, 16}, {64, 256, 3, 8, 16}}},
      {"down", 2048, 6144, {{32, 768, 0, 8, 0}, {32, 384, 0, 16, 0}, {32, 768, 4, 8, 16}, {32, 384, 4, 16, 16},
                            {32, 768, 3, 8, 16}, {32, 384, 4, 16, 8}}},
  };
  for (auto &sh : shapes) {
    std::vector<bf16 *> W;
    for (int r = 0; r < kCopies; r++) W.push_back(rand_bf16(size_t(sh.n) * sh.k, 17 + r, 0.04f));
    constexpr int kMaxM = 64;
    bf16 *x = rand_bf16(size_t(kMaxM) * sh.k, 5, 2.f), *res = rand_bf16(size_t(kMaxM) * sh.n, 7, 1.f);
    bf16 *o1, *o2;
    CK(cudaMalloc(&o1, size_t(kMaxM) * sh.n * 2));
    CK(cudaMalloc(&o2, size_t(kMaxM) * sh.n * 2));
    float one = 1.f;
    for (const Cfg &cf : sh.cfgs) {
      const int m = cf.m;
      auto cublas = [&](int r, bf16 *o) {
        CK(cublasGemmEx(bh, CUBLAS_OP_T, CUBLAS_OP_N, sh.n, m, sh.k, &one, W[r], CUDA_R_16BF, sh.k, x, CUDA_R_16BF,
                        sh.k, &one, o, CUDA_R_16BF, sh.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      };
      if (cf.kr * cf.ks != sh.k) std::exit(3);
      size_t smem = cf.st ? size_t(cf.st) * kNS * 128 * 2 + size_t(m) * cf.kr * 2 + size_t(2) * m * (kNS + 4) * 4
                          : size_t(kNS + m) * cf.kr * 2;
      dim3 grid = cf.st ? dim3(cf.g, cf.ks) : dim3(sh.n / kNS, cf.ks);
      auto ours = [&](int r, bf16 *o, int stop = 0) {
        auto go = [&](auto kernel) {
          CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
          if (cf.ks > 8) CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
          set_carve(kernel);
          CK(launch_in(kernel, grid, 128, smem, s, unsigned(cf.ks), x, W[r], o, sh.n, sh.k, stop));
        };
#define GO(M_, KR_, ST_, KS_)                                                                                      \
  if (m == M_ && cf.kr == KR_ && cf.st == ST_ && cf.ks == KS_) return go(skgemm_kernel<M_, KR_, ST_, KS_>);
#define GC(M_, KP_, KS_)                                                                                           \
  if (m == M_ && cf.kr == KP_ && cf.st == 0 && cf.ks == KS_) return go(cgemm_kernel<M_, KP_, KS_>);
        GO(32, 256, 4, 8) GO(32, 512, 3, 4) GO(32, 256, 3, 8) GO(64, 256, 3, 8)
        GO(32, 768, 4, 8) GO(32, 384, 4, 16) GO(32, 768, 3, 8)
        GC(32, 512, 4) GC(32, 256, 8) GC(64, 256, 8) GC(32, 768, 8) GC(32, 384, 16)
#undef GO
#undef GC
        std::fprintf(stderr, "no kernel for M=%d KR=%d ST=%d KS=%d\n", m, cf.kr, cf.st, cf.ks);
        std::exit(2);
      };
      const double err = probe::product_err(  // both from the same residual
          s, [&](bf16 *o) { cublas(0, o); }, [&](bf16 *o) { ours(0, o); }, o1, o2, res, size_t(m) * sh.n);
      // The outputs accumulate across timed calls; only their time counts.
      carve = -1;
      set_carve(busy_kernel);
      double tc = timed(s, [&](int r) { cublas(r, o1); });
      double to = timed(s, [&](int r) { ours(r, o2); });
      double tbc = timed(s, [&](int r) { busy(), cublas(r, o1); });
      double tbo = timed(s, [&](int r) { busy(), ours(r, o2); });
      double tprod = timed(s, [&](int r) { ours(r, o2, 1); });
      carve = 100;
      set_carve(busy_kernel);
      double tbo_c = timed(s, [&](int r) { busy(), ours(r, o2); });
      carve = -1;
      set_carve(busy_kernel);
      dtk_tune(0, -1, -1, -1);
      double tn = timed(s, [&](int r) { ours(r, o2); });
      dtk_tune(1, -1, -1, -1);
      std::printf("%-7s %s M=%d KR=%4d ST=%d KS=%2d G=%2d (%3zu KB): cuBLAS %5.1f ours %5.1f us | after stand-in "
                  "cuBLAS +%5.1f ours +%5.1f (all-shared carveout +%5.1f) | without the sums %5.1f | no PDL %5.1f | "
                  "err vs cuBLAS %.1e of the product\n",
                  sh.name, cf.st ? "ring" : "tile", m, cf.kr, cf.st, cf.ks, cf.st ? cf.g : int(grid.x),
                  smem / 1024, tc, to, tbc - 8.5, tbo - 8.5, tbo_c - 8.5, tprod, tn, err);
    }
    for (auto p : W) cudaFree(p);
    cudaFree(x), cudaFree(res), cudaFree(o1), cudaFree(o2);
  }
  return 0;
}
