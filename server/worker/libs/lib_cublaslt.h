// cuBLASLt on the worker: the hooks protocol/api/cublasLt.api names. The extents of A, B, C
// and D come from their layouts as the real library holds them (rows, columns, leading
// dimension, type, order, batch count and stride); a matmul descriptor's device pointers
// (bias, scale factors, amax, epilogue aux) are checked against the session's allocations
// when they are set and again, with the extents the matmul gives them, at every
// cublasLtMatmul; its pointer mode is mirrored for the scalars' check.
// Used by the executor's single thread.
#pragma once

#include <cublasLt.h>

#include <cstdint>

#include "remora/base/status.h"

namespace remora::worker {
class OpContext;
struct LibObject;
}  // namespace remora::worker

namespace remora::worker::gen::cublasLt {

// Bytes of device memory a matrix of `layout` spans (0 if it cannot be read).
uint64_t LayoutBytes(OpContext& x, const LibObject* layout);
// Bytes of alpha (slot 0) or beta (slot 1) of `desc` as a device pointer: one scale-type
// element, or one per row of D in the vector pointer modes.
uint64_t LtScalarBytes(OpContext& x, const LibObject* desc, const LibObject* d_layout, int slot);

// A matrix transform descriptor: its pointer mode mirrored (both scalars), its scalars' bytes.
Status TransformAttributeSet(OpContext& x, LibObject* desc, cublasLtMatrixTransformDescAttributes_t attr, const void* buf, size_t size);
uint64_t TransformScaleBytesW(OpContext& x, const LibObject* desc);

Status LtVersion(OpContext& x, size_t* version);
Status LtDescCreated(OpContext& x, LibObject* desc, cublasComputeType_t compute, cudaDataType_t scale);
Status LtDescSetAttribute(OpContext& x, LibObject* desc, cublasLtMatmulDescAttributes_t attr, const void* buf, size_t size);
Status LtMatmul(OpContext& x, LibObject* handle, LibObject* desc, const void* alpha, const void* a, LibObject* a_layout,
                const void* b, LibObject* b_layout, const void* beta, const void* c, LibObject* c_layout, void* d,
                LibObject* d_layout, const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                cudaStream_t stream);

}  // namespace remora::worker::gen::cublasLt
