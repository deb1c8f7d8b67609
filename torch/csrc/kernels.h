// kernels.h: the shim's own CUDA kernels (kernels.cu, built with nvcc only
// for CUDA builds), plain C so that dllm_torch.cpp needs no CUDA compiler.
// Each launches on the given stream and returns a cudaError_t (0 = success).
// dtype is DT_BF16 or DT_F16 (dllm_torch.h's codes).
#ifndef DLLM_KERNELS_H
#define DLLM_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// out (rows, C) = w * (x / sqrt(mean(x^2) + eps)), normalised in float32 and
// rounded to the dtype before the scale, as HF's LlamaRMSNorm does.
int dtk_rms_norm(int dtype, const void *x, const void *w, void *out, int64_t rows, int64_t C, float eps,
                 void *stream);

// From qkv (T, (H+2Hkv)D), the output of the fused projection: q (T, H, D)
// with RoPE; keys with RoPE and values written to the caches (Max, Hkv, D)
// at rows pos[t]. cos and sin (Max, D) are the tables in the dtype; the
// arithmetic rounds where HF's x*cos + rotate_half(x)*sin does. D % 16 ==
// 0 and every pointer 16-byte aligned: the kernel moves 16 bytes at a time.
// Given x (T, C), not null: qkv is the projection of x by weights with an
// RMSNorm's weight folded into their columns (W diag(w)), so every value is
// first scaled by x_t's 1 / sqrt(mean(x_t^2) + eps) and rounded: the
// RMSNorm costs no kernel of its own. x: 16-byte aligned, C % 8 == 0; read
// after the PDL wait (a TMA GEMM just before lets this kernel launch while
// x's writer may still run).
// fold_q != 0: q is written (Hkv, T G, D) instead, G = H / Hkv, head h of
// token t at key head h / G's row t G + h % G (the decoder's cuDNN path).
// kside and vside (T, Hkv, D), both or neither: token t's key and value go
// to their row t instead, and the caches' rows pos[t] are zeroed.
// parts (nparts, T, (H + 2 Hkv) D) float32, when not null, stand for qkv
// (which may then be null): its values are their sum in part order,
// rounded (dtk_tma_post's QKV phase).
// rows (T), when not null: token t's key and value go to cache row rows[t]
// instead of pos[t] (a batched forward's sequence slots).
int dtk_rope_qkv(int dtype, const void *qkv, const void *cos, const void *sin, const int64_t *pos,
                 const int64_t *rows, void *q, void *kcache, void *vcache, int64_t T, int64_t H, int64_t Hkv, int64_t D, const void *x, int64_t C,
                 float eps, int fold_q, void *kside, void *vside, const float *parts, int nparts, void *stream);

// out (T, F) = silu(gu[:, :F]) * gu[:, F:], rounding after the SiLU as
// at::silu followed by a product does. Given x (T, C), not null, gate and
// up are first scaled by x_t's inverse RMS as in dtk_rope_qkv (F % 8 == 0,
// gu and out 16-byte aligned).
int dtk_silu_mul(int dtype, const void *gu, void *out, int64_t T, int64_t F, const void *x, int64_t C, float eps,
                 void *stream);

// out (N) = w (N, K) x (K) (+ resid (N) when not null; it may be out) for
// one row, in float32 with one rounding at the end as cuBLAS's linear and
// addmm do: an AR step's matmuls. Each weight row is streamed once with 16-byte
// loads. Needs K % 8 == 0, K <= DTK_GEMV_MAX_K (x is staged in shared
// memory) and 16-byte aligned x and w; cudaErrorInvalidValue otherwise.
// w, resid and aux are read before the PDL wait: none of them may be what
// the kernel just before on the stream writes.
#define DTK_GEMV_MAX_K 16384
int dtk_gemv(int dtype, const void *x, const void *w, const void *resid, void *out, int64_t N, int64_t K,
             void *stream);

// dtk_gemv with the step before the matmul folded in: in = DTK_GEMV_NORM
// takes the RMSNorm of x (K) with weight aux (K) and eps first, as
// dtk_rms_norm; in = DTK_GEMV_SILU_MUL takes x (2K) as (gate, up) and the
// product's input is silu(gate) * up, as dtk_silu_mul (aux unused);
// DTK_GEMV_PLAIN is dtk_gemv. Same results as the two kernels in turn.
// resid may be out.
#define DTK_GEMV_PLAIN 0
#define DTK_GEMV_NORM 1
#define DTK_GEMV_SILU_MUL 2
int dtk_gemv_in(int dtype, int in, const void *x, const void *aux, float eps, const void *w, const void *resid,
                void *out, int64_t N, int64_t K, void *stream);

// For each row of logits (n, V) in dtype (DT_BF16, DT_F16 or DT_F32): the
// first index of its largest value, column mask left out when mask >= 0,
// and that value's softmax probability, exp(max - logsumexp) in float32;
// out (2n) float64 on the device = [p_0 .. p_n-1, id_0 .. id_n-1]. scratch
// is device memory of dtk_pick_greedy_scratch(n, V) bytes. Given first
// (V), not null, row 0 is first and rows 1 .. n-1 are logits' first n - 1
// (the sampler's carry row before a forward's rows, without a copy).
int dtk_pick_greedy(int dtype, const void *first, const void *logits, int64_t n, int64_t V, int64_t mask, double *out,
                    void *scratch, void *stream);
int64_t dtk_pick_greedy_scratch(int64_t n, int64_t V);

// Attention without a mask, head dim 128: every one of q's T tokens (T, H,
// 128) sees the keys and values in slots [0, S) of the caches (Max, Hkv,
// 128); out (T, H, 128) = softmax(scale q k^T) v per head, head h reading
// key head h / (H / Hkv). The query heads of a key head are folded into
// rows, the keys split over CTAs and merged by log-sum-exp through scratch
// (dtk_attn_decode_scratch floats; 0 when it needs none). 16-byte aligned
// pointers; cudaErrorInvalidValue otherwise.
int dtk_attn_decode(int dtype, const void *q, const void *kc, const void *vc, void *out, int64_t T, int64_t H,
                    int64_t Hkv, int64_t S, float scale, void *scratch, void *stream);
int64_t dtk_attn_decode_scratch(int64_t T, int64_t H, int64_t Hkv, int64_t S);

// The merge of an attention of q (T, H, 128) split over its keys by another
// kernel (the decoder's cuDNN path): with G = H / Hkv query heads a key head
// folded into R = T G rows (row r: token r / G, head h G + r % G), split
// s's row r of key head h at parts[s ps + h ph + r pr] (128 contiguous
// values), its natural-log log-sum-exp (float32) at lse[s ls + h lh + r lr];
// out (T, H, 128) = the splits weighted by e^lse. The splits covered S key
// slots, of which those past pos[T-1] (pos: the rows' T positions) are
// zero (scores 0, values 0): their e^0 each is taken off the sum.
// splits <= 128.
int dtk_attn_merge_lse(int dtype, const void *parts, int64_t ps, int64_t ph, int64_t pr, const float *lse,
                       int64_t ls, int64_t lh, int64_t lr, const int64_t *pos, int64_t S, void *out, int64_t T,
                       int64_t H, int64_t Hkv, int64_t splits, void *stream);
// dtk_attn_merge_lse for a forward whose own T keys and values were kept
// out of the caches while the splits read them (dtk_rope_qkv with side
// rows: the caches' rows from pos[0] on are all zero then) and attended
// apart (dtk_attn_own): own (Hkv, R, 128) and its base-2 log-sum-exps
// own_lse (Hkv, R) merge as one more split, and the own keys and values
// ks, vs (T, Hkv, 128) are then copied into the caches kc, vc at pos.
int dtk_attn_merge_lse_own(int dtype, const void *parts, int64_t ps, int64_t ph, int64_t pr, const float *lse,
                           int64_t ls, int64_t lh, int64_t lr, const int64_t *pos, int64_t S, void *out, int64_t T,
                           int64_t H, int64_t Hkv, int64_t splits, const void *own, const float *own_lse, void *kc,
                           void *vc, const void *ks, const void *vs, void *stream);
// dtk_attn_own is attention of the folded q (Hkv, T G, 128) of T <= 64
// tokens over their own keys and values ks, vs (T, Hkv, 128), the first
// causal tokens causally (token t sees own keys [0, t]), the rest all:
// out (Hkv, T G, 128), folded as q, and each row's base-2 log-sum-exp of
// its scaled scores in lse (Hkv, T G). pos: the T positions 0, 1, ...
int dtk_attn_own(int dtype, const void *q, const void *ks, const void *vs, void *out, float *lse, int64_t T,
                 int64_t H, int64_t Hkv, const int64_t *pos, int64_t causal, float scale, void *stream);

// dtk_attn_decode with the number of keys read on the device: pos (T) are
// the rows' consecutive positions and the keys seen are [0, pos[T-1] + 1),
// at most S (the grid and scratch are sized for S), except that the first
// causal tokens (0 <= causal <= T) see only [0, pos[t] + 1): a finished
// block's commit riding in the forward. A CUDA graph can hold it while the
// context grows.
int dtk_attn_decode_pos(int dtype, const void *q, const void *kc, const void *vc, void *out, int64_t T, int64_t H,
                        int64_t Hkv, int64_t S, const int64_t *pos, int64_t causal, float scale, void *scratch,
                        void *stream);

// dtk_attn_decode_pos for the nb sequences of a batched forward, q and out
// (N, H, 128) their N tokens one after another, pos (N) their positions:
// sequence b's bd[4b .. 4b+3] are its first token, its tokens n_b, the
// first row of its KV slot in the caches (its keys are that slot's rows
// [0, pos of its last token + 1)) and its causal tokens (as
// dtk_attn_decode_pos's). max_n >= every n_b and max_s >= every
// sequence's keys size the grid; scratch holds
// dtk_attn_decode_batch_scratch floats.
int dtk_attn_decode_batch(int dtype, const void *q, const void *kc, const void *vc, void *out, int64_t N, int64_t H,
                          int64_t Hkv, int64_t nb, const int64_t *bd, const int64_t *pos, int64_t max_n,
                          int64_t max_s, float scale, void *scratch, void *stream);
int64_t dtk_attn_decode_batch_scratch(int64_t N, int64_t H, int64_t Hkv, int64_t nb, int64_t max_n, int64_t max_s);

// For probes (probes/gpu_attn_probe.py): programmatic dependent launch of
// these kernels on (1) or off (0), and dtk_attn_decode's split of the keys
// (at most splits_cap splits, about ctas_per_sm CTAs per SM, at least
// min_tiles 64-key tiles a split). A value <= 0 (pdl < 0) leaves a setting
// as it is; the defaults are the decoder's. Not for use while kernels run.
void dtk_tune(int pdl, int splits_cap, int ctas_per_sm, int min_tiles);

// ids (n) = host_ids and pos (n) = p0, p0 + 1, ...: a captured forward's
// static inputs set by one kernel whose arguments carry the ids, instead
// of a copy from host memory and an arange. n <= DTK_SET_IDS_MAX.
#define DTK_SET_IDS_MAX 64
// dtk_commit_top writes to (n) and pos (n) the inputs of a fixed-commit
// block's next denoising forward from the last one's canvas from (n; may
// be to) and its picks (2n float64 on the device: probabilities, then
// ids): the k most probable masked positions (ids equal to mask; position
// 0 first with shift, the first on a tie) take their picks, as the
// sampler's canvas.commitTop does on the host. n <= DTK_SET_IDS_MAX.
int dtk_commit_top(const int64_t *from, int64_t *to, int64_t *pos, const double *picks, int64_t n, int64_t mask,
                   int64_t k, int shift, int64_t p0, void *stream);

int dtk_set_ids(int64_t *ids, int64_t *pos, const int64_t *host_ids, int64_t n, int64_t p0, void *stream);

// Replaces each memset node of the CUDA graph (a cudaGraph_t, not yet
// instantiated) with a kernel node that writes the same bytes, on the same
// edges; *replaced is how many. cuDNN's attention issues a small memset
// before its kernel, and a memset node between two kernels costs the
// step ~4 us more than a kernel there (docs/history.md). Where the
// memset's dependencies are RoPE kernels, the kernel depends on what they
// depend on instead, so that it runs beside them (they then precede the
// memset's dependents directly): what the memset writes is memory the
// allocator handed cuDNN's call, none that RoPE uses.
int dtk_graph_fill_memsets(void *graph, int *replaced);

// dtk_tma_linear is out (M, N) = resid + x (M, K) w (N, K)^T (resid may be
// out, or NULL for none) through the Hopper GEMM for 1-32 rows (TMA copies,
// wgmma, PDL: it fetches weights while the kernel before runs); bf16, K a
// multiple of 64, 16-byte aligned. DTK_TMA_NO when it does not take the
// shape or the device (then nothing is launched).
#define DTK_TMA_NO (-1)
int dtk_tma_linear(int dtype, const void *x, const void *w, const void *resid, void *out, int64_t M, int64_t N,
                   int64_t K, void *stream);
// dtk_tma_gate_up_silu is dtk_silu_mul(x W^T, x) for the fused gate-up
// weight w (2F, K) with the RMSNorm's weight folded in, in one kernel: out
// (M, F). F a multiple of 48, M at most 32; DTK_TMA_NO as dtk_tma_linear.
int dtk_tma_gate_up_silu(int dtype, const void *x, const void *w, void *out, int64_t M, int64_t F, int64_t K,
                         float eps, void *stream);
// dtk_tma_post is a block step's sublayers after the attention on the
// residual stream y (M, C; M at most 64, a fused commit), in place, in one
// persistent kernel (grid barriers; up to 32 rows the TMA kernels' results
// bit for bit): y += ao wo^T when ao (M, Ko) is given (wo (C, Ko)), then
// y += down(dtk_tma_gate_up_silu(y, wgu)) with wgu (2F, C) as there and
// wdown (C, F). Given wqkv (Nq, C), the next layer's folded QKV weight,
// it then also writes that layer's QKV projection of the new y as
// DTK_TMA_POST_QPARTS partial products over K to qpart (DTK_TMA_POST_QPARTS,
// M, Nq) float32, 16-byte aligned, for dtk_rope_qkv (Nq / 80 * 4 == F /
// 48; else DTK_TMA_NO). scratch:
// dtk_tma_post_scratch bytes, 16-byte aligned; sync: DTK_TMA_POST_SYNC
// bytes, 8-byte aligned and zero before the first call, that no other
// kernel uses while it runs (a count of barrier arrivals). The grid must
// be resident at once: it needs an SM for each of F / 48 CTAs, which
// kernels of other processes sharing the GPU through MPS could hold (the
// decoder's DT_DECODER_NO_PERSISTENT keeps it off there). DTK_TMA_NO where
// it does not take the shape or the device.
#define DTK_TMA_POST_SYNC 8
#define DTK_TMA_POST_QPARTS 4
int dtk_tma_post(int dtype, void *y, const void *ao, const void *wo, int64_t Ko, const void *wgu, const void *wdown,
                 const void *wqkv, int64_t Nq, void *qpart, void *scratch, void *sync, int64_t M, int64_t F, int64_t C,
                 float eps, void *stream);
int64_t dtk_tma_post_scratch(int64_t M, int64_t F, int64_t C);

#ifdef __cplusplus
}
#endif
#endif
