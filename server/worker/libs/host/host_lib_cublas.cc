// The host backend's cuBLAS: enough of the library, computed on the CPU over emulated device
// memory, for CI to test the whole path (client library, wire, worker checks, library call)
// with real processes. Handles with their stream, pointer mode and workspace; SGEMM, DGEMM,
// GemmEx (real 16/32/64-bit floats), their strided-batched and batched (pointer-array)
// forms, HGEMM; SAXPY, SSCAL and SDOT; in both pointer modes. Everything else answers
// CUBLAS_STATUS_NOT_SUPPORTED (the generated default). Work runs in stream order; a host
// scalar is read when the call is made, a device one when the stream gets there, as on a GPU.
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <vector>

#include "blas_hooks.h"
#include "cublas_api.h"  // the generated table (NVIDIA's cublas_api.h comes through cublas.h)
#include "worker/backend/host/host_device.h"
#include "worker/libs/host/host_libraries.h"
#include "worker/backend/host/host_numeric.h"

namespace remora::worker {
namespace {

using api::blas::Mat;
using api::blas::MatOp;
using api::blas::Strided;
using api::blas::TypeBytes;
using api::blas::Vec;
using numeric::MatrixView;

struct EmuBlas {
  DStream stream = nullptr;
  cublasPointerMode_t mode = CUBLAS_POINTER_MODE_HOST;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
  cublasAtomicsMode_t atomics = CUBLAS_ATOMICS_NOT_ALLOWED;
  int sm_count_target = 0;
  DevPtr workspace = 0;
  size_t workspace_bytes = 0;
};

// A scalar as the call passed it: read now (host pointer mode), or where the stream gets to
// it (device pointer mode).
struct Scalar {
  const std::byte* device = nullptr;
  double value = 0;
  cudaDataType type = CUDA_R_32F;
  double Get() const { return device ? numeric::Load(type, device, 0) : value; }
};

cudaDataType ScalarTypeOf(cublasComputeType_t c) {
  switch (c) {
    case CUBLAS_COMPUTE_16F:
    case CUBLAS_COMPUTE_16F_PEDANTIC: return CUDA_R_16F;
    case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC: return CUDA_R_64F;
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
    case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF:
    case CUBLAS_COMPUTE_32F_FAST_TF32: return CUDA_R_32F;
    default: return CUDA_R_8I;  // not emulated
  }
}

class HostCublas final : public gen::cublas::Api {
 public:
  explicit HostCublas(EmulatedDevice& d) : d_(d) {}
  ~HostCublas() override {
    for (EmuBlas* b : handles_) {
      d_.NoteBlasHandle(b, false);
      delete b;
    }
  }

  cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) override {
    auto* b = new EmuBlas;
    handles_.insert(b);
    d_.NoteBlasHandle(b, true);
    *handle = reinterpret_cast<cublasHandle_t>(b);
    return CUBLAS_STATUS_SUCCESS;
  }
  cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) override {
    auto* b = reinterpret_cast<EmuBlas*>(handle);
    if (handles_.erase(b) == 0) return CUBLAS_STATUS_NOT_INITIALIZED;
    d_.NoteBlasHandle(b, false);
    delete b;
    return CUBLAS_STATUS_SUCCESS;
  }
  cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) override {
    EmuBlas* b = Of(handle);
    if (!b) return CUBLAS_STATUS_NOT_INITIALIZED;
    b->stream = stream;
    b->workspace = 0;  // as cuBLAS: back to the default workspace pool
    b->workspace_bytes = 0;
    return CUBLAS_STATUS_SUCCESS;
  }
  cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode) override {
    EmuBlas* b = Of(handle);
    if (!b) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE) return CUBLAS_STATUS_INVALID_VALUE;
    b->mode = mode;
    return CUBLAS_STATUS_SUCCESS;
  }
  cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) override {
    EmuBlas* b = Of(handle);
    if (!b) return CUBLAS_STATUS_NOT_INITIALIZED;
    b->math = mode;
    return CUBLAS_STATUS_SUCCESS;
  }
  cublasStatus_t cublasSetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t mode) override {
    EmuBlas* b = Of(handle);
    if (!b) return CUBLAS_STATUS_NOT_INITIALIZED;
    b->atomics = mode;
    return CUBLAS_STATUS_SUCCESS;
  }
  cublasStatus_t cublasSetSmCountTarget(cublasHandle_t handle, int target) override {
    EmuBlas* b = Of(handle);
    if (!b) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (target < 0) return CUBLAS_STATUS_INVALID_VALUE;
    b->sm_count_target = target;
    return CUBLAS_STATUS_SUCCESS;
  }
  cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) override {
    EmuBlas* b = Of(handle);
    if (!b) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (bytes > 0 && !d_.Translate(reinterpret_cast<DevPtr>(workspace), bytes).ok()) return CUBLAS_STATUS_INVALID_VALUE;
    b->workspace = reinterpret_cast<DevPtr>(workspace);
    b->workspace_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
  }
  cublasStatus_t cublasGetVersion_v2(cublasHandle_t handle, int* version) override {
    if (handle != nullptr && !Of(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;  // (NULL is legal, as in cuBLAS)
    *version = CUBLAS_VERSION;
    return CUBLAS_STATUS_SUCCESS;
  }
  cublasStatus_t cublasGetProperty(libraryPropertyType type, int* value) override {
    switch (type) {
      case MAJOR_VERSION: *value = CUBLAS_VER_MAJOR; return CUBLAS_STATUS_SUCCESS;
      case MINOR_VERSION: *value = CUBLAS_VER_MINOR; return CUBLAS_STATUS_SUCCESS;
      case PATCH_LEVEL: *value = CUBLAS_VER_PATCH; return CUBLAS_STATUS_SUCCESS;
    }
    return CUBLAS_STATUS_INVALID_VALUE;
  }

  // ---- GEMM --------------------------------------------------------------------------------
  cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta,
                                float* C, int ldc) override {
    return GemmStrided(h, ta, tb, m, n, k, alpha, CUDA_R_32F, A, CUDA_R_32F, lda, 0, B, CUDA_R_32F, ldb, 0, beta, C,
                       CUDA_R_32F, ldc, 0, 1);
  }
  cublasStatus_t cublasDgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                const double* alpha, const double* A, int lda, const double* B, int ldb, const double* beta,
                                double* C, int ldc) override {
    return GemmStrided(h, ta, tb, m, n, k, alpha, CUDA_R_64F, A, CUDA_R_64F, lda, 0, B, CUDA_R_64F, ldb, 0, beta, C,
                       CUDA_R_64F, ldc, 0, 1);
  }
  cublasStatus_t cublasHgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                             const __half* alpha, const __half* A, int lda, const __half* B, int ldb, const __half* beta,
                             __half* C, int ldc) override {
    return GemmStrided(h, ta, tb, m, n, k, alpha, CUDA_R_16F, A, CUDA_R_16F, lda, 0, B, CUDA_R_16F, ldb, 0, beta, C,
                       CUDA_R_16F, ldc, 0, 1);
  }
  cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                              const void* alpha, const void* A, cudaDataType at, int lda, const void* B, cudaDataType bt, int ldb,
                              const void* beta, void* C, cudaDataType ct, int ldc, cublasComputeType_t compute,
                              cublasGemmAlgo_t) override {
    return GemmStrided(h, ta, tb, m, n, k, alpha, ScalarTypeOf(compute), A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1);
  }
  cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                           const float* alpha, const float* A, int lda, long long sa, const float* B, int ldb,
                                           long long sb, const float* beta, float* C, int ldc, long long sc, int batch) override {
    return GemmStrided(h, ta, tb, m, n, k, alpha, CUDA_R_32F, A, CUDA_R_32F, lda, sa, B, CUDA_R_32F, ldb, sb, beta, C,
                       CUDA_R_32F, ldc, sc, batch);
  }
  cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                           const double* alpha, const double* A, int lda, long long sa, const double* B, int ldb,
                                           long long sb, const double* beta, double* C, int ldc, long long sc, int batch) override {
    return GemmStrided(h, ta, tb, m, n, k, alpha, CUDA_R_64F, A, CUDA_R_64F, lda, sa, B, CUDA_R_64F, ldb, sb, beta, C,
                       CUDA_R_64F, ldc, sc, batch);
  }
  cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                            const void* alpha, const void* A, cudaDataType at, int lda, long long sa,
                                            const void* B, cudaDataType bt, int ldb, long long sb, const void* beta, void* C,
                                            cudaDataType ct, int ldc, long long sc, int batch, cublasComputeType_t compute,
                                            cublasGemmAlgo_t) override {
    return GemmStrided(h, ta, tb, m, n, k, alpha, ScalarTypeOf(compute), A, at, lda, sa, B, bt, ldb, sb, beta, C, ct, ldc, sc, batch);
  }
  cublasStatus_t cublasSgemmBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                    const float* alpha, const float* const A[], int lda, const float* const B[], int ldb,
                                    const float* beta, float* const C[], int ldc, int batch) override {
    return GemmArrays(h, ta, tb, m, n, k, alpha, CUDA_R_32F, Ptrs(A), CUDA_R_32F, lda, Ptrs(B), CUDA_R_32F, ldb, beta, Ptrs(C),
                      CUDA_R_32F, ldc, batch);
  }
  cublasStatus_t cublasDgemmBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                    const double* alpha, const double* const A[], int lda, const double* const B[], int ldb,
                                    const double* beta, double* const C[], int ldc, int batch) override {
    return GemmArrays(h, ta, tb, m, n, k, alpha, CUDA_R_64F, Ptrs(A), CUDA_R_64F, lda, Ptrs(B), CUDA_R_64F, ldb, beta, Ptrs(C),
                      CUDA_R_64F, ldc, batch);
  }
  cublasStatus_t cublasGemmBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                     const void* alpha, const void* const A[], cudaDataType at, int lda, const void* const B[],
                                     cudaDataType bt, int ldb, const void* beta, void* const C[], cudaDataType ct, int ldc,
                                     int batch, cublasComputeType_t compute, cublasGemmAlgo_t) override {
    return GemmArrays(h, ta, tb, m, n, k, alpha, ScalarTypeOf(compute), A, at, lda, B, bt, ldb, beta, Ptrs(C), ct, ldc, batch);
  }

  // ---- level 1 -------------------------------------------------------------------------------
  cublasStatus_t cublasSaxpy_v2(cublasHandle_t h, int n, const float* alpha, const float* x, int incx, float* y,
                                int incy) override {
    EmuBlas* b = Of(h);
    if (!b) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (n <= 0) return CUBLAS_STATUS_SUCCESS;
    Scalar a;
    std::byte *hx, *hy;
    if (!GetScalar(b, alpha, CUDA_R_32F, &a) || !Host(x, Vec(n, incx, 4), &hx) || !Host(y, Vec(n, incy, 4), &hy))
      return CUBLAS_STATUS_INVALID_VALUE;
    return Run(b, [=] {
      double av = a.Get();
      for (int i = 0; i < n; i++) {
        int64_t ix = incx >= 0 ? int64_t{i} * incx : int64_t{n - 1 - i} * -incx;
        int64_t iy = incy >= 0 ? int64_t{i} * incy : int64_t{n - 1 - i} * -incy;
        numeric::Store(CUDA_R_32F, hy, iy, numeric::Load(CUDA_R_32F, hy, iy) + av * numeric::Load(CUDA_R_32F, hx, ix));
      }
    });
  }
  cublasStatus_t cublasSscal_v2(cublasHandle_t h, int n, const float* alpha, float* x, int incx) override {
    EmuBlas* b = Of(h);
    if (!b) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (n <= 0 || incx <= 0) return CUBLAS_STATUS_SUCCESS;
    Scalar a;
    std::byte* hx;
    if (!GetScalar(b, alpha, CUDA_R_32F, &a) || !Host(x, Vec(n, incx, 4), &hx)) return CUBLAS_STATUS_INVALID_VALUE;
    return Run(b, [=] {
      double av = a.Get();
      for (int i = 0; i < n; i++) numeric::Store(CUDA_R_32F, hx, int64_t{i} * incx, av * numeric::Load(CUDA_R_32F, hx, int64_t{i} * incx));
    });
  }
  cublasStatus_t cublasSdot_v2(cublasHandle_t h, int n, const float* x, int incx, const float* y, int incy,
                               float* result) override {
    EmuBlas* b = Of(h);
    if (!b) return CUBLAS_STATUS_NOT_INITIALIZED;
    std::byte *hx = nullptr, *hy = nullptr, *hr = nullptr;
    if (n > 0 && (!Host(x, Vec(n, incx, 4), &hx) || !Host(y, Vec(n, incy, 4), &hy))) return CUBLAS_STATUS_INVALID_VALUE;
    bool device = b->mode == CUBLAS_POINTER_MODE_DEVICE;
    if (device && !Host(result, 4, &hr)) return CUBLAS_STATUS_INVALID_VALUE;
    if (!device) hr = reinterpret_cast<std::byte*>(result);
    cublasStatus_t st = Run(b, [=] {
      double acc = 0;
      for (int i = 0; i < n; i++) {
        int64_t ix = incx >= 0 ? int64_t{i} * incx : int64_t{n - 1 - i} * -incx;
        int64_t iy = incy >= 0 ? int64_t{i} * incy : int64_t{n - 1 - i} * -incy;
        acc += numeric::Load(CUDA_R_32F, hx, ix) * numeric::Load(CUDA_R_32F, hy, iy);
      }
      numeric::Store(CUDA_R_32F, hr, 0, acc);
    });
    // A host result is there when the call returns (cuBLAS waits for it too).
    if (st == CUBLAS_STATUS_SUCCESS && !device && !d_.Synchronize(b->stream).ok()) return CUBLAS_STATUS_EXECUTION_FAILED;
    return st;
  }

 private:
  // A device array of device pointers, whatever they point to (it is only translated).
  template <typename T>
  static const void* const* Ptrs(T* const* a) {
    return reinterpret_cast<const void* const*>(a);
  }
  template <typename T>
  static const void* const* Ptrs(const T* const* a) {
    return reinterpret_cast<const void* const*>(a);
  }
  EmuBlas* Of(cublasHandle_t h) {
    auto* b = reinterpret_cast<EmuBlas*>(h);
    return handles_.count(b) ? b : nullptr;
  }
  // Host view of `bytes` of emulated device memory at `p` (nothing to view when empty).
  bool Host(const void* p, uint64_t bytes, std::byte** out) {
    if (bytes == 0) {
      *out = nullptr;
      return true;
    }
    auto h = d_.Translate(reinterpret_cast<DevPtr>(p), bytes);
    if (!h.ok()) return false;
    *out = *h;
    return true;
  }
  bool GetScalar(EmuBlas* b, const void* p, cudaDataType t, Scalar* s) {
    s->type = t;
    if (p == nullptr) return false;
    if (b->mode == CUBLAS_POINTER_MODE_DEVICE) {
      std::byte* h;
      if (!Host(p, TypeBytes(t), &h)) return false;
      s->device = h;
      return true;
    }
    s->value = numeric::Load(t, p, 0);
    return true;
  }
  cublasStatus_t Run(EmuBlas* b, std::function<void()> task) {
    return d_.InOrder(b->stream, std::move(task)).ok() ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
  }
  static bool Emulated(cudaDataType at, cudaDataType bt, cudaDataType ct, cudaDataType st) {
    return numeric::Supported(at) && numeric::Supported(bt) && numeric::Supported(ct) && numeric::Supported(st) &&
           at != CUDA_R_32I && ct != CUDA_R_32I;
  }
  static bool BadDims(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k, int64_t lda,
                      int64_t ldb, int64_t ldc) {
    int64_t arows = ta == CUBLAS_OP_N ? m : k, brows = tb == CUBLAS_OP_N ? k : n;
    return m < 0 || n < 0 || k < 0 || lda < std::max<int64_t>(1, arows) || ldb < std::max<int64_t>(1, brows) ||
           ldc < std::max<int64_t>(1, m) || (ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T);
  }

  cublasStatus_t GemmStrided(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
                             const void* alpha, cudaDataType st, const void* A, cudaDataType at, int64_t lda, int64_t sa,
                             const void* B, cudaDataType bt, int64_t ldb, int64_t sb, const void* beta, void* C,
                             cudaDataType ct, int64_t ldc, int64_t sc, int64_t batch) {
    EmuBlas* b = Of(h);
    if (!b) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!Emulated(at, bt, ct, st)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (BadDims(ta, tb, m, n, k, lda, ldb, ldc) || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
    Scalar a, be;
    std::byte *ha, *hb, *hc;
    if (!GetScalar(b, alpha, st, &a) || !GetScalar(b, beta, st, &be) ||
        !Host(A, Strided(MatOp(ta, m, k, lda, TypeBytes(at)), sa, batch, TypeBytes(at)), &ha) ||
        !Host(B, Strided(MatOp(tb, k, n, ldb, TypeBytes(bt)), sb, batch, TypeBytes(bt)), &hb) ||
        !Host(C, Strided(Mat(m, n, ldc, TypeBytes(ct)), sc, batch, TypeBytes(ct)), &hc))
      return CUBLAS_STATUS_INVALID_VALUE;
    return Run(b, [=] {
      double av = a.Get(), bv = be.Get();
      for (int64_t i = 0; i < batch; i++) {
        MatrixView va{ha + i * sa * static_cast<int64_t>(TypeBytes(at)), at, lda, ta != CUBLAS_OP_N};
        MatrixView vb{hb + i * sb * static_cast<int64_t>(TypeBytes(bt)), bt, ldb, tb != CUBLAS_OP_N};
        MatrixView vc{hc + i * sc * static_cast<int64_t>(TypeBytes(ct)), ct, ldc, false};
        numeric::Gemm(m, n, k, av, va, vb, bv, vc);
      }
    });
  }

  cublasStatus_t GemmArrays(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
                            const void* alpha, cudaDataType st, const void* const* A, cudaDataType at, int64_t lda,
                            const void* const* B, cudaDataType bt, int64_t ldb, const void* beta, const void* const* C,
                            cudaDataType ct, int64_t ldc, int64_t batch) {
    EmuBlas* b = Of(h);
    if (!b) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!Emulated(at, bt, ct, st)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (BadDims(ta, tb, m, n, k, lda, ldb, ldc) || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
    Scalar a, be;
    if (!GetScalar(b, alpha, st, &a) || !GetScalar(b, beta, st, &be)) return CUBLAS_STATUS_INVALID_VALUE;
    // The pointer arrays were read in stream order by the worker's check (the stream is idle
    // now): translate every operand at once.
    std::byte *pa, *pb, *pc;
    uint64_t array = static_cast<uint64_t>(batch) * sizeof(void*);
    if (!Host(A, array, &pa) || !Host(B, array, &pb) || !Host(C, array, &pc)) return CUBLAS_STATUS_INVALID_VALUE;
    std::vector<MatrixView> va, vb, vc;
    for (int64_t i = 0; i < batch; i++) {
      const void *ea, *eb, *ec;
      std::memcpy(&ea, pa + i * 8, 8);
      std::memcpy(&eb, pb + i * 8, 8);
      std::memcpy(&ec, pc + i * 8, 8);
      std::byte *ha, *hb, *hc;
      if (!Host(ea, MatOp(ta, m, k, lda, TypeBytes(at)), &ha) || !Host(eb, MatOp(tb, k, n, ldb, TypeBytes(bt)), &hb) ||
          !Host(ec, Mat(m, n, ldc, TypeBytes(ct)), &hc))
        return CUBLAS_STATUS_INVALID_VALUE;
      va.push_back({ha, at, lda, ta != CUBLAS_OP_N});
      vb.push_back({hb, bt, ldb, tb != CUBLAS_OP_N});
      vc.push_back({hc, ct, ldc, false});
    }
    return Run(b, [=] {
      double av = a.Get(), bv = be.Get();
      for (size_t i = 0; i < va.size(); i++) numeric::Gemm(m, n, k, av, va[i], vb[i], bv, vc[i]);
    });
  }

  EmulatedDevice& d_;
  std::set<EmuBlas*> handles_;
};

}  // namespace

std::shared_ptr<void> MakeHostCublas(EmulatedDevice& device) {
  auto api = std::make_shared<HostCublas>(device);
  return std::shared_ptr<void>(api, static_cast<gen::cublas::Api*>(api.get()));
}

}  // namespace remora::worker
