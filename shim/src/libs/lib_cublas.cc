// cuBLAS entry points written by hand (protocol/api/cublas.api: local and custom): the
// getters of mirrored handle state, names and versions, and the host<->device copies, which
// are the runtime's 2D copies. Plus the mirror hooks (lib_cublas.h).
#include "lib_cublas.h"

#include <cuda_runtime_api.h>

#include "cublas_client.h"
#include "lib_objects.h"
#include "process.h"
#include "remote_call.h"

namespace remora::gen::cublas {
namespace {

enum Aux : size_t { kStream = 0, kMathMode = 1, kAtomicsMode = 2, kSmCountTarget = 3 };

uint64_t Id(cublasHandle_t h) { return shim::HandleBits(HandleKind::kCublasHandle, h); }

void SetAux(cublasHandle_t h, Aux slot, int64_t v) { shim::Process::Get().lib_objects().SetAux(Id(h), slot, v); }

}  // namespace

void MirrorStream(cublasHandle_t h, cudaStream_t s) { SetAux(h, kStream, static_cast<int64_t>(reinterpret_cast<uintptr_t>(s))); }
void MirrorPointerMode(cublasHandle_t h, cublasPointerMode_t mode) {
  // Both scalar slots (alpha and beta) follow the handle's mode.
  shim::Process::Get().lib_objects().SetMode(Id(h), mode == CUBLAS_POINTER_MODE_DEVICE ? 3u : 0u);
}
void MirrorMathMode(cublasHandle_t h, cublasMath_t mode) { SetAux(h, kMathMode, mode); }
void MirrorAtomicsMode(cublasHandle_t h, cublasAtomicsMode_t mode) { SetAux(h, kAtomicsMode, mode); }
void MirrorSmCountTarget(cublasHandle_t h, int target) { SetAux(h, kSmCountTarget, target); }

}  // namespace remora::gen::cublas

namespace {

using remora::gen::cublas::Aux;
using remora::shim::LibObjectView;

// The mirrored state of a live handle of this process, or nullptr.
std::optional<LibObjectView> View(cublasHandle_t h) {
  auto v = remora::shim::Process::Get().lib_objects().Get(remora::shim::HandleBits(remora::HandleKind::kCublasHandle, h),
                                                         remora::HandleKind::kCublasHandle);
  if (!v.ok()) return std::nullopt;
  return *v;
}

cublasStatus_t Copy2D(void* dst, int64_t dpitch, const void* src, int64_t spitch, int64_t width, int64_t height,
                      cudaMemcpyKind kind, cudaStream_t stream, bool async) {
  cudaError_t e = async ? cudaMemcpy2DAsync(dst, static_cast<size_t>(dpitch), src, static_cast<size_t>(spitch),
                                            static_cast<size_t>(width), static_cast<size_t>(height), kind, stream)
                        : cudaMemcpy2D(dst, static_cast<size_t>(dpitch), src, static_cast<size_t>(spitch),
                                       static_cast<size_t>(width), static_cast<size_t>(height), kind);
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_MAPPING_ERROR;
}

cublasStatus_t Matrix(int64_t rows, int64_t cols, int64_t elem, const void* a, int64_t lda, void* b, int64_t ldb,
                      cudaMemcpyKind kind, cudaStream_t stream, bool async) {
  if (rows < 0 || cols < 0 || elem <= 0 || lda <= 0 || ldb <= 0 || lda < rows || ldb < rows) return CUBLAS_STATUS_INVALID_VALUE;
  if (rows == 0 || cols == 0) return CUBLAS_STATUS_SUCCESS;
  return Copy2D(b, ldb * elem, a, lda * elem, rows * elem, cols, kind, stream, async);
}

cublasStatus_t Vector(int64_t n, int64_t elem, const void* x, int64_t incx, void* y, int64_t incy, cudaMemcpyKind kind,
                      cudaStream_t stream, bool async) {
  if (n < 0 || elem <= 0 || incx <= 0 || incy <= 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (n == 0) return CUBLAS_STATUS_SUCCESS;
  return Copy2D(y, incy * elem, x, incx * elem, elem, n, kind, stream, async);
}

}  // namespace

#define REMORA_EXPORT extern "C"

REMORA_EXPORT cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
  auto v = View(handle);
  if (!v) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (stream == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *stream = reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(v->aux[Aux::kStream]));
  return CUBLAS_STATUS_SUCCESS;
}
REMORA_EXPORT cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t* mode) {
  auto v = View(handle);
  if (!v) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = (v->mode & 1u) ? CUBLAS_POINTER_MODE_DEVICE : CUBLAS_POINTER_MODE_HOST;
  return CUBLAS_STATUS_SUCCESS;
}
REMORA_EXPORT cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  auto v = View(handle);
  if (!v) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = static_cast<cublasMath_t>(v->aux[Aux::kMathMode]);
  return CUBLAS_STATUS_SUCCESS;
}
REMORA_EXPORT cublasStatus_t cublasGetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t* mode) {
  auto v = View(handle);
  if (!v) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = static_cast<cublasAtomicsMode_t>(v->aux[Aux::kAtomicsMode]);
  return CUBLAS_STATUS_SUCCESS;
}
REMORA_EXPORT cublasStatus_t cublasGetSmCountTarget(cublasHandle_t handle, int* target) {
  auto v = View(handle);
  if (!v) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (target == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *target = static_cast<int>(v->aux[Aux::kSmCountTarget]);
  return CUBLAS_STATUS_SUCCESS;
}

// The CUDA runtime version the application's cuBLAS would report: the one Remora's headers are.
REMORA_EXPORT size_t cublasGetCudartVersion() { return CUDART_VERSION; }

REMORA_EXPORT cublasStatus_t cublasGetVersion(int* version) {
  if (version == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  int v[3] = {};
  const libraryPropertyType props[3] = {MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL};
  for (int i = 0; i < 3; i++) {
    remora::Status st = remora::gen::cublas::cublasGetProperty(remora::shim::CallCtx{false, "cublasGetVersion"}, props[i], &v[i]);
    if (!st.ok()) return st.domain() == remora::Domain::kCublas ? static_cast<cublasStatus_t>(st.raw()) : CUBLAS_STATUS_NOT_INITIALIZED;
  }
  *version = v[0] * 10000 + v[1] * 100 + v[2];
  return CUBLAS_STATUS_SUCCESS;
}

REMORA_EXPORT const char* cublasGetStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "<unknown>";
}

REMORA_EXPORT const char* cublasGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "error detected trying to check the license";
  }
  return "<unknown>";
}

REMORA_EXPORT cublasStatus_t cublasSetMatrix(int rows, int cols, int elemSize, const void* A, int lda, void* B, int ldb) {
  return Matrix(rows, cols, elemSize, A, lda, B, ldb, cudaMemcpyHostToDevice, nullptr, false);
}
REMORA_EXPORT cublasStatus_t cublasGetMatrix(int rows, int cols, int elemSize, const void* A, int lda, void* B, int ldb) {
  return Matrix(rows, cols, elemSize, A, lda, B, ldb, cudaMemcpyDeviceToHost, nullptr, false);
}
REMORA_EXPORT cublasStatus_t cublasSetVector(int n, int elemSize, const void* x, int incx, void* y, int incy) {
  return Vector(n, elemSize, x, incx, y, incy, cudaMemcpyHostToDevice, nullptr, false);
}
REMORA_EXPORT cublasStatus_t cublasGetVector(int n, int elemSize, const void* x, int incx, void* y, int incy) {
  return Vector(n, elemSize, x, incx, y, incy, cudaMemcpyDeviceToHost, nullptr, false);
}
REMORA_EXPORT cublasStatus_t cublasSetMatrixAsync(int rows, int cols, int elemSize, const void* A, int lda, void* B, int ldb,
                                                  cudaStream_t stream) {
  return Matrix(rows, cols, elemSize, A, lda, B, ldb, cudaMemcpyHostToDevice, stream, true);
}
REMORA_EXPORT cublasStatus_t cublasGetMatrixAsync(int rows, int cols, int elemSize, const void* A, int lda, void* B, int ldb,
                                                  cudaStream_t stream) {
  return Matrix(rows, cols, elemSize, A, lda, B, ldb, cudaMemcpyDeviceToHost, stream, true);
}
REMORA_EXPORT cublasStatus_t cublasSetVectorAsync(int n, int elemSize, const void* x, int incx, void* y, int incy,
                                                  cudaStream_t stream) {
  return Vector(n, elemSize, x, incx, y, incy, cudaMemcpyHostToDevice, stream, true);
}
REMORA_EXPORT cublasStatus_t cublasGetVectorAsync(int n, int elemSize, const void* x, int incx, void* y, int incy,
                                                  cudaStream_t stream) {
  return Vector(n, elemSize, x, incx, y, incy, cudaMemcpyDeviceToHost, stream, true);
}
REMORA_EXPORT cublasStatus_t cublasSetMatrix_64(int64_t rows, int64_t cols, int64_t elemSize, const void* A, int64_t lda,
                                                void* B, int64_t ldb) {
  return Matrix(rows, cols, elemSize, A, lda, B, ldb, cudaMemcpyHostToDevice, nullptr, false);
}
REMORA_EXPORT cublasStatus_t cublasGetMatrix_64(int64_t rows, int64_t cols, int64_t elemSize, const void* A, int64_t lda,
                                                void* B, int64_t ldb) {
  return Matrix(rows, cols, elemSize, A, lda, B, ldb, cudaMemcpyDeviceToHost, nullptr, false);
}
REMORA_EXPORT cublasStatus_t cublasSetVector_64(int64_t n, int64_t elemSize, const void* x, int64_t incx, void* y, int64_t incy) {
  return Vector(n, elemSize, x, incx, y, incy, cudaMemcpyHostToDevice, nullptr, false);
}
REMORA_EXPORT cublasStatus_t cublasGetVector_64(int64_t n, int64_t elemSize, const void* x, int64_t incx, void* y, int64_t incy) {
  return Vector(n, elemSize, x, incx, y, incy, cudaMemcpyDeviceToHost, nullptr, false);
}
REMORA_EXPORT cublasStatus_t cublasSetMatrixAsync_64(int64_t rows, int64_t cols, int64_t elemSize, const void* A, int64_t lda,
                                                     void* B, int64_t ldb, cudaStream_t stream) {
  return Matrix(rows, cols, elemSize, A, lda, B, ldb, cudaMemcpyHostToDevice, stream, true);
}
REMORA_EXPORT cublasStatus_t cublasGetMatrixAsync_64(int64_t rows, int64_t cols, int64_t elemSize, const void* A, int64_t lda,
                                                     void* B, int64_t ldb, cudaStream_t stream) {
  return Matrix(rows, cols, elemSize, A, lda, B, ldb, cudaMemcpyDeviceToHost, stream, true);
}
REMORA_EXPORT cublasStatus_t cublasSetVectorAsync_64(int64_t n, int64_t elemSize, const void* x, int64_t incx, void* y,
                                                     int64_t incy, cudaStream_t stream) {
  return Vector(n, elemSize, x, incx, y, incy, cudaMemcpyHostToDevice, stream, true);
}
REMORA_EXPORT cublasStatus_t cublasGetVectorAsync_64(int64_t n, int64_t elemSize, const void* x, int64_t incx, void* y,
                                                     int64_t incy, cudaStream_t stream) {
  return Vector(n, elemSize, x, incx, y, incy, cudaMemcpyDeviceToHost, stream, true);
}
