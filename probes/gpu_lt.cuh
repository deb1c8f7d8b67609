// gpu_lt.cuh: cuBLASLt's descriptors for the probes' skinny matmul (bf16,
// float32 accumulation): out (M, n) = x (M, k) W (n, k)^T (+ beta C), as
// column-major D (n, M) = op(W) x, the layout the decoder's linear and addmm
// hand cuBLAS. Shared by probes/gemm_lt_probe.cu and gemm_lt_tune_probe.cu.
#pragma once

#include "gpu_probe.cuh"

#include <cublasLt.h>

namespace probe {

struct LtMatmul {
  cublasLtMatmulDesc_t md;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulPreference_t pref;

  LtMatmul(int M, int n, int k, size_t workspace) {
    CK(cublasLtMatmulDescCreate(&md, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CK(cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CK(cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, k, n, k));
    CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, M, k));
    CK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, n, M, n));
    CK(cublasLtMatmulPreferenceCreate(&pref));
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                            sizeof workspace));
  }
  ~LtMatmul() {
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(md);
  }
  LtMatmul(const LtMatmul &) = delete;
  LtMatmul &operator=(const LtMatmul &) = delete;
};

} // namespace probe
