// Extents of BLAS and LAPACK operands: the size expressions protocol/api/cublas.api and
// cusolver.api name for their device pointers (the contract between the client's check and
// the worker's authoritative one). Column-major, as in BLAS. Pure functions of the
// arguments; a nonsensical dimension (negative, or a leading dimension below the rows) gives
// an extent of at most what a valid call would touch, and the library then rejects the call
// before touching memory.
#pragma once

#include <library_types.h>

#include <cstddef>
#include <cstdint>

namespace remora::api::blas {

// Bytes of a rows x cols matrix with leading dimension ld (elements of `elem` bytes).
inline uint64_t Mat(int64_t rows, int64_t cols, int64_t ld, size_t elem) {
  if (rows <= 0 || cols <= 0) return 0;
  if (ld < rows) ld = rows;
  return (static_cast<uint64_t>(cols - 1) * static_cast<uint64_t>(ld) + static_cast<uint64_t>(rows)) * elem;
}
// op(A) is rows x cols: A itself is that when op is N, its transpose otherwise.
inline uint64_t MatOp(int op, int64_t rows, int64_t cols, int64_t ld, size_t elem) {
  return op == 0 ? Mat(rows, cols, ld, elem) : Mat(cols, rows, ld, elem);
}
// An n x n matrix on the side the call names (side 0 = left: m x m, else n x n).
inline uint64_t Side(int side, int64_t m, int64_t n, int64_t ld, size_t elem) {
  int64_t k = side == 0 ? m : n;
  return Mat(k, k, ld, elem);
}
// A vector of n elements, inc apart.
inline uint64_t Vec(int64_t n, int64_t inc, size_t elem) {
  if (n <= 0) return 0;
  uint64_t step = static_cast<uint64_t>(inc < 0 ? -inc : inc);
  if (step == 0) step = 1;
  return (1 + static_cast<uint64_t>(n - 1) * step) * elem;
}
// A packed triangle of an n x n matrix.
inline uint64_t Packed(int64_t n, size_t elem) {
  if (n <= 0) return 0;
  return static_cast<uint64_t>(n) * static_cast<uint64_t>(n + 1) / 2 * elem;
}
// `batch` operands of `bytes` each, `stride` elements apart.
inline uint64_t Strided(uint64_t bytes, int64_t stride, int64_t batch, size_t elem) {
  if (batch <= 0 || bytes == 0) return 0;
  uint64_t step = static_cast<uint64_t>(stride < 0 ? -stride : stride) * elem;
  return static_cast<uint64_t>(batch - 1) * step + bytes;
}
// `n` elements of `elem` bytes (0 for n <= 0).
inline uint64_t Elems(int64_t n, size_t elem) { return n <= 0 ? 0 : static_cast<uint64_t>(n) * elem; }
inline int64_t Min(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t Max(int64_t a, int64_t b) { return a > b ? a : b; }

// Bytes of one element of a cudaDataType (0 for a type Remora does not know: such an
// operand is refused as empty).
inline size_t TypeBytes(int t) {
  switch (static_cast<cudaDataType>(t)) {
    case CUDA_R_8I: case CUDA_R_8U: case CUDA_R_8F_E4M3: case CUDA_R_8F_E5M2: return 1;
    case CUDA_R_16F: case CUDA_R_16BF: case CUDA_C_8I: case CUDA_C_8U: case CUDA_R_16I: case CUDA_R_16U: return 2;
    case CUDA_R_32F: case CUDA_R_32I: case CUDA_R_32U: case CUDA_C_16F: case CUDA_C_16BF: return 4;
    case CUDA_R_64F: case CUDA_C_32F: case CUDA_R_64I: case CUDA_R_64U: case CUDA_C_32I: case CUDA_C_32U: return 8;
    case CUDA_C_64F: case CUDA_C_64I: case CUDA_C_64U: return 16;
    default: return 0;
  }
}
inline bool IsComplex(int t) {
  switch (static_cast<cudaDataType>(t)) {
    case CUDA_C_16F: case CUDA_C_16BF: case CUDA_C_32F: case CUDA_C_64F: case CUDA_C_8I: case CUDA_C_8U:
    case CUDA_C_32I: case CUDA_C_32U: case CUDA_C_16I: case CUDA_C_16U: case CUDA_C_64I: case CUDA_C_64U:
      return true;
    default:
      return false;
  }
}

}  // namespace remora::api::blas
