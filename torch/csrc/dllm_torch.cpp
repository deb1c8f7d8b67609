// dllm_torch.cpp: libtorch behind the plain C interface of dllm_torch.h:
// tensors, their ops, autograd and the optimizer, the block layout's
// attention (block_attn.cpp); the decoder is decoder.cpp, the collectives
// dist.cpp.
//
// Every exported function catches every C++ exception and returns its message
// (without libtorch's backtrace) as a malloc'd string, so nothing unwinds into
// Go. Tensor handles are heap-allocated at::Tensor objects; the live count lets
// tests prove that nothing leaks.

#include "shim.h"

#include "block_attn.h"

extern "C" {

int dt_abi_version(void) { return DT_ABI_VERSION; }
const char *dt_torch_version(void) { return TORCH_VERSION; }
void dt_free_error(dt_err err) { std::free(err); }
int64_t dt_live_tensors(void) { return live.load(); }
void dt_set_num_threads(int n) { at::set_num_threads(n); }
int dt_get_num_threads(void) { return at::get_num_threads(); }
void dt_manual_seed(uint64_t seed) { torch::manual_seed(seed); }
void dt_set_allow_tf32(int on) { at::globalContext().setAllowTF32CuBLAS(on != 0); }
int dt_get_allow_tf32(void) { return at::globalContext().allowTF32CuBLAS() ? 1 : 0; }

int dt_cuda_is_available(void) { return torch::cuda::is_available() ? 1 : 0; }
int dt_cuda_device_count(void) { return static_cast<int>(torch::cuda::device_count()); }

dt_err dt_cuda_synchronize(int device) {
  return guard([&] {
#ifdef DLLM_CUDA
    torch::cuda::synchronize(device);
#else
    TORCH_CHECK(false, "this libdllmtorch was built without CUDA");
#endif
  });
}

dt_err dt_cuda_mem_info(int device, int64_t *free_bytes, int64_t *total_bytes) {
  return guard([&] {
#ifdef DLLM_CUDA
    c10::cuda::CUDAGuard g(static_cast<c10::DeviceIndex>(device));
    size_t f = 0, t = 0;
    auto e = cudaMemGetInfo(&f, &t);
    TORCH_CHECK(e == cudaSuccess, "cudaMemGetInfo: ", cudaGetErrorString(e));
    *free_bytes = static_cast<int64_t>(f), *total_bytes = static_cast<int64_t>(t);
#else
    (void)device; (void)free_bytes; (void)total_bytes;
    TORCH_CHECK(false, "this libdllmtorch was built without CUDA");
#endif
  });
}

dt_err dt_cuda_memory_stats(int device, int64_t *allocated, int64_t *reserved, int64_t *peak) {
  return guard([&] {
#ifdef DLLM_CUDA
    auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
    // Index 0 is StatType::AGGREGATE, whose namespace moved between versions.
    const size_t agg = 0;
    *allocated = s.allocated_bytes[agg].current;
    *reserved = s.reserved_bytes[agg].current;
    *peak = s.allocated_bytes[agg].peak;
#else
    (void)device; (void)allocated; (void)reserved; (void)peak;
    TORCH_CHECK(false, "this libdllmtorch was built without CUDA");
#endif
  });
}

dt_err dt_cuda_empty_cache(void) {
  return guard([&] {
#ifdef DLLM_CUDA
    c10::cuda::CUDACachingAllocator::emptyCache();
#endif
  });
}

void dt_free(dt_tensor t) {
  if (!t) return;
  delete static_cast<at::Tensor *>(t);
  live.fetch_sub(1, std::memory_order_relaxed);
}

dt_err dt_from_data(const void *data, size_t nbytes, int dtype, const int64_t *shape, int ndim,
                    int device_type, int device_index, dt_tensor *out) {
  return guard([&] {
    check_dtype(dtype);
    auto sizes = dims(shape, ndim);
    auto opts = at::TensorOptions().dtype(stype(dtype));
    int64_t n = 1;
    for (auto s : sizes) {
      TORCH_CHECK(s >= 0, "negative dimension ", s);
      n *= s;
    }
    auto want = static_cast<size_t>(n) * c10::elementSize(stype(dtype));
    TORCH_CHECK(want == nbytes, "data holds ", nbytes, " bytes but shape ", sizes, " of ",
                stype(dtype), " needs ", want);
    // from_blob borrows the caller's memory; the copy (to the device, or a
    // clone on the CPU) is the only one made, so weights mapped from disk go
    // to the GPU without a host-side duplicate.
    auto view = at::from_blob(const_cast<void *>(data), sizes, opts);
    auto dev = device_of(device_type, device_index);
    *out = W(dev.is_cpu() ? view.clone() : view.to(dev));
  });
}

dt_err dt_new(int fill, double value, int dtype, const int64_t *shape, int ndim, int device_type,
              int device_index, dt_tensor *out) {
  return guard([&] {
    check_dtype(dtype);
    auto sizes = dims(shape, ndim);
    auto opts = at::TensorOptions().dtype(stype(dtype)).device(device_of(device_type, device_index));
    at::Tensor t;
    switch (fill) {
    case 0: t = at::empty(sizes, opts); break;
    case 1: t = at::zeros(sizes, opts); break;
    case 2: t = at::ones(sizes, opts); break;
    case 3: t = at::full(sizes, value, opts); break;
    case 4: t = at::randn(sizes, opts); break;
    case 5: t = at::rand(sizes, opts); break;
    default: TORCH_CHECK(false, "unknown fill ", fill);
    }
    *out = W(t);
  });
}

dt_err dt_generator_new(uint64_t seed, int device_type, int device_index, dt_generator *out) {
  return guard([&] {
    auto dev = device_of(device_type, device_index);
    at::Generator g;
    if (dev.is_cpu()) {
      g = at::detail::createCPUGenerator(seed);
    } else {
#ifdef DLLM_CUDA
      g = at::cuda::detail::createCUDAGenerator(dev.index());
      std::lock_guard<std::mutex> lock(g.mutex());
      g.set_current_seed(seed);
#else
      TORCH_CHECK(false, "this libdllmtorch was built without CUDA");
#endif
    }
    *out = new at::Generator(std::move(g));
  });
}

void dt_generator_free(dt_generator g) { delete static_cast<at::Generator *>(g); }

dt_err dt_rand_from(dt_generator g, int dtype, const int64_t *shape, int ndim, dt_tensor *out) {
  return guard([&] {
    check_dtype(dtype);
    auto &gen = *static_cast<at::Generator *>(g);
    auto opts = at::TensorOptions().dtype(stype(dtype)).device(gen.device());
    *out = W(at::rand(dims(shape, ndim), gen, opts));
  });
}

dt_err dt_arange(int64_t start, int64_t end, int dtype, int device_type, int device_index, dt_tensor *out) {
  return guard([&] {
    check_dtype(dtype);
    *out = W(at::arange(start, end, at::TensorOptions().dtype(stype(dtype)).device(device_of(device_type, device_index))));
  });
}

int dt_ndim(dt_tensor t) { return static_cast<int>(T(t).dim()); }

void dt_shape(dt_tensor t, int64_t *shape, int cap) {
  auto s = T(t).sizes();
  for (int i = 0; i < cap && i < static_cast<int>(s.size()); i++) shape[i] = s[i];
}

int dt_dtype(dt_tensor t) { return static_cast<int>(T(t).scalar_type()); }

void dt_device(dt_tensor t, int *device_type, int *device_index) {
  auto d = T(t).device();
  *device_type = d.is_cuda() ? 1 : 0;
  *device_index = d.has_index() ? d.index() : 0;
}

int64_t dt_numel(dt_tensor t) { return T(t).numel(); }

dt_err dt_to_host(dt_tensor t, int dtype, void *dst, size_t nbytes) {
  return guard([&] {
    check_dtype(dtype);
    auto h = T(t).detach().to(at::kCPU, stype(dtype)).contiguous();
    auto have = static_cast<size_t>(h.numel()) * h.element_size();
    TORCH_CHECK(have == nbytes, "to_host: tensor holds ", have, " bytes, buffer ", nbytes);
    if (nbytes) std::memcpy(dst, h.data_ptr(), nbytes);
  });
}

namespace {
// HostCopy is dt_to_host_start's copy in flight.
struct HostCopy {
  at::Tensor h; // on the host (pinned when the source is on CUDA)
#ifdef DLLM_CUDA
  cudaEvent_t done = nullptr; // recorded after the copy
#endif
  ~HostCopy() {
#ifdef DLLM_CUDA
    if (done) cudaEventDestroy(done);
#endif
  }
};
} // namespace

dt_err dt_to_host_start(dt_tensor t, int dtype, dt_host_copy *out) {
  return guard([&] {
    check_dtype(dtype);
    auto src = T(t).detach().to(stype(dtype)).contiguous();
    auto c = std::make_unique<HostCopy>();
#ifdef DLLM_CUDA
    if (src.is_cuda()) {
      // On a stream of its own, after the work queued so far: a copy
      // between two kernels of the current stream holds the second back
      // by its latency (the sampler queues a step behind the one whose
      // picks these are; docs/performance.md).
      auto cur = c10::cuda::getCurrentCUDAStream();
      auto side = c10::cuda::getStreamFromPool(false, cur.device_index());
      at::cuda::CUDAEvent ready;
      ready.record(cur);
      ready.block(side);
      c->h = at::empty(src.sizes(), src.options().device(at::kCPU).pinned_memory(true));
      {
        c10::cuda::CUDAStreamGuard g(side);
        c->h.copy_(src, /*non_blocking=*/true);
      }
      c10::cuda::CUDACachingAllocator::recordStream(src.storage().data_ptr(), side);
      C10_CUDA_CHECK(cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming));
      C10_CUDA_CHECK(cudaEventRecord(c->done, side));
      *out = c.release();
      return;
    }
#endif
    c->h = src.to(at::kCPU);
    *out = c.release();
  });
}

dt_err dt_to_host_wait(dt_host_copy hc, void *dst, size_t nbytes) {
  std::unique_ptr<HostCopy> c(static_cast<HostCopy *>(hc));
  return guard([&] {
#ifdef DLLM_CUDA
    if (c->done) {
      // Polled rather than waited on: the step's next work waits on this
      // thread, and a blocking wait adds its wake-up to every step.
      cudaError_t e;
      while ((e = cudaEventQuery(c->done)) == cudaErrorNotReady) {
      }
      C10_CUDA_CHECK(e);
    }
#endif
    auto have = static_cast<size_t>(c->h.numel()) * c->h.element_size();
    TORCH_CHECK(have == nbytes, "to_host: tensor holds ", have, " bytes, buffer ", nbytes);
    if (nbytes) std::memcpy(dst, c->h.data_ptr(), nbytes);
  });
}

void dt_host_copy_free(dt_host_copy c) { delete static_cast<HostCopy *>(c); }

dt_err dt_to(dt_tensor t, int dtype, int device_type, int device_index, dt_tensor *out) {
  return guard([&] {
    check_dtype(dtype);
    *out = W(T(t).to(device_of(device_type, device_index), stype(dtype)));
  });
}

dt_err dt_clone(dt_tensor t, dt_tensor *out) {
  return guard([&] { *out = W(T(t).clone()); });
}

dt_err dt_contiguous(dt_tensor t, dt_tensor *out) {
  return guard([&] { *out = W(T(t).contiguous()); });
}

dt_err dt_copy_(dt_tensor dst, dt_tensor src) {
  return guard([&] {
    at::NoGradGuard ng;
    T(dst).copy_(T(src));
  });
}

dt_err dt_fill_(dt_tensor t, double value) {
  return guard([&] {
    at::NoGradGuard ng;
    T(t).fill_(value);
  });
}

dt_err dt_reshape(dt_tensor t, const int64_t *shape, int ndim, dt_tensor *out) {
  return guard([&] { *out = W(T(t).reshape(dims(shape, ndim))); });
}

dt_err dt_permute(dt_tensor t, const int64_t *d, int ndim, dt_tensor *out) {
  return guard([&] { *out = W(T(t).permute(dims(d, ndim))); });
}

dt_err dt_transpose(dt_tensor t, int64_t d0, int64_t d1, dt_tensor *out) {
  return guard([&] { *out = W(T(t).transpose(d0, d1)); });
}

dt_err dt_narrow(dt_tensor t, int64_t dim, int64_t start, int64_t len, dt_tensor *out) {
  return guard([&] { *out = W(T(t).narrow(dim, start, len)); });
}

dt_err dt_cat(const dt_tensor *ts, int n, int64_t dim, dt_tensor *out) {
  return guard([&] {
    TORCH_CHECK(n > 0, "cat of no tensors");
    std::vector<at::Tensor> v;
    v.reserve(n);
    for (int i = 0; i < n; i++) v.push_back(T(ts[i]));
    *out = W(at::cat(v, dim));
  });
}

dt_err dt_index_select(dt_tensor t, int64_t dim, dt_tensor index, dt_tensor *out) {
  return guard([&] { *out = W(at::index_select(T(t), dim, T(index))); });
}

dt_err dt_gather(dt_tensor t, int64_t dim, dt_tensor index, dt_tensor *out) {
  return guard([&] { *out = W(at::gather(T(t), dim, T(index))); });
}

dt_err dt_index_put_(dt_tensor t, dt_tensor index, dt_tensor values) {
  return guard([&] {
    at::NoGradGuard ng;
    c10::List<c10::optional<at::Tensor>> idx;
    idx.push_back(T(index));
    T(t).index_put_(idx, T(values));
  });
}

dt_err dt_masked_fill(dt_tensor t, dt_tensor mask, double value, dt_tensor *out) {
  return guard([&] { *out = W(T(t).masked_fill(T(mask), value)); });
}

dt_err dt_where(dt_tensor cond, dt_tensor a, dt_tensor b, dt_tensor *out) {
  return guard([&] { *out = W(at::where(T(cond), T(a), T(b))); });
}

dt_err dt_expand(dt_tensor t, const int64_t *shape, int ndim, dt_tensor *out) {
  return guard([&] { *out = W(T(t).expand(dims(shape, ndim))); });
}

dt_err dt_unary(int op, dt_tensor t, dt_tensor *out) {
  return guard([&] { *out = W(unary(op, T(t))); });
}

dt_err dt_binary(int op, dt_tensor a, dt_tensor b, dt_tensor *out) {
  return guard([&] {
    const auto &x = T(a);
    const auto &y = T(b);
    switch (op) {
    case DT_MAXIMUM: *out = W(at::maximum(x, y)); return;
    case DT_MINIMUM: *out = W(at::minimum(x, y)); return;
    case DT_LOGICAL_AND: *out = W(at::logical_and(x, y)); return;
    case DT_LOGICAL_OR: *out = W(at::logical_or(x, y)); return;
    }
    *out = W(binary(op, x, y));
  });
}

dt_err dt_binary_scalar(int op, dt_tensor a, double s, dt_tensor *out) {
  return guard([&] {
    const auto &x = T(a);
    switch (op) {
    case DT_MAXIMUM: *out = W(at::clamp_min(x, s)); return;
    case DT_MINIMUM: *out = W(at::clamp_max(x, s)); return;
    }
    *out = W(binary(op, x, at::Scalar(s)));
  });
}

dt_err dt_reduce(int op, dt_tensor t, int64_t dim, int keepdim, dt_tensor *out) {
  return guard([&] {
    const auto &x = T(t);
    bool kd = keepdim != 0;
    switch (op) {
    case DT_SUM: *out = W(x.sum(dim, kd)); return;
    case DT_MEAN: *out = W(x.mean(dim, kd)); return;
    case DT_MAX: *out = W(std::get<0>(x.max(dim, kd))); return;
    case DT_MIN: *out = W(std::get<0>(x.min(dim, kd))); return;
    case DT_ARGMAX: *out = W(x.argmax(dim, kd)); return;
    case DT_ARGMIN: *out = W(x.argmin(dim, kd)); return;
    case DT_LOGSUMEXP: *out = W(at::logsumexp(x, dim, kd)); return;
    }
    TORCH_CHECK(false, "unknown reduction ", op);
  });
}

dt_err dt_reduce_all(int op, dt_tensor t, dt_tensor *out) {
  return guard([&] {
    switch (op) {
    case DT_SUM: *out = W(T(t).sum()); return;
    case DT_MEAN: *out = W(T(t).mean()); return;
    }
    TORCH_CHECK(false, "reduce_all supports sum and mean, not ", op);
  });
}

dt_err dt_matmul(dt_tensor a, dt_tensor b, dt_tensor *out) {
  return guard([&] { *out = W(at::matmul(T(a), T(b))); });
}

dt_err dt_linear(dt_tensor x, dt_tensor w, dt_tensor b, dt_tensor *out) {
  return guard([&] { *out = W(at::linear(T(x), T(w), opt(b))); });
}

dt_err dt_embedding(dt_tensor weight, dt_tensor ids, dt_tensor *out) {
  return guard([&] { *out = W(at::embedding(T(weight), T(ids))); });
}

dt_err dt_softmax(dt_tensor t, int64_t dim, int log, dt_tensor *out) {
  return guard([&] { *out = W(log ? at::log_softmax(T(t), dim) : at::softmax(T(t), dim)); });
}

dt_err dt_cumsum(dt_tensor t, int64_t dim, dt_tensor *out) {
  return guard([&] { *out = W(at::cumsum(T(t), dim)); });
}

dt_err dt_rms_norm(dt_tensor x, dt_tensor w, double eps, dt_tensor *out) {
  return guard([&] { *out = W(rms_norm(T(x), T(w), eps)); });
}

dt_err dt_rope_tables(dt_tensor inv_freq, dt_tensor positions, double scale, int dtype, dt_tensor *cos,
                      dt_tensor *sin) {
  return guard([&] {
    check_dtype(dtype);
    // float32 angles as HF computes them (float64 only when asked, for tests).
    auto ft = dtype == DT_F64 ? at::kDouble : at::kFloat;
    auto f = T(inv_freq).to(ft);
    auto p = T(positions).to(f.device(), ft);
    auto ang = p.unsqueeze(-1) * f; // (..., T, D/2)
    auto emb = at::cat({ang, ang}, -1);
    auto c = emb.cos(), s = emb.sin();
    if (scale != 1.0) {
      c = c * scale;
      s = s * scale;
    }
    auto c_ = c.to(stype(dtype)), s_ = s.to(stype(dtype));
    *cos = W(c_);
    *sin = W(s_);
  });
}

dt_err dt_rope(dt_tensor x, dt_tensor cos, dt_tensor sin, dt_tensor *out) {
  return guard([&] { *out = W(rope(T(x), T(cos), T(sin))); });
}

dt_err dt_sdpa(dt_tensor q, dt_tensor k, dt_tensor v, dt_tensor mask, int causal, double scale, int impl,
               dt_tensor *out) {
  return guard([&] { *out = W(attention(T(q), T(k), T(v), opt(mask), causal != 0, scale, impl)); });
}

dt_err dt_cross_entropy(dt_tensor logits, dt_tensor targets, int64_t ignore_index, int reduction,
                        dt_tensor *out) {
  return guard([&] {
    TORCH_CHECK(reduction >= 0 && reduction <= 2, "unknown reduction ", reduction);
    auto r = reduction == 0 ? at::Reduction::None : reduction == 1 ? at::Reduction::Mean : at::Reduction::Sum;
    *out = W(at::cross_entropy_loss(T(logits), T(targets), {}, r, ignore_index));
  });
}

dt_err dt_topk(dt_tensor t, int64_t k, int64_t dim, dt_tensor *values, dt_tensor *indices) {
  return guard([&] {
    auto r = at::topk(T(t), k, dim);
    auto v = std::get<0>(r), i = std::get<1>(r);
    *values = W(v);
    *indices = W(i);
  });
}

dt_err dt_multinomial(dt_tensor probs, int64_t n, int replacement, dt_tensor *out) {
  return guard([&] { *out = W(at::multinomial(T(probs), n, replacement != 0)); });
}

dt_err dt_attn_block(dt_tensor x, dt_tensor norm_w, dt_tensor wq, dt_tensor wk, dt_tensor wv, dt_tensor wo,
                     dt_tensor bq, dt_tensor bk, dt_tensor bv, dt_tensor cos, dt_tensor sin, dt_tensor mask,
                     int causal, int n_head, int n_kv_head, double eps, double attn_scale, dt_tensor kcache,
                     dt_tensor vcache, int64_t pos, int impl, int64_t split, dt_layout layout, dt_tensor *out) {
  return guard([&] {
    const auto &xx = T(x);
    TORCH_CHECK(xx.dim() == 3, "attn_block: x must be (B, T, C)");
    if (layout) {
      TORCH_CHECK(!mask && !kcache && split == 0 && !causal, "attn_block: a layout takes no mask, cache, split or causal");
      TORCH_CHECK(n_head > 0 && n_kv_head > 0, "attn_block: head counts must be positive");
      auto B = xx.size(0), L = xx.size(1);
      auto h = rms_norm(xx, T(norm_w), eps);
      auto q = at::linear(h, T(wq), opt(bq)); // (B, T, H*D)
      auto D = q.size(-1) / n_head;
      q = q.view({B, L, n_head, D}); // (B, T, H, D): the layout FlashAttention reads
      auto k = at::linear(h, T(wk), opt(bk)).view({B, L, n_kv_head, D});
      auto v = at::linear(h, T(wv), opt(bv)).view({B, L, n_kv_head, D});
      auto c = T(cos).unsqueeze(-2), s = T(sin).unsqueeze(-2); // (.., T, 1, D)
      q = q * c + rotate_half(q) * s;
      k = k * c + rotate_half(k) * s;
      auto sc = attn_scale > 0 ? attn_scale : 1.0 / std::sqrt(static_cast<double>(D));
      auto y = dllm::block_layout_attention(q, k, v, *static_cast<dllm::BlockLayout *>(layout), sc);
      *out = W(xx + at::linear(y.reshape({B, L, n_head * D}), T(wo)));
      return;
    }
    TORCH_CHECK(split == 0 || (mask && !kcache && split > 0 && split < xx.size(1)),
                "attn_block: split ", split, " needs a mask, no cache and 0 < split < T");
    TORCH_CHECK(n_head > 0 && n_kv_head > 0, "attn_block: head counts must be positive");
    auto B = xx.size(0), L = xx.size(1);
    auto h = rms_norm(xx, T(norm_w), eps);
    auto q = at::linear(h, T(wq), opt(bq)); // (B, T, H*D)
    auto k = at::linear(h, T(wk), opt(bk)); // (B, T, Hkv*D)
    auto v = at::linear(h, T(wv), opt(bv));
    auto D = q.size(-1) / n_head;
    q = q.view({B, L, n_head, D}).transpose(1, 2);    // (B, H, T, D)
    k = k.view({B, L, n_kv_head, D}).transpose(1, 2); // (B, Hkv, T, D)
    v = v.view({B, L, n_kv_head, D}).transpose(1, 2);
    q = rope(q, T(cos), T(sin));
    k = rope(k, T(cos), T(sin));
    if (kcache) {
      TORCH_CHECK(vcache, "attn_block: kcache without vcache");
      auto &kc = T(kcache);
      auto &vc = T(vcache);
      TORCH_CHECK(pos >= 0 && pos + L <= kc.size(2), "attn_block: positions [", pos, ", ", pos + L,
                  ") exceed the KV cache of ", kc.size(2));
      {
        at::NoGradGuard ng;
        kc.narrow(2, pos, L).copy_(k);
        vc.narrow(2, pos, L).copy_(v);
      }
      k = kc.narrow(2, 0, pos + L);
      v = vc.narrow(2, 0, pos + L);
    }
    at::Tensor y; // (B, H, T, D)
    if (split > 0) {
      // Rows [0, split) over every key; rows [split, T) over keys [split, T).
      auto &m = T(mask);
      auto n = L - split;
      auto top = attention(q.narrow(2, 0, split), k, v, m.narrow(2, 0, split), false, attn_scale, impl);
      auto bot = attention(q.narrow(2, split, n), k.narrow(2, split, n), v.narrow(2, split, n),
                           m.narrow(2, split, n).narrow(3, split, n), false, attn_scale, impl);
      y = at::cat({top, bot}, 2);
    } else {
      y = attention(q, k, v, opt(mask), causal != 0, attn_scale, impl);
    }
    y = y.transpose(1, 2).reshape({B, L, n_head * D});
    *out = W(xx + at::linear(y, T(wo)));
  });
}

dt_err dt_layout_new(dt_tensor docs, int64_t block, int device_type, int device_index, dt_layout *out) {
  return guard([&] {
    *out = new dllm::BlockLayout(dllm::make_block_layout(T(docs), block, device_of(device_type, device_index)));
  });
}

void dt_layout_free(dt_layout l) { delete static_cast<dllm::BlockLayout *>(l); }

dt_err dt_mlp_block(dt_tensor x, dt_tensor norm_w, dt_tensor w_gate, dt_tensor w_up, dt_tensor w_down,
                    double eps, dt_tensor *out) {
  return guard([&] {
    auto h = rms_norm(T(x), T(norm_w), eps);
    *out = W(T(x) + swiglu_down(at::linear(h, T(w_gate)), at::linear(h, T(w_up)), T(w_down)));
  });
}

dt_err dt_set_requires_grad(dt_tensor t, int on) {
  return guard([&] { T(t).set_requires_grad(on != 0); });
}

int dt_requires_grad(dt_tensor t) { return T(t).requires_grad() ? 1 : 0; }

dt_err dt_backward(dt_tensor t) {
  return guard([&] { T(t).backward(); });
}

dt_err dt_grad(dt_tensor t, dt_tensor *out) {
  return guard([&] {
    auto g = T(t).grad();
    *out = g.defined() ? W(g) : nullptr;
  });
}

dt_err dt_zero_grad(dt_tensor t) {
  return guard([&] {
    auto &g = T(t).mutable_grad();
    if (g.defined()) g = at::Tensor();
  });
}

void dt_set_grad_enabled(int on) { at::GradMode::set_enabled(on != 0); }
int dt_is_grad_enabled(void) { return at::GradMode::is_enabled() ? 1 : 0; }

dt_err dt_clip_grad_norm(const dt_tensor *params, int n, double max_norm, double *norm) {
  return guard([&] {
    std::vector<at::Tensor> ps;
    for (int i = 0; i < n; i++) ps.push_back(T(params[i]));
    *norm = torch::nn::utils::clip_grad_norm_(ps, max_norm);
  });
}

dt_err dt_adamw_update(dt_tensor param, dt_tensor m, dt_tensor v, int64_t step, double lr, double beta1,
                       double beta2, double eps, double weight_decay) {
  return guard([&] {
    at::NoGradGuard ng;
    auto &p = T(param);
    auto g = p.grad();
    if (!g.defined()) return;
    TORCH_CHECK(step >= 1, "adamw: step counts from 1, got ", step);
    auto &mm = T(m);
    auto &vv = T(v);
    // Moments in their own (float32) precision even when p is bf16.
    auto gf = g.to(mm.scalar_type());
    mm.mul_(beta1).add_(gf, 1 - beta1);
    vv.mul_(beta2).addcmul_(gf, gf, 1 - beta2);
    double bc1 = 1 - std::pow(beta1, static_cast<double>(step));
    double bc2 = 1 - std::pow(beta2, static_cast<double>(step));
    auto upd = (mm / bc1) / ((vv / bc2).sqrt_().add_(eps));
    if (weight_decay != 0) p.mul_(1 - lr * weight_decay);
    p.sub_(upd.to(p.scalar_type()), lr);
  });
}

dt_err dt_backward_grad(dt_tensor t, dt_tensor grad) {
  return guard([&] { T(t).backward(T(grad)); });
}

dt_err dt_detach(dt_tensor t, dt_tensor *out) {
  return guard([&] { *out = W(T(t).detach()); });
}

} // extern "C"
