// Where does kernels.cu's TMA GEMM lose time against its copies? Its
// weights stream through TMA into a ring of stages, but the kernels reach
// 2.2-2.8 TB/s where the H200 gives ~4 TB/s. The probe times, in CUDA
// graphs cycling over 12 weight copies (so the 50 MB L2 cannot serve
// them), at 32 rows:
//
// - a layer's four projections through the decoder's kernels;
// - the copies alone (stream_kernel: a ring that one warp empties at
//   once), for several box heights, stage counts and grids;
// - the copies alone with the gate-up kernel's features added one by one
//   (stream2_kernel's FEAT bits);
// - the gate-up kernel with parts left out (gu_var's MODE bits);
// - the layer's chain (output, gate-up with SiLU, down, next QKV; PDL)
//   after a stand-in for the attention's merge.
//
// docs/history.md has the figures (packed weights,
// each box one run of bytes, were measured by this probe's first form at
// commit 0a0626e: no faster).
//
//     NV=$(python3 -c 'import torch,os;print(os.path.dirname(os.path.dirname(torch.__file__)))')/nvidia/cu13/lib
//     nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/tp probes/tma_stream_probe.cu -L$NV \
//         -l:libcublas.so.13 -l:libcublasLt.so.13 -Xlinker -rpath=$NV && /tmp/tp
// (or PROBES=tma_stream_probe.cu TESTS= CTX= scripts/gpu-speed.sh)
#define DLLM_SM90A
#include "../torch/csrc/kernels.cu"

#include "gpu_probe.cuh"

#include <cuda.h>

#include <array>

namespace {

using bf16 = __nv_bfloat16;
using probe::kCopies;
using probe::rand_bf16;
using probe::timed;

__global__ void spin_kernel(long long cycles) {
  dep_wait();
  dep_launch();
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

// stream_kernel only copies: each CTA streams rows [blockIdx.x R, + R)
// of W (.., K) in (BR, 64) boxes through an ST-stage ring that one warp
// empties at once: the TMA streaming rate without products.
template <int BR, int ST> __global__ void __launch_bounds__(64) stream_kernel(const __grid_constant__ CUtensorMap wmap, int R, int K) {
  extern __shared__ __align__(16) unsigned char smem_[];
  unsigned char *smem = reinterpret_cast<unsigned char *>((reinterpret_cast<uintptr_t>(smem_) + 1023) & ~uintptr_t(1023));
  uint64_t *bars = reinterpret_cast<uint64_t *>(smem + ST * BR * 128);
  const unsigned full0 = smem_u32(bars), empty0 = smem_u32(bars + ST);
  if (threadIdx.x == 0) {
    for (int s = 0; s < ST; s++) mbar_init(full0 + 8 * s, 1), mbar_init(empty0 + 8 * s, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const int CH = (R / BR) * (K / 64);
  if (threadIdx.x == 0) {
    for (int c = 0; c < CH; c++) {
      const int s = c % ST;
      if (c >= ST) mbar_wait(empty0 + 8 * s, (c / ST - 1) & 1);
      mbar_expect(full0 + 8 * s, BR * 128);
      tma_load2d(smem_u32(smem + s * BR * 128), wmap, 64 * (c % (K / 64)), blockIdx.x * R + BR * (c / (K / 64)), full0 + 8 * s);
    }
  } else if (threadIdx.x == 32) {
    for (int c = 0; c < CH; c++) {
      mbar_wait(full0 + 8 * (c % ST), (c / ST) & 1);
      mbar_arrive(empty0 + 8 * (c % ST));
    }
  }
}

// stream2_kernel is stream_kernel for gate-up's 128 CTAs of 96 rows with
// 160 threads and the gate-up kernel's features one by one (FEAT bits): 1
// the four multiplying warps all wait for each stage and each frees it
// (else one thread of warp 0 does both), 2 a stage freed only once the
// next has landed, 4 the first ST copies before a PDL wait, 8 the
// weights in two 48-row boxes (gate rows, up rows), 16 x's (32, 64) box
// with each stage.
template <int ST, int FEAT>
__global__ void __launch_bounds__(160) stream2_kernel(const __grid_constant__ CUtensorMap wmap,
                                                      const __grid_constant__ CUtensorMap xmap, int F, int K) {
  constexpr int kW = 96 * 128, kStage = kW + 32 * 128;
  extern __shared__ __align__(16) unsigned char smem_[];
  unsigned char *smem = reinterpret_cast<unsigned char *>((reinterpret_cast<uintptr_t>(smem_) + 1023) & ~uintptr_t(1023));
  uint64_t *bars = reinterpret_cast<uint64_t *>(smem + ST * kStage);
  const unsigned full0 = smem_u32(bars), empty0 = smem_u32(bars + ST);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, CH = K / 64, j0 = blockIdx.x * 48;
  if (threadIdx.x == 0) {
    for (int s = 0; s < ST; s++) mbar_init(full0 + 8 * s, 1), mbar_init(empty0 + 8 * s, (FEAT & 1) ? 4 : 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  constexpr unsigned bytes = kW + ((FEAT & 16) ? 32 * 128 : 0);
  auto load = [&](int c, int s) {
    mbar_expect(full0 + 8 * s, bytes);
    if (FEAT & 8) {
      tma_load2d(smem_u32(smem + s * kStage), wmap, 64 * c, j0, full0 + 8 * s);
      tma_load2d(smem_u32(smem + s * kStage + kW / 2), wmap, 64 * c, F + j0, full0 + 8 * s);
    } else {
      tma_load2d(smem_u32(smem + s * kStage), wmap, 64 * c, 2 * j0, full0 + 8 * s);
    }
    if (FEAT & 16) tma_load2d(smem_u32(smem + s * kStage + kW), xmap, 64 * c, 0, full0 + 8 * s);
  };
  if (warp == 4) {
    if (lane == 0) {
      if (FEAT & 4) {
        for (int c = 0; c < ST; c++) load(c, c);
        dep_wait();
        dep_launch();
      } else {
        for (int c = 0; c < ST; c++) load(c, c);
      }
      for (int c = ST; c < CH; c++) {
        const int s = c % ST;
        mbar_wait(empty0 + 8 * s, (c / ST - 1) & 1);
        load(c, s);
      }
    }
    return;
  }
  if (FEAT & 4) dep_wait(), dep_launch();
  if (!(FEAT & 1) && threadIdx.x != 0) return;
  for (int c = 0; c < CH; c++) {
    mbar_wait(full0 + 8 * (c % ST), (c / ST) & 1);
    __syncwarp(FEAT & 1 ? 0xffffffffu : 1u);
    const int done = (FEAT & 2) ? c - 1 : c;
    if (lane == 0 && done >= 0) mbar_arrive(empty0 + 8 * (done % ST));
  }
}

// gu_var is tgemm_gu_kernel<ST> with parts changed, MODE bits:
// 1 no products (the multipliers only wait for each stage and free it), 2
// no sums of x's squares, 4 x copied only with the first ST stages (later
// stages multiply stale x), 8 two wgmma groups in flight instead of one,
// 16 no epilogue, 32 the epilogue's outputs stored to shared memory, 64
// the epilogue storing zeros (none of its arithmetic), 128 its division
// by __fdividef, 256 no SiLU (g u), 512 no roundings either.
template <int ST, int MODE>
__global__ void __launch_bounds__(160) gu_var(const __grid_constant__ CUtensorMap wmap,
                                              const __grid_constant__ CUtensorMap xmap, __nv_bfloat16 *out, int M,
                                              int F, int K, float eps) {
  using T = __nv_bfloat16;
  constexpr int NH = 48, NW = 2 * NH, kH = NH * 128, kW = NW * 128, kStage = kW + kTmaRows * 128;
  extern __shared__ __align__(16) unsigned char smem_[];
  unsigned char *smem = reinterpret_cast<unsigned char *>((reinterpret_cast<uintptr_t>(smem_) + 1023) & ~uintptr_t(1023));
  float *rinv = reinterpret_cast<float *>(smem + (ST + 1) * kStage);
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
    dep_wait();
    dep_launch();
    if (lane == 0) {
      for (int c = 0; c < CH && c < ST; c++) tma_load2d(smem_u32(smem + c * kStage + kW), xmap, 64 * c, 0, full0 + 8 * c);
      for (int c = ST; c < CH; c++) {
        const int s = c % ST;
        mbar_wait(empty0 + 8 * s, (c / ST - 1) & 1);
        mbar_expect(full0 + 8 * s, (MODE & 4) ? kW : kStage);
        wload(c, s);
        if (!(MODE & 4)) tma_load2d(smem_u32(smem + s * kStage + kW), xmap, 64 * c, 0, full0 + 8 * s);
      }
    }
    __syncwarp();
    return;
  }
  dep_wait();
  dep_launch();
  const int row = tid / 4, q = tid % 4;
  float ss = 0;
  for (int c = 0; c < CH; c++) {
    const int s = c % ST;
    const unsigned wb = smem_u32(smem + s * kStage);
    if (MODE & 1)
      mbar_wait(full0 + 8 * s, (c / ST) & 1);
    else
      mma_chunk<NW>(d, c, ST, full0, wb, wb + kW);
    if (!(MODE & 2) && row < M) {
      const uint4 *xr = reinterpret_cast<const uint4 *>(smem + s * kStage + kW + row * 128 + q * 32);
#pragma unroll
      for (int h = 0; h < 2; h++) {
        uint4 v = xr[h];
        const T *e = reinterpret_cast<const T *>(&v);
#pragma unroll
        for (int i = 0; i < 8; i++) ss += f32(e[i]) * f32(e[i]);
      }
    }
    if (MODE & 8) {
      asm volatile("wgmma.wait_group.sync.aligned 2;\n" ::: "memory");
      __syncwarp();
      if (lane == 0 && c > 1) mbar_arrive(empty0 + 8 * ((c - 2) % ST));
    } else {
      release_prev(c, ST, empty0);
    }
  }
  wg_wait(d);
  if (MODE & 16) return;
  ss += __shfl_xor_sync(0xffffffff, ss, 1);
  ss += __shfl_xor_sync(0xffffffff, ss, 2);
  if (q == 0) rinv[row] = rsqrtf(ss / static_cast<float>(K) + eps);
  asm volatile("bar.sync 1, 128;" ::: "memory");
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int m = 16 * warp + g + 8 * h;
    if (m >= M) continue;
    const float r = rinv[m];
#pragma unroll
    for (int j = 0; j < NH / 8; j++) {
      float y[2] = {0, 0};
      if (!(MODE & 64))
#pragma unroll
        for (int e = 0; e < 2; e++) {
          if (MODE & 512) {
            y[e] = d[j][2 * h + e] * r * d[j + NH / 8][2 * h + e] * r;
            continue;
          }
          float gv = round<T>(round<T>(d[j][2 * h + e]) * r), uv = round<T>(round<T>(d[j + NH / 8][2 * h + e]) * r);
          if (MODE & 256)
            y[e] = gv * uv;
          else if (MODE & 128)
            y[e] = round<T>(__fdividef(gv, 1.0f + __expf(-gv))) * uv;
          else
            y[e] = round<T>(gv / (1.0f + __expf(-gv))) * uv;
        }
      const __nv_bfloat162 v = __floats2bfloat162_rn(y[0], y[1]);
      if (MODE & 32)
        *reinterpret_cast<__nv_bfloat162 *>(smem + (m * NH + 8 * j + 2 * t) * 2) = v;
      else
        *reinterpret_cast<__nv_bfloat162 *>(out + size_t(m) * F + j0 + 8 * j + 2 * t) = v;
    }
  }
}

CUtensorMap map2d(const void *p, int64_t rows, int64_t cols, int box_rows) {
  CUtensorMap m;
  if (!tmap2d(&m, p, rows, cols, box_rows)) std::exit(4);
  return m;
}

constexpr int C = 2048, F = 6144, Q = 2560, M = 32;
// o, gate-up, down, qkv: rows, K, box height (gate-up: two 48-row boxes).
constexpr int kN[4] = {C, 2 * F, C, Q}, kK[4] = {C, C, F, C}, kBox[4] = {64, 48, 128, 64};

bool same(const bf16 *a, const bf16 *b, size_t n) {
  std::vector<bf16> x(n), y(n);
  CK(cudaMemcpy(x.data(), a, n * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(y.data(), b, n * 2, cudaMemcpyDeviceToHost));
  return std::memcmp(x.data(), y.data(), n * 2) == 0;
}

} // namespace

int main() {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<std::array<bf16 *, 4>> W(kCopies);
  std::vector<std::array<CUtensorMap, 4>> WM(kCopies);
  for (int r = 0; r < kCopies; r++)
    for (int i = 0; i < 4; i++) {
      W[r][i] = rand_bf16(size_t(kN[i]) * kK[i], 100 * i + r, 0.04f);
      WM[r][i] = map2d(W[r][i], kN[i], kK[i], kBox[i]);
    }
  bf16 *ao = rand_bf16(size_t(M) * C, 5, 2.f), *y = rand_bf16(size_t(M) * C, 6, 1.f), *h = rand_bf16(size_t(M) * F, 8, 1.f);
  bf16 *out[2], *qkv;
  for (auto &o : out) CK(cudaMalloc(&o, size_t(M) * 2 * F * 2));
  CK(cudaMalloc(&qkv, size_t(M) * Q * 2));
  CK(cudaDeviceSynchronize());
  const CUtensorMap xao = map2d(ao, M, C, 32), xy = map2d(y, M, C, 32), xh = map2d(h, M, F, 32);
  const float eps = 1e-6f;
  auto set = [](auto k, size_t sm) { CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sm))); };
  auto ko = tgemm_kernel<64, 4, 8>;
  auto kd = tgemm_kernel<128, 8, 4>;
  auto kgu = tgemm_gu_kernel<6>;
  const size_t so = tgemm_smem<64, 8>(), sd = tgemm_smem<128, 4>(), sgu = tgemm_gu_smem<6>();
  set(ko, so), set(kd, sd), set(kgu, sgu);

  // 1. The projections alone, as the decoder runs them.
  auto proj = [&](int i, int r, bf16 *o) {
    const CUtensorMap &w = WM[r][i];
    switch (i) {
    case 0: CK(launch_in(ko, dim3(C / 64, 4), 160, so, s, 4u, w, xao, (const bf16 *)nullptr, o, M, C, C)); break;
    case 1: CK(launch(kgu, dim3(F / 48), 160, sgu, s, w, xy, o, M, F, C, eps)); break;
    case 2: CK(launch_in(kd, dim3(C / 128, 8), 160, sd, s, 8u, w, xh, (const bf16 *)nullptr, o, M, C, F)); break;
    case 3: CK(launch_in(ko, dim3(Q / 64, 4), 160, so, s, 4u, w, xy, (const bf16 *)nullptr, o, M, Q, C)); break;
    }
  };
  const char *names[4] = {"o", "gate_up+silu", "down", "qkv"};
  for (int i = 0; i < 4; i++) {
    const double t = timed(s, [&](int r) { proj(i, r, out[0]); }), mb = double(kN[i]) * kK[i] * 2 / 1e6;
    std::printf("%-13s %5.1f MB: %5.1f us (%4.0f GB/s)\n", names[i], mb, t, mb * 1e3 / t);
  }

  // 2. The copies alone: gate-up's 50 MB in boxes of BR rows, ST stages, G CTAs.
  auto run = [&](auto kern, int br, int st, int g) {
    const size_t sm = 1024 + size_t(st) * br * 128 + 16 * st;
    set(kern, sm);
    std::vector<CUtensorMap> mm;
    for (int r = 0; r < kCopies; r++) mm.push_back(map2d(W[r][1], 2 * F, C, br));
    const double t = timed(s, [&](int r) { CK(launch(kern, dim3(g), 64, sm, s, mm[r], 2 * F / g, C)); });
    std::printf("copies only: boxes of %3d rows, %2d stages (%3zu KB), %3d CTAs: %5.1f us (%4.0f GB/s)\n", br, st,
                sm / 1024, g, t, 50.3e3 / t);
  };
  run(stream_kernel<96, 6>, 96, 6, 128);
  run(stream_kernel<48, 12>, 48, 12, 256);
  run(stream_kernel<128, 8>, 128, 8, 96);

  // 3. The copies with the gate-up kernel's features, one by one.
  auto st2 = [&](auto kern, int feat) {
    const size_t sm = 1024 + size_t(6) * (96 + 32) * 128 + 16 * 6;
    set(kern, sm);
    std::vector<CUtensorMap> mm;
    for (int r = 0; r < kCopies; r++) mm.push_back(map2d(W[r][1], 2 * F, C, (feat & 8) ? 48 : 96));
    const double t = timed(s, [&](int r) { CK(launch(kern, dim3(F / 48), 160, sm, s, mm[r], xy, F, C)); });
    std::printf("copies only, features %2d (%s%s%s%s%s): %5.1f us (%4.0f GB/s)\n", feat,
                feat & 1 ? "4 warps wait " : "", feat & 2 ? "late free " : "", feat & 4 ? "PDL wait " : "",
                feat & 8 ? "2 boxes " : "", feat & 16 ? "x " : "", t, 50.3e3 / t);
  };
  st2(stream2_kernel<6, 0>, 0);
  st2(stream2_kernel<6, 1>, 1);
  st2(stream2_kernel<6, 2>, 2);
  st2(stream2_kernel<6, 4>, 4);
  st2(stream2_kernel<6, 8>, 8);
  st2(stream2_kernel<6, 16>, 16);
  st2(stream2_kernel<6, 31>, 31);

  // 4. The gate-up kernel with parts left out.
  auto var = [&](auto kern, int mode) {
    const size_t sm = tgemm_gu_smem<6>();
    set(kern, sm);
    const double t = timed(s, [&](int r) { CK(launch(kern, dim3(F / 48), 160, sm, s, WM[r][1], xy, h, M, F, C, eps)); });
    std::printf("gate-up, mode %3d (%s%s%s%s%s): %5.1f us (%4.0f GB/s)\n", mode, mode & 1 ? "no products " : "",
                mode & 2 ? "no squares " : "", mode & 4 ? "x once " : "", mode & 8 ? "two groups in flight " : "",
                mode & 16    ? "no epilogue"
                : mode & 32  ? "outputs to smem"
                : mode & 64  ? "zeros stored"
                : mode & 128 ? "fdividef"
                : mode & 256 ? "no silu"
                : mode & 512 ? "no silu, no rounding"
                             : "",
                t, 50.3e3 / t);
  };
  var(gu_var<6, 0>, 0);
  var(gu_var<6, 1>, 1);
  var(gu_var<6, 4>, 4);
  var(gu_var<6, 7>, 7);
  var(gu_var<6, 23>, 23);
  var(gu_var<6, 39>, 39);
  var(gu_var<6, 71>, 71);
  var(gu_var<6, 128>, 128);
  var(gu_var<6, 256>, 256);
  var(gu_var<6, 512>, 512);

  // 5. The chain, as the decoder runs it (residual adds in place).
  auto spin = [&] { CK(launch(spin_kernel, 132, 128, 0, s, 6000LL)); };
  for (int sp : {1, 0}) {
    const double tsp = sp ? timed(s, [&](int) { spin(); }) : 0;
    const double t = timed(s, [&](int r) {
      if (sp) spin();
      const auto &w = WM[r];
      CK(launch_in(ko, dim3(C / 64, 4), 160, so, s, 4u, w[0], xao, (const bf16 *)y, y, M, C, C));
      CK(launch(kgu, dim3(F / 48), 160, sgu, s, w[1], xy, h, M, F, C, eps));
      CK(launch_in(kd, dim3(C / 128, 8), 160, sd, s, 8u, w[2], xh, (const bf16 *)y, y, M, C, F));
      CK(launch_in(ko, dim3(Q / 64, 4), 160, so, s, 4u, w[3], xy, (const bf16 *)nullptr, qkv, M, Q, C));
    });
    std::printf("chain %s: %5.1f us a layer (%4.0f GB/s)\n", sp ? "after a ~3 us stand-in" : "alone", t - tsp,
                94.4e3 / (t - tsp));
  }
  return 0;
}
