// Is the block step's QKV projection with RoPE in its epilogue (kernels.cu's
// tqkv_kernel, dtk_tma_qkv_rope) what the two kernels it replaces give
// (tgemm_kernel<64, 4, 8> then rope_qkv_kernel<bf16, true>, folded q), and
// how long does each take? At 32 rows, MiniCPM5-2B's shapes, in CUDA graphs
// cycling over 12 weight copies (so the 50 MB L2 cannot serve them): alone,
// after the persistent kernel (dtk_tma_post) as in a layer, where both
// launch early into its tail, and so with a one-CTA kernel beside (the
// decoder's fill node, after the persistent kernel's end).
//
//     NV=$(python3 -c 'import torch,os;print(os.path.dirname(os.path.dirname(torch.__file__)))')/nvidia/cu13/lib
//     nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/qp scripts/qkv_rope_probe.cu -L$NV \
//         -l:libcublas.so.13 -l:libcublasLt.so.13 -Xlinker -rpath=$NV && /tmp/qp
// (or PROBES=qkv_rope_probe.cu TESTS= CTX= scripts/gpu-speed.sh)
#define DLLM_SM90A
#include "../torch/csrc/kernels.cu"

#include "gpu_probe.cuh"

namespace {

using bf16 = __nv_bfloat16;
using probe::kCopies;
using probe::rand_bf16;
using probe::timed;

constexpr int M = 32, C = 2048, F = 6144, H = 16, Hkv = 2, D = 128, N = (H + 2 * Hkv) * D, S = 2048;

// count_diff is how many of n bf16 values at a and b differ, and the
// largest difference.
void count_diff(const char *what, const bf16 *a, const bf16 *b, size_t n) {
  std::vector<bf16> ha(n), hb(n);
  CK(cudaMemcpy(ha.data(), a, n * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hb.data(), b, n * 2, cudaMemcpyDeviceToHost));
  size_t diff = 0;
  float mx = 0, ref = 0;
  for (size_t i = 0; i < n; i++) {
    const float x = __bfloat162float(ha[i]), y = __bfloat162float(hb[i]);
    diff += x != y, mx = std::max(mx, std::fabs(x - y)), ref = std::max(ref, std::fabs(x));
  }
  std::printf("%-8s %7zu of %7zu values differ, largest by %.3g (largest value %.3g)\n", what, diff, n, mx, ref);
}

} // namespace

int main() {
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  std::vector<bf16 *> wqkv(kCopies), wo(kCopies), wgu(kCopies), wdn(kCopies);
  for (int r = 0; r < kCopies; r++) {
    wqkv[r] = rand_bf16(size_t(N) * C, 301 + r, 0.04f);
    wo[r] = rand_bf16(size_t(C) * C, 201 + r, 0.04f);
    wgu[r] = rand_bf16(size_t(2) * F * C, 11 + r, 0.04f);
    wdn[r] = rand_bf16(size_t(C) * F, 101 + r, 0.04f);
  }
  bf16 *x = rand_bf16(size_t(M) * C, 7, 2.0f), *ao = rand_bf16(size_t(M) * C, 8, 2.0f);
  bf16 *cs = rand_bf16(size_t(S) * D, 9, 2.0f), *sn = rand_bf16(size_t(S) * D, 10, 2.0f);
  bf16 *qkv, *q[2], *kc[2], *vc[2];
  CK(cudaMalloc(&qkv, size_t(M) * N * 2));
  for (int i = 0; i < 2; i++) {
    CK(cudaMalloc(&q[i], size_t(M) * H * D * 2));
    CK(cudaMalloc(&kc[i], size_t(S) * Hkv * D * 2));
    CK(cudaMalloc(&vc[i], size_t(S) * Hkv * D * 2));
    CK(cudaMemset(kc[i], 0, size_t(S) * Hkv * D * 2));
    CK(cudaMemset(vc[i], 0, size_t(S) * Hkv * D * 2));
  }
  std::vector<int64_t> hp(M);
  for (int t = 0; t < M; t++) hp[t] = 1000 + t;
  int64_t *pos;
  CK(cudaMalloc(&pos, M * 8));
  CK(cudaMemcpy(pos, hp.data(), M * 8, cudaMemcpyHostToDevice));
  char *scratch;
  CK(cudaMalloc(&scratch, dtk_tma_post_scratch(M, F, C)));
  unsigned long long *bar;
  CK(cudaMalloc(&bar, DTK_TMA_POST_SYNC));
  CK(cudaMemset(bar, 0, DTK_TMA_POST_SYNC));
  const float eps = 1e-6f;
  auto two = [&](int r) {
    CK(dtk_tma_linear(kBF16, x, wqkv[r], nullptr, qkv, M, N, C, s));
    CK(dtk_rope_qkv(kBF16, qkv, cs, sn, pos, q[0], kc[0], vc[0], M, H, Hkv, D, x, C, eps, 1, nullptr, nullptr, s));
  };
  auto one = [&](int r) {
    CK(dtk_tma_qkv_rope(kBF16, x, wqkv[r], cs, sn, pos, q[1], kc[1], vc[1], M, H, Hkv, D, C, eps, 1, nullptr, s));
  };
  // The layer's persistent kernel on a residual stream of its own (x stays
  // the QKV input, so the outputs compare).
  bf16 *y;
  CK(cudaMalloc(&y, size_t(M) * C * 2));
  CK(cudaMemcpy(y, x, size_t(M) * C * 2, cudaMemcpyDeviceToDevice));
  auto post = [&](int r) {
    CK(dtk_tma_post(kBF16, y, ao, wo[r], C, wgu[r], wdn[r], scratch, bar, M, F, C, eps, s));
  };
  // beside(f) launches a one-CTA kernel writing 4 bytes on a side stream
  // after what s has so far, joined before s goes on: the decoder's fill
  // node (what cuDNN's memset became), which runs beside RoPE or, with the
  // one kernel, beside it.
  cudaStream_t s2;
  CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaEvent_t fork, join;
  CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  bf16 *word;
  CK(cudaMalloc(&word, 4));
  auto beside = [&](const std::function<void()> &f) {
    CK(cudaEventRecord(fork, s));
    CK(cudaStreamWaitEvent(s2, fork, 0));
    probe::fill<<<1, 256, 0, s2>>>(word, 2, 0, 0.0f);
    CK(cudaEventRecord(join, s2));
    f();
    CK(cudaStreamWaitEvent(s, join, 0));
  };
  auto two_fill = [&](int r) {
    CK(dtk_tma_linear(kBF16, x, wqkv[r], nullptr, qkv, M, N, C, s));
    beside([&] {
      CK(dtk_rope_qkv(kBF16, qkv, cs, sn, pos, q[0], kc[0], vc[0], M, H, Hkv, D, x, C, eps, 1, nullptr, nullptr, s));
    });
  };
  auto one_fill = [&](int r) { beside([&] { one(r); }); };
  // 1. Both ways once: equal?
  two(0), one(0);
  CK(cudaStreamSynchronize(s));
  count_diff("q", q[0], q[1], size_t(M) * H * D);
  count_diff("k cache", kc[0], kc[1], size_t(S) * Hkv * D);
  count_diff("v cache", vc[0], vc[1], size_t(S) * Hkv * D);
  // 2. Times a call (A B A B).
  for (int i = 0; i < 2; i++) {
    std::printf("alone:             two kernels %6.2f us, one kernel %6.2f us\n", timed(s, two), timed(s, one));
    std::printf("after tpost:       two kernels %6.2f us, one kernel %6.2f us (tpost alone %6.2f)\n",
                timed(s, [&](int r) { post(r), two(r); }), timed(s, [&](int r) { post(r), one(r); }), timed(s, post));
    std::printf("with a fill beside: two kernels %6.2f us, one kernel %6.2f us\n",
                timed(s, [&](int r) { post(r), two_fill(r); }), timed(s, [&](int r) { post(r), one_fill(r); }));
  }
  return 0;
}
