#include "worker/lib_cublas.h"

#include "cublas_api.h"
#include "worker/api_op.h"
#include "worker/lib_workspace.h"

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

}  // namespace remora::worker::gen::cublas
