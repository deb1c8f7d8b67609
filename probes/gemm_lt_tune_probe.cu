// The block step's skinny matmuls (32 and 64 rows) through cuBLASLt beyond
// what its heuristic offers by default. The timeline (docs/history.md)
// shows cuBLAS's picks filling few SMs: gate-up 96 CTAs of 128 x 32 on 132
// SMs at ~2.8 TB/s, QKV and output 64-80 CTAs at ~1.5 TB/s. Two ways to
// other kernels: (a) the heuristic told the GPU has more SMs than it has
// (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET), which favours more, smaller
// tiles; (b) every algorithm id with every tile and split-K its
// capabilities list (cuBLASLt's autotuning sample), checked by
// cublasLtMatmulAlgoCheck. Each timed as probes/gemm_lt_probe.cu times
// (a CUDA graph over 12 weight copies: no L2 reuse), with the decoder's
// epilogues: beta 0 for QKV and gate-up, the residual added in place for
// output and down. Prints the default and the three best of each way.
//
//     NV=$(python3 -c 'import torch,os;print(os.path.dirname(os.path.dirname(torch.__file__)))')/nvidia/cu13/lib
//     nvcc -O2 -std=c++17 -arch=sm_90 -o /tmp/p probes/gemm_lt_tune_probe.cu -L$NV \
//         -l:libcublasLt.so.13 -Xlinker -rpath=$NV && /tmp/p
#include "gpu_lt.cuh"

#include <cmath>
#include <string>

using probe::rand_bf16;
using probe::timed;
static const int R = probe::kCopies;

struct Result {
  double us;
  float err;
  std::string what;
};

int main() {
  const int C = 2048, F = 6144, H = 16, Hkv = 2, D = 128;
  struct Shape { const char *name; int n, k; bool resid; };
  Shape shapes[] = {{"qkv", (H + 2 * Hkv) * D, C, false}, {"o", C, H * D, true}, {"gate_up", 2 * F, C, false},
                    {"down", C, F, true}};
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  size_t wsz = 32u << 20;
  void *ws;
  CK(cudaMalloc(&ws, wsz));
  int dev;
  cudaGetDevice(&dev);
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, dev);
  std::printf("%s, %d SMs, cuBLASLt %zu\n", prop.name, prop.multiProcessorCount, cublasLtGetVersion());
  double tot[2][3] = {};
  int Ms[2] = {32, 64};
  for (auto &sh : shapes) {
    std::vector<__nv_bfloat16 *> W;
    for (int r = 0; r < R; r++) W.push_back(rand_bf16((size_t)sh.n * sh.k, 17 + r, 0.04f));
    for (int mi = 0; mi < 2; mi++) {
      int M = Ms[mi];
      __nv_bfloat16 *x = rand_bf16((size_t)M * sh.k, 5, 2.f), *res = rand_bf16((size_t)M * sh.n, 7, 1.f);
      __nv_bfloat16 *out;
      CK(cudaMalloc(&out, (size_t)M * sh.n * 2));
      float one = 1.f, zero = 0.f;
      const float *beta = sh.resid ? &one : &zero;
      probe::LtMatmul lm(M, sh.n, sh.k, wsz);
      auto &md = lm.md;
      auto &la = lm.la, &lb = lm.lb, &lc = lm.lc;
      auto &pref = lm.pref;

      // The reference: the heuristic's first pick on a fresh residual copy.
      std::vector<__nv_bfloat16> ref((size_t)M * sh.n), got(ref.size());
      auto run_algo = [&](const cublasLtMatmulAlgo_t &a, int r) {
        CK(cublasLtMatmul(lt, md, &one, W[r], la, x, lb, beta, out, lc, out, lc, &a, ws, wsz, s));
      };
      auto check = [&](const cublasLtMatmulAlgo_t &a) {
        CK(cudaMemcpyAsync(out, res, ref.size() * 2, cudaMemcpyDeviceToDevice, s));
        if (cublasLtMatmul(lt, md, &one, W[0], la, x, lb, beta, out, lc, out, lc, &a, ws, wsz, s) != 0) return -1.0f;
        CK(cudaMemcpyAsync(got.data(), out, got.size() * 2, cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
        double num = 0, den = 0;
        for (size_t j = 0; j < got.size(); j++) {
          double u = __bfloat162float(got[j]), v = __bfloat162float(ref[j]);
          num += (u - v) * (u - v), den += v * v;
        }
        return (float)std::sqrt(num / den);
      };
      auto heuristic = [&](int smt, cublasLtMatmulHeuristicResult_t *hr, int want) {
        CK(cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &smt, sizeof smt));
        int n = 0;
        if (cublasLtMatmulAlgoGetHeuristic(lt, md, la, lb, lc, lc, pref, want, hr, &n) != 0) n = 0;
        return n;
      };
      cublasLtMatmulHeuristicResult_t hr[16];
      if (heuristic(0, hr, 1) < 1) {
        std::printf("%s M=%d: no heuristic result\n", sh.name, M);
        continue;
      }
      cublasLtMatmulAlgo_t def = hr[0].algo;
      CK(cudaMemcpyAsync(out, res, ref.size() * 2, cudaMemcpyDeviceToDevice, s));
      run_algo(def, 0);
      CK(cudaMemcpyAsync(ref.data(), out, ref.size() * 2, cudaMemcpyDeviceToHost, s));
      CK(cudaStreamSynchronize(s));
      double t_def = timed(s, [&](int r) { run_algo(def, r); });

      // (a) SM count targets.
      std::vector<Result> ra;
      for (int smt : {132, 160, 198, 264, 330, 396, 528, 792}) {
        int n = heuristic(smt, hr, 8);
        for (int i = 0; i < n; i++) {
          if (hr[i].state != CUBLAS_STATUS_SUCCESS || hr[i].workspaceSize > wsz) continue;
          float e = check(hr[i].algo);
          if (e < 0) continue;
          auto a = hr[i].algo;
          ra.push_back({timed(s, [&](int r) { run_algo(a, r); }), e,
                        "sm_target " + std::to_string(smt) + " #" + std::to_string(i)});
        }
      }
      int zero_smt = 0;
      CK(cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &zero_smt, sizeof zero_smt));

      // (b) Every algorithm id, tile and split-K.
      std::vector<Result> rb;
      int ids[128], nids = 0;
      CK(cublasLtMatmulAlgoGetIds(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF,
                                  CUDA_R_16BF, 128, ids, &nids));
      int tried = 0;
      for (int ii = 0; ii < nids && tried < 400; ii++) {
        cublasLtMatmulAlgo_t a;
        if (cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF,
                                   CUDA_R_16BF, ids[ii], &a) != 0)
          continue;
        size_t sz = 0;
        std::vector<int> tiles;
        if (cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_TILE_IDS, nullptr, 0, &sz) == 0 && sz > 0) {
          tiles.resize(sz / sizeof(int));
          cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_TILE_IDS, tiles.data(), sz, &sz);
        }
        if (tiles.empty()) tiles.push_back(0); // CUBLASLT_MATMUL_TILE_UNDEFINED
        int splitk_ok = 0;
        cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &splitk_ok, sizeof splitk_ok, &sz);
        std::vector<int> splits = {1};
        if (splitk_ok) splits = {1, 2, 3, 4, 6, 8};
        for (int tile : tiles) {
          for (int sk : splits) {
            if (tried >= 400) break;
            cublasLtMatmulAlgo_t b = a;
            cublasLtMatmulAlgoConfigSetAttribute(&b, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile);
            cublasLtMatmulAlgoConfigSetAttribute(&b, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &sk, sizeof sk);
            if (sk > 1) {
              uint32_t red = CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
              cublasLtMatmulAlgoConfigSetAttribute(&b, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof red);
            }
            cublasLtMatmulHeuristicResult_t chk;
            if (cublasLtMatmulAlgoCheck(lt, md, la, lb, lc, lc, &b, &chk) != 0 || chk.state != CUBLAS_STATUS_SUCCESS ||
                chk.workspaceSize > wsz)
              continue;
            tried++;
            float e = check(b);
            if (e < 0 || e > 1e-2f) continue;
            rb.push_back({timed(s, [&](int r) { run_algo(b, r); }), e,
                          "id " + std::to_string(ids[ii]) + " tile " + std::to_string(tile) + " splitK " +
                              std::to_string(sk)});
          }
        }
      }
      auto top = [](std::vector<Result> &v) {
        std::sort(v.begin(), v.end(), [](const Result &p, const Result &q) { return p.us < q.us; });
        return v.empty() ? 0.0 : v[0].us;
      };
      double ba = top(ra), bb = top(rb);
      double floor_us = (double)sh.n * sh.k * 2 / 4.3e9 * 1e6 / 1e3;
      std::printf("M=%2d %-8s default %6.2f us | (a) best %6.2f | (b) best %6.2f of %d (ids %d) | floor %5.2f\n", M,
                  sh.name, t_def, ba, bb, (int)rb.size(), nids, floor_us);
      for (size_t i = 0; i < ra.size() && i < 3; i++)
        std::printf("    (a) %6.2f us err %.1e  %s\n", ra[i].us, ra[i].err, ra[i].what.c_str());
      for (size_t i = 0; i < rb.size() && i < 3; i++)
        std::printf("    (b) %6.2f us err %.1e  %s\n", rb[i].us, rb[i].err, rb[i].what.c_str());
      tot[mi][0] += t_def;
      tot[mi][1] += ba > 0 ? std::min(ba, t_def) : t_def;
      tot[mi][2] += bb > 0 ? std::min(bb, t_def) : t_def;
      cudaFree(x), cudaFree(res), cudaFree(out);
    }
    for (auto w : W) cudaFree(w);
  }
  for (int mi = 0; mi < 2; mi++)
    std::printf("M=%d per layer: default %.1f us, (a) %.1f, (b) %.1f\n", Ms[mi], tot[mi][0], tot[mi][1], tot[mi][2]);
  return 0;
}
