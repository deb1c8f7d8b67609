/*
 * dllm_torch.h: the C interface of libdllmtorch.so, the only bridge between Go
 * and libtorch's C++ API.
 *
 * Rules that keep the CPU build (Debian libtorch 1.13) and the GPU build (the
 * PyTorch wheel's libtorch) interchangeable under one Go binary:
 *   - plain C types only; tensors are opaque handles freed with dt_free;
 *   - every function that can fail returns NULL on success or a malloc'd error
 *     message (libtorch's text without its C++ backtrace) that the caller
 *     releases with dt_free_error;
 *   - the interface is append-only; DT_ABI_VERSION changes whenever an existing
 *     signature or meaning changes, and Go refuses a library whose
 *     dt_abi_version() differs from the one it was built for.
 */
#ifndef DLLM_TORCH_H
#define DLLM_TORCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DT_ABI_VERSION 13

typedef void *dt_tensor;
typedef char *dt_err;
typedef void *dt_decoder;
typedef void *dt_layout;
typedef void *dt_host_copy;
typedef void *dt_generator;

/* Scalar types, numbered as c10::ScalarType so conversion is a cast. */
enum {
  DT_U8 = 0, DT_I8 = 1, DT_I16 = 2, DT_I32 = 3, DT_I64 = 4,
  DT_F16 = 5, DT_F32 = 6, DT_F64 = 7, DT_BOOL = 11, DT_BF16 = 15
};

/* Elementwise unary ops for dt_unary. */
enum {
  DT_NEG = 0, DT_EXP, DT_LOG, DT_SQRT, DT_RSQRT, DT_SILU, DT_SIGMOID, DT_TANH,
  DT_ABS, DT_COS, DT_SIN, DT_RELU, DT_LOGICAL_NOT
};

/* Elementwise binary ops for dt_binary (broadcasting). */
enum {
  DT_ADD = 0, DT_SUB, DT_MUL, DT_DIV, DT_POW, DT_MAXIMUM, DT_MINIMUM,
  DT_EQ, DT_NE, DT_LT, DT_LE, DT_GT, DT_GE, DT_LOGICAL_AND, DT_LOGICAL_OR
};

/* Reductions for dt_reduce; dim < 0 counts from the end. */
enum { DT_SUM = 0, DT_MEAN, DT_MAX, DT_MIN, DT_ARGMAX, DT_ARGMIN, DT_LOGSUMEXP };

/* Attention kernels for dt_sdpa: AUTO uses libtorch's fused SDPA where the
 * version has one (>= 2.0) and MATH the explicit softmax(QK^T)V everywhere. */
enum { DT_ATTN_AUTO = 0, DT_ATTN_MATH = 1 };

/* --- library ------------------------------------------------------------ */
int dt_abi_version(void);
/* libtorch's version string, e.g. "1.13.1"; static storage. */
const char *dt_torch_version(void);
void dt_free_error(dt_err err);
/* Number of tensor handles alive (created and not yet freed). */
int64_t dt_live_tensors(void);
void dt_set_num_threads(int n);
int dt_get_num_threads(void);
void dt_manual_seed(uint64_t seed);
/* Allows (1) or forbids (0) TF32 for float32 matmuls on the GPU. */
void dt_set_allow_tf32(int on);
int dt_get_allow_tf32(void);

/* --- devices ------------------------------------------------------------ */
int dt_cuda_is_available(void);
int dt_cuda_device_count(void);
dt_err dt_cuda_synchronize(int device);
/* Bytes allocated, reserved and peak-allocated by the caching allocator. */
dt_err dt_cuda_memory_stats(int device, int64_t *allocated, int64_t *reserved,
                            int64_t *peak);
dt_err dt_cuda_empty_cache(void);
/* The device's free and total memory in bytes (cudaMemGetInfo): free does
 * not count what the caching allocator holds unused. */
dt_err dt_cuda_mem_info(int device, int64_t *free_bytes, int64_t *total_bytes);

/* --- tensors ------------------------------------------------------------ */
void dt_free(dt_tensor t);
/* Copies nbytes of host data (laid out as dtype, shape) into a new tensor on
 * device (device_type 0 = cpu, 1 = cuda; index for cuda). */
dt_err dt_from_data(const void *data, size_t nbytes, int dtype,
                    const int64_t *shape, int ndim, int device_type,
                    int device_index, dt_tensor *out);
/* fill: 0 empty, 1 zeros, 2 ones, 3 full(value), 4 randn, 5 rand. */
dt_err dt_new(int fill, double value, int dtype, const int64_t *shape, int ndim,
              int device_type, int device_index, dt_tensor *out);
/* A random generator of its own on a device (device_type 0 cpu, 1 cuda),
 * seeded: draws from it do not depend on anyone else's draws, so that
 * concurrent generations each reproduce their seed. Freed with
 * dt_generator_free. */
dt_err dt_generator_new(uint64_t seed, int device_type, int device_index,
                        dt_generator *out);
void dt_generator_free(dt_generator g);
/* Uniform draws in [0, 1) from g, on g's device. */
dt_err dt_rand_from(dt_generator g, int dtype, const int64_t *shape, int ndim,
                    dt_tensor *out);
dt_err dt_arange(int64_t start, int64_t end, int dtype, int device_type,
                 int device_index, dt_tensor *out);
int dt_ndim(dt_tensor t);
/* Writes min(ndim, cap) sizes. */
void dt_shape(dt_tensor t, int64_t *shape, int cap);
int dt_dtype(dt_tensor t);
/* device_type 0 cpu, 1 cuda. */
void dt_device(dt_tensor t, int *device_type, int *device_index);
int64_t dt_numel(dt_tensor t);
/* Copies the tensor, converted to dtype and made contiguous, into host memory
 * of nbytes (must be exactly numel * element size). */
dt_err dt_to_host(dt_tensor t, int dtype, void *dst, size_t nbytes);
/* dt_to_host in two halves: start queues the copy (a CUDA tensor's into
 * pinned memory, behind the work queued on the current stream) and returns
 * at once; wait waits for it, copies nbytes into dst and frees c. A copy
 * not waited for is freed with dt_host_copy_free. */
dt_err dt_to_host_start(dt_tensor t, int dtype, dt_host_copy *out);
dt_err dt_to_host_wait(dt_host_copy c, void *dst, size_t nbytes);
void dt_host_copy_free(dt_host_copy c);
dt_err dt_to(dt_tensor t, int dtype, int device_type, int device_index,
             dt_tensor *out);
dt_err dt_clone(dt_tensor t, dt_tensor *out);
dt_err dt_contiguous(dt_tensor t, dt_tensor *out);
/* dst[...] = src (broadcast), in place, without recording autograd history. */
dt_err dt_copy_(dt_tensor dst, dt_tensor src);
dt_err dt_fill_(dt_tensor t, double value);

/* --- shape ops (views where libtorch can) ------------------------------- */
dt_err dt_reshape(dt_tensor t, const int64_t *shape, int ndim, dt_tensor *out);
dt_err dt_permute(dt_tensor t, const int64_t *dims, int ndim, dt_tensor *out);
dt_err dt_transpose(dt_tensor t, int64_t d0, int64_t d1, dt_tensor *out);
dt_err dt_narrow(dt_tensor t, int64_t dim, int64_t start, int64_t len,
                 dt_tensor *out);
dt_err dt_cat(const dt_tensor *ts, int n, int64_t dim, dt_tensor *out);
dt_err dt_index_select(dt_tensor t, int64_t dim, dt_tensor index,
                       dt_tensor *out);
dt_err dt_gather(dt_tensor t, int64_t dim, dt_tensor index, dt_tensor *out);
/* t[index] = values along dim 0 style: out = t with t.index_put_({index}, v). */
dt_err dt_index_put_(dt_tensor t, dt_tensor index, dt_tensor values);
dt_err dt_masked_fill(dt_tensor t, dt_tensor mask, double value,
                      dt_tensor *out);
dt_err dt_where(dt_tensor cond, dt_tensor a, dt_tensor b, dt_tensor *out);
dt_err dt_expand(dt_tensor t, const int64_t *shape, int ndim, dt_tensor *out);

/* --- arithmetic ---------------------------------------------------------- */
dt_err dt_unary(int op, dt_tensor t, dt_tensor *out);
dt_err dt_binary(int op, dt_tensor a, dt_tensor b, dt_tensor *out);
/* op(a, scalar) with the binary op codes. */
dt_err dt_binary_scalar(int op, dt_tensor a, double s, dt_tensor *out);
dt_err dt_reduce(int op, dt_tensor t, int64_t dim, int keepdim,
                 dt_tensor *out);
/* Sum or mean of all elements (op DT_SUM or DT_MEAN). */
dt_err dt_reduce_all(int op, dt_tensor t, dt_tensor *out);
dt_err dt_matmul(dt_tensor a, dt_tensor b, dt_tensor *out);
/* x @ w^T + b; b may be NULL. */
dt_err dt_linear(dt_tensor x, dt_tensor w, dt_tensor b, dt_tensor *out);
dt_err dt_embedding(dt_tensor weight, dt_tensor ids, dt_tensor *out);
dt_err dt_softmax(dt_tensor t, int64_t dim, int log, dt_tensor *out);
/* Inclusive cumulative sum along dim. */
dt_err dt_cumsum(dt_tensor t, int64_t dim, dt_tensor *out);
/* HF-style RMSNorm: compute in float32, cast back, then scale by w. */
dt_err dt_rms_norm(dt_tensor x, dt_tensor w, double eps, dt_tensor *out);
/* cos, sin (..., T, D) for positions (T) or (B, T) from inv_freq (D/2):
 * angles in float32 as HF computes them, times scale, cast to dtype. */
dt_err dt_rope_tables(dt_tensor inv_freq, dt_tensor positions, double scale,
                      int dtype, dt_tensor *cos, dt_tensor *sin);
/* x * cos + rotate_half(x) * sin for x (B, H, T, D), cos/sin (T, D) or
 * (B, T, D). */
dt_err dt_rope(dt_tensor x, dt_tensor cos, dt_tensor sin, dt_tensor *out);
/* Attention for q (B, H, T, D) over k, v (B, Hkv, S, D), H a multiple of Hkv.
 * mask: NULL or bool broadcastable to (B, H, T, S), true = may attend.
 * causal: lower-right aligned causal mask (only with mask == NULL).
 * scale <= 0 means 1/sqrt(D). */
dt_err dt_sdpa(dt_tensor q, dt_tensor k, dt_tensor v, dt_tensor mask,
               int causal, double scale, int impl, dt_tensor *out);
/* Mean cross-entropy of logits (N, V) against targets (N), skipping targets
 * equal to ignore_index; reduction 0 none, 1 mean, 2 sum. */
dt_err dt_cross_entropy(dt_tensor logits, dt_tensor targets,
                        int64_t ignore_index, int reduction, dt_tensor *out);
dt_err dt_topk(dt_tensor t, int64_t k, int64_t dim, dt_tensor *values,
               dt_tensor *indices);
/* Samples n indices per row of probs (R, V) (or (V)). */
dt_err dt_multinomial(dt_tensor probs, int64_t n, int replacement,
                      dt_tensor *out);

/* --- fused model blocks -------------------------------------------------- */
/* Attention for q/k/v after projection and RoPE is done by dt_sdpa; this
 * block is the whole pre-norm attention sublayer of a Llama layer:
 *   h = rms_norm(x) ; q,k,v = h Wq, h Wk, h Wv (+ bias) ; rope(q, k)
 *   if kcache: kcache[:, :, pos:pos+T] = k (same for v), attend over [0, pos+T)
 *   out = x + attn(q, k, v, mask) Wo
 * x (B, T, C); cos/sin (T, D) or (B, T, D); mask NULL or bool (B|1, 1, T, S);
 * causal as in dt_sdpa; kcache/vcache NULL or (B, Hkv, Tmax, D).
 * split > 0 (with a mask, without a cache) promises that queries from split
 * on see no key before split (training's noisy+clean layout: the clean half
 * never sees the noise); attention then runs as two calls, the rows before
 * split over all keys and the rest over the keys from split on, which skips
 * the quarter of the scores the mask would only zero. Same result.
 * layout, when not NULL (from dt_layout_new; no mask, cache or split then),
 * is the noisy+clean layout of x (B, 2L, C): attention follows its mask
 * without building it, through FlashAttention on CUDA (block_attn.h). */
dt_err dt_attn_block(dt_tensor x, dt_tensor norm_w, dt_tensor wq, dt_tensor wk,
                     dt_tensor wv, dt_tensor wo, dt_tensor bq, dt_tensor bk,
                     dt_tensor bv, dt_tensor cos, dt_tensor sin,
                     dt_tensor mask, int causal, int n_head, int n_kv_head,
                     double eps, double attn_scale, dt_tensor kcache,
                     dt_tensor vcache, int64_t pos, int impl, int64_t split,
                     dt_layout layout, dt_tensor *out);
/* dt_layout_new plans the noisy+clean block layout of a micro-batch for
 * dt_attn_block: docs (B, L) int64 on the CPU, the document id of each
 * position (documents contiguous), blocks of `block` aligned at 0; its
 * tensors go to the device. It must outlive the backward passes of the
 * blocks that use it. */
dt_err dt_layout_new(dt_tensor docs, int64_t block, int device_type,
                     int device_index, dt_layout *out);
void dt_layout_free(dt_layout l);
/* out = x + W_down(silu(h W_gate) * (h W_up)), h = rms_norm(x). */
dt_err dt_mlp_block(dt_tensor x, dt_tensor norm_w, dt_tensor w_gate,
                    dt_tensor w_up, dt_tensor w_down, double eps,
                    dt_tensor *out);

/* --- autograd ------------------------------------------------------------ */
dt_err dt_set_requires_grad(dt_tensor t, int on);
int dt_requires_grad(dt_tensor t);
/* Backpropagates from a scalar tensor. */
dt_err dt_backward(dt_tensor t);
/* The accumulated gradient, or *out = NULL when there is none. */
dt_err dt_grad(dt_tensor t, dt_tensor *out);
dt_err dt_zero_grad(dt_tensor t);
/* Grad mode is per OS thread: Go pins the goroutine while it is off. */
void dt_set_grad_enabled(int on);
int dt_is_grad_enabled(void);
/* Scales gradients so their global L2 norm is at most max_norm; returns the
 * norm before clipping. */
dt_err dt_clip_grad_norm(const dt_tensor *params, int n, double max_norm,
                         double *norm);

/* --- optimiser ----------------------------------------------------------- */
/* One decoupled-weight-decay Adam update of param in place from its grad,
 * with the moment buffers m and v (same shape, any float dtype, typically
 * float32) updated in place; step counts from 1 for the bias corrections.
 * Parameters without a gradient are left alone. */
dt_err dt_adamw_update(dt_tensor param, dt_tensor m, dt_tensor v, int64_t step,
                       double lr, double beta1, double beta2, double eps,
                       double weight_decay);

/* --- more autograd -------------------------------------------------------- */
/* Backpropagates grad (shaped like t) from a non-scalar t: the vector-Jacobian
 * product that layer-by-layer recomputation (activation checkpointing) needs. */
dt_err dt_backward_grad(dt_tensor t, dt_tensor grad);
/* A tensor sharing t's storage, cut from the autograd graph. */
dt_err dt_detach(dt_tensor t, dt_tensor *out);

/* --- decoder --------------------------------------------------------------- */
/* A whole-model forward for decoding, batch 1, in one call: fused weights, a
 * KV cache of its own for cos.size(0) positions ((Max, Hkv, D) per layer),
 * FlashAttention 2 and per-layer CUDA graphs on CUDA (graphs > 0 captures
 * query lengths up to graphs on their second use); with nvcc, kernels.cu's
 * kernels for RMSNorm, RoPE, SiLU-mul, one-row matmuls and unmasked
 * attention. layers holds 7 handles
 * per layer: attention norm, fused QKV weight ((H+2Hkv)D, C), fused QKV bias
 * or NULL, output projection, MLP norm, fused gate-up weight (2F, C), down
 * projection. cos and sin are the RoPE tables (Max, D) in the model dtype.
 * seqs (at least 1) is how many KV slots of Max positions the cache holds,
 * for dt_decoder_forward_batch; the other forwards use slot 0. */
dt_err dt_decoder_new(dt_tensor embed, dt_tensor norm, dt_tensor head,
                      const dt_tensor *layers, int n_layers, int n_head,
                      int n_kv_head, double eps, double attn_scale,
                      dt_tensor cos, dt_tensor sin, int graphs, int options,
                      int seqs, dt_decoder *out);
/* dt_decoder_new's options, or-ed: NO_NORM_FOLD keeps the RMSNorm kernels
 * instead of copies of the QKV and gate-up weights with the norm weights
 * folded in (which cost their size again: 2.4 GB for MiniCPM5-2B);
 * NO_PERSISTENT keeps block steps off the persistent kernel, whose grid
 * barriers need all its CTAs resident at once (a GPU shared through MPS
 * may not give them). */
#define DT_DECODER_NO_NORM_FOLD 1
#define DT_DECODER_NO_PERSISTENT 2
/* Runs the n ids (host memory) at positions [pos, pos+n) over the cached
 * [0, pos), writing their keys and values at [pos, pos+n). The first causal
 * of them (clamped to [0, n]) each see themselves and what is before them;
 * the rest see all n and everything cached. logits: the last rows
 * positions' (rows, V), or NULL when rows is 0. A forward whose CUDA graphs
 * are captured gets its inputs from one small kernel that carries the ids
 * (no host-to-device copy of its own). */
dt_err dt_decoder_forward(dt_decoder d, const int64_t *ids, int64_t n,
                          int64_t pos, int64_t causal, int64_t rows,
                          dt_tensor *logits);
/* Runs n_seq sequences in one forward (continuous batching) on a decoder
 * made with seqs >= the slots named: sequence i's n[i] ids (ids holds them
 * one sequence after another, host memory) at positions [pos[i], pos[i] +
 * n[i]) of KV slot slot[i], over that slot's cached [0, pos[i]), its first
 * causal[i] rows causal. logits: the last rows[i] rows' of each sequence,
 * stacked in order (sum rows, V), or NULL when every rows[i] is 0. The
 * projections and the MLP run over all the rows at once; no CUDA graphs. */
dt_err dt_decoder_forward_batch(dt_decoder dec, const int64_t *ids, int n_seq,
                                const int64_t *slot, const int64_t *n,
                                const int64_t *pos, const int64_t *causal,
                                const int64_t *rows, dt_tensor *logits);
/* The next denoising forward of a fixed-commit block of n tokens at pos,
 * queued before the host has read the picks of the forward before it (the
 * last one, whose last n ids are the block's canvas): on the device, the
 * k most probable masked positions (ids equal to mask; position 0 first
 * with shift; the first on a tie) of that canvas take their picks (picks:
 * (2n) float64 on the device, probabilities then ids, as dt_pick_greedy
 * gives), and the forward runs on the result, as dt_decoder_forward would
 * with causal 0. *ok 1: queued, logits as dt_decoder_forward's; 0: nothing
 * was queued (no CUDA graph for it, or the last forward ran without one):
 * call dt_decoder_forward with the canvas instead. */
dt_err dt_decoder_forward_next(dt_decoder d, int64_t n, int64_t pos,
                               dt_tensor picks, int64_t mask, int64_t k,
                               int shift, int64_t rows, int *ok,
                               dt_tensor *logits);
/* Number of CUDA graphs captured so far. */
int64_t dt_decoder_graphs(dt_decoder d);
/* Captures ahead of use the graphs of block steps of n tokens (none
 * causal) that attend through cuDNN, one per context bucket up to upto
 * positions; *captured: how many (0 where that path is off or not built).
 * It writes the cache at positions [0, n): call it between sequences. */
dt_err dt_decoder_prepare(dt_decoder d, int64_t n, int64_t upto, int64_t *captured);
void dt_decoder_free(dt_decoder d);
/* The sampler's greedy choice for each row of logits (n, V): the first
 * index of the row's largest value (column mask left out when mask >= 0)
 * and its softmax probability, computed in float32. out (2n) float64 on the
 * logits' device: [p_0 .. p_n-1, id_0 .. id_n-1]. On CUDA with nvcc, one
 * kernel pass over the logits (kernels.cu); elsewhere libtorch ops. */
dt_err dt_pick_greedy(dt_tensor logits, int64_t mask, dt_tensor *out);
/* dt_pick_greedy over first's row (1, V) followed by logits' rows (n, V),
 * without their concatenation: (2n + 2). */
dt_err dt_pick_greedy_after(dt_tensor first, dt_tensor logits, int64_t mask, dt_tensor *out);

/* --- data-parallel collectives (dist.cpp) -------------------------------- */
/* A process group over libtorch's c10d: a TCPStore rendezvous, then Gloo
 * (CPU tensors) or NCCL (CUDA tensors, in a shim built with DLLM_CUDA). All
 * ranks call the same collectives in the same order. None waits without
 * bound: past the group's timeout a call fails with a message naming the
 * operation and the rank. After any failure the group is broken: later
 * calls fail at once. */
typedef void *dt_dist;
/* 1 when this shim can make groups of backend ("gloo" or "nccl"), else 0. */
int dt_dist_available(const char *backend);
/* Joins the group of world processes as rank. The TCPStore at addr:port is
 * hosted by this process when host_store is 1 (rank 0, unless a launcher
 * such as torchrun hosts it); keys go under prefix ("" for none).
 * Collectives run on the device (0 cpu for gloo, 1 cuda:device_index for
 * nccl). Fails when the group is not complete within timeout_ms, which also
 * bounds every later collective. */
dt_err dt_dist_init(const char *backend, const char *addr, int port,
                    int host_store, const char *prefix, int rank, int world,
                    int device_type, int device_index, int64_t timeout_ms,
                    dt_dist *out);
/* Sums the n tensors over all ranks, in place (grads 1: each tensor's
 * gradient instead, a missing one taken as zeros). A contiguous tensor of
 * bucket_bytes or more goes as it is; smaller ones are packed into flat
 * buffers of up to bucket_bytes (<= 0: 25 MB), one collective each. */
dt_err dt_dist_allreduce(dt_dist g, const dt_tensor *ts, int n, int grads,
                         int64_t bucket_bytes);
/* Overwrites the n tensors with root's, bucketed as dt_dist_allreduce. */
dt_err dt_dist_broadcast(dt_dist g, const dt_tensor *ts, int n, int root,
                         int64_t bucket_bytes);
/* Returns when every rank has called it. */
dt_err dt_dist_barrier(dt_dist g);
/* Leaves the group. A broken group's backend is released without its
 * destructor, which may wait on a dead peer: the caller should exit. */
void dt_dist_free(dt_dist g);

#ifdef __cplusplus
}
#endif
#endif
