// Where does the one-kernel post-attention sublayers (kernels.cu's
// tpost_kernel, dtk_tma_post) spend its time, and is it the kernels it
// replaces bit for bit? At 32 rows (DLLM_PROBE_M=64: a fused commit's
// 64, timed only), MiniCPM5-2B's shapes, in CUDA graphs cycling over 12
// weight copies (so the 50 MB L2 cannot serve them), the probe compares
// and times, for the MLP alone and with the output projection first, the
// TMA kernels the decoder ran before (tgemm_kernel<64, 4>,
// tgemm_gu_kernel, tgemm_kernel<128, 8>; PDL) against the one kernel;
// then it replays the one kernel 48 times in a row with DLLM_MLP_TRACE's
// timestamps and prints, per step of the kernel, when the average and the
// last CTA got there (us from the grid's first CTA start), and thread 0's
// cycles a chunk in each step of gate-up's and the down projection's
// chunk loops (g_mlp_steps).
//
//     NV=$(python3 -c 'import torch,os;print(os.path.dirname(os.path.dirname(torch.__file__)))')/nvidia/cu13/lib
//     nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/mp probes/mlp_probe.cu -L$NV \
//         -l:libcublas.so.13 -l:libcublasLt.so.13 -Xlinker -rpath=$NV && /tmp/mp
// (or PROBES=mlp_probe.cu TESTS= CTX= scripts/gpu-speed.sh)
#define DLLM_SM90A
#define DLLM_MLP_TRACE
#include "../torch/csrc/kernels.cu"
#include "../torch/csrc/attention.cu"
#include "../torch/csrc/tma.cu"

#include "gpu_probe.cuh"

namespace {

using bf16 = __nv_bfloat16;
using probe::kCopies;
using probe::rand_bf16;
using probe::timed;

// DLLM_PROBE_M=64: a fused commit's 64 rows instead of a block step's 32.
const int M = [] {
  const char *e = std::getenv("DLLM_PROBE_M");
  return e && *e ? std::atoi(e) : 32;
}();
constexpr int C = 2048, F = 6144;

} // namespace

int main() {
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  std::vector<bf16 *> wo(kCopies), wgu(kCopies), wdn(kCopies);
  for (int r = 0; r < kCopies; r++) {
    wo[r] = rand_bf16(size_t(C) * C, 201 + r, 0.04f);
    wgu[r] = rand_bf16(size_t(2) * F * C, 11 + r, 0.04f);
    wdn[r] = rand_bf16(size_t(C) * F, 101 + r, 0.04f);
  }
  bf16 *x0 = rand_bf16(size_t(M) * C, 7, 2.0f), *ao = rand_bf16(size_t(M) * C, 8, 2.0f), *y, *y2, *a;
  CK(cudaMalloc(&y, size_t(M) * C * 2));
  CK(cudaMalloc(&y2, size_t(M) * C * 2));
  CK(cudaMalloc(&a, size_t(M) * F * 2));
  char *scratch;
  CK(cudaMalloc(&scratch, dtk_tma_post_scratch(M, F, C)));
  unsigned long long *bar;
  CK(cudaMalloc(&bar, DTK_TMA_POST_SYNC));
  CK(cudaMemset(bar, 0, DTK_TMA_POST_SYNC));
  const float eps = 1e-6f;
  // The kernels as the decoder ran them before (with_o: the output
  // projection first), and the one kernel.
  auto chain = [&](int r, bf16 *yy, bool with_o) {
    if (with_o) CK(dtk_tma_linear(kBF16, ao, wo[r], yy, yy, M, C, C, s));
    CK(dtk_tma_gate_up_silu(kBF16, yy, wgu[r], a, M, F, C, eps, s));
    CK(dtk_tma_linear(kBF16, a, wdn[r], yy, yy, M, C, F, s));
  };
  auto fused = [&](int r, bf16 *yy, bool with_o) {
    CK(dtk_tma_post(kBF16, yy, with_o ? ao : nullptr, wo[r], C, wgu[r], wdn[r], nullptr, 0, nullptr, scratch, bar, M, F, C, eps, s));
  };
  std::printf("%d rows\n", M);
  std::vector<uint16_t> h1(size_t(M) * C), h2(size_t(M) * C);
  // The TMA kernels take up to 32 rows: past that only the one kernel.
  for (bool with_o : {false, true}) {
    const char *what = with_o ? "output projection and MLP" : "MLP";
    if (M > 32) {
      CK(cudaMemcpy(y2, x0, size_t(M) * C * 2, cudaMemcpyDeviceToDevice));
      std::printf("%s: one kernel %6.1f us\n", what, timed(s, [&](int r) { fused(r, y2, with_o); }));
      continue;
    }
    // 1. The same three layers both ways: equal bit for bit?
    CK(cudaMemcpy(y, x0, size_t(M) * C * 2, cudaMemcpyDeviceToDevice));
    CK(cudaMemcpy(y2, x0, size_t(M) * C * 2, cudaMemcpyDeviceToDevice));
    for (int r = 0; r < 3; r++) chain(r, y, with_o), fused(r, y2, with_o);
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(h1.data(), y, h1.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h2.data(), y2, h2.size() * 2, cudaMemcpyDeviceToHost));
    size_t diff = 0;
    for (size_t i = 0; i < h1.size(); i++) diff += h1[i] != h2[i];
    std::printf("%s: after 3 layers %zu of %zu values differ\n", what, diff, h1.size());
    // 2. Times a layer.
    std::printf("%s: kernels %6.1f us, one kernel %6.1f us\n", what,
                timed(s, [&](int r) { chain(r, y, with_o); }), timed(s, [&](int r) { fused(r, y2, with_o); }));
  }
  // 3. The trace: 48 launches in a row, with the output projection.
  const int G = F / 48;
  const size_t n = size_t(kMlpTraceLaunches) * G * kMlpTraceMarks;
  unsigned long long *tr;
  CK(cudaMalloc(&tr, n * 8));
  CK(cudaMemset(tr, 0, n * 8));
  CK(cudaMemcpyToSymbol(g_mlp_trace, &tr, sizeof tr));
  const size_t ns = size_t(kMlpTraceLaunches) * G * kMlpSteps;
  long long *stp;
  CK(cudaMalloc(&stp, ns * 8));
  CK(cudaMemset(stp, 0, ns * 8));
  CK(cudaMemcpyToSymbol(g_mlp_steps, &stp, sizeof stp));
  // DLLM_MLP_SKIP=b: kernels.cu's g_mlp_skip (leave out parts of gate-up's
  // phase to see what bounds it; the outputs are then wrong).
  const char *sk = std::getenv("DLLM_MLP_SKIP");
  const int skip = sk ? std::atoi(sk) : 0;
  CK(cudaMemcpyToSymbol(g_mlp_skip, &skip, sizeof skip));
  if (skip) std::printf("g_mlp_skip %d (outputs wrong)\n", skip);
  CK(cudaMemset(bar, 0, DTK_TMA_POST_SYNC));
  for (int l = 0; l < 48; l++) fused(l % kCopies, y2, true);
  CK(cudaStreamSynchronize(s));
  std::vector<unsigned long long> ht(n);
  CK(cudaMemcpy(ht.data(), tr, n * 8, cudaMemcpyDeviceToHost));
  const int K = kMlpTraceMarks, order[] = {0, 1, 8, 9, 2, 10, 3, 4, 5, 6, 7};
  const char *what[kMlpTraceMarks] = {"start",
                                      "past the PDL wait",
                                      "gate-up products",
                                      "h stored (pre-fence)",
                                      "past barrier 1",
                                      "down products",
                                      "past barrier 2",
                                      "end",
                                      "output: past its parts' barrier",
                                      "output: past its sum's barrier",
                                      "rinv ready (SiLU step next)"};
  double avg[kMlpTraceMarks] = {}, last[kMlpTraceMarks] = {}, gap = 0;
  int L = 0;
  for (int l = 8; l < 47; l++, L++) {
    const unsigned long long *t = ht.data() + size_t(l) * G * K;
    unsigned long long t0 = ~0ull, end = 0, next = ~0ull;
    for (int b = 0; b < G; b++) t0 = std::min(t0, t[b * K]), end = std::max(end, t[b * K + 7]);
    for (int b = 0; b < G; b++) next = std::min(next, ht[(size_t(l + 1) * G + b) * K + 1]);
    gap += (double(next) - double(end)) / 1e3;
    for (int i = 0; i < K; i++) {
      double sum = 0, mx = 0;
      for (int b = 0; b < G; b++) {
        const double v = (double(t[b * K + i]) - double(t0)) / 1e3;
        sum += v, mx = std::max(mx, v);
      }
      avg[i] += sum / G, last[i] += mx;
    }
  }
  std::printf("%-34s %8s %8s   (us from the first CTA's start; %d launches)\n", "step", "average", "last", L);
  for (int i : order) std::printf("%-34s %8.2f %8.2f\n", what[i], avg[i] / L, last[i] / L);
  std::printf("%-34s %8.2f\n", "last end to next's PDL wait", gap / L);
  // Thread 0's cycles a chunk in each step of the two chunk loops, over
  // the same launches and every CTA.
  std::vector<long long> hs(ns);
  CK(cudaMemcpy(hs.data(), stp, ns * 8, cudaMemcpyDeviceToHost));
  int khz = 0;
  CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  const char *sname[kMlpSteps] = {"gate-up: stage's wait", "gate-up: products' issue", "gate-up: sums of squares",
                                  "gate-up: chunk before, release", "down: stage's wait", "down: products' issue",
                                  "down: chunk before, release", "-"};
  const int chunks[kMlpSteps] = {C / 64, C / 64, C / 64, C / 64, F / 64 / 8, F / 64 / 8, F / 64 / 8, 1};
  std::printf("%-34s %8s %8s   (thread 0, a chunk; ns at %d MHz)\n", "step", "cycles", "ns", khz / 1000);
  for (int i = 0; i < 7; i++) {
    double sum = 0;
    for (int l = 8; l < 47; l++)
      for (int b = 0; b < G; b++) sum += double(hs[(size_t(l) * G + b) * kMlpSteps + i]);
    const double cyc = sum / (double(L) * G * chunks[i]);
    std::printf("%-34s %8.0f %8.1f\n", sname[i], cyc, cyc / (khz / 1e6));
  }
  return 0;
}
