// Where does the one-kernel post-attention sublayers (kernels.cu's
// tpost_kernel, dtk_tma_post) spend its time, and is it the kernels it
// replaces bit for bit? At 32 rows, MiniCPM5-2B's shapes, in CUDA graphs
// cycling over 12 weight copies (so the 50 MB L2 cannot serve them), the
// probe compares and times, for the MLP alone, with the output projection
// first and with the next layer's QKV projection after, the TMA kernels
// the decoder ran before (tgemm_kernel<64, 4>, tgemm_gu_kernel,
// tgemm_kernel<128, 8>, then tgemm_kernel<64, 4> for QKV and
// rope_qkv_kernel; PDL) against the one kernel; then it
// replays the one kernel, in the decoder's form, 48 times in a row with
// DLLM_MLP_TRACE's timestamps and prints, per step of the kernel, when the
// average and the last CTA got there (us from the grid's first CTA start).
//
//     NV=$(python3 -c 'import torch,os;print(os.path.dirname(os.path.dirname(torch.__file__)))')/nvidia/cu13/lib
//     nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/mp scripts/mlp_probe.cu -L$NV \
//         -l:libcublas.so.13 -l:libcublasLt.so.13 -Xlinker -rpath=$NV && /tmp/mp
// (or PROBES=mlp_probe.cu TESTS= CTX= scripts/gpu-speed.sh)
#define DLLM_SM90A
#define DLLM_MLP_TRACE
#include "../torch/csrc/kernels.cu"

#include "gpu_probe.cuh"

namespace {

using bf16 = __nv_bfloat16;
using probe::kCopies;
using probe::rand_bf16;
using probe::timed;

constexpr int M = 32, C = 2048, F = 6144, H = 16, Hkv = 2, D = 128, NQ = (H + 2 * Hkv) * D, P0 = 1000,
              kMax = 1056;

// compare prints how many of two device arrays' n bf16 values differ and
// the largest difference relative to the largest value.
void compare(const char *what, const bf16 *a, const bf16 *b, size_t n) {
  std::vector<bf16> ha(n), hb(n);
  CK(cudaMemcpy(ha.data(), a, n * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hb.data(), b, n * 2, cudaMemcpyDeviceToHost));
  size_t diff = 0;
  double md = 0, mx = 0;
  for (size_t i = 0; i < n; i++) {
    const double x = __bfloat162float(ha[i]), y = __bfloat162float(hb[i]);
    diff += x != y, md = std::max(md, std::fabs(x - y)), mx = std::max(mx, std::fabs(x));
  }
  std::printf("%s: %zu of %zu values differ, by at most %.2e of the largest\n", what, diff, n, md / mx);
}

} // namespace

int main() {
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  std::vector<bf16 *> wo(kCopies), wgu(kCopies), wdn(kCopies), wq(kCopies);
  for (int r = 0; r < kCopies; r++) {
    wq[r] = rand_bf16(size_t(NQ) * C, 301 + r, 0.04f);
    wo[r] = rand_bf16(size_t(C) * C, 201 + r, 0.04f);
    wgu[r] = rand_bf16(size_t(2) * F * C, 11 + r, 0.04f);
    wdn[r] = rand_bf16(size_t(C) * F, 101 + r, 0.04f);
  }
  bf16 *x0 = rand_bf16(size_t(M) * C, 7, 2.0f), *ao = rand_bf16(size_t(M) * C, 8, 2.0f), *y, *y2, *a;
  CK(cudaMalloc(&y, size_t(M) * C * 2));
  CK(cudaMalloc(&y2, size_t(M) * C * 2));
  CK(cudaMalloc(&a, size_t(M) * F * 2));
  // The next layer's pre: RoPE tables, positions P0.., q and caches for
  // each form.
  bf16 *qkv, *cs = rand_bf16(size_t(kMax) * D, 401, 1.0f), *sn = rand_bf16(size_t(kMax) * D, 402, 1.0f), *q[2],
       *kc[2], *vc[2];
  CK(cudaMalloc(&qkv, size_t(M) * NQ * 2));
  for (int i = 0; i < 2; i++) {
    CK(cudaMalloc(&q[i], size_t(M) * H * D * 2));
    CK(cudaMalloc(&kc[i], size_t(kMax) * Hkv * D * 2));
    CK(cudaMalloc(&vc[i], size_t(kMax) * Hkv * D * 2));
  }
  std::vector<int64_t> hp(M);
  for (int i = 0; i < M; i++) hp[i] = P0 + i;
  int64_t *pos;
  CK(cudaMalloc(&pos, M * 8));
  CK(cudaMemcpy(pos, hp.data(), M * 8, cudaMemcpyHostToDevice));
  const dtk_rope_args rope{cs, sn, pos, q[1], kc[1], vc[1], H, Hkv, D, 0};
  char *scratch;
  CK(cudaMalloc(&scratch, dtk_tma_post_scratch(M, F, C)));
  unsigned long long *bar;
  CK(cudaMalloc(&bar, DTK_TMA_POST_SYNC));
  CK(cudaMemset(bar, 0, DTK_TMA_POST_SYNC));
  const float eps = 1e-6f;
  // The kernels as the decoder ran them before (form 1: the output
  // projection first; 2: and the next layer's QKV after), and the one
  // kernel.
  auto chain = [&](int r, bf16 *yy, int form) {
    if (form >= 1) CK(dtk_tma_linear(kBF16, ao, wo[r], yy, yy, M, C, C, s));
    CK(dtk_tma_gate_up_silu(kBF16, yy, wgu[r], a, M, F, C, eps, s));
    CK(dtk_tma_linear(kBF16, a, wdn[r], yy, yy, M, C, F, s));
    if (form >= 2) {
      CK(dtk_tma_linear(kBF16, yy, wq[(r + 1) % kCopies], nullptr, qkv, M, NQ, C, s));
      CK(dtk_rope_qkv(kBF16, qkv, cs, sn, pos, q[0], kc[0], vc[0], M, H, Hkv, D, yy, C, eps, 0, s));
    }
  };
  auto fused = [&](int r, bf16 *yy, int form) {
    CK(dtk_tma_post(kBF16, yy, form >= 1 ? ao : nullptr, wo[r], C, wgu[r], wdn[r],
                    form >= 2 ? wq[(r + 1) % kCopies] : nullptr, form >= 2 ? &rope : nullptr, scratch, bar, M, F, C,
                    eps, s));
  };
  std::vector<uint16_t> h1(size_t(M) * C), h2(size_t(M) * C);
  for (int form : {0, 1, 2}) {
    const char *what = form == 2 ? "output, MLP and next QKV" : form == 1 ? "output projection and MLP" : "MLP";
    // 1. The same three layers both ways: equal bit for bit?
    CK(cudaMemcpy(y, x0, size_t(M) * C * 2, cudaMemcpyDeviceToDevice));
    CK(cudaMemcpy(y2, x0, size_t(M) * C * 2, cudaMemcpyDeviceToDevice));
    for (int r = 0; r < 3; r++) chain(r, y, form), fused(r, y2, form);
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(h1.data(), y, h1.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h2.data(), y2, h2.size() * 2, cudaMemcpyDeviceToHost));
    size_t diff = 0;
    for (size_t i = 0; i < h1.size(); i++) diff += h1[i] != h2[i];
    std::printf("%s: after 3 layers %zu of %zu values differ\n", what, diff, h1.size());
    if (form == 2) { // the inverse RMS's sum runs in another order: the last bit may differ
      compare("the last layer's q", q[0], q[1], size_t(M) * H * D);
      compare("the last layer's keys", kc[0] + size_t(P0) * Hkv * D, kc[1] + size_t(P0) * Hkv * D,
              size_t(M) * Hkv * D);
      compare("the last layer's values", vc[0] + size_t(P0) * Hkv * D, vc[1] + size_t(P0) * Hkv * D,
              size_t(M) * Hkv * D);
    }
    // 2. Times a layer.
    std::printf("%s: kernels %6.1f us, one kernel %6.1f us\n", what,
                timed(s, [&](int r) { chain(r, y, form); }), timed(s, [&](int r) { fused(r, y2, form); }));
  }
  // 3. The trace: 48 launches in a row, with the output projection.
  const int G = F / 48;
  const size_t n = size_t(kMlpTraceLaunches) * G * kMlpTraceMarks;
  unsigned long long *tr;
  CK(cudaMalloc(&tr, n * 8));
  CK(cudaMemset(tr, 0, n * 8));
  CK(cudaMemcpyToSymbol(g_mlp_trace, &tr, sizeof tr));
  CK(cudaMemset(bar, 0, DTK_TMA_POST_SYNC));
  for (int l = 0; l < 48; l++) fused(l % kCopies, y2, 2);
  CK(cudaStreamSynchronize(s));
  std::vector<unsigned long long> ht(n);
  CK(cudaMemcpy(ht.data(), tr, n * 8, cudaMemcpyDeviceToHost));
  const int K = kMlpTraceMarks, order[] = {0, 1, 8, 9, 2, 3, 4, 5, 6, 7, 10, 13, 11, 12}, kEnd = 12;
  const char *what[kMlpTraceMarks] = {"start",
                                      "past the PDL wait",
                                      "gate-up products",
                                      "h stored (pre-fence)",
                                      "past barrier 1",
                                      "down products",
                                      "past barrier 2",
                                      "down summed",
                                      "output: past its parts' barrier",
                                      "output: past its sum's barrier",
                                      "QKV: past y's barrier",
                                      "RoPE: past the parts' barrier",
                                      "end (RoPE stored)",
                                      "QKV products"};
  double avg[kMlpTraceMarks] = {}, last[kMlpTraceMarks] = {}, gap = 0;
  int L = 0;
  for (int l = 8; l < 47; l++, L++) {
    const unsigned long long *t = ht.data() + size_t(l) * G * K;
    unsigned long long t0 = ~0ull, end = 0, next = ~0ull;
    for (int b = 0; b < G; b++) t0 = std::min(t0, t[b * K]), end = std::max(end, t[b * K + kEnd]);
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
  return 0;
}
