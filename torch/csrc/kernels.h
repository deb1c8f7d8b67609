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
// arithmetic rounds where HF's x*cos + rotate_half(x)*sin does.
int dtk_rope_qkv(int dtype, const void *qkv, const void *cos, const void *sin, const int64_t *pos, void *q,
                 void *kcache, void *vcache, int64_t T, int64_t H, int64_t Hkv, int64_t D, void *stream);

// out (T, F) = silu(gu[:, :F]) * gu[:, F:], rounding after the SiLU as
// at::silu followed by a product does.
int dtk_silu_mul(int dtype, const void *gu, void *out, int64_t T, int64_t F, void *stream);

// out (N) = w (N, K) x (K) (+ resid (N) when not null) for one row, in
// float32 with one rounding at the end as cuBLAS's linear and addmm do:
// an AR step's matmuls. Each weight row is streamed once with 16-byte
// loads. Needs K % 8 == 0, K <= DTK_GEMV_MAX_K (x is staged in shared
// memory) and 16-byte aligned x and w; cudaErrorInvalidValue otherwise.
#define DTK_GEMV_MAX_K 16384
int dtk_gemv(int dtype, const void *x, const void *w, const void *resid, void *out, int64_t N, int64_t K,
             void *stream);

// out = x (M, K) w (N, K)^T for 1 <= M <= DTK_GEMM_MAX_M rows on tensor
// cores (mma.sync), the shapes of a decode step's matmuls: each CTA streams
// a 64-row slice of w through a cp.async pipeline, split-K over enough
// CTAs to fill the GPU, the last CTA of a slice summing the partial
// products (float32, in split order: the result does not depend on
// scheduling) and applying the epilogue:
//   DTK_GEMM_PLAIN: out (M, N) = acc (+ resid (M, N) when not null), one
//     rounding at the end as cuBLAS's addmm;
//   DTK_GEMM_SILU: w stacks gate (N/2 rows) over up (N/2 rows), out (M,
//     N/2) = silu(gate) * up, rounded where at::silu and a product of the
//     rounded matmul outputs would (resid unused).
// ws is float32 scratch of dtk_gemm_ws_floats(M, N, K) floats and counters
// N/64 ints, zero before the first call; every call leaves them zero again,
// so both can live in a CUDA graph's memory. splits > 0 forces the split
// count (a divisor of K/128); 0 picks it for this GPU. Needs K % 128 == 0,
// N % 64 == 0 and 16-byte aligned x and w; cudaErrorInvalidValue otherwise.
#define DTK_GEMM_MAX_M 64
#define DTK_GEMM_PLAIN 0
#define DTK_GEMM_SILU 1
int dtk_gemm(int dtype, int mode, const void *x, const void *w, const void *resid, void *out, int64_t M, int64_t N,
             int64_t K, int splits, float *ws, int *counters, void *stream);

// The float32 scratch dtk_gemm needs for these sizes with its own split
// choice (0 if it needs none).
int64_t dtk_gemm_ws_floats(int64_t M, int64_t N, int64_t K);

#ifdef __cplusplus
}
#endif
#endif
