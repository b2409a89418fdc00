// cuSPARSE on the worker: the hooks protocol/api/cusparse.api names. A descriptor's arrays are
// kept with it (roles keep=) and checked again by every call that hands it to the library;
// an array the application gives a descriptor later (cusparseCsrSetPointers, ...) is checked
// with the extent the library's own description of the descriptor gives (its format, sizes
// and types, read back through the library's getters). The handle's pointer mode is mirrored
// for the scalars' check. Used by the executor's single thread.
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

// Bytes of a sparse matrix descriptor's array `which` (0: row or column offsets, or COO row
// indices; 1: column or row indices; 2: values) as the library describes the descriptor; 1
// (the pointer's start) for a format or an answer it cannot size.
uint64_t SpMatArray(OpContext& x, cusparseConstSpMatDescr_t mat, int which);
// Bytes of a dense matrix's, a dense vector's and a sparse vector's values.
uint64_t DnMatArray(OpContext& x, cusparseConstDnMatDescr_t mat);
uint64_t DnVecArray(OpContext& x, cusparseConstDnVecDescr_t vec);
uint64_t SpVecArray(OpContext& x, cusparseConstSpVecDescr_t vec);
// Bytes of one value of a sparse vector (the scalars of cusparseAxpby and cusparseRot).
uint64_t SpVecBytesW(OpContext& x, cusparseConstSpVecDescr_t vec);

}  // namespace remora::worker::gen::cusparse
