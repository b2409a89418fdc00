// cuBLASXt in the client (protocol/api/cublas.api: custom), on top of the handle API and the
// runtime of this process, both remoted: an Xt handle is a cuBLAS handle on the first device
// cublasXtDeviceSelect names (the current device's until then). A level-3 call's matrices may
// be host or device memory, as in cuBLASXt: each host matrix is staged whole into device
// memory of the tenant (rows x columns, packed), the handle API's call runs on the staged
// copies, the outputs are copied back, and the staging is freed before the call returns
// (cuBLASXt's calls block, as they do natively). Not tiled: a call's host matrices must fit the
// tenant's GPU memory (else CUBLAS_STATUS_ALLOC_FAILED); the work is not split over several
// GPUs, and a CPU share (cublasXtSetCpuRatio) is accepted and not used: the GPU does all.
// Thread-safe: handles are looked up under a mutex; one handle's calls are the caller's to
// order, as in cuBLASXt.
#include <cublasXt.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <mutex>
#include <set>
#include <vector>

namespace {

struct XtHandle {
  cublasHandle_t blas = nullptr;
  int device = 0;
  int block_dim = 1024;  // cuBLASXt's default tile size (only reported: Remora does not tile)
  cublasXtPinnedMemMode_t pinning = CUBLASXT_PINNING_DISABLED;
};

std::mutex g_mu;
std::set<XtHandle*> g_handles;

XtHandle* Live(cublasXtHandle_t h) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto* x = reinterpret_cast<XtHandle*>(h);
  return g_handles.count(x) ? x : nullptr;
}

// Makes `device` current for the scope (and the previous one current again after).
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    ok_ = cudaGetDevice(&old_) == cudaSuccess && cudaSetDevice(device) == cudaSuccess;
  }
  ~DeviceScope() {
    if (ok_) (void)cudaSetDevice(old_);
  }
  bool ok() const { return ok_; }

 private:
  int old_ = 0;
  bool ok_ = false;
};

// One matrix of a call: the caller's (host or device) and what the handle API gets.
class Operand {
 public:
  Operand(const void* p, size_t rows, size_t cols, size_t ld, size_t elem, bool out)
      : p_(const_cast<void*>(p)), rows_(rows), cols_(cols), ld_(ld), elem_(elem), out_(out) {}
  Operand(const Operand&) = delete;
  ~Operand() {
    if (staged_ != nullptr) (void)cudaFree(staged_);
  }
  // Device memory stays where it is; host memory is copied into a packed device copy.
  cublasStatus_t Stage() {
    if (p_ == nullptr || rows_ == 0 || cols_ == 0) return CUBLAS_STATUS_SUCCESS;
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p_) == cudaSuccess && (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged))
      return CUBLAS_STATUS_SUCCESS;
    (void)cudaGetLastError();  // (an unregistered host pointer is not an error)
    if (ld_ < rows_) return CUBLAS_STATUS_INVALID_VALUE;
    if (cudaMalloc(&staged_, rows_ * cols_ * elem_) != cudaSuccess) {
      staged_ = nullptr;
      return CUBLAS_STATUS_ALLOC_FAILED;
    }
    if (cudaMemcpy2D(staged_, rows_ * elem_, p_, ld_ * elem_, rows_ * elem_, cols_, cudaMemcpyHostToDevice) != cudaSuccess)
      return CUBLAS_STATUS_MAPPING_ERROR;
    return CUBLAS_STATUS_SUCCESS;
  }
  // An output's staged copy back into the caller's host memory.
  cublasStatus_t Unstage() {
    if (staged_ == nullptr || !out_) return CUBLAS_STATUS_SUCCESS;
    return cudaMemcpy2D(p_, ld_ * elem_, staged_, rows_ * elem_, rows_ * elem_, cols_, cudaMemcpyDeviceToHost) == cudaSuccess
               ? CUBLAS_STATUS_SUCCESS
               : CUBLAS_STATUS_MAPPING_ERROR;
  }
  template <typename T>
  T* ptr() const {
    return static_cast<T*>(staged_ != nullptr ? staged_ : p_);
  }
  int ld() const { return static_cast<int>(staged_ != nullptr ? rows_ : ld_); }

 private:
  void* p_;
  size_t rows_, cols_, ld_, elem_;
  bool out_;
  void* staged_ = nullptr;
};

// Stages the operands, runs `call`, copies the outputs back.
template <typename Call>
cublasStatus_t Run(cublasXtHandle_t handle, std::initializer_list<Operand*> ops, Call&& call) {
  XtHandle* x = Live(handle);
  if (x == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  DeviceScope scope(x->device);
  if (!scope.ok()) return CUBLAS_STATUS_EXECUTION_FAILED;
  for (Operand* o : ops)
    if (cublasStatus_t st = o->Stage(); st != CUBLAS_STATUS_SUCCESS) return st;
  if (cublasStatus_t st = call(x->blas); st != CUBLAS_STATUS_SUCCESS) return st;
  for (Operand* o : ops)
    if (cublasStatus_t st = o->Unstage(); st != CUBLAS_STATUS_SUCCESS) return st;
  return cudaDeviceSynchronize() == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

size_t Rows(cublasOperation_t op, size_t r, size_t c) { return op == CUBLAS_OP_N ? r : c; }
size_t Cols(cublasOperation_t op, size_t r, size_t c) { return op == CUBLAS_OP_N ? c : r; }
size_t Side(cublasSideMode_t side, size_t m, size_t n) { return side == CUBLAS_SIDE_LEFT ? m : n; }
int I(size_t v) { return static_cast<int>(v); }

// A packed triangle (upper or lower, column-major) as the full symmetric matrix.
template <typename T>
std::vector<T> Unpack(const T* ap, size_t k, cublasFillMode_t uplo) {
  std::vector<T> full(k * k);
  size_t at = 0;
  for (size_t j = 0; j < k; j++) {
    const size_t lo = uplo == CUBLAS_FILL_MODE_UPPER ? 0 : j, hi = uplo == CUBLAS_FILL_MODE_UPPER ? j + 1 : k;
    for (size_t i = lo; i < hi; i++) {
      full[j * k + i] = ap[at];
      full[i * k + j] = ap[at];
      at++;
    }
  }
  return full;
}

}  // namespace

extern "C" cublasStatus_t cublasXtCreate(cublasXtHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* x = new XtHandle();
  if (cudaGetDevice(&x->device) != cudaSuccess) x->device = 0;
  cublasStatus_t st = cublasCreate_v2(&x->blas);
  if (st != CUBLAS_STATUS_SUCCESS) {
    delete x;
    return st;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  g_handles.insert(x);
  *handle = reinterpret_cast<cublasXtHandle_t>(x);
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasXtDestroy(cublasXtHandle_t handle) {
  XtHandle* x = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    x = reinterpret_cast<XtHandle*>(handle);
    if (!g_handles.erase(x)) return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  cublasStatus_t st = cublasDestroy_v2(x->blas);
  delete x;
  return st;
}

extern "C" cublasStatus_t cublasXtMaxBoards(int* nbGpuBoards) {
  if (nbGpuBoards == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  return cudaGetDeviceCount(nbGpuBoards) == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

extern "C" cublasStatus_t cublasXtGetNumBoards(int nbDevices, int* deviceId, int* nbBoards) {
  if (nbBoards == nullptr || nbDevices < 0 || (nbDevices > 0 && deviceId == nullptr)) return CUBLAS_STATUS_INVALID_VALUE;
  *nbBoards = nbDevices;  // each of the session's devices is a board of its own
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasXtDeviceSelect(cublasXtHandle_t handle, int nbDevices, int* deviceId) {
  XtHandle* x = Live(handle);
  if (x == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (nbDevices <= 0 || deviceId == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return CUBLAS_STATUS_NOT_INITIALIZED;
  for (int i = 0; i < nbDevices; i++)
    if (deviceId[i] < 0 || deviceId[i] >= count) return CUBLAS_STATUS_INVALID_VALUE;
  if (deviceId[0] == x->device) return CUBLAS_STATUS_SUCCESS;
  DeviceScope scope(deviceId[0]);
  if (!scope.ok()) return CUBLAS_STATUS_INVALID_VALUE;
  cublasHandle_t blas = nullptr;
  if (cublasStatus_t st = cublasCreate_v2(&blas); st != CUBLAS_STATUS_SUCCESS) return st;
  (void)cublasDestroy_v2(x->blas);
  x->blas = blas;
  x->device = deviceId[0];
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasXtSetBlockDim(cublasXtHandle_t handle, int blockDim) {
  XtHandle* x = Live(handle);
  if (x == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (blockDim <= 0) return CUBLAS_STATUS_INVALID_VALUE;
  x->block_dim = blockDim;
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasXtGetBlockDim(cublasXtHandle_t handle, int* blockDim) {
  XtHandle* x = Live(handle);
  if (x == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (blockDim == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *blockDim = x->block_dim;
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasXtGetPinningMemMode(cublasXtHandle_t handle, cublasXtPinnedMemMode_t* mode) {
  XtHandle* x = Live(handle);
  if (x == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = x->pinning;
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasXtSetPinningMemMode(cublasXtHandle_t handle, cublasXtPinnedMemMode_t mode) {
  XtHandle* x = Live(handle);
  if (x == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode != CUBLASXT_PINNING_DISABLED && mode != CUBLASXT_PINNING_ENABLED) return CUBLAS_STATUS_INVALID_VALUE;
  x->pinning = mode;
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasXtSetCpuRoutine(cublasXtHandle_t handle, cublasXtBlasOp_t op, cublasXtOpType_t type, void*) {
  if (Live(handle) == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  return op < 0 || op >= CUBLASXT_ROUTINE_MAX || type < 0 || type > CUBLASXT_DOUBLECOMPLEX ? CUBLAS_STATUS_INVALID_VALUE
                                                                                           : CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasXtSetCpuRatio(cublasXtHandle_t handle, cublasXtBlasOp_t op, cublasXtOpType_t type, float ratio) {
  if (Live(handle) == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (op < 0 || op >= CUBLASXT_ROUTINE_MAX || type < 0 || type > CUBLASXT_DOUBLECOMPLEX || ratio < 0.0f || ratio > 1.0f)
    return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

// ---- level 3 ---------------------------------------------------------------------------------

#define REMORA_XT_GEMM(X, T, V2)                                                                                                    \
  extern "C" cublasStatus_t cublasXt##X##gemm(cublasXtHandle_t h, cublasOperation_t ta, cublasOperation_t tb, size_t m, size_t n,   \
                                              size_t k, const T* alpha, const T* A, size_t lda, const T* B, size_t ldb,              \
                                              const T* beta, T* C, size_t ldc) {                                                    \
    Operand a(A, Rows(ta, m, k), Cols(ta, m, k), lda, sizeof(T), false), b(B, Rows(tb, k, n), Cols(tb, k, n), ldb, sizeof(T), false); \
    Operand c(C, m, n, ldc, sizeof(T), true);                                                                                        \
    return Run(h, {&a, &b, &c}, [&](cublasHandle_t x) {                                                                             \
      return V2(x, ta, tb, I(m), I(n), I(k), alpha, a.ptr<const T>(), a.ld(), b.ptr<const T>(), b.ld(), beta, c.ptr<T>(), c.ld());  \
    });                                                                                                                               \
  }
REMORA_XT_GEMM(S, float, cublasSgemm_v2)
REMORA_XT_GEMM(D, double, cublasDgemm_v2)
REMORA_XT_GEMM(C, cuComplex, cublasCgemm_v2)
REMORA_XT_GEMM(Z, cuDoubleComplex, cublasZgemm_v2)

#define REMORA_XT_SYMM(Name, T, V2)                                                                                                  \
  extern "C" cublasStatus_t Name(cublasXtHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo, size_t m, size_t n,              \
                                 const T* alpha, const T* A, size_t lda, const T* B, size_t ldb, const T* beta, T* C, size_t ldc) { \
    const size_t ka = Side(side, m, n);                                                                                              \
    Operand a(A, ka, ka, lda, sizeof(T), false), b(B, m, n, ldb, sizeof(T), false), c(C, m, n, ldc, sizeof(T), true);                \
    return Run(h, {&a, &b, &c}, [&](cublasHandle_t x) {                                                                             \
      return V2(x, side, uplo, I(m), I(n), alpha, a.ptr<const T>(), a.ld(), b.ptr<const T>(), b.ld(), beta, c.ptr<T>(), c.ld());     \
    });                                                                                                                               \
  }
REMORA_XT_SYMM(cublasXtSsymm, float, cublasSsymm_v2)
REMORA_XT_SYMM(cublasXtDsymm, double, cublasDsymm_v2)
REMORA_XT_SYMM(cublasXtCsymm, cuComplex, cublasCsymm_v2)
REMORA_XT_SYMM(cublasXtZsymm, cuDoubleComplex, cublasZsymm_v2)
REMORA_XT_SYMM(cublasXtChemm, cuComplex, cublasChemm_v2)
REMORA_XT_SYMM(cublasXtZhemm, cuDoubleComplex, cublasZhemm_v2)

#define REMORA_XT_SYRK(Name, T, S, V2)                                                                                               \
  extern "C" cublasStatus_t Name(cublasXtHandle_t h, cublasFillMode_t uplo, cublasOperation_t trans, size_t n, size_t k,            \
                                 const S* alpha, const T* A, size_t lda, const S* beta, T* C, size_t ldc) {                         \
    Operand a(A, Rows(trans, n, k), Cols(trans, n, k), lda, sizeof(T), false), c(C, n, n, ldc, sizeof(T), true);                     \
    return Run(h, {&a, &c}, [&](cublasHandle_t x) {                                                                                 \
      return V2(x, uplo, trans, I(n), I(k), alpha, a.ptr<const T>(), a.ld(), beta, c.ptr<T>(), c.ld());                              \
    });                                                                                                                               \
  }
REMORA_XT_SYRK(cublasXtSsyrk, float, float, cublasSsyrk_v2)
REMORA_XT_SYRK(cublasXtDsyrk, double, double, cublasDsyrk_v2)
REMORA_XT_SYRK(cublasXtCsyrk, cuComplex, cuComplex, cublasCsyrk_v2)
REMORA_XT_SYRK(cublasXtZsyrk, cuDoubleComplex, cuDoubleComplex, cublasZsyrk_v2)
REMORA_XT_SYRK(cublasXtCherk, cuComplex, float, cublasCherk_v2)
REMORA_XT_SYRK(cublasXtZherk, cuDoubleComplex, double, cublasZherk_v2)

// syr2k, her2k, syrkx, herkx: two n x k (or k x n) operands into C.
#define REMORA_XT_2K(Name, T, B_, V2)                                                                                                \
  extern "C" cublasStatus_t Name(cublasXtHandle_t h, cublasFillMode_t uplo, cublasOperation_t trans, size_t n, size_t k,            \
                                 const T* alpha, const T* A, size_t lda, const T* B, size_t ldb, const B_* beta, T* C, size_t ldc) { \
    Operand a(A, Rows(trans, n, k), Cols(trans, n, k), lda, sizeof(T), false);                                                       \
    Operand b(B, Rows(trans, n, k), Cols(trans, n, k), ldb, sizeof(T), false), c(C, n, n, ldc, sizeof(T), true);                     \
    return Run(h, {&a, &b, &c}, [&](cublasHandle_t x) {                                                                             \
      return V2(x, uplo, trans, I(n), I(k), alpha, a.ptr<const T>(), a.ld(), b.ptr<const T>(), b.ld(), beta, c.ptr<T>(), c.ld());    \
    });                                                                                                                               \
  }
REMORA_XT_2K(cublasXtSsyr2k, float, float, cublasSsyr2k_v2)
REMORA_XT_2K(cublasXtDsyr2k, double, double, cublasDsyr2k_v2)
REMORA_XT_2K(cublasXtCsyr2k, cuComplex, cuComplex, cublasCsyr2k_v2)
REMORA_XT_2K(cublasXtZsyr2k, cuDoubleComplex, cuDoubleComplex, cublasZsyr2k_v2)
REMORA_XT_2K(cublasXtCher2k, cuComplex, float, cublasCher2k_v2)
REMORA_XT_2K(cublasXtZher2k, cuDoubleComplex, double, cublasZher2k_v2)
REMORA_XT_2K(cublasXtSsyrkx, float, float, cublasSsyrkx)
REMORA_XT_2K(cublasXtDsyrkx, double, double, cublasDsyrkx)
REMORA_XT_2K(cublasXtCsyrkx, cuComplex, cuComplex, cublasCsyrkx)
REMORA_XT_2K(cublasXtZsyrkx, cuDoubleComplex, cuDoubleComplex, cublasZsyrkx)
REMORA_XT_2K(cublasXtCherkx, cuComplex, float, cublasCherkx)
REMORA_XT_2K(cublasXtZherkx, cuDoubleComplex, double, cublasZherkx)

#define REMORA_XT_TRSM(X, T, V2)                                                                                                     \
  extern "C" cublasStatus_t cublasXt##X##trsm(cublasXtHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo,                     \
                                              cublasOperation_t trans, cublasDiagType_t diag, size_t m, size_t n, const T* alpha,   \
                                              const T* A, size_t lda, T* B, size_t ldb) {                                           \
    const size_t ka = Side(side, m, n);                                                                                              \
    Operand a(A, ka, ka, lda, sizeof(T), false), b(B, m, n, ldb, sizeof(T), true);                                                   \
    return Run(h, {&a, &b}, [&](cublasHandle_t x) {                                                                                 \
      return V2(x, side, uplo, trans, diag, I(m), I(n), alpha, a.ptr<const T>(), a.ld(), b.ptr<T>(), b.ld());                        \
    });                                                                                                                               \
  }
REMORA_XT_TRSM(S, float, cublasStrsm_v2)
REMORA_XT_TRSM(D, double, cublasDtrsm_v2)
REMORA_XT_TRSM(C, cuComplex, cublasCtrsm_v2)
REMORA_XT_TRSM(Z, cuDoubleComplex, cublasZtrsm_v2)

#define REMORA_XT_TRMM(X, T, V2)                                                                                                     \
  extern "C" cublasStatus_t cublasXt##X##trmm(cublasXtHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo,                     \
                                              cublasOperation_t trans, cublasDiagType_t diag, size_t m, size_t n, const T* alpha,   \
                                              const T* A, size_t lda, const T* B, size_t ldb, T* C, size_t ldc) {                   \
    const size_t ka = Side(side, m, n);                                                                                              \
    Operand a(A, ka, ka, lda, sizeof(T), false), b(B, m, n, ldb, sizeof(T), false), c(C, m, n, ldc, sizeof(T), true);                \
    return Run(h, {&a, &b, &c}, [&](cublasHandle_t x) {                                                                             \
      return V2(x, side, uplo, trans, diag, I(m), I(n), alpha, a.ptr<const T>(), a.ld(), b.ptr<const T>(), b.ld(), c.ptr<T>(),      \
                c.ld());                                                                                                             \
    });                                                                                                                               \
  }
REMORA_XT_TRMM(S, float, cublasStrmm_v2)
REMORA_XT_TRMM(D, double, cublasDtrmm_v2)
REMORA_XT_TRMM(C, cuComplex, cublasCtrmm_v2)
REMORA_XT_TRMM(Z, cuDoubleComplex, cublasZtrmm_v2)

// spmm: A is a packed symmetric triangle in host memory, unpacked here and multiplied as symm.
#define REMORA_XT_SPMM(X, T, V2)                                                                                                     \
  extern "C" cublasStatus_t cublasXt##X##spmm(cublasXtHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo, size_t m, size_t n, \
                                              const T* alpha, const T* AP, const T* B, size_t ldb, const T* beta, T* C,             \
                                              size_t ldc) {                                                                         \
    if (AP == nullptr) return CUBLAS_STATUS_INVALID_VALUE;                                                                           \
    const size_t ka = Side(side, m, n);                                                                                              \
    std::vector<T> full = Unpack(AP, ka, uplo);                                                                                      \
    Operand a(full.data(), ka, ka, ka, sizeof(T), false), b(B, m, n, ldb, sizeof(T), false), c(C, m, n, ldc, sizeof(T), true);       \
    return Run(h, {&a, &b, &c}, [&](cublasHandle_t x) {                                                                             \
      return V2(x, side, uplo, I(m), I(n), alpha, a.ptr<const T>(), a.ld(), b.ptr<const T>(), b.ld(), beta, c.ptr<T>(), c.ld());     \
    });                                                                                                                               \
  }
REMORA_XT_SPMM(S, float, cublasSsymm_v2)
REMORA_XT_SPMM(D, double, cublasDsymm_v2)
REMORA_XT_SPMM(C, cuComplex, cublasCsymm_v2)
REMORA_XT_SPMM(Z, cuDoubleComplex, cublasZsymm_v2)
