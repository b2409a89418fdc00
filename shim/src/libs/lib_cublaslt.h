// cuBLASLt in the client: what protocol/api/cublasLt.api's expressions and mirror hooks need
// of a matmul descriptor before a call is sent - the size of its scalars (its scale type,
// LibObjectView::aux[0]) and whether alpha and beta are device pointers (its pointer mode:
// mode bit 0 alpha, bit 1 beta). Thread-safe.
#pragma once

#include <cublasLt.h>

#include <cstddef>

namespace remora::gen::cublasLt {

// Bytes of one alpha or beta of `desc` (its scale type's).
size_t ScaleBytes(cublasLtMatmulDesc_t desc);
void MirrorDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale);
void MirrorDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* buf, size_t size);

// A matrix transform descriptor's scale type (aux 0) and pointer mode (both scalars).
size_t TransformScaleBytes(cublasLtMatrixTransformDesc_t desc);
void MirrorTransformCreate(cublasLtMatrixTransformDesc_t* desc, cudaDataType scale);
void MirrorTransformSetAttribute(cublasLtMatrixTransformDesc_t desc, cublasLtMatrixTransformDescAttributes_t attr, const void* buf,
                                 size_t size);

// Which scalars of a cublasLtPointerMode_t are device pointers (bit 0 alpha, bit 1 beta).
constexpr unsigned LtModeBits(int mode) {
  switch (mode) {
    case CUBLASLT_POINTER_MODE_DEVICE:
    case CUBLASLT_POINTER_MODE_DEVICE_VECTOR: return 3u;
    case CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO:
    case CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST: return 1u;
    default: return 0u;
  }
}

}  // namespace remora::gen::cublasLt
