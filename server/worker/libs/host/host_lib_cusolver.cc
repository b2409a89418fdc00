// The host backend's cuSOLVER: enough of the dense API, computed on the CPU over emulated
// device memory, for CI to test the whole path of its calls and of the parameter roles they
// use (info objects, params, workspace queries, host workspaces of the 64-bit API, batched
// pointer arrays) with real processes. Handles with their stream; params objects; Jacobi
// info objects with their tolerance, sweeps and residual; LU (getrf with partial pivoting,
// getrs), Cholesky (potrf, potrs, and their batched forms over arrays of device pointers) in
// single and double precision and in the 64-bit API; the symmetric eigensolver syevj (cyclic
// Jacobi). Its numbers are the emulation's own (textbook algorithms), not NVIDIA's; its
// workspace sizes too. Everything else answers CUSOLVER_STATUS_NOT_SUPPORTED (the generated
// default). Work runs in the handle's stream order; info and pivots are written there.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "blas_hooks.h"
#include "cusolver_api.h"
#include "worker/backend/host/host_device.h"
#include "worker/libs/host/host_libraries.h"

namespace remora::worker {
namespace {

using api::blas::Mat;

struct EmuSolver {
  DStream stream = nullptr;
};
struct EmuJacobi {
  double tolerance = 1e-7;
  int max_sweeps = 100;
  int sort = 1;
  double residual = 0;  // of the last solve (what the Get calls answer)
  int sweeps = 0;
};

// Bytes each emulated workspace query answers (the emulation needs none; the calls check the
// application's buffer against it, as the real library's sizes are).
constexpr int kWorkElems = 8;

class HostCusolver final : public gen::cusolver::Api {
 public:
  explicit HostCusolver(EmulatedDevice& d) : d_(d) {}
  ~HostCusolver() override {
    for (auto* h : handles_) delete h;
  }

  cusolverStatus_t cusolverDnCreate(cusolverDnHandle_t* h) override {
    auto* s = new EmuSolver;
    handles_.insert(s);
    *h = reinterpret_cast<cusolverDnHandle_t>(s);
    return CUSOLVER_STATUS_SUCCESS;
  }
  cusolverStatus_t cusolverDnDestroy(cusolverDnHandle_t h) override {
    auto* s = reinterpret_cast<EmuSolver*>(h);
    if (handles_.erase(s) == 0) return CUSOLVER_STATUS_NOT_INITIALIZED;
    delete s;
    return CUSOLVER_STATUS_SUCCESS;
  }
  cusolverStatus_t cusolverDnSetStream(cusolverDnHandle_t h, cudaStream_t stream) override {
    EmuSolver* s = Of(h);
    if (s == nullptr) return CUSOLVER_STATUS_NOT_INITIALIZED;
    s->stream = static_cast<DStream>(stream);
    return CUSOLVER_STATUS_SUCCESS;
  }
  cusolverStatus_t cusolverGetVersion(int* v) override {
    *v = CUSOLVER_VERSION;
    return CUSOLVER_STATUS_SUCCESS;
  }
  cusolverStatus_t cusolverGetProperty(libraryPropertyType type, int* value) override {
    switch (type) {
      case MAJOR_VERSION: *value = CUSOLVER_VER_MAJOR; return CUSOLVER_STATUS_SUCCESS;
      case MINOR_VERSION: *value = CUSOLVER_VER_MINOR; return CUSOLVER_STATUS_SUCCESS;
      case PATCH_LEVEL: *value = CUSOLVER_VER_PATCH; return CUSOLVER_STATUS_SUCCESS;
    }
    return CUSOLVER_STATUS_INVALID_VALUE;
  }
  cusolverStatus_t cusolverDnCreateParams(cusolverDnParams_t* p) override {
    *p = reinterpret_cast<cusolverDnParams_t>(new int(0));
    params_.insert(*p);
    return CUSOLVER_STATUS_SUCCESS;
  }
  cusolverStatus_t cusolverDnDestroyParams(cusolverDnParams_t p) override {
    if (params_.erase(p) == 0) return CUSOLVER_STATUS_INVALID_VALUE;
    delete reinterpret_cast<int*>(p);
    return CUSOLVER_STATUS_SUCCESS;
  }
  cusolverStatus_t cusolverDnSetAdvOptions(cusolverDnParams_t p, cusolverDnFunction_t, cusolverAlgMode_t) override {
    return params_.count(p) ? CUSOLVER_STATUS_SUCCESS : CUSOLVER_STATUS_INVALID_VALUE;
  }

  // ---- Jacobi info objects ------------------------------------------------------------------
  cusolverStatus_t cusolverDnCreateSyevjInfo(syevjInfo_t* info) override { return NewJacobi(reinterpret_cast<void**>(info)); }
  cusolverStatus_t cusolverDnDestroySyevjInfo(syevjInfo_t info) override { return DropJacobi(info); }
  cusolverStatus_t cusolverDnXsyevjSetTolerance(syevjInfo_t info, double tol) override {
    EmuJacobi* j = Jacobi(info);
    if (j == nullptr || !(tol >= 0)) return CUSOLVER_STATUS_INVALID_VALUE;
    j->tolerance = tol;
    return CUSOLVER_STATUS_SUCCESS;
  }
  cusolverStatus_t cusolverDnXsyevjSetMaxSweeps(syevjInfo_t info, int sweeps) override {
    EmuJacobi* j = Jacobi(info);
    if (j == nullptr || sweeps <= 0) return CUSOLVER_STATUS_INVALID_VALUE;
    j->max_sweeps = sweeps;
    return CUSOLVER_STATUS_SUCCESS;
  }
  cusolverStatus_t cusolverDnXsyevjSetSortEig(syevjInfo_t info, int sort) override {
    EmuJacobi* j = Jacobi(info);
    if (j == nullptr) return CUSOLVER_STATUS_INVALID_VALUE;
    j->sort = sort;
    return CUSOLVER_STATUS_SUCCESS;
  }
  cusolverStatus_t cusolverDnXsyevjGetResidual(cusolverDnHandle_t h, syevjInfo_t info, double* residual) override {
    EmuJacobi* j = Jacobi(info);
    EmuSolver* s = Of(h);
    if (s == nullptr) return CUSOLVER_STATUS_NOT_INITIALIZED;
    if (j == nullptr) return CUSOLVER_STATUS_INVALID_VALUE;
    if (!d_.Synchronize(s->stream).ok()) return CUSOLVER_STATUS_EXECUTION_FAILED;
    *residual = j->residual;
    return CUSOLVER_STATUS_SUCCESS;
  }
  cusolverStatus_t cusolverDnXsyevjGetSweeps(cusolverDnHandle_t h, syevjInfo_t info, int* sweeps) override {
    EmuJacobi* j = Jacobi(info);
    EmuSolver* s = Of(h);
    if (s == nullptr) return CUSOLVER_STATUS_NOT_INITIALIZED;
    if (j == nullptr) return CUSOLVER_STATUS_INVALID_VALUE;
    if (!d_.Synchronize(s->stream).ok()) return CUSOLVER_STATUS_EXECUTION_FAILED;
    *sweeps = j->sweeps;
    return CUSOLVER_STATUS_SUCCESS;
  }
  cusolverStatus_t cusolverDnCreateGesvdjInfo(gesvdjInfo_t* info) override { return NewJacobi(reinterpret_cast<void**>(info)); }
  cusolverStatus_t cusolverDnDestroyGesvdjInfo(gesvdjInfo_t info) override { return DropJacobi(info); }

  // ---- syevj --------------------------------------------------------------------------------
  cusolverStatus_t cusolverDnSsyevj_bufferSize(cusolverDnHandle_t h, cusolverEigMode_t, cublasFillMode_t, int, const float*, int,
                                               const float*, int* lwork, syevjInfo_t info) override {
    return SizeAnswer(h, info, lwork);
  }
  cusolverStatus_t cusolverDnDsyevj_bufferSize(cusolverDnHandle_t h, cusolverEigMode_t, cublasFillMode_t, int, const double*, int,
                                               const double*, int* lwork, syevjInfo_t info) override {
    return SizeAnswer(h, info, lwork);
  }
  cusolverStatus_t cusolverDnSsyevj(cusolverDnHandle_t h, cusolverEigMode_t jobz, cublasFillMode_t uplo, int n, float* a, int lda, float* w,
                                    float* work, int lwork, int* info, syevjInfo_t params) override {
    return Syevj(h, jobz, uplo, n, a, lda, w, work, lwork, info, params);
  }
  cusolverStatus_t cusolverDnDsyevj(cusolverDnHandle_t h, cusolverEigMode_t jobz, cublasFillMode_t uplo, int n, double* a, int lda,
                                    double* w, double* work, int lwork, int* info, syevjInfo_t params) override {
    return Syevj(h, jobz, uplo, n, a, lda, w, work, lwork, info, params);
  }

  // ---- LU and Cholesky ----------------------------------------------------------------------
  cusolverStatus_t cusolverDnSgetrf_bufferSize(cusolverDnHandle_t h, int, int, float*, int, int* lwork) override {
    return SizeAnswer(h, nullptr, lwork);
  }
  cusolverStatus_t cusolverDnDgetrf_bufferSize(cusolverDnHandle_t h, int, int, double*, int, int* lwork) override {
    return SizeAnswer(h, nullptr, lwork);
  }
  cusolverStatus_t cusolverDnSgetrf(cusolverDnHandle_t h, int m, int n, float* a, int lda, float*, int* ipiv, int* info) override {
    return Getrf<float, int>(h, m, n, a, lda, ipiv, info);
  }
  cusolverStatus_t cusolverDnDgetrf(cusolverDnHandle_t h, int m, int n, double* a, int lda, double*, int* ipiv, int* info) override {
    return Getrf<double, int>(h, m, n, a, lda, ipiv, info);
  }
  cusolverStatus_t cusolverDnSgetrs(cusolverDnHandle_t h, cublasOperation_t t, int n, int nrhs, const float* a, int lda, const int* ipiv,
                                    float* b, int ldb, int* info) override {
    return Getrs<float, int>(h, t, n, nrhs, a, lda, ipiv, b, ldb, info);
  }
  cusolverStatus_t cusolverDnDgetrs(cusolverDnHandle_t h, cublasOperation_t t, int n, int nrhs, const double* a, int lda,
                                    const int* ipiv, double* b, int ldb, int* info) override {
    return Getrs<double, int>(h, t, n, nrhs, a, lda, ipiv, b, ldb, info);
  }
  cusolverStatus_t cusolverDnSpotrf_bufferSize(cusolverDnHandle_t h, cublasFillMode_t, int, float*, int, int* lwork) override {
    return SizeAnswer(h, nullptr, lwork);
  }
  cusolverStatus_t cusolverDnDpotrf_bufferSize(cusolverDnHandle_t h, cublasFillMode_t, int, double*, int, int* lwork) override {
    return SizeAnswer(h, nullptr, lwork);
  }
  cusolverStatus_t cusolverDnSpotrf(cusolverDnHandle_t h, cublasFillMode_t uplo, int n, float* a, int lda, float*, int, int* info) override {
    return Potrf<float>(h, uplo, n, a, lda, info);
  }
  cusolverStatus_t cusolverDnDpotrf(cusolverDnHandle_t h, cublasFillMode_t uplo, int n, double* a, int lda, double*, int,
                                    int* info) override {
    return Potrf<double>(h, uplo, n, a, lda, info);
  }
  cusolverStatus_t cusolverDnSpotrs(cusolverDnHandle_t h, cublasFillMode_t uplo, int n, int nrhs, const float* a, int lda, float* b,
                                    int ldb, int* info) override {
    return Potrs<float>(h, uplo, n, nrhs, a, lda, b, ldb, info);
  }
  cusolverStatus_t cusolverDnDpotrs(cusolverDnHandle_t h, cublasFillMode_t uplo, int n, int nrhs, const double* a, int lda, double* b,
                                    int ldb, int* info) override {
    return Potrs<double>(h, uplo, n, nrhs, a, lda, b, ldb, info);
  }
  cusolverStatus_t cusolverDnSpotrfBatched(cusolverDnHandle_t h, cublasFillMode_t uplo, int n, float** a, int lda, int* info,
                                           int batch) override {
    return PotrfBatched<float>(h, uplo, n, a, lda, info, batch);
  }
  cusolverStatus_t cusolverDnDpotrfBatched(cusolverDnHandle_t h, cublasFillMode_t uplo, int n, double** a, int lda, int* info,
                                           int batch) override {
    return PotrfBatched<double>(h, uplo, n, a, lda, info, batch);
  }
  cusolverStatus_t cusolverDnSpotrsBatched(cusolverDnHandle_t h, cublasFillMode_t uplo, int n, int nrhs, float** a, int lda, float** b,
                                           int ldb, int* info, int batch) override {
    return PotrsBatched<float>(h, uplo, n, nrhs, a, lda, b, ldb, info, batch);
  }
  cusolverStatus_t cusolverDnDpotrsBatched(cusolverDnHandle_t h, cublasFillMode_t uplo, int n, int nrhs, double** a, int lda,
                                           double** b, int ldb, int* info, int batch) override {
    return PotrsBatched<double>(h, uplo, n, nrhs, a, lda, b, ldb, info, batch);
  }

  // ---- the 64-bit API (single and double precision) ----------------------------------------
  cusolverStatus_t cusolverDnXgetrf_bufferSize(cusolverDnHandle_t h, cusolverDnParams_t, int64_t, int64_t, cudaDataType, const void*,
                                               int64_t, cudaDataType, size_t* dev, size_t* host) override {
    return XSizes(h, dev, host);
  }
  cusolverStatus_t cusolverDnXpotrf_bufferSize(cusolverDnHandle_t h, cusolverDnParams_t, cublasFillMode_t, int64_t, cudaDataType,
                                               const void*, int64_t, cudaDataType, size_t* dev, size_t* host) override {
    return XSizes(h, dev, host);
  }
  cusolverStatus_t cusolverDnXgetrf(cusolverDnHandle_t h, cusolverDnParams_t, int64_t m, int64_t n, cudaDataType t, void* a, int64_t lda,
                                    int64_t* ipiv, cudaDataType, void*, size_t, void* host_work, size_t host_bytes, int* info) override {
    if (host_bytes > 0 && host_work == nullptr) return CUSOLVER_STATUS_INVALID_VALUE;  // the worker's own, when asked for
    if (t == CUDA_R_32F) return Getrf<float, int64_t>(h, m, n, static_cast<float*>(a), lda, ipiv, info);
    if (t == CUDA_R_64F) return Getrf<double, int64_t>(h, m, n, static_cast<double*>(a), lda, ipiv, info);
    return CUSOLVER_STATUS_NOT_SUPPORTED;
  }
  cusolverStatus_t cusolverDnXgetrs(cusolverDnHandle_t h, cusolverDnParams_t, cublasOperation_t tr, int64_t n, int64_t nrhs, cudaDataType ta,
                                    const void* a, int64_t lda, const int64_t* ipiv, cudaDataType tb, void* b, int64_t ldb,
                                    int* info) override {
    if (ta != tb) return CUSOLVER_STATUS_INVALID_VALUE;
    if (ta == CUDA_R_32F) return Getrs<float, int64_t>(h, tr, n, nrhs, static_cast<const float*>(a), lda, ipiv, static_cast<float*>(b), ldb, info);
    if (ta == CUDA_R_64F) return Getrs<double, int64_t>(h, tr, n, nrhs, static_cast<const double*>(a), lda, ipiv, static_cast<double*>(b), ldb, info);
    return CUSOLVER_STATUS_NOT_SUPPORTED;
  }
  cusolverStatus_t cusolverDnXpotrf(cusolverDnHandle_t h, cusolverDnParams_t, cublasFillMode_t uplo, int64_t n, cudaDataType t, void* a,
                                    int64_t lda, cudaDataType, void*, size_t, void* host_work, size_t host_bytes, int* info) override {
    if (host_bytes > 0 && host_work == nullptr) return CUSOLVER_STATUS_INVALID_VALUE;
    if (t == CUDA_R_32F) return Potrf<float>(h, uplo, static_cast<int>(n), static_cast<float*>(a), static_cast<int>(lda), info);
    if (t == CUDA_R_64F) return Potrf<double>(h, uplo, static_cast<int>(n), static_cast<double*>(a), static_cast<int>(lda), info);
    return CUSOLVER_STATUS_NOT_SUPPORTED;
  }
  cusolverStatus_t cusolverDnXpotrs(cusolverDnHandle_t h, cusolverDnParams_t, cublasFillMode_t uplo, int64_t n, int64_t nrhs,
                                    cudaDataType ta, const void* a, int64_t lda, cudaDataType tb, void* b, int64_t ldb, int* info) override {
    if (ta != tb) return CUSOLVER_STATUS_INVALID_VALUE;
    const int ni = static_cast<int>(n), ri = static_cast<int>(nrhs), la = static_cast<int>(lda), lb = static_cast<int>(ldb);
    if (ta == CUDA_R_32F) return Potrs<float>(h, uplo, ni, ri, static_cast<const float*>(a), la, static_cast<float*>(b), lb, info);
    if (ta == CUDA_R_64F) return Potrs<double>(h, uplo, ni, ri, static_cast<const double*>(a), la, static_cast<double*>(b), lb, info);
    return CUSOLVER_STATUS_NOT_SUPPORTED;
  }

 private:
  EmuSolver* Of(cusolverDnHandle_t h) {
    auto* s = reinterpret_cast<EmuSolver*>(h);
    return handles_.count(s) ? s : nullptr;
  }
  // (Info objects are shared with the work queued on streams: destroying one does not wait.)
  EmuJacobi* Jacobi(const void* p) {
    auto it = jacobi_.find(static_cast<const EmuJacobi*>(p));
    return it == jacobi_.end() ? nullptr : it->second.get();
  }
  cusolverStatus_t NewJacobi(void** out) {
    auto j = std::make_shared<EmuJacobi>();
    *out = j.get();
    jacobi_.emplace(j.get(), std::move(j));
    return CUSOLVER_STATUS_SUCCESS;
  }
  cusolverStatus_t DropJacobi(const void* p) {
    return jacobi_.erase(static_cast<const EmuJacobi*>(p)) ? CUSOLVER_STATUS_SUCCESS : CUSOLVER_STATUS_INVALID_VALUE;
  }
  cusolverStatus_t SizeAnswer(cusolverDnHandle_t h, const void* info, int* lwork) {
    if (Of(h) == nullptr) return CUSOLVER_STATUS_NOT_INITIALIZED;
    if (info != nullptr && Jacobi(info) == nullptr) return CUSOLVER_STATUS_INVALID_VALUE;
    *lwork = kWorkElems;
    return CUSOLVER_STATUS_SUCCESS;
  }
  cusolverStatus_t XSizes(cusolverDnHandle_t h, size_t* dev, size_t* host) {
    if (Of(h) == nullptr) return CUSOLVER_STATUS_NOT_INITIALIZED;
    *dev = kWorkElems * 8;
    *host = 64;  // a host workspace, so the worker's own is passed and checked
    return CUSOLVER_STATUS_SUCCESS;
  }
  template <typename T>
  T* Host(const T* p, uint64_t bytes) {
    if (bytes == 0) return nullptr;
    auto h = d_.Translate(reinterpret_cast<DevPtr>(p), bytes);
    return h.ok() ? reinterpret_cast<T*>(*h) : nullptr;
  }
  cusolverStatus_t Run(EmuSolver* s, std::function<void()> task) {
    return d_.InOrder(s->stream, std::move(task)).ok() ? CUSOLVER_STATUS_SUCCESS : CUSOLVER_STATUS_EXECUTION_FAILED;
  }

  template <typename T, typename I>
  cusolverStatus_t Getrf(cusolverDnHandle_t h, I m, I n, T* a, I lda, I* ipiv, int* info) {
    EmuSolver* s = Of(h);
    if (s == nullptr) return CUSOLVER_STATUS_NOT_INITIALIZED;
    if (m < 0 || n < 0 || lda < std::max<I>(1, m)) return CUSOLVER_STATUS_INVALID_VALUE;
    T* ha = Host(a, Mat(m, n, lda, sizeof(T)));
    I* hp = ipiv ? Host(ipiv, static_cast<uint64_t>(std::min(m, n)) * sizeof(I)) : nullptr;
    int* hi = Host(info, 4);
    if ((m > 0 && n > 0 && ha == nullptr) || hi == nullptr) return CUSOLVER_STATUS_INVALID_VALUE;
    return Run(s, [=] {
      int bad = 0;
      for (I k = 0; k < std::min(m, n); k++) {
        I p = k;
        if (hp != nullptr)
          for (I i = k + 1; i < m; i++)
            if (std::fabs(ha[i + k * lda]) > std::fabs(ha[p + k * lda])) p = i;
        if (hp != nullptr) hp[k] = p + 1;
        if (p != k)
          for (I j = 0; j < n; j++) std::swap(ha[k + j * lda], ha[p + j * lda]);
        const T piv = ha[k + k * lda];
        if (piv == T(0)) {
          if (bad == 0) bad = static_cast<int>(k) + 1;
          continue;
        }
        for (I i = k + 1; i < m; i++) {
          ha[i + k * lda] /= piv;
          for (I j = k + 1; j < n; j++) ha[i + j * lda] -= ha[i + k * lda] * ha[k + j * lda];
        }
      }
      *hi = bad;
    });
  }
  template <typename T, typename I>
  cusolverStatus_t Getrs(cusolverDnHandle_t h, cublasOperation_t t, I n, I nrhs, const T* a, I lda, const I* ipiv, T* b, I ldb, int* info) {
    EmuSolver* s = Of(h);
    if (s == nullptr) return CUSOLVER_STATUS_NOT_INITIALIZED;
    if (t != CUBLAS_OP_N) return CUSOLVER_STATUS_NOT_SUPPORTED;  // (the emulation solves A x = b only)
    if (n < 0 || nrhs < 0 || lda < std::max<I>(1, n) || ldb < std::max<I>(1, n)) return CUSOLVER_STATUS_INVALID_VALUE;
    const T* ha = Host(a, Mat(n, n, lda, sizeof(T)));
    const I* hp = ipiv ? Host(ipiv, static_cast<uint64_t>(n) * sizeof(I)) : nullptr;
    T* hb = Host(b, Mat(n, nrhs, ldb, sizeof(T)));
    int* hi = Host(info, 4);
    if ((n > 0 && (ha == nullptr || hb == nullptr)) || hi == nullptr) return CUSOLVER_STATUS_INVALID_VALUE;
    return Run(s, [=] {
      for (I r = 0; r < nrhs; r++) {
        T* x = hb + r * ldb;
        if (hp != nullptr)
          for (I i = 0; i < n; i++) std::swap(x[i], x[hp[i] - 1]);
        for (I i = 0; i < n; i++)
          for (I j = 0; j < i; j++) x[i] -= ha[i + j * lda] * x[j];
        for (I i = n; i-- > 0;) {
          for (I j = i + 1; j < n; j++) x[i] -= ha[i + j * lda] * x[j];
          x[i] /= ha[i + i * lda];
        }
      }
      *hi = 0;
    });
  }
  // Cholesky of one matrix in place (lower: A = L L^T; upper: A = U^T U); 0 or the order of
  // the first minor that is not positive definite.
  template <typename T>
  static int Chol(T* a, int n, int lda, cublasFillMode_t uplo) {
    auto at = [&](int i, int j) -> T& { return uplo == CUBLAS_FILL_MODE_LOWER ? a[i + j * lda] : a[j + i * lda]; };
    for (int j = 0; j < n; j++) {
      T d = at(j, j);
      for (int k = 0; k < j; k++) d -= at(j, k) * at(j, k);
      if (!(d > T(0))) return j + 1;
      d = std::sqrt(d);
      at(j, j) = d;
      for (int i = j + 1; i < n; i++) {
        T v = at(i, j);
        for (int k = 0; k < j; k++) v -= at(i, k) * at(j, k);
        at(i, j) = v / d;
      }
    }
    return 0;
  }
  template <typename T>
  static void CholSolve(const T* a, int n, int lda, cublasFillMode_t uplo, T* x) {
    auto at = [&](int i, int j) { return uplo == CUBLAS_FILL_MODE_LOWER ? a[i + j * lda] : a[j + i * lda]; };
    for (int i = 0; i < n; i++) {
      for (int k = 0; k < i; k++) x[i] -= at(i, k) * x[k];
      x[i] /= at(i, i);
    }
    for (int i = n; i-- > 0;) {
      for (int k = i + 1; k < n; k++) x[i] -= at(k, i) * x[k];
      x[i] /= at(i, i);
    }
  }
  template <typename T>
  cusolverStatus_t Potrf(cusolverDnHandle_t h, cublasFillMode_t uplo, int n, T* a, int lda, int* info) {
    EmuSolver* s = Of(h);
    if (s == nullptr) return CUSOLVER_STATUS_NOT_INITIALIZED;
    if (n < 0 || lda < std::max(1, n)) return CUSOLVER_STATUS_INVALID_VALUE;
    T* ha = Host(a, Mat(n, n, lda, sizeof(T)));
    int* hi = Host(info, 4);
    if ((n > 0 && ha == nullptr) || hi == nullptr) return CUSOLVER_STATUS_INVALID_VALUE;
    return Run(s, [=] { *hi = Chol(ha, n, lda, uplo); });
  }
  template <typename T>
  cusolverStatus_t Potrs(cusolverDnHandle_t h, cublasFillMode_t uplo, int n, int nrhs, const T* a, int lda, T* b, int ldb, int* info) {
    EmuSolver* s = Of(h);
    if (s == nullptr) return CUSOLVER_STATUS_NOT_INITIALIZED;
    if (n < 0 || nrhs < 0 || lda < std::max(1, n) || ldb < std::max(1, n)) return CUSOLVER_STATUS_INVALID_VALUE;
    const T* ha = Host(a, Mat(n, n, lda, sizeof(T)));
    T* hb = Host(b, Mat(n, nrhs, ldb, sizeof(T)));
    int* hi = Host(info, 4);
    if ((n > 0 && (ha == nullptr || hb == nullptr)) || hi == nullptr) return CUSOLVER_STATUS_INVALID_VALUE;
    return Run(s, [=] {
      for (int r = 0; r < nrhs; r++) CholSolve(ha, n, lda, uplo, hb + r * ldb);
      *hi = 0;
    });
  }
  // The batched forms read their array of device pointers in stream order, as on a GPU.
  template <typename T>
  cusolverStatus_t PotrfBatched(cusolverDnHandle_t h, cublasFillMode_t uplo, int n, T** a, int lda, int* info, int batch) {
    EmuSolver* s = Of(h);
    if (s == nullptr) return CUSOLVER_STATUS_NOT_INITIALIZED;
    if (n < 0 || batch < 0 || lda < std::max(1, n)) return CUSOLVER_STATUS_INVALID_VALUE;
    T** ptrs = Host(a, static_cast<uint64_t>(batch) * sizeof(T*));
    int* hi = Host(info, static_cast<uint64_t>(batch) * 4);
    if (batch > 0 && (ptrs == nullptr || hi == nullptr)) return CUSOLVER_STATUS_INVALID_VALUE;
    EmulatedDevice* d = &d_;
    return Run(s, [=] {
      for (int b = 0; b < batch; b++) {
        auto m = d->Translate(reinterpret_cast<DevPtr>(ptrs[b]), Mat(n, n, lda, sizeof(T)));
        hi[b] = m.ok() ? Chol(reinterpret_cast<T*>(*m), n, lda, uplo) : -1;
      }
    });
  }
  template <typename T>
  cusolverStatus_t PotrsBatched(cusolverDnHandle_t h, cublasFillMode_t uplo, int n, int nrhs, T** a, int lda, T** b, int ldb, int* info,
                                int batch) {
    EmuSolver* s = Of(h);
    if (s == nullptr) return CUSOLVER_STATUS_NOT_INITIALIZED;
    if (nrhs != 1) return CUSOLVER_STATUS_INVALID_VALUE;  // as cuSOLVER: one right-hand side
    T** pa = Host(a, static_cast<uint64_t>(batch) * sizeof(T*));
    T** pb = Host(b, static_cast<uint64_t>(batch) * sizeof(T*));
    int* hi = Host(info, 4);
    if (batch > 0 && (pa == nullptr || pb == nullptr || hi == nullptr)) return CUSOLVER_STATUS_INVALID_VALUE;
    EmulatedDevice* d = &d_;
    return Run(s, [=] {
      *hi = 0;
      for (int k = 0; k < batch; k++) {
        auto ma = d->Translate(reinterpret_cast<DevPtr>(pa[k]), Mat(n, n, lda, sizeof(T)));
        auto mb = d->Translate(reinterpret_cast<DevPtr>(pb[k]), Mat(n, 1, ldb, sizeof(T)));
        if (!ma.ok() || !mb.ok()) {
          *hi = -1;
          continue;
        }
        CholSolve(reinterpret_cast<const T*>(*ma), n, lda, uplo, reinterpret_cast<T*>(*mb));
      }
    });
  }
  // Cyclic Jacobi on the symmetric matrix (the triangle `uplo` names): eigenvalues into w
  // (ascending when sorted), eigenvectors into a's columns when asked for.
  template <typename T>
  cusolverStatus_t Syevj(cusolverDnHandle_t h, cusolverEigMode_t jobz, cublasFillMode_t uplo, int n, T* a, int lda, T* w, T*, int lwork,
                         int* info, syevjInfo_t params) {
    EmuSolver* s = Of(h);
    if (s == nullptr) return CUSOLVER_STATUS_NOT_INITIALIZED;
    std::shared_ptr<EmuJacobi> j;
    if (params != nullptr) {
      auto it = jacobi_.find(reinterpret_cast<const EmuJacobi*>(params));
      if (it != jacobi_.end()) j = it->second;
    }
    if ((params != nullptr && j == nullptr) || n < 0 || lda < std::max(1, n) || lwork < kWorkElems) return CUSOLVER_STATUS_INVALID_VALUE;
    T* ha = Host(a, Mat(n, n, lda, sizeof(T)));
    T* hw = Host(w, static_cast<uint64_t>(n) * sizeof(T));
    int* hi = Host(info, 4);
    if ((n > 0 && (ha == nullptr || hw == nullptr)) || hi == nullptr) return CUSOLVER_STATUS_INVALID_VALUE;
    const double tol = j ? j->tolerance : 1e-7;
    const int max_sweeps = j ? j->max_sweeps : 100;
    const bool sort = j ? j->sort != 0 : true;
    return Run(s, [=] {
      std::vector<double> m(static_cast<size_t>(n) * n), v(static_cast<size_t>(n) * n, 0.0);
      for (int c = 0; c < n; c++)
        for (int r = 0; r < n; r++) {
          const bool stored = uplo == CUBLAS_FILL_MODE_LOWER ? r >= c : r <= c;
          m[r + c * n] = stored ? ha[r + c * lda] : ha[c + r * lda];
        }
      for (int i = 0; i < n; i++) v[i + i * n] = 1;
      auto off = [&] {
        double sum = 0;
        for (int c = 0; c < n; c++)
          for (int r = 0; r < n; r++)
            if (r != c) sum += m[r + c * n] * m[r + c * n];
        return std::sqrt(sum);
      };
      double norm = 0;
      for (double e : m) norm += e * e;
      norm = std::sqrt(norm);
      int sweeps = 0;
      while (sweeps < max_sweeps && off() > tol * std::max(norm, 1e-300)) {
        sweeps++;
        for (int p = 0; p < n; p++)
          for (int q = p + 1; q < n; q++) {
            const double apq = m[p + q * n];
            if (apq == 0) continue;
            const double theta = (m[q + q * n] - m[p + p * n]) / (2 * apq);
            const double t = (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1));
            const double c = 1 / std::sqrt(t * t + 1), sn = t * c;
            for (int k = 0; k < n; k++) {  // columns p, q
              const double mkp = m[k + p * n], mkq = m[k + q * n];
              m[k + p * n] = c * mkp - sn * mkq;
              m[k + q * n] = sn * mkp + c * mkq;
            }
            for (int k = 0; k < n; k++) {  // rows p, q
              const double mpk = m[p + k * n], mqk = m[q + k * n];
              m[p + k * n] = c * mpk - sn * mqk;
              m[q + k * n] = sn * mpk + c * mqk;
            }
            for (int k = 0; k < n; k++) {
              const double vkp = v[k + p * n], vkq = v[k + q * n];
              v[k + p * n] = c * vkp - sn * vkq;
              v[k + q * n] = sn * vkp + c * vkq;
            }
          }
      }
      std::vector<int> order(n);
      for (int i = 0; i < n; i++) order[i] = i;
      if (sort) std::sort(order.begin(), order.end(), [&](int x, int y) { return m[x + x * n] < m[y + y * n]; });
      for (int i = 0; i < n; i++) hw[i] = static_cast<T>(m[order[i] + order[i] * n]);
      if (jobz == CUSOLVER_EIG_MODE_VECTOR)
        for (int c = 0; c < n; c++)
          for (int r = 0; r < n; r++) ha[r + c * lda] = static_cast<T>(v[r + order[c] * n]);
      const double residual = off();
      *hi = residual <= tol * std::max(norm, 1e-300) ? 0 : n + 1;
      if (j != nullptr) {
        j->residual = residual;
        j->sweeps = sweeps;
      }
    });
  }

  EmulatedDevice& d_;
  std::set<EmuSolver*> handles_;
  std::map<const EmuJacobi*, std::shared_ptr<EmuJacobi>> jacobi_;
  std::set<cusolverDnParams_t> params_;
};

}  // namespace

std::shared_ptr<void> MakeHostCusolver(EmulatedDevice& device) {
  auto api = std::make_shared<HostCusolver>(device);
  return std::shared_ptr<void>(api, static_cast<gen::cusolver::Api*>(api.get()));
}

}  // namespace remora::worker
