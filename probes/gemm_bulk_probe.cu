// Can a GEMM of our own whose weights arrive by the copy engine beat cuBLAS
// at 32 rows? The earlier GEMMs fed their weights through
// cp.async or plain loads, 16 bytes an instruction, and none streamed more
// than ~14-25 GB/s an SM. Here the weights come into shared memory by
// Hopper's asynchronous copies into a ring of stages (mbarriers; a copier
// warp, a warpgroup multiplying with wgmma), in two forms:
//
// - bgemm_kernel: one cp.async.bulk (a 1-D copy, no tensor map) per 8-16 KB
//   tile of weights packed once, at load time, into the order wgmma reads
//   (its 128-byte swizzle, K renumbered so that x's fragments are 16
//   consecutive values a lane: x is wgmma's A operand straight from
//   registers and never touches shared memory);
// - tgemm_kernel (kernels.cu's, what the decoder runs): TMA tensor copies
//   (cuTensorMapEncodeTiled, 128-byte swizzle) of the weights' and x's own
//   layouts, no packing, both operands from shared memory; tgemm_gu_kernel
//   is it for the MLP's gate-up projection with the SiLU step
//   (silu_mul_norm_kernel's arithmetic) in its epilogue.
//
// Both split K over thread block clusters whose partial products are summed
// in shared memory (rank order: deterministic). The probe times, in CUDA
// graphs cycling over 12 weight copies (so the 50 MB L2 cannot serve them),
// a layer's four projections out (M, N) += x (M, K) W^T (beta 1, in place,
// as the decoder's addmm_) through cublasGemmEx and ours, with each one's
// error against cuBLAS; "copies only" runs the ring without the products
// (wrong results; the streaming alone), "hot" times one weight copy over
// and over. Last, a layer's matmuls one after the other as the decoder
// runs them, all cuBLAS's or all ours (with PDL and without).
// docs/history.md has the figures.
//
//     NV=$(python3 -c 'import torch,os;print(os.path.dirname(os.path.dirname(torch.__file__)))')/nvidia/cu13/lib
//     nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/pb probes/gemm_bulk_probe.cu -L$NV \
//         -l:libcublas.so.13 -l:libcublasLt.so.13 -Xlinker -rpath=$NV && /tmp/pb
#define DLLM_SM90A // kernels.cu's TMA GEMM (tgemm_kernel, tgemm_gu_kernel) and its helpers
#include "../torch/csrc/kernels.cu" // and launch_in, dep_wait, smem_u32, silu_mul_norm_kernel
#include "../torch/csrc/attention.cu"
#include "../torch/csrc/tma.cu"

#include "gpu_probe.cuh"

#include <cublas_v2.h>
#include <cuda.h>

#include <cmath>

namespace {

using bf16 = __nv_bfloat16;
using probe::kCopies;
using probe::rand_bf16;
using probe::timed;

// --- the 1-D form's own pieces: bulk copies, wgmma with A in registers ---

// bulk_load copies bytes (a multiple of 16) from global src to shared dst
// by the copy engine, completing them on bar.
__device__ inline void bulk_load(unsigned dst, const void *src, unsigned bytes, unsigned bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
// wgmma_rs is d (64 x NW, float32; warp w's rows 16 w .. 16 w + 15 in
// mma.sync's accumulator layout, d[j] the 8 columns 8 j ..) += a (64 x 16,
// bf16, in registers: mma.sync's A fragment for the warp's 16 rows) b^T, b
// (NW x 16) K-major in shared memory (descriptor), one register operand per
// accumulator value.
template <int NW> __device__ inline void wgmma_rs(float (&d)[NW / 8][4], const unsigned (&a)[4], uint64_t b);
template <> __device__ inline void wgmma_rs<96>(float (&d)[12][4], const unsigned (&a)[4], uint64_t b) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %53, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47}, "
               "{%48,%49,%50,%51}, %52, p, 1, 1, 0;\n}\n"
               : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}
template <> __device__ inline void wgmma_rs<128>(float (&d)[16][4], const unsigned (&a)[4], uint64_t b) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
               "{%64,%65,%66,%67}, %68, p, 1, 1, 0;\n}\n"
               : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

// --- the packed weight layout ---------------------------------------------
//
// W (N, K) becomes tiles of NW rows x 64 columns of K, tile (nt, c) at
// element (nt K / 64 + c) NW 64: a weight slice's K range is one run of
// bytes. Within a tile, row n is 128 bytes in wgmma's swizzled K-major
// layout, and K is renumbered so that a lane's A fragments for a tile's four
// k steps are 16 consecutive values of x: lane (g, t) of mma's layout needs
// logical columns 2t, 2t+1, 2t+8, 2t+9 of each 16-column step s, which we
// take from x's columns 16 t + 4 s + (0, 1, 2, 3).

// phys_col is the column of x (and W) within a 64-column chunk that logical
// column l of the tile holds.
__host__ __device__ inline int phys_col(int l) {
  int s = l / 16, j = l % 16, t = (j % 8) / 2, e = (j % 2) + (j >= 8 ? 2 : 0);
  return 16 * t + 4 * s + e;
}

__global__ void pack_kernel(const bf16 *__restrict__ W, bf16 *__restrict__ Wt, int N, int K, int NW) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= size_t(N) * K) return;
  const int pos = i % 64, n = (i / 64) % NW;
  const size_t tile = i / (64 * size_t(NW));
  const int kc = K / 64, c = tile % kc, nt = tile / kc;
  const int l = ((pos / 8) ^ (n % 8)) * 8 + pos % 8; // the logical column stored at pos
  Wt[i] = W[size_t(nt * NW + n) * K + c * 64 + phys_col(l)];
}

// --- the GEMM ----------------------------------------------------------------
//
// bgemm_kernel: out (M, N) = res + x (M, K) W^T for M <= 64 (res may be
// out). Grid (N / NW, KS) in clusters of the KS CTAs of a weight slice;
// 160 threads: warps 0-3 are one warpgroup that multiplies, warp 4 issues
// the bulk copies. CTA rank r takes chunks [r CH, (r + 1) CH) of K (CH =
// K / 64 / KS) through a ring of ST tile buffers. Its first ST tiles are
// asked for before the PDL wait: weights are never written by the kernel
// before. The KS partial products meet in shared memory: each CTA then sums
// 1/KS of the slice's outputs over the cluster in rank order
// (deterministic) and adds res.
template <int NW, int KS, int ST>
__global__ void __launch_bounds__(160)
    bgemm_kernel(const bf16 *__restrict__ x, const bf16 *__restrict__ Wt, const bf16 *res, bf16 *out, int M, int N,
                 int K, int mode) {
  constexpr int kTile = NW * 64 * 2; // bytes
  extern __shared__ __align__(16) unsigned char smem_[];
  unsigned char *smem =
      reinterpret_cast<unsigned char *>((reinterpret_cast<uintptr_t>(smem_) + 1023) & ~uintptr_t(1023));
  float *red = reinterpret_cast<float *>(smem + ST * kTile); // (M, NW) partial products
  uint64_t *bars = reinterpret_cast<uint64_t *>(red + 64 * NW);
  const unsigned full0 = smem_u32(bars), empty0 = smem_u32(bars + ST);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int nt = blockIdx.x, rank = KS > 1 ? int(cluster_rank()) : 0;
  const int CH = K / 64 / KS;
  const bf16 *src = Wt + (size_t(nt) * (K / 64) + size_t(rank) * CH) * (NW * 64);

  ring_init(full0, empty0, ST);

  float d[NW / 8][4] = {};
  if (warp == 4) {
    // 2. The copier: the first ST tiles at once, then each as its stage frees.
    auto issue = [&](int c, int s) {
      if (lane == 0)
        mbar_expect(full0 + 8 * s, kTile),
            bulk_load(smem_u32(smem + s * kTile), src + size_t(c) * NW * 64, kTile, full0 + 8 * s);
    };
    for (int c = 0; c < CH && c < ST; c++) issue(c, c);
    dep_wait();
    dep_launch();
    for (int c = ST; c < CH; c++) {
      const int s = c % ST;
      mbar_wait(empty0 + 8 * s, (c / ST - 1) & 1);
      issue(c, s);
    }
    __syncwarp(); // the cluster barrier below wants whole warps
  } else {
    // 3. The multipliers: lane (g, t) of warp w holds x's rows 16 w + g and
    // 16 w + g + 8, columns 16 t .. 16 t + 15 of each chunk (zeros past M).
    dep_wait();
    dep_launch();
    const int g = lane / 4, t = lane % 4, m0 = 16 * warp + g, m1 = m0 + 8;
    const bf16 *x0 = x + size_t(m0) * K + size_t(rank) * CH * 64 + 16 * t;
    const bf16 *x1 = x + size_t(m1) * K + size_t(rank) * CH * 64 + 16 * t;
    auto load = [&](uint4 (&v)[4], int c) {
      const uint4 z = make_uint4(0, 0, 0, 0);
      v[0] = m0 < M ? *reinterpret_cast<const uint4 *>(x0 + c * 64) : z;
      v[1] = m0 < M ? *reinterpret_cast<const uint4 *>(x0 + c * 64 + 8) : z;
      v[2] = m1 < M ? *reinterpret_cast<const uint4 *>(x1 + c * 64) : z;
      v[3] = m1 < M ? *reinterpret_cast<const uint4 *>(x1 + c * 64 + 8) : z;
    };
    // x's fragments come kXD chunks ahead of their use (a load from L2 takes
    // ~0.7 us, several chunks' worth), in a ring of registers.
    constexpr int kXD = 4;
    uint4 xb[kXD][4];
#pragma unroll
    for (int j = 0; j < kXD; j++)
      if (j < CH) load(xb[j], j);
    for (int c0 = 0; c0 < CH; c0 += kXD) {
#pragma unroll
      for (int j = 0; j < kXD; j++) {
        const int c = c0 + j, s = c % ST;
        if (c >= CH) break;
        mbar_wait(full0 + 8 * s, (c / ST) & 1);
        const unsigned *r0 = reinterpret_cast<const unsigned *>(&xb[j][0]); // row m0, 8 pairs
        const unsigned *r1 = reinterpret_cast<const unsigned *>(&xb[j][2]); // row m1
        const unsigned base = smem_u32(smem + s * kTile);
        if (mode == 0) {
          wg_fence();
#pragma unroll
          for (int ks = 0; ks < 4; ks++) {
            const unsigned a[4] = {r0[2 * ks], r1[2 * ks], r0[2 * ks + 1], r1[2 * ks + 1]};
            wgmma_rs<NW>(d, a, sw128_desc(base + 32 * ks));
          }
          wg_commit();
          wg_wait(d);
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(empty0 + 8 * s);
        if (c + kXD < CH) load(xb[j], c + kXD);
      }
    }
  }

  // 4. The sum over the cluster (kernels.cu's, as tgemm_kernel's).
  cluster_sum_out<NW, KS>(d, red, res, out, M, N, nt, rank);
}

// spin_kernel stands in for the attention's split merge, the shim's kernel
// before the output projection: small CTAs, launched with PDL, letting the
// next kernel launch at once, busy for the given cycles.
__global__ void spin_kernel(long long cycles) {
  dep_wait();
  dep_launch();
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

// map2d is kernels.cu's tmap2d as a value.
CUtensorMap map2d(const void *p, int64_t rows, int64_t cols, int box_rows) {
  CUtensorMap m;
  if (!tmap2d(&m, p, rows, cols, box_rows)) std::exit(4);
  return m;
}

template <int NW, int ST> constexpr size_t bgemm_smem() { return 1024 + size_t(ST) * NW * 128 + 64 * NW * 4 + 16 * ST; }

} // namespace

int main() {
  cudaStream_t s;
  cublasHandle_t bh = probe::cublas_on(&s);

  struct Cfg {
    int tma, nw, ks, st, mode; // tma: 0 bgemm_kernel, 1 tgemm_kernel; mode 1: the copies only
  };
  struct Shape {
    const char *name;
    int n, k;
    std::vector<Cfg> cfgs;
  } shapes[] = {
      {"o", 2048, 2048, {{0, 128, 8, 4, 0}, {1, 64, 4, 4, 0}}},
      {"qkv", 2560, 2048, {{0, 128, 8, 4, 0}, {1, 64, 4, 4, 0}}},
      {"gate_up", 12288, 2048, {{0, 128, 2, 4, 0}, {0, 96, 1, 8, 1}, {1, 96, 1, 12, 0}}},
      {"down", 2048, 6144, {{0, 128, 8, 4, 0}, {1, 128, 8, 4, 0}, {1, 128, 8, 6, 0}}},
  };
  for (int m : {32})
    for (auto &sh : shapes) {
      std::vector<bf16 *> W, Wt;
      for (int r = 0; r < kCopies; r++) W.push_back(rand_bf16(size_t(sh.n) * sh.k, 17 + r, 0.04f));
      for (int r = 0; r < kCopies; r++) {
        bf16 *p;
        CK(cudaMalloc(&p, size_t(sh.n) * sh.k * 2));
        Wt.push_back(p);
      }
      bf16 *x = rand_bf16(size_t(64) * sh.k, 5, 2.f), *res = rand_bf16(size_t(64) * sh.n, 7, 1.f);
      bf16 *o1, *o2;
      CK(cudaMalloc(&o1, size_t(64) * sh.n * 2));
      CK(cudaMalloc(&o2, size_t(64) * sh.n * 2));
      float one = 1.f;
      auto cublas = [&](int r, bf16 *o) {
        CK(cublasGemmEx(bh, CUBLAS_OP_T, CUBLAS_OP_N, sh.n, m, sh.k, &one, W[r], CUDA_R_16BF, sh.k, x, CUDA_R_16BF,
                        sh.k, &one, o, CUDA_R_16BF, sh.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      };
      double tc = timed(s, [&](int r) { cublas(r, o1); });
      std::printf("%-7s M=%d cuBLAS %5.1f us (%4.0f GB/s)\n", sh.name, m, tc, sh.n * double(sh.k) * 2 / tc / 1e3);
      int packed_nw = 0;
      for (const Cfg &cf : sh.cfgs) {
        if (!cf.tma && packed_nw != cf.nw) {
          for (int r = 0; r < kCopies; r++) {
            size_t n = size_t(sh.n) * sh.k;
            pack_kernel<<<(n + 255) / 256, 256, 0, s>>>(W[r], Wt[r], sh.n, sh.k, cf.nw);
          }
          CK(cudaStreamSynchronize(s));
          packed_nw = cf.nw;
        }
        if (sh.n % cf.nw || sh.k % (64 * cf.ks)) std::exit(3);
        std::vector<CUtensorMap> wm;
        for (int r = 0; r < kCopies; r++) wm.push_back(map2d(W[r], sh.n, sh.k, cf.nw));
        const CUtensorMap xm = map2d(x, m, sh.k, 32);
        auto ours = [&](int r, bf16 *o) {
          auto go = [&](auto kernel, size_t smem, auto... a) {
            CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
            CK(launch_in(kernel, dim3(sh.n / cf.nw, cf.ks), 160, smem, s, unsigned(cf.ks), a...));
          };
#define GO(NW_, KS_, ST_)                                                                                          \
  if (!cf.tma && cf.nw == NW_ && cf.ks == KS_ && cf.st == ST_)                                                   \
    return go(bgemm_kernel<NW_, KS_, ST_>, bgemm_smem<NW_, ST_>(), x, Wt[r], o, o, m, sh.n, sh.k, cf.mode);
#define TGO(NW_, KS_, ST_)                                                                                         \
  if (cf.tma && cf.nw == NW_ && cf.ks == KS_ && cf.st == ST_)                                                    \
    return go(tgemm_kernel<NW_, KS_, ST_>, tgemm_smem<NW_, ST_>(), wm[r], xm, o, o, m, sh.n, sh.k);
          GO(128, 8, 4) GO(128, 2, 4) GO(96, 1, 8) TGO(64, 4, 4) TGO(96, 1, 12) TGO(128, 8, 4) TGO(128, 8, 6)
#undef GO
#undef TGO
          std::fprintf(stderr, "no kernel for NW=%d KS=%d ST=%d\n", cf.nw, cf.ks, cf.st);
          std::exit(2);
        };
        const double err = probe::product_err(  // both from the same residual
            s, [&](bf16 *o) { cublas(0, o); }, [&](bf16 *o) { ours(0, o); }, o1, o2, res, size_t(m) * sh.n);
        double to = timed(s, [&](int r) { ours(r, o2); });
        double hot = timed(s, [&](int) { ours(0, o2); }); // one weight copy: L2 serves what it holds
        std::printf("%-7s M=%d %s NW=%3d KS=%d ST=%2d%s (%3d CTAs): ours %5.1f us (%4.0f GB/s; hot %5.1f) vs "
                    "cuBLAS %5.1f | err %.1e\n",
                    sh.name, m, cf.tma ? "tma " : "bulk", cf.nw, cf.ks, cf.st, cf.mode ? " copies only" : "",
                    sh.n / cf.nw * cf.ks, to, sh.n * double(sh.k) * 2 / to / 1e3, hot, tc, err);
      }
      for (auto p : W) cudaFree(p);
      for (auto p : Wt) cudaFree(p);
      cudaFree(x), cudaFree(res), cudaFree(o1), cudaFree(o2);
    }
  // The MLP's gate-up projection and SiLU step: cuBLAS then the shim's
  // silu_mul_norm_kernel, as the decoder runs them, against tgemm_gu_kernel.
  {
    const int F = 6144, K = 2048, m = 32;
    std::vector<bf16 *> W;
    for (int r = 0; r < kCopies; r++) W.push_back(rand_bf16(size_t(2 * F) * K, 17 + r, 0.04f));
    bf16 *x = rand_bf16(size_t(64) * K, 5, 2.f), *gu, *o1, *o2;
    CK(cudaMalloc(&gu, size_t(64) * 2 * F * 2));
    CK(cudaMalloc(&o1, size_t(64) * F * 2));
    CK(cudaMalloc(&o2, size_t(64) * F * 2));
    float one = 1.f, zero = 0.f;
    const float eps = 1e-6f;
    auto base = [&](int r) {
      CK(cublasGemmEx(bh, CUBLAS_OP_T, CUBLAS_OP_N, 2 * F, m, K, &one, W[r], CUDA_R_16BF, K, x, CUDA_R_16BF, K, &zero,
                      gu, CUDA_R_16BF, 2 * F, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      CK(launch(silu_mul_norm_kernel<bf16>, dim3(m, (F / 8 + 255) / 256), 256, 0, s, gu, o1, int64_t(F), x, K, eps));
    };
    std::vector<CUtensorMap> wm;
    for (int r = 0; r < kCopies; r++) wm.push_back(map2d(W[r], 2 * F, K, 48));
    const CUtensorMap xm = map2d(x, m, K, 32);
    for (int st : {8}) {
      auto ours = [&](int r) {
        auto go = [&](auto kernel, size_t smem) {
          CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
          CK(launch(kernel, dim3(F / 48), 160, smem, s, wm[r], xm, o2, m, F, K, eps));
        };
        if (st == 8) return go(tgemm_gu_kernel<8>, tgemm_gu_smem<8>());
        return go(tgemm_gu_kernel<12>, tgemm_gu_smem<12>());
      };
      base(0);
      ours(0);
      CK(cudaStreamSynchronize(s));
      std::vector<bf16> h1(size_t(m) * F), h2(h1.size());
      CK(cudaMemcpy(h1.data(), o1, h1.size() * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(h2.data(), o2, h2.size() * 2, cudaMemcpyDeviceToHost));
      double num = 0, den = 0, mx = 0;
      for (size_t i = 0; i < h1.size(); i++) {
        double a = __bfloat162float(h2[i]), b = __bfloat162float(h1[i]);
        num += (a - b) * (a - b), den += b * b, mx = std::max(mx, std::fabs(a - b));
      }
      double tb = timed(s, [&](int r) { base(r); }), to = timed(s, [&](int r) { ours(r); });
      std::printf("gate_up+silu M=%d ST=%d: cuBLAS + silu_mul_norm %5.1f us, fused %5.1f us | rel err %.1e (max %.1e)\n",
                  m, st, tb, to, std::sqrt(num / den), mx);
    }
  }
  // A layer's matmuls as the decoder runs them, one after the other: the
  // merge stand-in, the output projection (+= into the residual y), the
  // gate-up projection and SiLU step, the down projection (+= into y), the
  // next layer's QKV projection; through cuBLAS (and silu_mul_norm_kernel)
  // or all through ours, whose kernels launch during the one before (PDL)
  // and fetch their first weights before they wait for it.
  {
    const int C = 2048, F = 6144, Q = 2560, m = 32;
    std::vector<bf16 *> Wo, Wgu, Wd, Wq;
    for (int r = 0; r < kCopies; r++) {
      Wo.push_back(rand_bf16(size_t(C) * C, 100 + r, 0.04f));
      Wgu.push_back(rand_bf16(size_t(2 * F) * C, 200 + r, 0.04f));
      Wd.push_back(rand_bf16(size_t(C) * F, 300 + r, 0.02f));
      Wq.push_back(rand_bf16(size_t(Q) * C, 400 + r, 0.04f));
    }
    bf16 *ao = rand_bf16(size_t(m) * C, 5, 2.f), *y = rand_bf16(size_t(m) * C, 6, 1.f), *gu, *h, *qkv;
    CK(cudaMalloc(&gu, size_t(m) * 2 * F * 2));
    CK(cudaMalloc(&h, size_t(m) * F * 2));
    CK(cudaMalloc(&qkv, size_t(m) * Q * 2));
    float one = 1.f, zf = 0.f;
    const float eps = 1e-6f;
    const long long cycles = 10000; // ~5 us at 1.98 GHz
    auto spin = [&] { CK(launch(spin_kernel, 132, 128, 0, s, cycles)); };
    auto gemm = [&](const bf16 *w, const bf16 *xx, bf16 *o, int n, int k, float *beta) {
      CK(cublasGemmEx(bh, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, w, CUDA_R_16BF, k, xx, CUDA_R_16BF, k, beta, o,
                      CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    auto cublas_layer = [&](int r, bool with_spin) {
      if (with_spin) spin();
      gemm(Wo[r], ao, y, C, C, &one);
      gemm(Wgu[r], y, gu, 2 * F, C, &zf);
      CK(launch(silu_mul_norm_kernel<bf16>, dim3(m, (F / 8 + 255) / 256), 256, 0, s, gu, h, int64_t(F), y, C, eps));
      gemm(Wd[r], h, y, C, F, &one);
      gemm(Wq[r], y, qkv, Q, C, &zf);
    };
    std::vector<CUtensorMap> mo, mgu, md, mq;
    for (int r = 0; r < kCopies; r++) {
      mo.push_back(map2d(Wo[r], C, C, 64));
      mgu.push_back(map2d(Wgu[r], 2 * F, C, 48));
      md.push_back(map2d(Wd[r], C, F, 128));
      mq.push_back(map2d(Wq[r], Q, C, 64));
    }
    const CUtensorMap xao = map2d(ao, m, C, 32), xy = map2d(y, m, C, 32), xh = map2d(h, m, F, 32);
    auto set_smem = [](auto kernel, size_t smem) {
      CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    };
    auto ko = tgemm_kernel<64, 4, 4>;
    auto kd = tgemm_kernel<128, 8, 4>;
    auto kgu = tgemm_gu_kernel<6>;
    const size_t so = tgemm_smem<64, 4>(), sd = tgemm_smem<128, 4>(), sgu = tgemm_gu_smem<6>();
    set_smem(ko, so), set_smem(kd, sd), set_smem(kgu, sgu);
    auto our_layer = [&](int r, bool with_spin) {
      if (with_spin) spin();
      CK(launch_in(ko, dim3(C / 64, 4), 160, so, s, 4u, mo[r], xao, y, y, m, C, C));
      CK(launch(kgu, dim3(F / 48), 160, sgu, s, mgu[r], xy, h, m, F, C, eps));
      CK(launch_in(kd, dim3(C / 128, 8), 160, sd, s, 8u, md[r], xh, y, y, m, C, F));
      CK(launch_in(ko, dim3(Q / 64, 4), 160, so, s, 4u, mq[r], xy, static_cast<const bf16 *>(nullptr), qkv, m, Q, C));
    };
    std::printf("chain (smem KB: o/qkv %zu, gate-up %zu, down %zu; the stand-in ~5 us):\n", so / 1024, sgu / 1024,
                sd / 1024);
    const double tsp = timed(s, [&](int) { spin(); });
    for (int sp : {1, 0}) {
      double tc = timed(s, [&](int r) { cublas_layer(r, sp); });
      double to = timed(s, [&](int r) { our_layer(r, sp); });
      dtk_tune(0, -1, -1, -1);
      double tn = timed(s, [&](int r) { our_layer(r, sp); });
      dtk_tune(1, -1, -1, -1);
      std::printf("  %s: cuBLAS chain %5.1f us a layer, ours %5.1f (without PDL %5.1f)\n",
                  sp ? "after the stand-in (its time taken off)" : "alone", tc - sp * tsp, to - sp * tsp,
                  tn - sp * tsp);
    }
  }
  return 0;
}
