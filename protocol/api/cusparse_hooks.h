// Extents of cuSPARSE arguments: the size expressions protocol/api/cusparse.api names on both
// ends of the wire (BLAS's dense extents, blas_hooks.h, plus index types). Pure functions.
#pragma once

#include <cusparse.h>

#include <cstddef>
#include <cstdint>

#include "blas_hooks.h"

namespace remora::api::sparse {

using blas::Elems;
using blas::Mat;
using blas::MatOp;  // (cusparseOperation_t: 0 is "not transposed", as in BLAS)
using blas::Max;
using blas::Min;
using blas::Strided;
using blas::TypeBytes;

// Bytes of one index of `type` (0 for a type Remora does not know).
inline size_t IndexBytes(cusparseIndexType_t type) {
  switch (type) {
    case CUSPARSE_INDEX_16U: return 2;
    case CUSPARSE_INDEX_32I: return 4;
    case CUSPARSE_INDEX_64I: return 8;
    default: return 0;
  }
}

// Bytes of a dense rows x cols matrix with leading dimension ld in `order`.
inline uint64_t DnMatBytes(int64_t rows, int64_t cols, int64_t ld, cudaDataType type, cusparseOrder_t order) {
  size_t elem = TypeBytes(type);
  return order == CUSPARSE_ORDER_ROW ? Mat(cols, rows, ld, elem) : Mat(rows, cols, ld, elem);
}

}  // namespace remora::api::sparse
