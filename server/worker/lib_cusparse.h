// cuSPARSE on the worker: the hooks protocol/api/cusparse.api names. A descriptor remembers the
// device ranges its arrays were checked with when it was created (its LibExtra); SpMV and SpMM
// check every range of the descriptors they use again, so memory freed since never reaches
// the library, and their external buffer with what *_bufferSize answers for the same
// arguments. The handle's pointer mode is mirrored for the scalars' check. Used by the
// executor's single thread.
#pragma once

#include <cusparse.h>

#include <cstdint>

#include "remora/base/status.h"

namespace remora::worker {
class OpContext;
struct LibObject;
}  // namespace remora::worker

namespace remora::worker::gen::cusparse {

Status PointerModeSet(OpContext& x, LibObject* handle, cusparsePointerMode_t mode);
Status CsrCreated(OpContext& x, LibObject* mat, int64_t rows, int64_t cols, int64_t nnz, void* offsets, void* columns, void* values,
                  cusparseIndexType_t offsets_type, cusparseIndexType_t columns_type, cusparseIndexBase_t base, cudaDataType type);
Status DnVecCreated(OpContext& x, LibObject* vec, int64_t size, void* values, cudaDataType type);
Status DnMatCreated(OpContext& x, LibObject* mat, int64_t rows, int64_t cols, int64_t ld, void* values, cudaDataType type,
                    cusparseOrder_t order);

// Bytes of the external buffer SpMV / SpMM need for these arguments (0 where the library
// refuses them: the call then fails in the library).
uint64_t SpMVBufferBytes(OpContext& x, cusparseHandle_t handle, cusparseOperation_t op, const void* alpha,
                         cusparseConstSpMatDescr_t a, cusparseConstDnVecDescr_t vx, const void* beta, cusparseDnVecDescr_t vy,
                         cudaDataType compute, cusparseSpMVAlg_t alg);
uint64_t SpMMBufferBytes(OpContext& x, cusparseHandle_t handle, cusparseOperation_t op_a, cusparseOperation_t op_b, const void* alpha,
                         cusparseConstSpMatDescr_t a, cusparseConstDnMatDescr_t b, const void* beta, cusparseDnMatDescr_t c,
                         cudaDataType compute, cusparseSpMMAlg_t alg);
Status SpMV(OpContext& x, LibObject* handle, cusparseOperation_t op, const void* alpha, LibObject* a, LibObject* vx, const void* beta,
            LibObject* vy, cudaDataType compute, cusparseSpMVAlg_t alg, void* buffer);
Status SpMM(OpContext& x, LibObject* handle, cusparseOperation_t op_a, cusparseOperation_t op_b, const void* alpha, LibObject* a,
            LibObject* b, const void* beta, LibObject* c, cudaDataType compute, cusparseSpMMAlg_t alg, void* buffer);

}  // namespace remora::worker::gen::cusparse
