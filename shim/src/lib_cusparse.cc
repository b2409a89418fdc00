// cuSPARSE entry points written by hand (protocol/api/cusparse.api: local) and the mirror hooks
// (lib_cusparse.h).
#include "lib_cusparse.h"

#include <optional>

#include "lib_objects.h"
#include "process.h"
#include "remote_call.h"

namespace remora::gen::cusparse {

void MirrorStream(cusparseHandle_t h, cudaStream_t s) {
  shim::Process::Get().lib_objects().SetAux(shim::HandleBits(HandleKind::kCusparseHandle, h), 0,
                                            static_cast<int64_t>(reinterpret_cast<uintptr_t>(s)));
}

void MirrorPointerMode(cusparseHandle_t h, cusparsePointerMode_t mode) {
  shim::Process::Get().lib_objects().SetMode(shim::HandleBits(HandleKind::kCusparseHandle, h),
                                             mode == CUSPARSE_POINTER_MODE_DEVICE ? 3u : 0u);
}

}  // namespace remora::gen::cusparse

namespace {

std::optional<remora::shim::LibObjectView> View(cusparseHandle_t h) {
  auto v = remora::shim::Process::Get().lib_objects().Get(remora::shim::HandleBits(remora::HandleKind::kCusparseHandle, h),
                                                         remora::HandleKind::kCusparseHandle);
  if (!v.ok()) return std::nullopt;
  return *v;
}

}  // namespace

extern "C" cusparseStatus_t cusparseGetStream(cusparseHandle_t handle, cudaStream_t* stream) {
  auto v = View(handle);
  if (!v) return CUSPARSE_STATUS_NOT_INITIALIZED;
  if (stream == nullptr) return CUSPARSE_STATUS_INVALID_VALUE;
  *stream = reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(v->aux[0]));
  return CUSPARSE_STATUS_SUCCESS;
}

extern "C" cusparseStatus_t cusparseGetPointerMode(cusparseHandle_t handle, cusparsePointerMode_t* mode) {
  auto v = View(handle);
  if (!v) return CUSPARSE_STATUS_NOT_INITIALIZED;
  if (mode == nullptr) return CUSPARSE_STATUS_INVALID_VALUE;
  *mode = v->mode != 0 ? CUSPARSE_POINTER_MODE_DEVICE : CUSPARSE_POINTER_MODE_HOST;
  return CUSPARSE_STATUS_SUCCESS;
}

extern "C" const char* cusparseGetErrorName(cusparseStatus_t s) {
  switch (s) {
#define REMORA_SPARSE_STATUS(name) \
  case name: return #name;
    REMORA_SPARSE_STATUS(CUSPARSE_STATUS_SUCCESS)
    REMORA_SPARSE_STATUS(CUSPARSE_STATUS_NOT_INITIALIZED)
    REMORA_SPARSE_STATUS(CUSPARSE_STATUS_ALLOC_FAILED)
    REMORA_SPARSE_STATUS(CUSPARSE_STATUS_INVALID_VALUE)
    REMORA_SPARSE_STATUS(CUSPARSE_STATUS_ARCH_MISMATCH)
    REMORA_SPARSE_STATUS(CUSPARSE_STATUS_MAPPING_ERROR)
    REMORA_SPARSE_STATUS(CUSPARSE_STATUS_EXECUTION_FAILED)
    REMORA_SPARSE_STATUS(CUSPARSE_STATUS_INTERNAL_ERROR)
    REMORA_SPARSE_STATUS(CUSPARSE_STATUS_MATRIX_TYPE_NOT_SUPPORTED)
    REMORA_SPARSE_STATUS(CUSPARSE_STATUS_ZERO_PIVOT)
    REMORA_SPARSE_STATUS(CUSPARSE_STATUS_NOT_SUPPORTED)
    REMORA_SPARSE_STATUS(CUSPARSE_STATUS_INSUFFICIENT_RESOURCES)
#undef REMORA_SPARSE_STATUS
    default: return "CUSPARSE_STATUS_UNKNOWN";
  }
}

extern "C" const char* cusparseGetErrorString(cusparseStatus_t s) {
  switch (s) {
    case CUSPARSE_STATUS_SUCCESS: return "success";
    case CUSPARSE_STATUS_NOT_INITIALIZED: return "initialization error";
    case CUSPARSE_STATUS_ALLOC_FAILED: return "out of memory";
    case CUSPARSE_STATUS_INVALID_VALUE: return "invalid value";
    case CUSPARSE_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case CUSPARSE_STATUS_EXECUTION_FAILED: return "kernel launch failure";
    case CUSPARSE_STATUS_INTERNAL_ERROR: return "internal error";
    case CUSPARSE_STATUS_MATRIX_TYPE_NOT_SUPPORTED: return "matrix type not supported";
    case CUSPARSE_STATUS_NOT_SUPPORTED: return "operation not supported";
    case CUSPARSE_STATUS_INSUFFICIENT_RESOURCES: return "insufficient resources";
    default: return "unknown error";
  }
}
