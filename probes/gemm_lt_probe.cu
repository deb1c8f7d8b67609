// The skinny matmuls of a MiniCPM5-2B layer through cuBLASLt with every
// algorithm its heuristic offers, timed one by one, against cublasGemmEx's
// default (what libtorch's addmm and linear call for bf16). Each runs in a
// CUDA graph cycling over 12 copies of the weight so the H200's 50 MB L2
// cannot serve repeated reads (as probes/gpu_gemm_probe.py). The question
// it answers: does a per-shape algorithm choice beat cuBLAS's default at
// 1-64 rows, and by how much a layer. LT_HEAD=1 times the head's matmul
// (130,560 x 2048) instead. docs/history.md has the figures.
//
//     NV=$(python3 -c 'import torch,os;print(os.path.dirname(os.path.dirname(torch.__file__)))')/nvidia/cu13/lib
//     nvcc -O2 -std=c++17 -arch=sm_90 -o /tmp/p probes/gemm_lt_probe.cu -L$NV \
//         -l:libcublasLt.so.13 -l:libcublas.so.13 -Xlinker -rpath=$NV && /tmp/p
#include "gpu_lt.cuh"
#include <cublas_v2.h>

#include <cmath>
#include <cstdlib>
#include <vector>

using probe::rand_bf16;
using probe::timed;
static const int R = probe::kCopies;

int main() {
  const int C = 2048, F = 6144, H = 16, Hkv = 2, D = 128;
  struct Shape { const char *name; int n, k; };
  std::vector<Shape> shapes = {{"qkv", (H + 2 * Hkv) * D, C}, {"o", C, H * D}, {"gate_up", 2 * F, C}, {"down", C, F}};
  const bool head = std::getenv("LT_HEAD") != nullptr;
  if (head) shapes = {{"head", 130560, C}};
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasHandle_t bh;
  CK(cublasCreate(&bh));
  CK(cublasSetStream(bh, s));
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  size_t wsz = 32u << 20;
  void *ws;
  CK(cudaMalloc(&ws, wsz));
  CK(cublasSetWorkspace(bh, ws, wsz));
  void *ws2;
  CK(cudaMalloc(&ws2, wsz));
  int dev;
  cudaGetDevice(&dev);
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, dev);
  std::printf("%s, cuBLASLt %zu\n", prop.name, cublasLtGetVersion());

  double tot_def[3] = {0, 0, 0}, tot_best[3] = {0, 0, 0};
  int Ms[3] = {1, 32, 64};
  for (auto &sh : shapes) {
    std::vector<__nv_bfloat16 *> W;
    for (int r = 0; r < R; r++) W.push_back(rand_bf16((size_t)sh.n * sh.k, 17 + r, 0.04f));
    for (int mi = 0; mi < 3; mi++) {
      int M = Ms[mi];
      __nv_bfloat16 *x = rand_bf16((size_t)M * sh.k, 5, 2.f), *res = rand_bf16((size_t)M * sh.n, 7, 1.f);
      __nv_bfloat16 *out, *ref;
      CK(cudaMalloc(&out, (size_t)M * sh.n * 2));
      CK(cudaMalloc(&ref, (size_t)M * sh.n * 2));
      float one = 1.f;
      // 1. The default: D = W^T-view times x, beta 1 onto a copy of the
      // residual, as libtorch's addmm does (copy, then gemm).
      auto def = [&](int r, __nv_bfloat16 *o) {
        CK(cudaMemcpyAsync(o, res, (size_t)M * sh.n * 2, cudaMemcpyDeviceToDevice, s));
        CK(cublasGemmEx(bh, CUBLAS_OP_T, CUBLAS_OP_N, sh.n, M, sh.k, &one, W[r], CUDA_R_16BF, sh.k, x,
                        CUDA_R_16BF, sh.k, &one, o, CUDA_R_16BF, sh.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      };
      double t_def = timed(s, [&](int r) { def(r, out); });
      double t_lin = timed(s, [&](int r) {
        float zero = 0.f;
        CK(cublasGemmEx(bh, CUBLAS_OP_T, CUBLAS_OP_N, sh.n, M, sh.k, &one, W[r], CUDA_R_16BF, sh.k, x,
                        CUDA_R_16BF, sh.k, &zero, out, CUDA_R_16BF, sh.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      });
      def(0, ref);
      // 2. cuBLASLt: the same product with C = residual and D = out (no copy).
      probe::LtMatmul lm(M, sh.n, sh.k, wsz);
      auto &md = lm.md;
      auto &la = lm.la, &lb = lm.lb, &lc = lm.lc;
      auto &pref = lm.pref;
      cublasLtMatmulHeuristicResult_t hr[64];
      int nres = 0;
      CK(cublasLtMatmulAlgoGetHeuristic(lt, md, la, lb, lc, lc, pref, 64, hr, &nres));
      double best = 1e9, first = 0;
      int bi = -1;
      float besterr = 0;
      std::vector<__nv_bfloat16> hr_out((size_t)M * sh.n), hr_ref((size_t)M * sh.n);
      CK(cudaMemcpy(hr_ref.data(), ref, hr_ref.size() * 2, cudaMemcpyDeviceToHost));
      for (int i = 0; i < nres; i++) {
        if (hr[i].state != CUBLAS_STATUS_SUCCESS) continue;
        auto run = [&](int r) {
          CK(cublasLtMatmul(lt, md, &one, W[r], la, x, lb, &one, res, lc, out, lc, &hr[i].algo, ws2,
                            hr[i].workspaceSize, s));
        };
        double t = timed(s, run);
        run(0);
        CK(cudaMemcpy(hr_out.data(), out, hr_out.size() * 2, cudaMemcpyDeviceToHost));
        double num = 0, den = 0;
        for (size_t j = 0; j < hr_out.size(); j++) {
          double a = __bfloat162float(hr_out[j]), b = __bfloat162float(hr_ref[j]);
          num += (a - b) * (a - b);
          den += b * b;
        }
        float err = (float)std::sqrt(num / den);
        if (i == 0) first = t;
        if (t < best) best = t, bi = i, besterr = err;
      }
      double floor_us = (double)sh.n * sh.k * 2 / 4.3e9 * 1e6 / 1e3;
      std::printf("M=%2d %-8s gemmEx+copy %6.1f  gemmEx(beta0) %6.1f  lt-first %6.1f  lt-best %6.1f (#%d of %d, ws %zu, err %.1e)  floor %5.1f us\n",
                  M, sh.name, t_def, t_lin, first, best, bi, nres, bi >= 0 ? hr[bi].workspaceSize : 0, besterr, floor_us);
      tot_def[mi] += t_def;
      tot_best[mi] += best;
      cudaFree(x); cudaFree(res); cudaFree(out); cudaFree(ref);
    }
    for (auto w : W) cudaFree(w);
  }
  for (int mi = 0; mi < 3 && !head; mi++)
    std::printf("M=%2d per layer: default %.1f us, best cuBLASLt %.1f us (x42: %.2f -> %.2f ms)\n", Ms[mi], tot_def[mi],
                tot_best[mi], tot_def[mi] * 42e-3, tot_best[mi] * 42e-3);
  return 0;
}
