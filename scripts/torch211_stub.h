// torch211_stub.h: the libtorch 2.11 ops the shim's CUDA path calls, declared
// over Debian's libtorch 1.13 headers, so that the cuDNN attention path
// (DLLM_CUDNN_ATTN) passes the syntax check on the CPU machine too
// (docs/gpu.md). Only a syntax check: the bodies are placeholders.
#pragma once
#include <ATen/ATen.h>

#include <tuple>

namespace at {
inline std::tuple<Tensor, Tensor> _scaled_dot_product_cudnn_attention(const Tensor &, const Tensor &,
                                                                      const Tensor &, const c10::optional<Tensor> &,
                                                                      bool, double, bool, bool,
                                                                      c10::optional<double>) {
  return {};
}
inline std::tuple<Tensor, Tensor> _flash_attention_forward(const Tensor &, const Tensor &, const Tensor &,
                                                           const c10::optional<Tensor> &,
                                                           const c10::optional<Tensor> &, int64_t, int64_t, double,
                                                           bool, bool, c10::optional<double>,
                                                           c10::optional<int64_t> = c10::nullopt,
                                                           c10::optional<int64_t> = c10::nullopt,
                                                           const c10::optional<Tensor> & = {},
                                                           const c10::optional<Tensor> & = {}) {
  return {};
}
} // namespace at
