// Does the TMA GEMM stream its weights faster when each of its copies is
// one run of bytes? kernels.cu's tgemm_kernel and tgemm_gu_kernel read the
// weights' own row-major layout in boxes of NW rows x 128 bytes, so every
// copy touches NW rows 4-12 KB apart; packed (pack_tiles_kernel) the same
// box is NW x 128 contiguous bytes. The probe times a layer's four
// projections at 32 rows each way, in CUDA graphs cycling over 12 weight
// copies (so the 50 MB L2 cannot serve them), checks that the outputs are
// bit-identical, then times the layer's chain (output, gate-up with SiLU,
// down, next QKV; PDL) after a stand-in for the attention's merge.
//
//     NV=$(python3 -c 'import torch,os;print(os.path.dirname(os.path.dirname(torch.__file__)))')/nvidia/cu13/lib
//     nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/tp scripts/tma_pack_probe.cu -L$NV \
//         -l:libcublas.so.13 -l:libcublasLt.so.13 -Xlinker -rpath=$NV && /tmp/tp
// (or PROBES=tma_pack_probe.cu TESTS= CTX= scripts/gpu-speed.sh)
#define DLLM_SM90A
#include "../torch/csrc/kernels.cu"

#include "gpu_probe.cuh"

#include <cuda.h>

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

CUtensorMap map2d(const void *p, int64_t rows, int64_t cols, int box_rows) {
  CUtensorMap m;
  if (!tmap2d(&m, p, rows, cols, box_rows)) std::exit(4);
  return m;
}

// Layer is one copy of a layer's weights, as is and packed, with their maps.
struct Layer {
  bf16 *w[4], *p[4];
  CUtensorMap wm[4], pm[4];
};
constexpr int C = 2048, F = 6144, Q = 2560, M = 32;
// o, gate-up, down, qkv: rows, K, the box height (NW), gate-up's F.
constexpr int kN[4] = {C, 2 * F, C, Q}, kK[4] = {C, C, F, C}, kNW[4] = {64, 96, 128, 64};

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
  std::vector<Layer> L(kCopies);
  for (int r = 0; r < kCopies; r++)
    for (int i = 0; i < 4; i++) {
      const size_t n = size_t(kN[i]) * kK[i];
      L[r].w[i] = rand_bf16(n, 100 * i + r, 0.04f);
      CK(cudaMalloc(&L[r].p[i], n * 2));
      pack_tiles_kernel<<<1024, 256, 0, s>>>(L[r].w[i], L[r].p[i], kN[i], kK[i], kNW[i], i == 1 ? F : 0);
      // gate-up's unpacked map reads gate and up rows in two 48-row boxes
      L[r].wm[i] = map2d(L[r].w[i], kN[i], kK[i], i == 1 ? 48 : kNW[i]);
      L[r].pm[i] = map2d(L[r].p[i], n / 64, 64, kNW[i]);
    }
  CK(cudaStreamSynchronize(s));
  bf16 *ao = rand_bf16(size_t(M) * C, 5, 2.f), *y = rand_bf16(size_t(M) * C, 6, 1.f), *h = rand_bf16(size_t(M) * F, 8, 1.f);
  bf16 *out[2], *qkv;
  for (auto &o : out) CK(cudaMalloc(&o, size_t(M) * 2 * F * 2));
  CK(cudaMalloc(&qkv, size_t(M) * Q * 2));
  const CUtensorMap xao = map2d(ao, M, C, 32), xy = map2d(y, M, C, 32), xh = map2d(h, M, F, 32);
  const float eps = 1e-6f;
  auto set = [](auto k, size_t sm) { CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sm))); };
  auto ko = tgemm_kernel<64, 4, 8>;
  auto kd = tgemm_kernel<128, 8, 4>;
  auto kgu = tgemm_gu_kernel<6>;
  const size_t so = tgemm_smem<64, 8>(), sd = tgemm_smem<128, 4>(), sgu = tgemm_gu_smem<6>();
  set(ko, so), set(kd, sd), set(kgu, sgu);
  // one projection i of copy r into o (no residual), packed or not
  auto proj = [&](int i, int r, int pk, bf16 *o) {
    const CUtensorMap &w = pk ? L[r].pm[i] : L[r].wm[i];
    switch (i) {
    case 0: CK(launch_in(ko, dim3(C / 64, 4), 160, so, s, 4u, w, xao, (const bf16 *)nullptr, o, M, C, C, pk)); break;
    case 1: CK(launch(kgu, dim3(F / 48), 160, sgu, s, w, xy, o, M, F, C, eps, pk)); break;
    case 2: CK(launch_in(kd, dim3(C / 128, 8), 160, sd, s, 8u, w, xh, (const bf16 *)nullptr, o, M, C, F, pk)); break;
    case 3: CK(launch_in(ko, dim3(Q / 64, 4), 160, so, s, 4u, w, xy, (const bf16 *)nullptr, o, M, Q, C, pk)); break;
    }
  };
  const char *names[4] = {"o", "gate_up+silu", "down", "qkv"};
  for (int i = 0; i < 4; i++) {
    proj(i, 0, 0, out[0]);
    proj(i, 0, 1, out[1]);
    CK(cudaStreamSynchronize(s));
    const bool eq = same(out[0], out[1], size_t(M) * (i == 1 ? F : kN[i]));
    const double t0 = timed(s, [&](int r) { proj(i, r, 0, out[0]); });
    const double t1 = timed(s, [&](int r) { proj(i, r, 1, out[1]); });
    const double mb = double(kN[i]) * kK[i] * 2 / 1e6;
    std::printf("%-13s %5.1f MB: as is %5.1f us (%4.0f GB/s), packed %5.1f us (%4.0f GB/s)%s\n", names[i], mb, t0,
                mb * 1e3 / t0, t1, mb * 1e3 / t1, eq ? "" : "  OUTPUTS DIFFER");
  }
  // The chain, as the decoder runs it (residual adds in place).
  auto spin = [&] { CK(launch(spin_kernel, 132, 128, 0, s, 6000LL)); };
  for (int sp : {1, 0}) {
    const double tsp = sp ? timed(s, [&](int) { spin(); }) : 0;
    for (int pk : {0, 1}) {
      const double t = timed(s, [&](int r) {
        if (sp) spin();
        const CUtensorMap *w = pk ? L[r].pm : L[r].wm;
        CK(launch_in(ko, dim3(C / 64, 4), 160, so, s, 4u, w[0], xao, (const bf16 *)y, y, M, C, C, pk));
        CK(launch(kgu, dim3(F / 48), 160, sgu, s, w[1], xy, h, M, F, C, eps, pk));
        CK(launch_in(kd, dim3(C / 128, 8), 160, sd, s, 8u, w[2], xh, (const bf16 *)y, y, M, C, F, pk));
        CK(launch_in(ko, dim3(Q / 64, 4), 160, so, s, 4u, w[3], xy, (const bf16 *)nullptr, qkv, M, Q, C, pk));
      });
      std::printf("chain %s, %s: %5.1f us a layer (%4.0f GB/s)\n", sp ? "after a ~3 us stand-in" : "alone",
                  pk ? "packed" : "as is", t - tsp, 94.4e3 / (t - tsp));
    }
  }
  return 0;
}
