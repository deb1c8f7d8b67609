// tma.cu: Hopper's TMA/wgmma GEMMs for a block step's 2-32 rows and the
// persistent kernel that runs a block step's post-attention sublayers (and
// the next layer's QKV projection) in one launch; built for sm_90a
// (DLLM_SM90A), elsewhere their entry points decline (DTK_TMA_NO).

#include "kernels_common.cuh"

namespace {

#ifdef DLLM_SM90A
// --- TMA GEMM for block steps (2-32 rows) -------------------------------------
//
// out (M, N) = [res +] x (M, K) W^T for M <= 32 on Hopper, for the matmuls of
// a denoising block step, where cuBLAS's kernels cannot launch before the
// kernel ahead of them is done (they do not wait on griddepcontrol). These
// do: launched with PDL, each fetches its first weights while the kernel
// before still runs, then waits. The weights (and x) come into a ring of
// shared memory stages by TMA tensor copies of their own layouts (128-byte
// swizzle, no repacking), a copier warp ahead of one warpgroup that
// multiplies with wgmma (x as the 64-row A operand: x's box is 32 rows,
// zeros past M; the operand's rows 32-63 read whatever follows the box, and
// every row past M is dropped). K is split over a thread
// block cluster whose partial products meet in shared memory; each CTA
// sums 1/KS of them in rank order (deterministic). Measured against cuBLAS
// with probes/gemm_bulk_probe.cu (docs/history.md). Needs sm_90a (DLLM_SM90A: the Makefile builds it where nvcc
// knows the target); elsewhere the kernels trap and the host never
// launches them.

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DLLM_TMA_DEVICE 1
#endif
// The helpers go unused where the kernels' bodies are traps (sm_80, sm_90).
#pragma nv_diag_suppress 177

__device__ inline void mbar_init(unsigned bar, unsigned count) {
#ifdef DLLM_TMA_DEVICE
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
#endif
}
// mbar_expect arrives on bar, telling it bytes more will land by TMA.
__device__ inline void mbar_expect(unsigned bar, unsigned bytes) {
#ifdef DLLM_TMA_DEVICE
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
#endif
}
__device__ inline void mbar_arrive(unsigned bar) {
#ifdef DLLM_TMA_DEVICE
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
#endif
}
// mbar_wait returns once bar's phase of the given parity has completed.
__device__ inline void mbar_wait(unsigned bar, unsigned parity) {
#ifdef DLLM_TMA_DEVICE
  unsigned done;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
  } while (!done);
#endif
}
// tma_load2d copies the box at (c0 inner, c1 outer) of map's tensor into
// shared dst (map's swizzle), completing on bar.
__device__ inline void tma_load2d(unsigned dst, const CUtensorMap &map, int c0, int c1, unsigned bar) {
#ifdef DLLM_TMA_DEVICE
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
#endif
}
__device__ inline unsigned cluster_rank() {
  unsigned r = 0;
#ifdef DLLM_TMA_DEVICE
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
#endif
  return r;
}
__device__ inline void cluster_sync() {
#ifdef DLLM_TMA_DEVICE
  asm volatile("barrier.cluster.arrive.aligned;\nbarrier.cluster.wait.aligned;" ::: "memory");
#endif
}
// ld_peer4 is four floats at shared address a of the cluster's CTA rank.
__device__ inline float4 ld_peer4(unsigned a, unsigned rank) {
  float4 v = make_float4(0, 0, 0, 0);
#ifdef DLLM_TMA_DEVICE
  unsigned r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(r)
               : "memory");
#endif
  return v;
}
// sw128_desc is the wgmma descriptor of a K-major operand in shared memory
// with 128-byte swizzling (what TMA's 128-byte swizzle writes): rows of 64
// values (128 bytes) eight to a 1024-byte atom, the 16-byte chunk c of row
// r stored at chunk c ^ (r % 8); addr is where its 16-value k step starts
// (atom base + 32 k bytes).
__device__ inline uint64_t sw128_desc(unsigned addr) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}
__device__ inline void wg_fence() {
#ifdef DLLM_TMA_DEVICE
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ inline void wg_commit() {
#ifdef DLLM_TMA_DEVICE
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// wg_wait1 waits until at most one of this warp's wgmma groups is pending.
__device__ inline void wg_wait1() {
#ifdef DLLM_TMA_DEVICE
  asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
#endif
}
// wg_wait waits for all of them; d, their accumulator, is then tied to the
// wait (an empty asm on each register) so that nothing reads it before.
template <int NJ> __device__ inline void wg_wait(float (&d)[NJ][4]) {
#ifdef DLLM_TMA_DEVICE
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
#pragma unroll
  for (int j = 0; j < NJ; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) asm volatile("" : "+f"(d[j][e])::"memory");
}
// wgmma_ss is d (64 x NW, float32; warp w's rows 16 w .. 16 w + 15 in
// mma.sync's accumulator layout, d[j] the 8 columns 8 j ..) += a (64 x 16)
// b (NW x 16)^T, bf16, both K-major in shared memory (descriptors); one
// register operand per accumulator value, so one asm form per tile height:
// 32-row wgmmas for every height (one form) re-read x's tile per call and
// cost 6% end to end (docs/history.md).
template <int NW> __device__ inline void wgmma_ss(float (&d)[NW / 8][4], uint64_t a, uint64_t b);
template <> __device__ inline void wgmma_ss<64>(float (&d)[8][4], uint64_t a, uint64_t b) {
#ifdef DLLM_TMA_DEVICE
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
               "%32, %33, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
               : "l"(a), "l"(b), "r"(1));
#endif
}
template <> __device__ inline void wgmma_ss<80>(float (&d)[10][4], uint64_t a, uint64_t b) {
#ifdef DLLM_TMA_DEVICE
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %42, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n80k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39}, "
               "%40, %41, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3])
               : "l"(a), "l"(b), "r"(1));
#endif
}
template <> __device__ inline void wgmma_ss<96>(float (&d)[12][4], uint64_t a, uint64_t b) {
#ifdef DLLM_TMA_DEVICE
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47}, "
               "%48, %49, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3])
               : "l"(a), "l"(b), "r"(1));
#endif
}
template <> __device__ inline void wgmma_ss<128>(float (&d)[16][4], uint64_t a, uint64_t b) {
#ifdef DLLM_TMA_DEVICE
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
               "%64, %65, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
               : "l"(a), "l"(b), "r"(1));
#endif
}

// ring_init sets up a copy ring's barriers (thread 0, then the block
// waits): full[s] completes when stage s has landed, empty[s] when the
// four multiplying warps are done with it.
__device__ inline void ring_init(unsigned full0, unsigned empty0, int stages) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; s++) mbar_init(full0 + 8 * s, 1), mbar_init(empty0 + 8 * s, 4);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
}

// mma_chunk waits for chunk c's stage (at wb, x's tile at xb) and issues
// its four k steps, d += x w^T, as one wgmma group.
template <int NW>
__device__ inline void mma_chunk(float (&d)[NW / 8][4], int c, int stages, unsigned full0, unsigned wb, unsigned xb) {
  mbar_wait(full0 + 8 * (c % stages), (c / stages) & 1);
  wg_fence();
#pragma unroll
  for (int ks = 0; ks < 4; ks++) wgmma_ss<NW>(d, sw128_desc(xb + 32 * ks), sw128_desc(wb + 32 * ks));
  wg_commit();
}

// release_prev waits for chunk c - 1's products and frees its stage: one
// group stays in flight while the next is issued.
__device__ inline void release_prev(int c, int stages, unsigned empty0) {
  wg_wait1();
  __syncwarp();
  if (threadIdx.x % 32 == 0 && c > 0) mbar_arrive(empty0 + 8 * ((c - 1) % stages));
}

// cluster_sum_out ends a split-K GEMM: the four multiplying warps put their
// partial products d (rows < M) in red (M, NW), then each of the cluster's
// KS CTAs sums 1/KS of the slice's outputs over the ranks in order
// (deterministic) and writes out = [res +] sum for weight slice nt. All
// 160 threads call it.
template <int NW, int KS>
__device__ inline void cluster_sum_out(const float (&d)[NW / 8][4], float *red, const __nv_bfloat16 *res,
                                       __nv_bfloat16 *out, int M, int N, int nt, int rank) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  if (warp < 4) {
#pragma unroll
    for (int j = 0; j < NW / 8; j++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int m = 16 * warp + g + 8 * h;
        if (m < M) *reinterpret_cast<float2 *>(red + m * NW + 8 * j + 2 * t) = make_float2(d[j][2 * h], d[j][2 * h + 1]);
      }
  }
  if (KS > 1)
    cluster_sync();
  else
    __syncthreads();
  const int E = M * NW, per = (E / 4 + KS - 1) / KS * 4; // floats, in fours
  for (int i = rank * per + 4 * tid; i < min(E, (rank + 1) * per); i += 4 * 160) {
    float4 v = make_float4(0, 0, 0, 0);
    for (int q = 0; q < KS; q++) {
      float4 p = KS > 1 ? ld_peer4(smem_u32(red + i), q) : *reinterpret_cast<float4 *>(red + i);
      v.x += p.x, v.y += p.y, v.z += p.z, v.w += p.w;
    }
    const size_t o = size_t(i / NW) * N + nt * NW + i % NW;
    if (res) {
      const float2 r0 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(res + o));
      const float2 r1 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(res + o + 2));
      v.x += r0.x, v.y += r0.y, v.z += r1.x, v.w += r1.y;
    }
    *reinterpret_cast<__nv_bfloat162 *>(out + o) = __floats2bfloat162_rn(v.x, v.y);
    *reinterpret_cast<__nv_bfloat162 *>(out + o + 2) = __floats2bfloat162_rn(v.z, v.w);
  }
  if (KS > 1) cluster_sync(); // peers may still read this CTA's partials
}

constexpr int kTmaRows = 32; // x's box: M <= 32 (a block step; tpost_kernel's XR 64 takes a fused commit)
// Copy stages of each TMA GEMM's ring: more fetch more of a GEMM's
// weights before its PDL wait, while the kernel before runs, but two
// kernels' CTAs share an SM only while their shared memory fits together
// (measured on an H200: 8 for QKV and output took a 1k step from 2.43 to
// 2.35 ms; gate-up 4 or 8 and other down counts were slower).
constexpr int kLinStages = 8, kGateUpStages = 6, kDownStages = 4;

// tgemm_kernel: out = [res +] x W^T (res may be out, or null). Grid (N / NW,
// KS) in clusters of the KS CTAs of a weight slice; 160 threads: warps 0-3
// multiply, warp 4 issues the copies. CTA rank r takes the CH = K / 64 / KS
// chunks of K from r CH, through ST stages, each the weights' (NW, 64) box
// and x's (32, 64) box.
template <int NW, int KS, int ST>
__global__ void __launch_bounds__(160)
    tgemm_kernel(const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap xmap,
                 const __nv_bfloat16 *res, __nv_bfloat16 *out, int M, int N, int K) {
#ifdef DLLM_TMA_DEVICE
  constexpr int kW = NW * 128, kStage = kW + kTmaRows * 128; // bytes
  extern __shared__ __align__(16) unsigned char smem_[];
  unsigned char *smem =
      reinterpret_cast<unsigned char *>((reinterpret_cast<uintptr_t>(smem_) + 1023) & ~uintptr_t(1023));
  float *red = reinterpret_cast<float *>(smem + ST * kStage); // (M, NW) partial products
  uint64_t *bars = reinterpret_cast<uint64_t *>(red + kTmaRows * NW);
  const unsigned full0 = smem_u32(bars), empty0 = smem_u32(bars + ST);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int nt = blockIdx.x, rank = KS > 1 ? int(cluster_rank()) : 0;
  const int CH = K / 64 / KS, k0 = rank * CH * 64;

  ring_init(full0, empty0, ST);

  float d[NW / 8][4] = {};
  if (warp == 4) {
    // 2. The copier: the first stages' weights before the PDL wait (nothing
    // before writes them), x's after; then each stage as it frees.
    if (lane == 0)
      for (int c = 0; c < CH && c < ST; c++) {
        mbar_expect(full0 + 8 * c, kStage);
        tma_load2d(smem_u32(smem + c * kStage), wmap, k0 + 64 * c, nt * NW, full0 + 8 * c);
      }
    dep_launch_wait();
    if (lane == 0) {
      for (int c = 0; c < CH && c < ST; c++)
        tma_load2d(smem_u32(smem + c * kStage + kW), xmap, k0 + 64 * c, 0, full0 + 8 * c);
      for (int c = ST; c < CH; c++) {
        const int s = c % ST;
        mbar_wait(empty0 + 8 * s, (c / ST - 1) & 1);
        mbar_expect(full0 + 8 * s, kStage);
        tma_load2d(smem_u32(smem + s * kStage), wmap, k0 + 64 * c, nt * NW, full0 + 8 * s);
        tma_load2d(smem_u32(smem + s * kStage + kW), xmap, k0 + 64 * c, 0, full0 + 8 * s);
      }
    }
    __syncwarp(); // the cluster barrier below wants whole warps
  } else {
    // 3. The multipliers: one chunk's products in flight while the next
    // chunk's are issued.
    dep_launch_wait();
    for (int c = 0; c < CH; c++) {
      const unsigned wb = smem_u32(smem + (c % ST) * kStage);
      mma_chunk<NW>(d, c, ST, full0, wb, wb + kW);
      release_prev(c, ST, empty0);
    }
    wg_wait(d);
  }
  // 4. The sum over the cluster; rows past M are dropped.
  cluster_sum_out<NW, KS>(d, red, res, out, M, N, nt, rank);
#else
  __trap();
#endif
}
template <int NW, int ST> constexpr size_t tgemm_smem() {
  return 1024 + size_t(ST) * (NW + kTmaRows) * 128 + kTmaRows * NW * 4 + 16 * ST;
}

// x_squares adds to ss[i] the squares of the 16 values of x's row tid / 4
// + 32 i (< M) that thread tid % 4 takes from a stage's (XR, 64) x box at
// xs (the 128-byte swizzle only moves a row's 16-byte chunks).
template <int XR = kTmaRows>
__device__ inline void x_squares(float (&ss)[XR / 32], const unsigned char *xs, int M) {
  const int q = threadIdx.x % 4;
#pragma unroll
  for (int r = 0; r < XR / 32; r++) {
    const int row = threadIdx.x / 4 + 32 * r;
    if (row >= M) continue;
    const uint4 *xr = reinterpret_cast<const uint4 *>(xs + row * 128 + q * 32);
#pragma unroll
    for (int h = 0; h < 2; h++) {
      uint4 v = xr[h];
      const __nv_bfloat16 *e = reinterpret_cast<const __nv_bfloat16 *>(&v);
#pragma unroll
      for (int i = 0; i < 8; i++) ss[r] += f32(e[i]) * f32(e[i]);
    }
  }
}

// x_rinv sums x_squares's ss over the four threads of each row and writes
// the rows' inverse RMS over K values to rinv.
template <int XR = kTmaRows> __device__ inline void x_rinv(float (&ss)[XR / 32], float *rinv, int K, float eps) {
#pragma unroll
  for (int r = 0; r < XR / 32; r++) {
    float v = ss[r];
    v += __shfl_xor_sync(0xffffffff, v, 1);
    v += __shfl_xor_sync(0xffffffff, v, 2);
    if (threadIdx.x % 4 == 0) rinv[threadIdx.x / 4 + 32 * r] = rsqrtf(v / static_cast<float>(K) + eps);
  }
}

// silu_spread is gate-up's SiLU step spread over the four multiplying
// warps: d (gate 48 and up 48 columns of the 64-row tile) holds rows 0-31
// in warps 0 and 1 only (XR 32), whose threads would each compute 24
// outputs as a chain no other warp hides. Their products go through red
// (XR, 104) in shared memory, then each thread takes runs of 4 outputs of
// one row into out (M, F) at column j0, scaled by rinv as
// silu_mul_norm_kernel does after cuBLAS's bf16 output. Threads 0-127 call
// it.
template <int XR = kTmaRows>
__device__ inline void silu_spread(const float (&d)[12][4], float *red, const float *rinv, __nv_bfloat16 *out, int M,
                                   int F, int j0) {
  using T = __nv_bfloat16;
  constexpr int NH = 48, RS = 2 * NH + 8; // floats a row; the pad halves bank conflicts
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  if (16 * warp < XR) {
#pragma unroll
    for (int j = 0; j < 2 * NH / 8; j++)
#pragma unroll
      for (int h = 0; h < 2; h++)
        *reinterpret_cast<float2 *>(red + (16 * warp + g + 8 * h) * RS + 8 * j + 2 * t) =
            make_float2(d[j][2 * h], d[j][2 * h + 1]);
  }
  asm volatile("bar.sync 1, 128;" ::: "memory");
  // A thread's (at most) three runs are loaded first and then computed in
  // one unrolled body, so that their chains (roundings, exp, IEEE division)
  // interleave: each warp is alone on its sub-partition here.
  constexpr int kRuns = XR * (NH / 4) / 128;
  float gu[kRuns][2][4], r[kRuns];
#pragma unroll
  for (int i = 0; i < kRuns; i++) {
    const int u = tid + 128 * i, m = min(u / (NH / 4), M - 1), c = 4 * (u % (NH / 4));
    r[i] = rinv[m];
#pragma unroll
    for (int e = 0; e < 4; e++) gu[i][0][e] = red[m * RS + c + e], gu[i][1][e] = red[m * RS + NH + c + e];
  }
#pragma unroll
  for (int i = 0; i < kRuns; i++) {
    const int u = tid + 128 * i, m = u / (NH / 4), c = 4 * (u % (NH / 4));
    float y[4];
#pragma unroll
    for (int e = 0; e < 4; e++) {
      float gv = round<T>(round<T>(gu[i][0][e]) * r[i]), uv = round<T>(round<T>(gu[i][1][e]) * r[i]);
      y[e] = round<T>(gv / (1.0f + __expf(-gv))) * uv;
    }
    __nv_bfloat162 o2[2] = {__floats2bfloat162_rn(y[0], y[1]), __floats2bfloat162_rn(y[2], y[3])};
    if (m < M) *reinterpret_cast<uint2 *>(out + size_t(m) * F + j0 + c) = *reinterpret_cast<const uint2 *>(o2);
  }
}

// tgemm_gu_kernel is tgemm_kernel for the MLP's gate-up projection with
// silu_mul_norm_kernel's step in its epilogue: w is the fused (gate; up)
// weight with the RMSNorm's weight folded in (2F, K), and out (M, F) =
// silu(g) u with g and u scaled by x's inverse RMS, rounded as there. CTA j
// takes gate rows [48 j, 48 j + 48) and the same up rows (two boxes a
// chunk, one 96-row tile) over all of K, so it owns its outputs; it sums
// x's squares from the tiles it multiplies.
template <int ST>
__global__ void __launch_bounds__(160)
    tgemm_gu_kernel(const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap xmap,
                    __nv_bfloat16 *out, int M, int F, int K, float eps) {
#ifdef DLLM_TMA_DEVICE
  using T = __nv_bfloat16;
  constexpr int NH = 48, NW = 2 * NH, kH = NH * 128, kW = NW * 128, kStage = kW + kTmaRows * 128;
  extern __shared__ __align__(16) unsigned char smem_[];
  unsigned char *smem =
      reinterpret_cast<unsigned char *>((reinterpret_cast<uintptr_t>(smem_) + 1023) & ~uintptr_t(1023));
  float *rinv = reinterpret_cast<float *>(smem + (ST + 1) * kStage); // past the ring and x's overhang
  uint64_t *bars = reinterpret_cast<uint64_t *>(rinv + kTmaRows);
  const unsigned full0 = smem_u32(bars), empty0 = smem_u32(bars + ST);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, j0 = blockIdx.x * NH, CH = K / 64;
  ring_init(full0, empty0, ST);
  float d[NW / 8][4] = {};
  if (warp == 4) {
    auto wload = [&](int c, int s) {
      tma_load2d(smem_u32(smem + s * kStage), wmap, 64 * c, j0, full0 + 8 * s);
      tma_load2d(smem_u32(smem + s * kStage + kH), wmap, 64 * c, F + j0, full0 + 8 * s);
    };
    if (lane == 0)
      for (int c = 0; c < CH && c < ST; c++) mbar_expect(full0 + 8 * c, kStage), wload(c, c);
    dep_launch_wait();
    if (lane == 0) {
      for (int c = 0; c < CH && c < ST; c++)
        tma_load2d(smem_u32(smem + c * kStage + kW), xmap, 64 * c, 0, full0 + 8 * c);
      for (int c = ST; c < CH; c++) {
        const int s = c % ST;
        mbar_wait(empty0 + 8 * s, (c / ST - 1) & 1);
        mbar_expect(full0 + 8 * s, kStage);
        wload(c, s);
        tma_load2d(smem_u32(smem + s * kStage + kW), xmap, 64 * c, 0, full0 + 8 * s);
      }
    }
    __syncwarp();
    return;
  }
  dep_launch_wait();
  float ss[1] = {};
  for (int c = 0; c < CH; c++) {
    const int s = c % ST;
    const unsigned wb = smem_u32(smem + s * kStage);
    mma_chunk<NW>(d, c, ST, full0, wb, wb + kW);
    x_squares(ss, smem + s * kStage + kW, M);
    release_prev(c, ST, empty0);
  }
  wg_wait(d);
  x_rinv(ss, rinv, K, eps);
  asm volatile("bar.sync 1, 128;" ::: "memory"); // the multiplying warps only
  const int g = lane / 4, t = lane % 4;
  // The ring is free once every warp has passed the barrier above.
  silu_spread(d, reinterpret_cast<float *>(smem), rinv, out, M, F, j0);
#else
  __trap();
#endif
}
template <int ST> constexpr size_t tgemm_gu_smem() { return 1024 + size_t(ST + 1) * (96 + kTmaRows) * 128 + kTmaRows * 4 + 16 * ST; }

// --- A block step's post-attention sublayers in one persistent kernel ---------
//
// tpost_kernel is, in one grid of F / 48 CTAs (one an SM, no clusters: at
// one CTA an SM the H200 holds only 15 clusters of 8, an earlier
// fused MLP), what three kernels did: the output projection with
// the residual add (tgemm_kernel<64, 4>; optional), gate-up with its SiLU
// step (tgemm_gu_kernel) and the down projection with the residual add
// (tgemm_kernel<128, 8>); optionally also the next layer's QKV
// projection (tgemm_kernel<64, 4>, its parts summed by RoPE). What
// crosses CTAs goes through global memory (L2): the projections' float32 partial products over K, summed after a
// grid barrier in rank order with the residual as cluster_sum_out does
// (each CTA C / G columns), and gate-up's outputs h. So the result is the
// kernels' bit for bit, each CTA multiplying the same chunks in the same
// order. (Summing each slice in the CTA that stores its last part, found
// with a counter, saves two barriers but was slower: one CTA sums 8 parts
// of 128 columns in ~5 us; probes/mlp_probe.cu.)
// What it gains: the copier never waits for a phase to end before
// fetching the next phase's weights, which depend on nothing (the output
// projection's all and gate-up's first before the PDL wait, during the
// attention; the down projection's while gate-up's last products, its SiLU
// step and the barrier run), and fewer kernel boundaries. The grid must be
// resident at once (dtk_tma_post checks the SMs); it lets the next kernel
// launch only after its first barrier, so that kernel cannot take an SM
// one of this grid's CTAs still waits for.

__device__ inline unsigned long long ld_acquire_u64(const unsigned long long *p) {
  unsigned long long v = 0;
#ifdef DLLM_TMA_DEVICE
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
#endif
  return v;
}
// proxy_fence_global orders this thread's generic accesses to global
// memory with the async proxy's (TMA reads h and y, written by plain
// stores).
__device__ inline void proxy_fence_global() {
#ifdef DLLM_TMA_DEVICE
  asm volatile("fence.proxy.async.global;" ::: "memory");
#endif
}

// grid_sync returns once every CTA's multiplying warps (threads 0-127)
// have called it, their writes before it visible after it. *bar counts
// arrivals over every barrier of every launch (64 bits: it never wraps):
// the arrival that finds it at old waits for the multiple of n past old.
// No reset, so no second atomic after the last arrival (a reset and a
// generation bump took ~1.9 us from the last arrival to the release,
// probes/mlp_probe.cu).
__device__ inline void grid_sync(unsigned long long *bar, unsigned n) {
  asm volatile("bar.sync 1, 128;" ::: "memory");
  if (threadIdx.x == 0) {
    unsigned long long old = 0;
#ifdef DLLM_TMA_DEVICE
    asm volatile("atom.add.release.gpu.global.u64 %0, [%1], 1;" : "=l"(old) : "l"(bar) : "memory");
#endif
    const unsigned long long target = (old / n + 1) * n;
    while (ld_acquire_u64(bar) < target) {
    }
  }
  asm volatile("bar.sync 1, 128;" ::: "memory");
}

// A stage holds the down projection's (128, 64) weight box and x's (XR,
// 64) at kPostW; gate-up's two (48, 64) boxes take 96 of the 128 rows,
// the output projection's one 64.
constexpr int kPostND = 128, kPostKS = 8, kPostOS = 4, kPostW = kPostND * 128;
// The next layer's QKV projection as the last phase: 80-row slices, K in
// four parts (MiniCPM5-2B's 2560 rows: 32 slices, 128 CTAs).
constexpr int kPostNQ = 80, kPostQS = DTK_TMA_POST_QPARTS;
__host__ __device__ constexpr int post_stage(int XR) { return kPostW + XR * 128; }

// DLLM_MLP_TRACE (probes/mlp_probe.cu only): thread 0 writes
// %globaltimer at the kernel's steps to g_mlp_trace, (launch, CTA, 11) by
// the barrier count.
#ifdef DLLM_MLP_TRACE
__device__ unsigned long long *g_mlp_trace;
constexpr int kMlpTraceLaunches = 64, kMlpTraceMarks = 11;
__device__ inline unsigned long long gtimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
#define MLP_MARK(i)                                                                                             \
  do {                                                                                                          \
    if (g_mlp_trace && threadIdx.x == 0)                                                                      \
      g_mlp_trace[(size_t(launch_no % kMlpTraceLaunches) * gridDim.x + blockIdx.x) * kMlpTraceMarks + (i)] =   \
          gtimer();                                                                                             \
  } while (0)
// g_mlp_skip (the probe's timing experiments only; results then wrong):
// bit 1 gate-up's products, bit 2 gate-up's y boxes, bit 4 gate-up's
// weight boxes, bit 8 its sums of squares are left out.
__device__ int g_mlp_skip;
#define MLP_SKIP(bit) (g_mlp_skip & (bit))
// g_mlp_steps: thread 0's clock64 cycles in each step of gate-up's chunk
// loop (0 the stage's wait, 1 the products' issue, 2 the sums of squares,
// 3 the wait for the chunk before and the release) and the down
// projection's (4 wait, 5 issue, 6 release), summed over the chunks,
// (launch, CTA, 8) as g_mlp_trace.
__device__ long long *g_mlp_steps;
constexpr int kMlpSteps = 8;
#else
#define MLP_MARK(i)
#define MLP_SKIP(bit) 0
#endif

// StepClock is g_mlp_steps's tally (empty outside DLLM_MLP_TRACE builds).
struct StepClock {
#ifdef DLLM_MLP_TRACE
  static constexpr bool on = true;
  long long t = 0, acc[kMlpSteps] = {};
  __device__ void start() { t = clock64(); }
  __device__ void mark(int i) {
    const long long n = clock64();
    acc[i] += n - t;
    t = n;
  }
  __device__ void store(unsigned launch) const {
    if (g_mlp_steps && threadIdx.x == 0)
      for (int i = 0; i < kMlpSteps; i++)
        g_mlp_steps[(size_t(launch % kMlpTraceLaunches) * gridDim.x + blockIdx.x) * kMlpSteps + i] = acc[i];
  }
#else
  static constexpr bool on = false;
  __device__ void start() {}
  __device__ void mark(int) {}
  __device__ void store(unsigned) const {}
#endif
};

// PostMaps: the tensor maps of tpost_kernel's operands.
struct PostMaps {
  CUtensorMap o, ao; // output projection (C, Ko) in (64, 64) boxes; attention output (M, Ko)
  CUtensorMap gu, x; // gate-up (2F, C) in (48, 64) boxes; the residual stream y (M, C)
  CUtensorMap dn, h; // down (C, F) in (128, 64) boxes; gate-up's outputs (M, F)
  CUtensorMap q;     // the next layer's folded QKV weight (Nq, C) in (80, 64) boxes (read with has_q)
};

// part_store writes the accumulator rows < M (warp w holds rows 16 w ..,
// those past x's box garbage) to part (KS, M, C) as K part r's columns
// [n0, n0 + 8 NJ).
template <int NJ>
__device__ inline void part_store(const float (&d)[NJ][4], float *part, int M, int C, int r, int n0) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  if (16 * warp >= M) return;
#pragma unroll
  for (int j = 0; j < NJ; j++)
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
      const int m = 16 * warp + g + 8 * hh;
      if (m < M)
        *reinterpret_cast<float2 *>(part + (size_t(r) * M + m) * C + n0 + 8 * j + 2 * t) =
            make_float2(d[j][2 * hh], d[j][2 * hh + 1]);
    }
}

// tpost_kernel: see above. has_o: the output projection first (y += ao
// Wo^T); h and part scratch; y the residual stream, updated in place. x's
// boxes (ao, y, h) are XR rows: M <= XR. With qpart: after one more
// barrier the next layer's QKV projection of the new y, its folded
// weight (Nq, C) fetched while the down projection and its sum run, as
// float32 partial products over K (kPostQS, M, Nq) that dtk_rope_qkv
// sums: the QKV GEMM's kernel and its boundary go (the next kernel, RoPE,
// is small enough to wait on this grid's SMs).
template <int ST, int XR = kTmaRows>
__global__ void __launch_bounds__(160, 1)
    tpost_kernel(const __grid_constant__ PostMaps maps, bool has_o, __nv_bfloat16 *h, float *part, __nv_bfloat16 *y,
                 unsigned long long *bar, int M, int F, int C, int Ko, float eps, float *qpart, int Nq) {
#ifdef DLLM_TMA_DEVICE
  using T = __nv_bfloat16;
  constexpr int NH = 48, NG = 2 * NH, NO = 64, ND = kPostND, kH = NH * 128, kW = kPostW, RS = NG + 8;
  constexpr int kStage = post_stage(XR), kOver = (64 - XR) * 128;
  constexpr int kOBytes = NO * 128 + XR * 128, kGuBytes = 2 * kH + XR * 128, kDnBytes = kStage;
  extern __shared__ __align__(16) unsigned char smem_[];
  unsigned char *smem =
      reinterpret_cast<unsigned char *>((reinterpret_cast<uintptr_t>(smem_) + 1023) & ~uintptr_t(1023));
  // Past the ring and x's overhang (the 64-row A operand reads 64 - XR
  // rows on): gate-up's products for the SiLU step (the ring holds down
  // weights by then), the inverse RMS, the ring's barriers.
  float *red = reinterpret_cast<float *>(smem + ST * kStage + kOver); // (XR, RS)
  float *rinv = red + XR * RS;
  uint64_t *bars = reinterpret_cast<uint64_t *>(rinv + XR);
  const unsigned full0 = smem_u32(bars), empty0 = smem_u32(bars + ST);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, G = gridDim.x, b = blockIdx.x;
  // The phases' chunks are numbered on through the ring: the output
  // projection's CHo (slice no, K part ro), gate-up's CHg (gate rows [j0,
  // j0 + 48) and the same up rows), the down projection's CHd (slice nd,
  // K part rd).
  const int CHo = has_o ? Ko / 64 / kPostOS : 0, no = b / kPostOS, ro = b % kPostOS, ko0 = ro * CHo * 64;
  const int CHg = C / 64, j0 = b * NH, cg = CHo;
  const int CHd = F / 64 / kPostKS, nd = b / kPostKS, rd = b % kPostKS, kd0 = rd * CHd * 64, cd = CHo + CHg;
  const bool has_q = qpart != nullptr;
  const int CHq = has_q ? C / 64 / kPostQS : 0, nq = b / kPostQS, rq = b % kPostQS, kq0 = rq * CHq * 64,
            cq = cd + CHd;
  auto stage = [&](int c) { return smem_u32(smem + (c % ST) * kStage); };
  auto full = [&](int c) { return full0 + 8 * (c % ST); };
#ifdef DLLM_MLP_TRACE
  const unsigned long long t_start = gtimer();
  unsigned launch_no = 0;
#endif
  ring_init(full0, empty0, ST);

  if (warp == 4) {
    // 1. The copier. Weights go as soon as their stage is free; the
    // activations (ao, then y for gate-up, then h) once they exist: ao
    // after the PDL wait, y after the output projection's sum (named
    // barrier 3 with the multipliers), h after gate-up's (barrier 2). A
    // phase's weights issued ahead of its activations are at most those
    // whose stages the phase before frees (so that the copier never waits
    // for a stage that only its own later copies would free).
    auto wait_free = [&](int c) {
      if (c >= ST) mbar_wait(empty0 + 8 * (c % ST), (c / ST - 1) & 1);
    };
    auto o_w = [&](int i) {
      mbar_expect(full(i), kOBytes);
      tma_load2d(stage(i), maps.o, ko0 + 64 * i, no * NO, full(i));
    };
    auto gu_w = [&](int j) {
      const int c = cg + j;
      mbar_expect(full(c), kGuBytes - (MLP_SKIP(2) ? XR * 128 : 0) - (MLP_SKIP(4) ? 2 * kH : 0));
      if (MLP_SKIP(4)) return;
      tma_load2d(stage(c), maps.gu, 64 * j, j0, full(c));
      tma_load2d(stage(c) + kH, maps.gu, 64 * j, F + j0, full(c));
    };
    auto gu_x = [&](int j) {
      if (!MLP_SKIP(2)) tma_load2d(stage(cg + j) + kW, maps.x, 64 * j, 0, full(cg + j));
    };
    auto dn_w = [&](int i) {
      const int c = cd + i;
      mbar_expect(full(c), kDnBytes);
      tma_load2d(stage(c), maps.dn, kd0 + 64 * i, nd * ND, full(c));
    };
    auto q_w = [&](int j) {
      const int c = cq + j;
      mbar_expect(full(c), kPostNQ * 128 + XR * 128);
      tma_load2d(stage(c), maps.q, kq0 + 64 * j, nq * kPostNQ, full(c));
    };
    const int preg = min(ST, CHg), pred = min(ST, CHd);
    int g_issued = 0;
    if (lane == 0) {
      for (int i = 0; i < CHo; i++) o_w(i);
      for (; g_issued < preg && cg + g_issued < ST; g_issued++) gu_w(g_issued);
    }
    dep_wait();
    if (lane == 0) {
      for (int i = 0; i < CHo; i++) tma_load2d(stage(i) + kW, maps.ao, ko0 + 64 * i, 0, full(i));
      for (; g_issued < preg; g_issued++) wait_free(cg + g_issued), gu_w(g_issued);
    }
    __syncwarp();
    if (has_o) asm volatile("bar.sync 3, 160;" ::: "memory");
    if (lane == 0) {
      if (has_o) proxy_fence_global();
      for (int j = 0; j < preg; j++) gu_x(j);
      for (int j = preg; j < CHg; j++) {
        wait_free(cg + j);
        gu_w(j);
        gu_x(j);
      }
      for (int i = 0; i < pred; i++) wait_free(cd + i), dn_w(i);
    }
    __syncwarp();
    asm volatile("bar.sync 2, 160;" ::: "memory");
    if (lane == 0) {
      proxy_fence_global();
      for (int i = 0; i < pred; i++) tma_load2d(stage(cd + i) + kW, maps.h, kd0 + 64 * i, 0, full(cd + i));
      for (int i = pred; i < CHd; i++) {
        wait_free(cd + i);
        dn_w(i);
        tma_load2d(stage(cd + i) + kW, maps.h, kd0 + 64 * i, 0, full(cd + i));
      }
      // The QKV weights take the stages the down projection's first chunks
      // free; y's boxes come after its sum (named barrier 4).
      for (int j = 0; j < CHq; j++) wait_free(cq + j), q_w(j);
    }
    __syncwarp();
    if (has_q) {
      asm volatile("bar.sync 4, 160;" ::: "memory");
      if (lane == 0) {
        proxy_fence_global();
        for (int j = 0; j < CHq; j++) tma_load2d(stage(cq + j) + kW, maps.x, kq0 + 64 * j, 0, full(cq + j));
      }
      __syncwarp();
    }
    return;
  }

  // The multipliers. rel frees chunk c - 1's stage once chunk c's products
  // are issued (one group stays in flight), except at a phase's first
  // chunk: each phase frees its last chunk's stage once its products are
  // done.
  auto rel = [&](int c, bool first) {
    wg_wait1();
    __syncwarp();
    if (lane == 0 && !first) mbar_arrive(empty0 + 8 * ((c - 1) % ST));
  };
  auto rel_last = [&](int c) {
    __syncwarp();
    if (lane == 0) mbar_arrive(empty0 + 8 * (c % ST));
  };
  const int g = lane / 4, t = lane % 4;
  // sum_into_y: this CTA's C / G columns of every row, the KS parts summed
  // in order, then the residual, into y.
  auto sum_into_y = [&](int KS) {
    const int per = C / G;
    for (int u = tid; u < M * (per / 4); u += 128) {
      const int m = u / (per / 4), col = b * per + 4 * (u % (per / 4));
      float4 v = make_float4(0, 0, 0, 0);
      for (int q = 0; q < KS; q++) {
        const float4 p = __ldcg(reinterpret_cast<const float4 *>(part + (size_t(q) * M + m) * C + col));
        v.x += p.x, v.y += p.y, v.z += p.z, v.w += p.w;
      }
      T *o = y + size_t(m) * C + col;
      const uint2 rr = __ldcg(reinterpret_cast<const uint2 *>(o));
      const float2 r0 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&rr.x));
      const float2 r1 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&rr.y));
      v.x += r0.x, v.y += r0.y, v.z += r1.x, v.w += r1.y;
      __nv_bfloat162 o2[2] = {__floats2bfloat162_rn(v.x, v.y), __floats2bfloat162_rn(v.z, v.w)};
      *reinterpret_cast<uint2 *>(o) = *reinterpret_cast<const uint2 *>(o2);
    }
  };
  dep_wait();
#ifdef DLLM_MLP_TRACE
  launch_no = unsigned(ld_acquire_u64(bar) / (uint64_t((has_o ? 4 : 2) + (has_q ? 1 : 0)) * gridDim.x));
  if (g_mlp_trace && tid == 0)
    g_mlp_trace[(size_t(launch_no % kMlpTraceLaunches) * gridDim.x + blockIdx.x) * kMlpTraceMarks] = t_start;
#endif
  MLP_MARK(1);
  StepClock sc;

  // 2. The output projection: y += ao Wo^T (its parts, a barrier, the sum).
  if (has_o) {
    float d[NO / 8][4] = {};
    for (int i = 0; i < CHo; i++) {
      mma_chunk<NO>(d, i, ST, full0, stage(i), stage(i) + kW);
      rel(i, i == 0);
    }
    wg_wait(d);
    rel_last(CHo - 1);
    part_store(d, part, M, C, ro, no * NO);
    grid_sync(bar, G);
    dep_launch(); // every CTA of this grid is resident now
    MLP_MARK(8);
    sum_into_y(kPostOS);
    proxy_fence_global(); // y is read by other CTAs' TMA copies
    grid_sync(bar, G);
    MLP_MARK(9);
    asm volatile("bar.sync 3, 160;" ::: "memory");
  }

  // 3. Gate-up with its SiLU step (tgemm_gu_kernel's spread form), into h.
  {
    float d[NG / 8][4] = {};
    float ss[XR / 32] = {};
    sc.start();
    for (int j = 0; j < CHg; j++) {
      const int c = cg + j;
      if (StepClock::on) mbar_wait(full(c), (c / ST) & 1); // MLP_SKIP's builds: always
      sc.mark(0);
      if (!MLP_SKIP(1)) {
        mma_chunk<NG>(d, c, ST, full0, stage(c), stage(c) + kW);
        sc.mark(1);
        if (!MLP_SKIP(8)) x_squares<XR>(ss, smem + (c % ST) * kStage + kW, M);
      }
      sc.mark(2);
      rel(c, j == 0);
      sc.mark(3);
    }
    wg_wait(d);
    MLP_MARK(2);
    rel_last(cg + CHg - 1);
    x_rinv<XR>(ss, rinv, C, eps);
    MLP_MARK(10);
    silu_spread<XR>(d, red, rinv, h, M, F, j0); // its barrier also makes rinv visible
    MLP_MARK(3);
    proxy_fence_global(); // h is read by other CTAs' TMA copies
  }
  grid_sync(bar, G);
  MLP_MARK(4);
  if (!has_o) dep_launch();
  asm volatile("bar.sync 2, 160;" ::: "memory");

  // 4. The down projection: y += h Wd^T (its parts, a barrier, the sum).
  {
    float d[ND / 8][4] = {};
    sc.start();
    for (int i = 0; i < CHd; i++) {
      const int c = cd + i;
      if (StepClock::on) mbar_wait(full(c), (c / ST) & 1);
      sc.mark(4);
      mma_chunk<ND>(d, c, ST, full0, stage(c), stage(c) + kW);
      sc.mark(5);
      rel(c, i == 0);
      sc.mark(6);
    }
    wg_wait(d);
    MLP_MARK(5);
    if (has_q) rel_last(cd + CHd - 1);
    part_store(d, part, M, C, rd, nd * ND);
  }
  grid_sync(bar, G);
  MLP_MARK(6);
  sum_into_y(kPostKS);
  MLP_MARK(7);

  // 5. The next layer's QKV projection of y (its parts; RoPE sums them).
  if (has_q) {
    proxy_fence_global(); // y is read by other CTAs' TMA copies
    grid_sync(bar, G);
    asm volatile("bar.sync 4, 160;" ::: "memory");
    float d[kPostNQ / 8][4] = {};
    for (int j = 0; j < CHq; j++) {
      const int c = cq + j;
      mma_chunk<kPostNQ>(d, c, ST, full0, stage(c), stage(c) + kW);
      rel(c, j == 0);
    }
    wg_wait(d);
    part_store(d, qpart, M, Nq, rq, nq * kPostNQ);
  }
#ifdef DLLM_MLP_TRACE
  sc.store(launch_no);
#endif
#else
  __trap();
#endif
}
template <int ST, int XR = kTmaRows> constexpr size_t tpost_smem() {
  return 1024 + size_t(ST) * post_stage(XR) + (64 - XR) * 128 + XR * (96 + 8) * 4 + XR * 4 + 16 * ST;
}

// The driver's cuTensorMapEncodeTiled, found through the runtime (the shim
// links no libcuda of its own).
using EncodeTiled = CUresult (*)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                 const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
EncodeTiled encoder() {
  static EncodeTiled fn = [] {
    void *p = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      p = nullptr;
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return fn;
}

// tmap2d is the tensor map of a row-major (rows, cols) bf16 matrix read in
// (box_rows, 64) boxes with the 128-byte swizzle (rows past the end: zeros).
bool tmap2d(CUtensorMap *m, const void *p, int64_t rows, int64_t cols, int box_rows) {
  cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)}, strides[1] = {cuuint64_t(cols) * 2};
  cuuint32_t box[2] = {64, cuuint32_t(box_rows)}, es[2] = {1, 1};
  return encoder()(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void *>(p), dims, strides, box, es,
                   CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// tma_on: the device is a Hopper of compute capability 9.0 (sm_90a's
// target) and the driver encodes tensor maps.
bool tma_on() {
  static const bool on = [] {
    int dev = 0, major = 0, minor = 0;
    return cudaGetDevice(&dev) == cudaSuccess &&
           cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
           cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess && major == 9 &&
           minor == 0 && encoder() != nullptr;
  }();
  return on;
}

// tgemm launches tgemm_kernel<NW, KS, ST> for the maps.
template <int NW, int KS, int ST>
int tgemm(const CUtensorMap &wm, const CUtensorMap &xm, const void *res, void *out, int64_t M, int64_t N, int64_t K,
          cudaStream_t s) {
  constexpr size_t smem = tgemm_smem<NW, ST>();
  static const cudaError_t set =
      cudaFuncSetAttribute(tgemm_kernel<NW, KS, ST>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (set != cudaSuccess) return set;
  return launch_in(tgemm_kernel<NW, KS, ST>, dim3(static_cast<unsigned>(N / NW), KS), 160, smem, s, unsigned(KS), wm,
                   xm, static_cast<const __nv_bfloat16 *>(res), static_cast<__nv_bfloat16 *>(out), static_cast<int>(M),
                   static_cast<int>(N), static_cast<int>(K));
}

// tgemm_gu launches tgemm_gu_kernel<ST>.
template <int ST>
int tgemm_gu(const CUtensorMap &wm, const CUtensorMap &xm, __nv_bfloat16 *out, int64_t M, int64_t F, int64_t K,
             float eps, cudaStream_t s) {
  constexpr size_t smem = tgemm_gu_smem<ST>();
  static const cudaError_t set =
      cudaFuncSetAttribute(tgemm_gu_kernel<ST>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (set != cudaSuccess) return set;
  return launch(tgemm_gu_kernel<ST>, dim3(static_cast<unsigned>(F / 48)), 160, smem, s, wm, xm, out,
                static_cast<int>(M), static_cast<int>(F), static_cast<int>(K), eps);
}

// tpost launches tpost_kernel<ST, XR> over G CTAs, or says DTK_TMA_NO
// where the device cannot hold them all at once (the grid barriers would
// wait for ever).
template <int ST, int XR = kTmaRows>
int tpost(const PostMaps &maps, bool has_o, void *h, void *part, void *y, void *bar, int G, int64_t M, int64_t F,
          int64_t C, int64_t Ko, float eps, float *qpart, int64_t Nq, cudaStream_t s) {
  constexpr size_t smem = tpost_smem<ST, XR>();
  static const bool ok = [&] {
    int dev = 0, sms = 0, per = 0;
    return cudaFuncSetAttribute(tpost_kernel<ST, XR>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) ==
               cudaSuccess &&
           cudaGetDevice(&dev) == cudaSuccess &&
           cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
           cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, tpost_kernel<ST, XR>, 160, smem) == cudaSuccess &&
           per >= 1 && sms >= G;
  }();
  if (!ok) return DTK_TMA_NO;
  return launch(tpost_kernel<ST, XR>, dim3(static_cast<unsigned>(G)), 160, smem, s, maps, has_o,
                static_cast<__nv_bfloat16 *>(h), static_cast<float *>(part), static_cast<__nv_bfloat16 *>(y),
                static_cast<unsigned long long *>(bar), static_cast<int>(M), static_cast<int>(F), static_cast<int>(C),
                static_cast<int>(Ko), eps, qpart, static_cast<int>(Nq));
}

#pragma nv_diag_default 177
// tma_rows is the x box that M rows take in the persistent kernel:
// kTmaRows, 64 for a fused commit's 33-64 rows, else 0 (none).
int tma_rows(int64_t M) { return M >= 1 && M <= kTmaRows ? kTmaRows : M <= 64 ? 64 : 0; }
#endif // DLLM_SM90A

} // namespace

extern "C" {

int dtk_tma_linear(int dtype, const void *x, const void *w, const void *resid, void *out, int64_t M, int64_t N,
                   int64_t K, void *stream) {
#ifdef DLLM_SM90A
  if (!tma_on() || dtype != kBF16 || M < 1 || M > kTmaRows || K % 64 != 0 || !aligned16(x) || !aligned16(w) ||
      !aligned16(out) || (resid && !aligned16(resid)))
    return DTK_TMA_NO;
  auto s = static_cast<cudaStream_t>(stream);
  CUtensorMap wm, xm;
  // The down projection's shape (K 6144) takes 128-row slices and K in
  // eight; the others 64-row slices and K in four (the probe's best).
  if (K >= 4096 && N % 128 == 0 && (K / 64) % 8 == 0) {
    if (!tmap2d(&wm, w, N, K, 128) || !tmap2d(&xm, x, M, K, kTmaRows)) return cudaErrorInvalidValue;
    return tgemm<128, 8, kDownStages>(wm, xm, resid, out, M, N, K, s);
  }
  if (N % 64 == 0 && (K / 64) % 4 == 0) {
    if (!tmap2d(&wm, w, N, K, 64) || !tmap2d(&xm, x, M, K, kTmaRows)) return cudaErrorInvalidValue;
    return tgemm<64, 4, kLinStages>(wm, xm, resid, out, M, N, K, s);
  }
#endif
  return DTK_TMA_NO;
}

int dtk_tma_gate_up_silu(int dtype, const void *x, const void *w, void *out, int64_t M, int64_t F, int64_t K,
                         float eps, void *stream) {
#ifdef DLLM_SM90A
  if (!tma_on() || dtype != kBF16 || M < 1 || M > kTmaRows || K % 64 != 0 || F % 48 != 0 || !aligned16(x) ||
      !aligned16(w) || !aligned16(out))
    return DTK_TMA_NO;
  CUtensorMap wm, xm;
  if (!tmap2d(&wm, w, 2 * F, K, 48) || !tmap2d(&xm, x, M, K, kTmaRows)) return cudaErrorInvalidValue;
  auto s = static_cast<cudaStream_t>(stream);
  auto o = static_cast<__nv_bfloat16 *>(out);
  return tgemm_gu<kGateUpStages>(wm, xm, o, M, F, K, eps, s);
#else
  return DTK_TMA_NO;
#endif
}

int dtk_tma_post(int dtype, void *y, const void *ao, const void *wo, int64_t Ko, const void *wgu, const void *wdown,
                 const void *wqkv, int64_t Nq, void *qpart, void *scratch, void *sync, int64_t M, int64_t F, int64_t C,
                 float eps, void *stream) {
#ifdef DLLM_SM90A
  // The grid: F / 48 gate-up slices; as many down parts (C / 128 slices of
  // 8 K parts) and output projection parts (C / 64 slices of 4).
  // MiniCPM5-2B: 128 CTAs.
  const int64_t G = F / 48;
  const bool has_o = ao != nullptr;
  const int xr = tma_rows(M);
  if (!tma_on() || dtype != kBF16 || xr == 0 || C % 128 != 0 ||
      F % 48 != 0 || (F / 64) % kPostKS != 0 || C / kPostND * kPostKS != G || C % (4 * G) != 0 ||
      (has_o && (C / 64 * kPostOS != G || Ko % (64 * kPostOS) != 0 || !aligned16(ao) || !aligned16(wo))) ||
      !aligned16(y) || !aligned16(wgu) || !aligned16(wdown) || !aligned16(scratch) || !sync ||
      reinterpret_cast<uintptr_t>(sync) % 8 != 0)
    return DTK_TMA_NO;
  // The next layer's QKV phase: a slice and K part for each CTA.
  if (wqkv && (!qpart || Nq % kPostNQ != 0 || Nq / kPostNQ * kPostQS != G ||
               (C / 64) % kPostQS != 0 || !aligned16(wqkv) || !aligned16(qpart)))
    return DTK_TMA_NO;
  auto h = static_cast<char *>(scratch);
  auto part = h + M * F * 2;
  PostMaps maps;
  if ((has_o && (!tmap2d(&maps.o, wo, C, Ko, 64) || !tmap2d(&maps.ao, ao, M, Ko, xr))) ||
      !tmap2d(&maps.gu, wgu, 2 * F, C, 48) || !tmap2d(&maps.x, y, M, C, xr) ||
      !tmap2d(&maps.dn, wdown, C, F, kPostND) || !tmap2d(&maps.h, h, M, F, xr) ||
      (wqkv && !tmap2d(&maps.q, wqkv, Nq, C, kPostNQ)))
    return cudaErrorInvalidValue;
  if (!has_o) maps.o = maps.ao = maps.x; // unread
  if (!wqkv) maps.q = maps.x;
  // A fused commit's 64 rows: 8 stages (the output projection's 8 chunks a
  // CTA, fetched at once), as 10 of 24 KB do not fit.
  if (xr == 64)
    return tpost<8, 64>(maps, has_o, h, part, y, sync, int(G), M, F, C, has_o ? Ko : 0, eps,
                        wqkv ? static_cast<float *>(qpart) : nullptr, Nq, static_cast<cudaStream_t>(stream));
  return tpost<10>(maps, has_o, h, part, y, sync, int(G), M, F, C, has_o ? Ko : 0, eps,
                   wqkv ? static_cast<float *>(qpart) : nullptr, Nq, static_cast<cudaStream_t>(stream));
#else
  return DTK_TMA_NO;
#endif
}

int64_t dtk_tma_post_scratch(int64_t M, int64_t F, int64_t C) {
#ifdef DLLM_SM90A
  return (M * F * 2 + 15) / 16 * 16 + int64_t(kPostKS) * M * C * 4;
#else
  return 0; // dtk_tma_post never runs
#endif
}

} // extern "C"
