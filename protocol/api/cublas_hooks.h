// Size expressions protocol/api/cublas.api names beyond the BLAS extents of blas_hooks.h.
// Included by the generated code of both ends; pure functions of their arguments.
#pragma once

#include <cublas.h>  // (NVIDIA's cublas_api.h through it: "cublas_api.h" is the generated table)

#include "blas_hooks.h"

namespace remora::api::blas {

// Bytes of alpha and beta of the *Ex GEMMs: the compute type's scalar, complex when C is.
inline size_t GemmExScalarBytes(cublasComputeType_t compute, int ctype) {
  size_t real;
  switch (compute) {
    case CUBLAS_COMPUTE_16F:
    case CUBLAS_COMPUTE_16F_PEDANTIC:
      real = 2;
      break;
    case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC:
    case CUBLAS_COMPUTE_64F_EMULATED_FIXEDPOINT:
      real = 8;
      break;
    default:  // 32F (all flavours), 32I
      real = 4;
      break;
  }
  return IsComplex(ctype) ? 2 * real : real;
}

// The element count of an array of `n` (none for n < 0: the library refuses the call).
inline int64_t Dims(int64_t n) { return n < 0 ? 0 : n; }
// The GEMMs of a grouped batch: the sum of its groups' sizes (a negative size counts none; the
// library refuses it). The array is the caller's host array of group_count sizes.
template <typename I>
inline int64_t GroupTotal(const I* group_size, int64_t group_count) {
  int64_t total = 0;
  for (int64_t g = 0; group_size != nullptr && g < group_count; g++) total += group_size[g] > 0 ? static_cast<int64_t>(group_size[g]) : 0;
  return total;
}
// Bytes of one alpha or beta of cublasGemmGroupedBatchedEx (real only: the grouped GEMMs take no
// complex types).
inline size_t ScalarBytes(cublasComputeType_t compute) { return GemmExScalarBytes(compute, CUDA_R_32F); }

}  // namespace remora::api::blas
