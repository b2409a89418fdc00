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

}  // namespace remora::api::blas
