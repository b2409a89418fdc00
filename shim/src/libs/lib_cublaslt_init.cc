// cuBLASLt entry points written by hand for descriptors whose storage the application owns
// (cublasLtMatmulDescInit and its siblings call these *_internal functions with the address of
// an opaque structure on the application's side): each makes a session object as the Create
// call would, and lets the structure's address stand for it in every later call of this
// process (LibObjects::Alias); initialising the same storage again ends the object it stood for.
// The application frees the storage without telling cuBLASLt: such objects end with the
// session. Plus the logger, whose settings are accepted here: cuBLASLt logs where it runs, on
// the server.
#include <cublasLt.h>

#include <cstdio>

#include "cublasLt_client.h"
#include "lib_objects.h"
#include "process.h"
#include "remote_call.h"

namespace {

namespace shim = remora::shim;
using remora::HandleKind;
using remora::Status;

constexpr shim::LibCodes kCodes{CUBLAS_STATUS_SUCCESS,        CUBLAS_STATUS_INVALID_VALUE, CUBLAS_STATUS_NOT_INITIALIZED,
                                CUBLAS_STATUS_NOT_SUPPORTED, CUBLAS_STATUS_ALLOC_FAILED,  CUBLAS_STATUS_INTERNAL_ERROR};

cublasStatus_t Finish(const Status& st, const char* name) {
  return static_cast<cublasStatus_t>(shim::FinishLib(remora::Domain::kCublasLt, kCodes, st, name));
}

// Makes the object with `create` (the generated Create stub, writing the new handle into its
// argument) and lets `storage` stand for it, ending what the storage stood for before with
// `destroy`.
template <typename H, typename Create, typename Destroy>
cublasStatus_t InitInto(H storage, size_t size, size_t need, HandleKind kind, const char* name, Create&& create, Destroy&& destroy) {
  if (storage == nullptr || size < need) return CUBLAS_STATUS_INVALID_VALUE;
  auto& objects = shim::Process::Get().lib_objects();
  const auto alias = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(storage));
  const uint64_t old = objects.Resolve(alias);
  if (old != alias) {
    Status st = destroy(shim::HandleFromBits<H>(kind, old));
    objects.Remove(alias);
    if (!st.ok()) return Finish(st, name);
  }
  H made{};
  Status st = create(&made);
  if (!st.ok()) return Finish(st, name);
  objects.Alias(alias, shim::HandleBits(kind, made));
  return CUBLAS_STATUS_SUCCESS;
}

shim::CallCtx Ctx(const char* name) { return shim::CallCtx{false, name}; }

}  // namespace

#define REMORA_EXPORT extern "C"  // (hidden inside libremora-core.so; the generated table reaches them)
namespace gen = remora::gen::cublasLt;

REMORA_EXPORT cublasStatus_t cublasLtMatmulDescInit_internal(cublasLtMatmulDesc_t desc, size_t size, cublasComputeType_t compute,
                                                              cudaDataType_t scale) {
  const char* n = "cublasLtMatmulDescInit_internal";
  return InitInto(
      desc, size, sizeof(cublasLtMatmulDescOpaque_t), HandleKind::kCublasLtMatmulDesc, n,
      [&](cublasLtMatmulDesc_t* out) { return gen::cublasLtMatmulDescCreate(Ctx(n), out, compute, scale); },
      [&](cublasLtMatmulDesc_t old) { return gen::cublasLtMatmulDescDestroy(Ctx(n), old); });
}

REMORA_EXPORT cublasStatus_t cublasLtMatrixLayoutInit_internal(cublasLtMatrixLayout_t layout, size_t size, cudaDataType type,
                                                                uint64_t rows, uint64_t cols, int64_t ld) {
  const char* n = "cublasLtMatrixLayoutInit_internal";
  return InitInto(
      layout, size, sizeof(cublasLtMatrixLayoutOpaque_t), HandleKind::kCublasLtMatrixLayout, n,
      [&](cublasLtMatrixLayout_t* out) { return gen::cublasLtMatrixLayoutCreate(Ctx(n), out, type, rows, cols, ld); },
      [&](cublasLtMatrixLayout_t old) { return gen::cublasLtMatrixLayoutDestroy(Ctx(n), old); });
}

REMORA_EXPORT cublasStatus_t cublasLtMatmulPreferenceInit_internal(cublasLtMatmulPreference_t pref, size_t size) {
  const char* n = "cublasLtMatmulPreferenceInit_internal";
  return InitInto(
      pref, size, sizeof(cublasLtMatmulPreferenceOpaque_t), HandleKind::kCublasLtMatmulPreference, n,
      [&](cublasLtMatmulPreference_t* out) { return gen::cublasLtMatmulPreferenceCreate(Ctx(n), out); },
      [&](cublasLtMatmulPreference_t old) { return gen::cublasLtMatmulPreferenceDestroy(Ctx(n), old); });
}

REMORA_EXPORT cublasStatus_t cublasLtMatrixTransformDescInit_internal(cublasLtMatrixTransformDesc_t desc, size_t size,
                                                                       cudaDataType scale) {
  const char* n = "cublasLtMatrixTransformDescInit_internal";
  return InitInto(
      desc, size, sizeof(cublasLtMatrixTransformDescOpaque_t), HandleKind::kCublasLtMatrixTransformDesc, n,
      [&](cublasLtMatrixTransformDesc_t* out) { return gen::cublasLtMatrixTransformDescCreate(Ctx(n), out, scale); },
      [&](cublasLtMatrixTransformDesc_t old) { return gen::cublasLtMatrixTransformDescDestroy(Ctx(n), old); });
}

REMORA_EXPORT cublasStatus_t cublasLtEmulationDescInit_internal(cublasLtEmulationDesc_t desc, size_t size) {
  const char* n = "cublasLtEmulationDescInit_internal";
  return InitInto(
      desc, size, sizeof(cublasLtEmulationDescOpaque_t), HandleKind::kCublasLtEmulationDesc, n,
      [&](cublasLtEmulationDesc_t* out) { return gen::cublasLtEmulationDescCreate(Ctx(n), out); },
      [&](cublasLtEmulationDesc_t old) { return gen::cublasLtEmulationDescDestroy(Ctx(n), old); });
}

REMORA_EXPORT cublasStatus_t cublasLtLoggerSetCallback(cublasLtLoggerCallback_t) { return CUBLAS_STATUS_SUCCESS; }
REMORA_EXPORT cublasStatus_t cublasLtLoggerSetFile(FILE* file) { return file == nullptr ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_SUCCESS; }
REMORA_EXPORT cublasStatus_t cublasLtLoggerOpenFile(const char* path) {
  if (path == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  FILE* f = std::fopen(path, "a");
  if (f == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  std::fclose(f);
  return CUBLAS_STATUS_SUCCESS;
}
REMORA_EXPORT cublasStatus_t cublasLtLoggerSetLevel(int level) {
  return level < 0 || level > 5 ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_SUCCESS;
}
REMORA_EXPORT cublasStatus_t cublasLtLoggerSetMask(int) { return CUBLAS_STATUS_SUCCESS; }
REMORA_EXPORT cublasStatus_t cublasLtLoggerForceDisable() { return CUBLAS_STATUS_SUCCESS; }
