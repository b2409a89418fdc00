// Extents of cuSOLVER's operands: the size expressions protocol/api/cusolver.api names on both
// ends of the wire (BLAS's dense extents, blas_hooks.h, plus the shapes that depend on a job
// argument: which singular vectors an SVD writes, which eigenvectors). Column-major. Pure
// functions; a job that writes no vectors gives 0 (the pointer may then be anything, as
// natively: it is not checked).
#pragma once

#include <cusolverDn.h>

#include <cstddef>
#include <cstdint>

#include "blas_hooks.h"

namespace remora::api::solver {

using namespace blas;  // NOLINT: the descriptions use BLAS's extents unqualified

// gesvd's U: 'A' all m columns, 'S' the first min(m, n), else none.
inline uint64_t GesvdU(signed char job, int64_t m, int64_t n, int64_t ld, size_t elem) {
  if (job == 'A' || job == 'a') return Mat(m, m, ld, elem);
  if (job == 'S' || job == 's') return Mat(m, Min(m, n), ld, elem);
  return 0;
}
// gesvd's V^T: 'A' all n rows, 'S' the first min(m, n), else none.
inline uint64_t GesvdVT(signed char job, int64_t m, int64_t n, int64_t ld, size_t elem) {
  if (job == 'A' || job == 'a') return Mat(n, n, ld, elem);
  if (job == 'S' || job == 's') return Mat(Min(m, n), n, ld, elem);
  return 0;
}
// The Jacobi SVDs' (gesvdj, gesvdp) U and V: none without vectors; economy size: min(m, n)
// columns.
inline uint64_t JacobiU(int jobz, int econ, int64_t m, int64_t n, int64_t ld, size_t elem) {
  if (jobz == CUSOLVER_EIG_MODE_NOVECTOR) return 0;
  return Mat(m, econ != 0 ? Min(m, n) : m, ld, elem);
}
inline uint64_t JacobiV(int jobz, int econ, int64_t m, int64_t n, int64_t ld, size_t elem) {
  if (jobz == CUSOLVER_EIG_MODE_NOVECTOR) return 0;
  return Mat(n, econ != 0 ? Min(m, n) : n, ld, elem);
}
// geev's left or right eigenvectors: n x n when asked for.
inline uint64_t EigVectors(int job, int64_t n, int64_t ld, size_t elem) {
  return job == CUSOLVER_EIG_MODE_VECTOR ? Mat(n, n, ld, elem) : 0;
}
// larft's V: n x k stored by columns, or k x n by rows.
inline uint64_t Larft(int storev, int64_t n, int64_t k, int64_t ld, size_t elem) {
  return storev == CUBLAS_STOREV_COLUMNWISE ? Mat(n, k, ld, elem) : Mat(k, n, ld, elem);
}
// The element count of an array of `n` (none for n < 0: the library refuses the call).
inline int64_t Dims(int64_t n) { return n < 0 ? 0 : n; }
// Bytes of one element of an IRS solver's main precision (0 if not one of the four).
inline size_t PrecBytes(int64_t prec) {
  switch (static_cast<cusolverPrecType_t>(prec)) {
    case CUSOLVER_R_32F: return 4;
    case CUSOLVER_R_64F: return 8;
    case CUSOLVER_C_32F: return 8;
    case CUSOLVER_C_64F: return 16;
    default: return 0;
  }
}

}  // namespace remora::api::solver
