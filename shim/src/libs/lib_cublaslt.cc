// cuBLASLt entry points written by hand (protocol/api/cublasLt.api: local) and the mirror of
// matmul descriptors (lib_cublaslt.h).
#include "lib_cublaslt.h"

#include <cublas.h>  // cublasGetStatusName/String: cuBLASLt shares cuBLAS's statuses
#include <cuda_runtime_api.h>

#include <cstring>

#include "blas_hooks.h"
#include "cublasLt_client.h"
#include "lib_objects.h"
#include "process.h"
#include "remote_call.h"

namespace remora::gen::cublasLt {
namespace {

constexpr size_t kScaleType = 0;  // LibObjectView::aux slot

uint64_t Id(cublasLtMatmulDesc_t d) { return shim::HandleBits(HandleKind::kCublasLtMatmulDesc, d); }

}  // namespace

size_t ScaleBytes(cublasLtMatmulDesc_t desc) {
  auto v = shim::Process::Get().lib_objects().Find(Id(desc));
  if (!v) return 0;  // the call fails on the handle anyway
  size_t n = api::blas::TypeBytes(static_cast<int>(v->aux[kScaleType]));
  return n == 0 ? 4 : n;
}

void MirrorDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t, cudaDataType_t scale) {
  shim::Process::Get().lib_objects().SetAux(Id(*desc), kScaleType, scale);
}

void MirrorDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* buf, size_t size) {
  if (buf == nullptr) return;
  if (attr == CUBLASLT_MATMUL_DESC_POINTER_MODE && size >= sizeof(int32_t)) {
    int32_t mode;
    std::memcpy(&mode, buf, sizeof(mode));
    shim::Process::Get().lib_objects().SetMode(Id(desc), LtModeBits(mode));
  } else if (attr == CUBLASLT_MATMUL_DESC_SCALE_TYPE && size >= sizeof(int32_t)) {
    int32_t type;
    std::memcpy(&type, buf, sizeof(type));
    shim::Process::Get().lib_objects().SetAux(Id(desc), kScaleType, type);
  }
}

namespace {
uint64_t TransformId(cublasLtMatrixTransformDesc_t d) { return shim::HandleBits(HandleKind::kCublasLtMatrixTransformDesc, d); }
}  // namespace

size_t TransformScaleBytes(cublasLtMatrixTransformDesc_t desc) {
  auto v = shim::Process::Get().lib_objects().Find(TransformId(desc));
  const size_t n = v ? api::blas::TypeBytes(static_cast<int>(v->aux[kScaleType])) : 0;
  return n == 0 ? 4 : n;
}

void MirrorTransformCreate(cublasLtMatrixTransformDesc_t* desc, cudaDataType scale) {
  shim::Process::Get().lib_objects().SetAux(TransformId(*desc), kScaleType, scale);
}

void MirrorTransformSetAttribute(cublasLtMatrixTransformDesc_t desc, cublasLtMatrixTransformDescAttributes_t attr, const void* buf,
                                 size_t size) {
  if (buf == nullptr || size < sizeof(int32_t)) return;
  int32_t v;
  std::memcpy(&v, buf, sizeof(v));
  if (attr == CUBLASLT_MATRIX_TRANSFORM_DESC_POINTER_MODE) shim::Process::Get().lib_objects().SetMode(TransformId(desc), v == 0 ? 0u : 3u);
  if (attr == CUBLASLT_MATRIX_TRANSFORM_DESC_SCALE_TYPE) shim::Process::Get().lib_objects().SetAux(TransformId(desc), kScaleType, v);
}

}  // namespace remora::gen::cublasLt

// The server's cuBLASLt version (memoised: asked once per process).
extern "C" size_t cublasLtGetVersion() {
  size_t v = 0;
  remora::Status st = remora::gen::cublasLt::remoraCublasLtGetVersion(remora::shim::CallCtx{false, "cublasLtGetVersion"}, &v);
  return st.ok() ? v : 0;
}
extern "C" size_t cublasLtGetCudartVersion() { return CUDART_VERSION; }
extern "C" const char* cublasLtGetStatusName(cublasStatus_t s) { return cublasGetStatusName(s); }
extern "C" const char* cublasLtGetStatusString(cublasStatus_t s) { return cublasGetStatusString(s); }
