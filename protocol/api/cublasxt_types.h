// cublasXt.h's types, for the code generated from protocol/api/cublas.api: it includes
// cublas.h (the legacy API), and cublasXt.h includes cublas_v2.h, which may not be included
// beside it. The same definitions as cublasXt.h's (the functions' C ABI); none when cublasXt.h
// was included first (shim/src/libs/lib_cublasxt.cc, which implements the functions, includes it).
#pragma once

#if !defined(CUBLAS_XT_H_)
extern "C" {
struct cublasXtContext;
typedef struct cublasXtContext* cublasXtHandle_t;
typedef enum { CUBLASXT_PINNING_DISABLED = 0, CUBLASXT_PINNING_ENABLED = 1 } cublasXtPinnedMemMode_t;
typedef enum { CUBLASXT_FLOAT = 0, CUBLASXT_DOUBLE = 1, CUBLASXT_COMPLEX = 2, CUBLASXT_DOUBLECOMPLEX = 3 } cublasXtOpType_t;
typedef enum {
  CUBLASXT_GEMM = 0,
  CUBLASXT_SYRK = 1,
  CUBLASXT_HERK = 2,
  CUBLASXT_SYMM = 3,
  CUBLASXT_HEMM = 4,
  CUBLASXT_TRSM = 5,
  CUBLASXT_SYR2K = 6,
  CUBLASXT_HER2K = 7,
  CUBLASXT_SPMM = 8,
  CUBLASXT_SYRKX = 9,
  CUBLASXT_HERKX = 10,
  CUBLASXT_TRMM = 11,
  CUBLASXT_ROUTINE_MAX = 12,
} cublasXtBlasOp_t;
}
#endif
