// cuSPARSE entry points written by hand (protocol/api/cusparse.api: local) and the mirror hooks
// (lib_cusparse.h).
#include "lib_cusparse.h"

#include <cstdio>
#include <optional>

#include "cusparse_hooks.h"
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

namespace {

enum MatAux : size_t { kType = 0, kFill = 1, kDiag = 2, kBase = 3 };

void SetMat(cusparseMatDescr_t d, MatAux slot, int64_t v) {
  shim::Process::Get().lib_objects().SetAux(shim::HandleBits(HandleKind::kCusparseMatDescr, d), slot, v);
}

}  // namespace

void MirrorMatType(cusparseMatDescr_t d, cusparseMatrixType_t v) { SetMat(d, kType, v); }
void MirrorMatFillMode(cusparseMatDescr_t d, cusparseFillMode_t v) { SetMat(d, kFill, v); }
void MirrorMatDiagType(cusparseMatDescr_t d, cusparseDiagType_t v) { SetMat(d, kDiag, v); }
void MirrorMatIndexBase(cusparseMatDescr_t d, cusparseIndexBase_t v) { SetMat(d, kBase, v); }

void MirrorSpVec(cusparseSpVecDescr_t* vec, int64_t, int64_t, void*, void*, cusparseIndexType_t, cusparseIndexBase_t, cudaDataType type) {
  shim::Process::Get().lib_objects().SetAux(shim::HandleBits(HandleKind::kCusparseSpVecDescr, *vec), 0, type);
}

void MirrorConstSpVec(cusparseConstSpVecDescr_t* vec, int64_t, int64_t, const void*, const void*, cusparseIndexType_t, cusparseIndexBase_t,
                      cudaDataType type) {
  shim::Process::Get().lib_objects().SetAux(shim::HandleBits(HandleKind::kCusparseSpVecDescr, *vec), 0, type);
}

uint64_t SpVecBytes(cusparseConstSpVecDescr_t vec) {
  auto v = shim::Process::Get().lib_objects().Find(shim::HandleBits(HandleKind::kCusparseSpVecDescr, vec));
  const size_t n = v ? api::sparse::TypeBytes(static_cast<int>(v->aux[0])) : 0;
  return n == 0 ? 16 : n;
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

namespace {

// A legacy descriptor's mirrored setting (its default where the descriptor is unknown: the
// library's getters have no error to answer with).
int64_t MatSetting(cusparseMatDescr_t d, size_t slot) {
  auto v = remora::shim::Process::Get().lib_objects().Find(remora::shim::HandleBits(remora::HandleKind::kCusparseMatDescr, d));
  return v ? v->aux[slot] : 0;
}

}  // namespace

extern "C" cusparseMatrixType_t cusparseGetMatType(const cusparseMatDescr_t d) { return static_cast<cusparseMatrixType_t>(MatSetting(d, 0)); }
extern "C" cusparseFillMode_t cusparseGetMatFillMode(const cusparseMatDescr_t d) { return static_cast<cusparseFillMode_t>(MatSetting(d, 1)); }
extern "C" cusparseDiagType_t cusparseGetMatDiagType(const cusparseMatDescr_t d) { return static_cast<cusparseDiagType_t>(MatSetting(d, 2)); }
extern "C" cusparseIndexBase_t cusparseGetMatIndexBase(const cusparseMatDescr_t d) { return static_cast<cusparseIndexBase_t>(MatSetting(d, 3)); }

// The logger: cuSPARSE logs where it runs, on the server, so its settings are accepted here and
// change nothing the application sees (a file it names is created, as cuSPARSE would, and left
// empty; a callback is never called).
extern "C" cusparseStatus_t cusparseLoggerSetCallback(cusparseLoggerCallback_t) { return CUSPARSE_STATUS_SUCCESS; }
extern "C" cusparseStatus_t cusparseLoggerSetFile(FILE* file) { return file == nullptr ? CUSPARSE_STATUS_INVALID_VALUE : CUSPARSE_STATUS_SUCCESS; }
extern "C" cusparseStatus_t cusparseLoggerOpenFile(const char* path) {
  if (path == nullptr) return CUSPARSE_STATUS_INVALID_VALUE;
  FILE* f = std::fopen(path, "a");
  if (f == nullptr) return CUSPARSE_STATUS_INVALID_VALUE;
  std::fclose(f);
  return CUSPARSE_STATUS_SUCCESS;
}
extern "C" cusparseStatus_t cusparseLoggerSetLevel(int level) {
  return level < 0 || level > 5 ? CUSPARSE_STATUS_INVALID_VALUE : CUSPARSE_STATUS_SUCCESS;
}
extern "C" cusparseStatus_t cusparseLoggerSetMask(int) { return CUSPARSE_STATUS_SUCCESS; }
extern "C" cusparseStatus_t cusparseLoggerForceDisable() { return CUSPARSE_STATUS_SUCCESS; }
