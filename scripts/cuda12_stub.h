// cuda12_stub.h: what kernels.cu's TMA GEMM (DLLM_SM90A) takes from CUDA
// 12.5+ headers, declared for the CPU machine's nvcc 11.8, so that the
// section passes the compiler's front end here (docs/gpu.md). Only a
// syntax check: the values are placeholders, and nvcc 11.8 cannot build
// sm_90a code (wgmma, TMA), so the kernels' bodies compile as traps.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>
#if CUDA_VERSION < 12000
typedef struct {
  alignas(64) unsigned long long opaque[16];
} CUtensorMap;
typedef int CUtensorMapDataType, CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
    CUtensorMapFloatOOBfill;
enum {
  CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9,
  CU_TENSOR_MAP_INTERLEAVE_NONE = 0,
  CU_TENSOR_MAP_SWIZZLE_128B = 3,
  CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3,
  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0
};
typedef int cudaDriverEntryPointQueryResult;
enum { cudaDriverEntryPointSuccess = 0 };
inline cudaError_t cudaGetDriverEntryPointByVersion(const char *, void **, unsigned, unsigned long long,
                                                    cudaDriverEntryPointQueryResult *) {
  return cudaErrorNotSupported;
}
#endif
