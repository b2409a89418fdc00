// cuSPARSE in the client: the mirror hooks protocol/api/cusparse.api names - a handle's stream
// (LibObjectView::aux[0]) for cusparseGetStream, and its pointer mode, which decides whether
// alpha and beta travel as values or as device addresses (mode bits 0 and 1); a legacy matrix
// descriptor's type, fill mode, diagonal type and index base (aux 0-3, zero being each one's
// default), which its getters answer; a sparse vector's value type (aux 0), the size of the
// scalars of cusparseAxpby and cusparseRot. Thread-safe.
#pragma once

#include <cusparse.h>

#include <cstdint>

namespace remora::gen::cusparse {

void MirrorStream(cusparseHandle_t handle, cudaStream_t stream);
void MirrorPointerMode(cusparseHandle_t handle, cusparsePointerMode_t mode);
void MirrorMatType(cusparseMatDescr_t descr, cusparseMatrixType_t type);
void MirrorMatFillMode(cusparseMatDescr_t descr, cusparseFillMode_t mode);
void MirrorMatDiagType(cusparseMatDescr_t descr, cusparseDiagType_t type);
void MirrorMatIndexBase(cusparseMatDescr_t descr, cusparseIndexBase_t base);
void MirrorSpVec(cusparseSpVecDescr_t* vec, int64_t size, int64_t nnz, void* indices, void* values, cusparseIndexType_t index_type,
                 cusparseIndexBase_t base, cudaDataType type);
void MirrorConstSpVec(cusparseConstSpVecDescr_t* vec, int64_t size, int64_t nnz, const void* indices, const void* values,
                      cusparseIndexType_t index_type, cusparseIndexBase_t base, cudaDataType type);
// Bytes of one value of a sparse vector (16, the largest, for one the client does not know).
uint64_t SpVecBytes(cusparseConstSpVecDescr_t vec);

}  // namespace remora::gen::cusparse
