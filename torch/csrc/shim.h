// shim.h: what the shim's files share (dllm_torch.cpp's tensor ops and
// autograd, decoder.cpp's decoder): libtorch's and CUDA's headers, the
// handle conversions (T, W), the exception guard every exported function
// runs in, and the ops both compose (RMSNorm, RoPE, SwiGLU, attention).
// Internal to the shim; the C interface is dllm_torch.h.
#pragma once

#include "dllm_torch.h"

#include <torch/torch.h>
#include <torch/version.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <map>
#include <memory>
#include <mutex>

#ifdef DLLM_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#ifdef DLLM_KERNELS
#include "kernels.h"
#endif
#endif

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 0)
#define DT_HAVE_SDPA 1
#endif

// aten::_scaled_dot_product_cudnn_attention: the decoder's cuDNN attention
// path (attend_cudnn). Measured with libtorch 2.11 only.
#if defined(DLLM_KERNELS) && (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 10))
#define DLLM_CUDNN_ATTN 1
#endif

// live counts the tensor handles not yet freed (dt_live_tensors), over
// every file of the shim.
namespace dllm {
inline std::atomic<int64_t> live{0};
} // namespace dllm

namespace {

using dllm::live;

dt_err make_err(const char *msg) {
  size_t n = std::strlen(msg);
  char *s = static_cast<char *>(std::malloc(n + 1));
  if (s) std::memcpy(s, msg, n + 1);
  return s;
}

// T and W turn handles into tensors and back.
dt_err make_err(const std::string &msg) { return make_err(msg.c_str()); }

inline at::Tensor &T(dt_tensor t) { return *static_cast<at::Tensor *>(t); }

inline dt_tensor W(at::Tensor t) {
  live.fetch_add(1, std::memory_order_relaxed);
  return new at::Tensor(std::move(t));
}

// opt turns a nullable handle into an optional tensor argument.
inline c10::optional<at::Tensor> opt(dt_tensor t) {
  if (!t) return c10::nullopt;
  return T(t);
}

at::Device device_of(int type, int index) {
  if (type == 1) return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
  return at::Device(at::kCPU);
}

at::ScalarType stype(int dtype) { return static_cast<at::ScalarType>(dtype); }

void check_dtype(int dtype) {
  switch (dtype) {
  case DT_U8: case DT_I8: case DT_I16: case DT_I32: case DT_I64:
  case DT_F16: case DT_F32: case DT_F64: case DT_BOOL: case DT_BF16:
    return;
  }
  TORCH_CHECK(false, "unsupported dtype code ", dtype);
}

std::vector<int64_t> dims(const int64_t *p, int n) {
  TORCH_CHECK(n >= 0 && (n == 0 || p != nullptr), "bad shape");
  return std::vector<int64_t>(p, p + n);
}

// rms_norm_ops follows HF's LlamaRMSNorm exactly: normalise in float32, cast
// back to the input dtype, then scale, so bf16 results round where HF's do.
// rstd, when given, receives 1/sqrt(mean(x^2) + eps) (.., 1).
at::Tensor rms_norm_ops(const at::Tensor &x, const at::Tensor &w, double eps, at::Tensor *rstd = nullptr) {
  auto h = x.to(x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
  auto r = at::rsqrt(h.pow(2).mean(-1, true) + eps);
  if (rstd) *rstd = r;
  return w * (h * r).to(x.scalar_type());
}

// RMSNormFn is rms_norm_ops with a backward of its own that keeps only x and
// rstd: autograd through the ops keeps two float32 copies of x and the
// normalised bf16 one, a fifth of a layer's activations in training.
struct RMSNormFn : public torch::autograd::Function<RMSNormFn> {
  static at::Tensor forward(torch::autograd::AutogradContext *ctx, const at::Tensor &x, const at::Tensor &w,
                            double eps) {
    at::Tensor rstd;
    auto y = rms_norm_ops(x, w, eps, &rstd);
    ctx->save_for_backward({x, w, rstd});
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                 torch::autograd::variable_list grads) {
    auto sv = ctx->get_saved_variables();
    auto &x = sv[0], &w = sv[1], &rstd = sv[2];
    auto g = grads[0];
    auto xf = x.to(rstd.scalar_type());
    auto n = (xf * rstd).to(x.scalar_type()); // the normalised x as forward rounded it
    // y = w * n: dw sums g * n over the rows; dn = g * w, then through
    // n = x * rstd with rstd = (mean(x^2) + eps)^-1/2:
    //   dx = rstd * dn - x * rstd^3 * mean(dn * x).
    at::Tensor dx, dw;
    if (ctx->needs_input_grad(1)) dw = (g * n).reshape({-1, w.numel()}).sum(0).view(w.sizes());
    if (ctx->needs_input_grad(0)) {
      auto dn = (g * w).to(rstd.scalar_type());
      dx = (rstd * dn - xf * rstd.pow(3) * (dn * xf).mean(-1, true)).to(x.scalar_type());
    }
    return {dx, dw, at::Tensor()};
  }
};

// rms_norm is rms_norm_ops, through RMSNormFn when a gradient is wanted.
at::Tensor rms_norm(const at::Tensor &x, const at::Tensor &w, double eps) {
  if (at::GradMode::is_enabled() && (x.requires_grad() || w.requires_grad())) return RMSNormFn::apply(x, w, eps);
  return rms_norm_ops(x, w, eps);
}

// SwiGLUDownFn is (silu(g) * u) W_down^T keeping g, u and W_down for the
// backward: the product, which the projection would keep, is recomputed
// (one elementwise pass) instead of held, a fifth of a layer's activations.
struct SwiGLUDownFn : public torch::autograd::Function<SwiGLUDownFn> {
  static at::Tensor forward(torch::autograd::AutogradContext *ctx, const at::Tensor &g, const at::Tensor &u,
                            const at::Tensor &w) {
    ctx->save_for_backward({g, u, w});
    return at::linear(at::silu(g) * u, w);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                 torch::autograd::variable_list grads) {
    // The formulas autograd uses through the ops (linear, mul, silu).
    auto sv = ctx->get_saved_variables();
    auto &g = sv[0], &u = sv[1], &w = sv[2], &d = grads[0]; // d (.., C), w (C, F)
    auto s = at::silu(g);
    at::Tensor dw;
    if (ctx->needs_input_grad(2)) dw = d.reshape({-1, w.size(0)}).t().mm((s * u).reshape({-1, w.size(1)}));
    auto da = at::matmul(d, w); // (.., F)
    return {at::silu_backward(da * u, g), da * s, dw};
  }
};

// swiglu_down is W_down(silu(g) * u), through SwiGLUDownFn when a gradient
// is wanted.
at::Tensor swiglu_down(const at::Tensor &g, const at::Tensor &u, const at::Tensor &w) {
  if (at::GradMode::is_enabled() && (g.requires_grad() || u.requires_grad() || w.requires_grad()))
    return SwiGLUDownFn::apply(g, u, w);
  return at::linear(at::silu(g) * u, w);
}

at::Tensor rotate_half(const at::Tensor &x) {
  auto half = x.size(-1) / 2;
  auto x1 = x.narrow(-1, 0, half);
  auto x2 = x.narrow(-1, half, half);
  return at::cat({-x2, x1}, -1);
}

at::Tensor rope(const at::Tensor &x, at::Tensor cos, at::Tensor sin) {
  // (T, D) or (B, T, D) broadcast over heads of x (B, H, T, D).
  if (cos.dim() == 3) {
    cos = cos.unsqueeze(1);
    sin = sin.unsqueeze(1);
  }
  return x * cos + rotate_half(x) * sin;
}

// repeat_kv turns (B, Hkv, S, D) into (B, Hkv*rep, S, D) for grouped queries.
at::Tensor repeat_kv(const at::Tensor &x, int64_t rep) {
  if (rep == 1) return x;
  auto s = x.sizes();
  return x.unsqueeze(2).expand({s[0], s[1], rep, s[2], s[3]}).reshape({s[0], s[1] * rep, s[2], s[3]});
}

at::Tensor attention_math(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                          const c10::optional<at::Tensor> &mask, bool causal, double scale) {
  auto att = at::matmul(q, k.transpose(-2, -1)) * scale; // (B, H, T, S)
  auto T_ = q.size(-2), S = k.size(-2);
  if (causal) {
    // Lower-right aligned: query t sees keys up to S - T + t.
    auto m = at::ones({T_, S}, q.options().dtype(at::kBool)).tril(S - T_);
    att = att.masked_fill(m.logical_not(), -std::numeric_limits<float>::infinity());
  }
  if (mask) att = att.masked_fill(mask->logical_not(), -std::numeric_limits<float>::infinity());
  // Softmax in at least float32, as HF's eager attention does, then back.
  auto st = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  att = at::softmax(att, -1, st).to(q.scalar_type());
  return at::matmul(att, v);
}

at::Tensor attention(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                     const c10::optional<at::Tensor> &mask, bool causal, double scale, int impl) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "attention wants 4-d q, k, v");
  TORCH_CHECK(!(causal && mask), "attention: give a mask or causal, not both");
  auto H = q.size(1), Hkv = k.size(1);
  TORCH_CHECK(Hkv > 0 && H % Hkv == 0, "attention: ", H, " query heads are not a multiple of ", Hkv, " kv heads");
  if (scale <= 0) scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto kk = repeat_kv(k, H / Hkv), vv = repeat_kv(v, H / Hkv);
#ifdef DT_HAVE_SDPA
  if (impl == DT_ATTN_AUTO) {
    // SDPA's is_causal is upper-left aligned; it is only right when T == S.
    if (causal && q.size(2) != k.size(2)) {
      auto T_ = q.size(2), S = k.size(2);
      auto m = at::ones({T_, S}, q.options().dtype(at::kBool)).tril(S - T_);
      return at::scaled_dot_product_attention(q, kk, vv, m, 0.0, false, scale);
    }
    return at::scaled_dot_product_attention(q, kk, vv, mask, 0.0, causal, scale);
  }
#endif
  return attention_math(q, kk, vv, mask, causal, scale);
}

template <typename F> dt_err guard(F &&f) {
  try {
    f();
    return nullptr;
  } catch (const c10::Error &e) {
    return make_err(e.what_without_backtrace());
  } catch (const std::exception &e) {
    return make_err(e.what());
  } catch (...) {
    return make_err("unknown C++ exception");
  }
}

at::Tensor unary(int op, const at::Tensor &t) {
  switch (op) {
  case DT_NEG: return at::neg(t);
  case DT_EXP: return at::exp(t);
  case DT_LOG: return at::log(t);
  case DT_SQRT: return at::sqrt(t);
  case DT_RSQRT: return at::rsqrt(t);
  case DT_SILU: return at::silu(t);
  case DT_SIGMOID: return at::sigmoid(t);
  case DT_TANH: return at::tanh(t);
  case DT_ABS: return at::abs(t);
  case DT_COS: return at::cos(t);
  case DT_SIN: return at::sin(t);
  case DT_RELU: return at::relu(t);
  case DT_LOGICAL_NOT: return at::logical_not(t);
  }
  TORCH_CHECK(false, "unknown unary op ", op);
}

template <typename B> at::Tensor binary(int op, const at::Tensor &a, const B &b) {
  switch (op) {
  case DT_ADD: return at::add(a, b);
  case DT_SUB: return at::sub(a, b);
  case DT_MUL: return at::mul(a, b);
  case DT_DIV: return at::div(a, b);
  case DT_POW: return at::pow(a, b);
  case DT_EQ: return at::eq(a, b);
  case DT_NE: return at::ne(a, b);
  case DT_LT: return at::lt(a, b);
  case DT_LE: return at::le(a, b);
  case DT_GT: return at::gt(a, b);
  case DT_GE: return at::ge(a, b);
  }
  TORCH_CHECK(false, "binary op ", op, " is not defined for this operand kind");
}

} // namespace
