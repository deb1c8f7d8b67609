// Where does a call of the shim's attention kernel (kernels.cu's
// attn_decode_kernel) spend its time? The decoder's trace shows it costing
// ~7 us even for a single 64-key tile (a fused commit's own keys,
// dtk_attn_own), where its loads and products should take ~2. For three
// calls as the decoder makes them (MiniCPM5-2B's heads: 16 query heads over
// 2 key heads, head dim 128), the probe prints the time a call takes in a
// CUDA graph of back-to-back calls, then, from DLLM_ATTN_TRACE's
// timestamps over 50 lone launches, when the average and the last CTA
// reached each step (us from the grid's first CTA start).
//
//     nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/ap probes/attn_phase_probe.cu \
//         -L$NV -l:libcublas.so.13 -Xlinker -rpath=$NV && /tmp/ap
// (or PROBES=attn_phase_probe.cu TESTS= CTX= scripts/gpu-speed.sh)
#define DLLM_ATTN_TRACE
#include "../torch/csrc/kernels.cu"
#include "../torch/csrc/attention.cu"
#include "../torch/csrc/tma.cu"

#include "gpu_probe.cuh"

namespace {

using bf16 = __nv_bfloat16;
constexpr int H = 16, Hkv = 2, D = 128, Smax = 4096;

struct Case {
  const char *what;
  int T, S, causal;
  bool own; // dtk_attn_own over T own keys (q folded), else dtk_attn_decode over S cache keys
};

} // namespace

int main() {
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  bf16 *q = probe::rand_bf16(size_t(64) * H * D, 1, 1.0f), *kc = probe::rand_bf16(size_t(Smax) * Hkv * D, 2, 1.0f),
       *vc = probe::rand_bf16(size_t(Smax) * Hkv * D, 3, 1.0f), *out;
  CK(cudaMalloc(&out, size_t(64) * H * D * 2));
  float *lse, *scratch;
  CK(cudaMalloc(&lse, size_t(64) * H * 4));
  CK(cudaMalloc(&scratch, (dtk_attn_decode_scratch(64, H, Hkv, Smax) + 1) * 4));
  std::vector<int64_t> hp(64);
  for (int i = 0; i < 64; i++) hp[i] = i;
  int64_t *pos;
  CK(cudaMalloc(&pos, 64 * 8));
  CK(cudaMemcpy(pos, hp.data(), 64 * 8, cudaMemcpyHostToDevice));
  const float scale = 1.0f / std::sqrt(float(D));
  const Case cases[] = {{"fused commit's own keys: 64 tokens, 32 causal, 64 keys", 64, 64, 32, true},
                        {"block step: 32 tokens over 1,056 keys", 32, 1056, 0, false},
                        {"AR step: 1 token over 1,056 keys", 1, 1056, 0, false}};
  unsigned long long *tr;
  const size_t cap = size_t(4096) * kAttnTraceMarks;
  CK(cudaMalloc(&tr, cap * 8));
  const char *marks[kAttnTraceMarks] = {"start", "past the PDL wait", "first tile in", "products done", "end"};
  for (const auto &c : cases) {
    auto call = [&] {
      int e = c.own ? dtk_attn_own(kBF16, q, kc, vc, out, lse, c.T, H, Hkv, pos, c.causal, scale, s)
                    : dtk_attn_decode(kBF16, q, kc, vc, out, c.T, H, Hkv, c.S, scale, scratch, s);
      CK(e);
    };
    // 1. A call's time, back to back in a graph (with its merge where it splits).
    unsigned long long *none = nullptr;
    CK(cudaMemcpyToSymbol(g_attn_trace, &none, sizeof none));
    std::printf("\n%s: %.2f us a call (CUDA graph, back to back)\n", c.what, probe::timed(s, [&](int) { call(); }));
    // 2. The steps of lone launches.
    CK(cudaMemcpyToSymbol(g_attn_trace, &tr, sizeof tr));
    double avg[kAttnTraceMarks] = {}, last[kAttnTraceMarks] = {};
    int n = 0, ctas = 0;
    for (int l = 0; l < 60; l++) {
      CK(cudaMemset(tr, 0, cap * 8));
      call();
      CK(cudaStreamSynchronize(s));
      std::vector<unsigned long long> h(cap);
      CK(cudaMemcpy(h.data(), tr, cap * 8, cudaMemcpyDeviceToHost));
      if (l < 10) continue; // warm
      unsigned long long t0 = ~0ull;
      ctas = 0;
      for (size_t b = 0; b < cap / kAttnTraceMarks && h[b * kAttnTraceMarks]; b++, ctas++)
        t0 = std::min(t0, h[b * kAttnTraceMarks]);
      for (int i = 0; i < kAttnTraceMarks; i++) {
        double sum = 0, mx = 0;
        int k = 0;
        for (int b = 0; b < ctas; b++) {
          unsigned long long v = h[size_t(b) * kAttnTraceMarks + i];
          if (!v) continue; // a split with no keys skips the tile steps
          sum += (double(v) - double(t0)) / 1e3, mx = std::max(mx, (double(v) - double(t0)) / 1e3), k++;
        }
        avg[i] += k ? sum / k : 0, last[i] += mx;
      }
      n++;
    }
    std::printf("%-22s %8s %8s   (us from the first CTA's start; %d CTAs, %d launches)\n", "step", "average", "last",
                ctas, n);
    for (int i = 0; i < kAttnTraceMarks; i++) std::printf("%-22s %8.2f %8.2f\n", marks[i], avg[i] / n, last[i] / n);
  }
  return 0;
}
