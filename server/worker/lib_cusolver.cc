#include "worker/lib_cusolver.h"

#include <vector>

#include "cusolver_api.h"
#include "worker/api_op.h"

namespace remora::worker::gen::cusolver {
namespace {

struct HostWorkspace final : LibExtra {
  std::vector<std::byte> bytes;
};

Result<void*> HostWork(LibObject* handle, size_t bytes) {
  if (bytes == 0) return static_cast<void*>(nullptr);
  if (bytes > kMaxHostWorkspace)
    return Status(Domain::kCusolver, CUSOLVER_STATUS_NOT_SUPPORTED, fmt::format("a host workspace of {} bytes is too large", bytes));
  auto& w = handle->Extra<HostWorkspace>();
  if (w.bytes.size() < bytes) w.bytes.resize(bytes);
  return static_cast<void*>(w.bytes.data());
}

cusolverDnParams_t Params(const LibObject* p) { return p ? p->As<cusolverDnParams_t>() : nullptr; }

}  // namespace

uint64_t GetrfWorkS(OpContext& x, cusolverDnHandle_t handle, int m, int n, float* a, int lda) {
  int lwork = 0;
  if (x.Library<Api>().cusolverDnSgetrf_bufferSize(handle, m, n, a, lda, &lwork) != CUSOLVER_STATUS_SUCCESS || lwork < 0) return 0;
  return static_cast<uint64_t>(lwork) * sizeof(float);
}

uint64_t GetrfWorkD(OpContext& x, cusolverDnHandle_t handle, int m, int n, double* a, int lda) {
  int lwork = 0;
  if (x.Library<Api>().cusolverDnDgetrf_bufferSize(handle, m, n, a, lda, &lwork) != CUSOLVER_STATUS_SUCCESS || lwork < 0) return 0;
  return static_cast<uint64_t>(lwork) * sizeof(double);
}

Status XGetrf(OpContext& x, LibObject* handle, LibObject* params, int64_t m, int64_t n, cudaDataType type_a, void* a, int64_t lda,
              int64_t* ipiv, cudaDataType compute, void* work, size_t work_bytes, void*, size_t host_bytes, int* info) {
  ASSIGN_OR_RETURN(void* host, HostWork(handle, host_bytes));
  cusolverStatus_t r = x.Library<Api>().cusolverDnXgetrf(handle->As<cusolverDnHandle_t>(), Params(params), m, n, type_a, a, lda, ipiv,
                                                         compute, work, work_bytes, host, host_bytes, info);
  if (r != CUSOLVER_STATUS_SUCCESS) return x.LibraryError(Domain::kCusolver, r, Api::StatusName(r), "cusolverDnXgetrf");
  return Status::Ok();
}

Status XPotrf(OpContext& x, LibObject* handle, LibObject* params, cublasFillMode_t uplo, int64_t n, cudaDataType type_a, void* a,
              int64_t lda, cudaDataType compute, void* work, size_t work_bytes, void*, size_t host_bytes, int* info) {
  ASSIGN_OR_RETURN(void* host, HostWork(handle, host_bytes));
  cusolverStatus_t r = x.Library<Api>().cusolverDnXpotrf(handle->As<cusolverDnHandle_t>(), Params(params), uplo, n, type_a, a, lda,
                                                         compute, work, work_bytes, host, host_bytes, info);
  if (r != CUSOLVER_STATUS_SUCCESS) return x.LibraryError(Domain::kCusolver, r, Api::StatusName(r), "cusolverDnXpotrf");
  return Status::Ok();
}

}  // namespace remora::worker::gen::cusolver
