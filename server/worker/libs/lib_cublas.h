// cuBLAS on the worker: the hooks protocol/api/cublas.api names (`wafter=`), run after the
// library accepted the call. A handle gets a workspace of its own, charged to the tenant, so
// cuBLAS never allocates an uncounted one (it would on the first GEMM of a stream); the
// handle's stream and pointer mode are mirrored for the checks of later calls.
// Used by the executor's single thread.
#pragma once

#include <cublas.h>  // (NVIDIA's cublas_api.h through it: "cublas_api.h" is the generated table)

#include <cstdint>
#include <vector>

#include "remora/base/status.h"

namespace remora::worker {
class OpContext;
struct LibObject;
}  // namespace remora::worker

namespace remora::worker::gen::cublas {

// Bytes of the workspace each handle gets: cuBLAS's own default size on pre-Hopper GPUs;
// an application that wants more sets its own (cublasSetWorkspace_v2, as PyTorch does).
inline constexpr uint64_t kWorkspaceBytes = 4ull << 20;

Status CublasCreated(OpContext& x, LibObject* handle);
// cublasSetStream resets cuBLAS to its default workspace pool: the handle's own is set again.
Status CublasStreamSet(OpContext& x, LibObject* handle, cudaStream_t stream);
Status CublasPointerModeSet(OpContext& x, LibObject* handle, cublasPointerMode_t mode);

// The grouped-batch GEMMs (cublas<t>gemmGroupedBatched[_64], cublasGemmGroupedBatchedEx[_64]):
// every matrix pointer of every group checked with its group's extents (the pointer arrays
// read in the handle's stream order), then the library's call.
Status CheckGroups(OpContext& x, LibObject* handle, const cublasOperation_t* ta, const cublasOperation_t* tb, const int64_t* m,
                   const int64_t* n, const int64_t* k, const int64_t* lda, const int64_t* ldb, const int64_t* ldc, int64_t groups,
                   const int64_t* sizes, const void* a, const void* b, const void* c, size_t ea, size_t eb, size_t ec);
template <typename I>
std::vector<int64_t> Wide(const I* v, int64_t n) {
  return std::vector<int64_t>(v, v + (n > 0 ? n : 0));
}
Status GroupedGemmS(OpContext& x, LibObject* handle, const cublasOperation_t* ta, const cublasOperation_t* tb, const int* m, const int* n,
                    const int* k, const float* alpha, const float* const* a, const int* lda, const float* const* b, const int* ldb,
                    const float* beta, float* const* c, const int* ldc, int groups, const int* sizes);
Status GroupedGemmS(OpContext& x, LibObject* handle, const cublasOperation_t* ta, const cublasOperation_t* tb, const int64_t* m,
                    const int64_t* n, const int64_t* k, const float* alpha, const float* const* a, const int64_t* lda,
                    const float* const* b, const int64_t* ldb, const float* beta, float* const* c, const int64_t* ldc, int64_t groups,
                    const int64_t* sizes);
Status GroupedGemmD(OpContext& x, LibObject* handle, const cublasOperation_t* ta, const cublasOperation_t* tb, const int* m, const int* n,
                    const int* k, const double* alpha, const double* const* a, const int* lda, const double* const* b, const int* ldb,
                    const double* beta, double* const* c, const int* ldc, int groups, const int* sizes);
Status GroupedGemmD(OpContext& x, LibObject* handle, const cublasOperation_t* ta, const cublasOperation_t* tb, const int64_t* m,
                    const int64_t* n, const int64_t* k, const double* alpha, const double* const* a, const int64_t* lda,
                    const double* const* b, const int64_t* ldb, const double* beta, double* const* c, const int64_t* ldc,
                    int64_t groups, const int64_t* sizes);
Status GroupedGemmEx(OpContext& x, LibObject* handle, const cublasOperation_t* ta, const cublasOperation_t* tb, const int* m,
                     const int* n, const int* k, const void* alpha, const void* const* a, cudaDataType_t at, const int* lda,
                     const void* const* b, cudaDataType_t bt, const int* ldb, const void* beta, void* const* c, cudaDataType_t ct,
                     const int* ldc, int groups, const int* sizes, cublasComputeType_t compute);
Status GroupedGemmEx(OpContext& x, LibObject* handle, const cublasOperation_t* ta, const cublasOperation_t* tb, const int64_t* m,
                     const int64_t* n, const int64_t* k, const void* alpha, const void* const* a, cudaDataType_t at, const int64_t* lda,
                     const void* const* b, cudaDataType_t bt, const int64_t* ldb, const void* beta, void* const* c, cudaDataType_t ct,
                     const int64_t* ldc, int64_t groups, const int64_t* sizes, cublasComputeType_t compute);

}  // namespace remora::worker::gen::cublas
