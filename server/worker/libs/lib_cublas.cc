#include "worker/libs/lib_cublas.h"

#include "blas_hooks.h"
#include "cublas_api.h"
#include "worker/calls/generated_call.h"
#include "worker/libs/lib_workspace.h"

namespace remora::worker::gen::cublas {

Status CublasCreated(OpContext& x, LibObject* handle) {
  RETURN_IF_ERROR(GiveWorkspace(x, handle, kWorkspaceBytes, Domain::kCublas, CUBLAS_STATUS_ALLOC_FAILED));
  cublasStatus_t r = x.Library<Api>().cublasSetWorkspace_v2(handle->As<cublasHandle_t>(),
                                                            reinterpret_cast<void*>(handle->workspace), handle->workspace_bytes);
  if (r != CUBLAS_STATUS_SUCCESS) return x.LibraryError(Domain::kCublas, r, Api::StatusName(r), "cublasSetWorkspace_v2");
  return Status::Ok();
}

Status CublasStreamSet(OpContext& x, LibObject* handle, cudaStream_t stream) {
  handle->stream = stream;
  if (handle->workspace == 0) return Status::Ok();
  cublasStatus_t r = x.Library<Api>().cublasSetWorkspace_v2(handle->As<cublasHandle_t>(),
                                                            reinterpret_cast<void*>(handle->workspace), handle->workspace_bytes);
  if (r != CUBLAS_STATUS_SUCCESS) return x.LibraryError(Domain::kCublas, r, Api::StatusName(r), "cublasSetWorkspace_v2");
  return Status::Ok();
}

Status CublasPointerModeSet(OpContext&, LibObject* handle, cublasPointerMode_t mode) {
  handle->mode = mode == CUBLAS_POINTER_MODE_DEVICE ? 3u : 0u;
  return Status::Ok();
}

Status CheckGroups(OpContext& x, LibObject* handle, const cublasOperation_t* ta, const cublasOperation_t* tb, const int64_t* m,
                   const int64_t* n, const int64_t* k, const int64_t* lda, const int64_t* ldb, const int64_t* ldc, int64_t groups,
                   const int64_t* sizes, const void* a, const void* b, const void* c, size_t ea, size_t eb, size_t ec) {
  using api::blas::Mat;
  using api::blas::MatOp;
  std::vector<uint64_t> xa, xb, xc;
  for (int64_t g = 0; g < groups; g++) {
    for (int64_t i = 0; i < sizes[g]; i++) {
      if (xa.size() >= api::kMaxArgBytes / sizeof(uint64_t)) return x.Malformed("a grouped batch of too many GEMMs");
      xa.push_back(MatOp(ta[g], m[g], k[g], lda[g], ea));
      xb.push_back(MatOp(tb[g], k[g], n[g], ldb[g], eb));
      xc.push_back(Mat(m[g], n[g], ldc[g], ec));
    }
  }
  auto addr = [](const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); };
  RETURN_IF_ERROR(x.DevPtrArrayOf(addr(a), xa.size(), handle, [&](uint64_t i) { return xa[i]; }));
  RETURN_IF_ERROR(x.DevPtrArrayOf(addr(b), xb.size(), handle, [&](uint64_t i) { return xb[i]; }));
  return x.DevPtrArrayOf(addr(c), xc.size(), handle, [&](uint64_t i) { return xc[i]; });
}

namespace {

template <typename I>
Status Check(OpContext& x, LibObject* handle, const cublasOperation_t* ta, const cublasOperation_t* tb, const I* m, const I* n, const I* k,
             const I* lda, const I* ldb, const I* ldc, I groups, const I* sizes, const void* a, const void* b, const void* c, size_t ea,
             size_t eb, size_t ec) {
  const int64_t g = groups > 0 ? groups : 0;
  return CheckGroups(x, handle, ta, tb, Wide(m, g).data(), Wide(n, g).data(), Wide(k, g).data(), Wide(lda, g).data(),
                     Wide(ldb, g).data(), Wide(ldc, g).data(), g, Wide(sizes, g).data(), a, b, c, ea, eb, ec);
}

Status Done(OpContext& x, cublasStatus_t r, const char* call) {
  if (r != CUBLAS_STATUS_SUCCESS) return x.LibraryError(Domain::kCublas, r, Api::StatusName(r), call);
  return Status::Ok();
}

}  // namespace

#define REMORA_GROUPED(Name, T, I, Call)                                                                                          \
  Status Name(OpContext& x, LibObject* handle, const cublasOperation_t* ta, const cublasOperation_t* tb, const I* m, const I* n,  \
              const I* k, const T* alpha, const T* const* a, const I* lda, const T* const* b, const I* ldb, const T* beta,       \
              T* const* c, const I* ldc, I groups, const I* sizes) {                                                             \
    RETURN_IF_ERROR(Check(x, handle, ta, tb, m, n, k, lda, ldb, ldc, groups, sizes, a, b, c, sizeof(T), sizeof(T), sizeof(T)));  \
    return Done(x, x.Library<Api>().Call(handle->As<cublasHandle_t>(), ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,     \
                                         groups, sizes), #Call);                                                                 \
  }
REMORA_GROUPED(GroupedGemmS, float, int, cublasSgemmGroupedBatched)
REMORA_GROUPED(GroupedGemmS, float, int64_t, cublasSgemmGroupedBatched_64)
REMORA_GROUPED(GroupedGemmD, double, int, cublasDgemmGroupedBatched)
REMORA_GROUPED(GroupedGemmD, double, int64_t, cublasDgemmGroupedBatched_64)
#undef REMORA_GROUPED

#define REMORA_GROUPED_EX(I, Call)                                                                                                \
  Status GroupedGemmEx(OpContext& x, LibObject* handle, const cublasOperation_t* ta, const cublasOperation_t* tb, const I* m,     \
                       const I* n, const I* k, const void* alpha, const void* const* a, cudaDataType_t at, const I* lda,         \
                       const void* const* b, cudaDataType_t bt, const I* ldb, const void* beta, void* const* c, cudaDataType_t ct, \
                       const I* ldc, I groups, const I* sizes, cublasComputeType_t compute) {                                   \
    using api::blas::TypeBytes;                                                                                                   \
    RETURN_IF_ERROR(Check(x, handle, ta, tb, m, n, k, lda, ldb, ldc, groups, sizes, a, b, c, TypeBytes(at), TypeBytes(bt),      \
                          TypeBytes(ct)));                                                                                        \
    return Done(x, x.Library<Api>().Call(handle->As<cublasHandle_t>(), ta, tb, m, n, k, alpha, a, at, lda, b, bt, ldb, beta, c, \
                                         ct, ldc, groups, sizes, compute), #Call);                                               \
  }
REMORA_GROUPED_EX(int, cublasGemmGroupedBatchedEx)
REMORA_GROUPED_EX(int64_t, cublasGemmGroupedBatchedEx_64)
#undef REMORA_GROUPED_EX

}  // namespace remora::worker::gen::cublas
