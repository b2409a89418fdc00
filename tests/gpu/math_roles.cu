// The parameter roles of cuSOLVER and cuSPARSE that issue 42 added to Remora's generator,
// through the calls that use them, against CPU answers:
// - handles that read as positive intptr_t values (CuPy keeps them so);
// - cuSOLVER's Jacobi info objects: syevj of a symmetric matrix with known eigenvalues, with the
//   info object's tolerance and sweeps set and read back;
// - batched pointer arrays: potrfBatched and potrsBatched over device arrays of device pointers;
// - cuSPARSE's multi-phase buffers: SpGEMM (work estimation, compute, copy: each phase's buffer
//   first asked for with NULL) into a C whose arrays are set after its size is known, and SpSV
//   (analysis with its buffer, then solve without it) of a lower-triangular CSR matrix;
// - legacy matrix descriptors, their settings read back;
// - empty arrays: NULL with a zero extent passes (getrs of order 0).
// Under Remora also what it refuses before the library sees it: a pointer array holding an
// address the application never allocated, a multi-phase buffer freed between the phases, a
// descriptor handle the application never made. No kernels of its own: it runs natively, on a
// GPU server, and on Remora's host-emulated backend in CI (over shm and tcp), whose emulation
// of these calls computes the same answers (server/worker/libs/host/host_lib_cusolver.cc, host_lib_cusparse.cc).
#define GPU_TEST_NAME "math_roles"
#include <cusolverDn.h>
#include <cusparse.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "gpu_test.h"
#include "lib_test.h"

namespace {

using gpu_test::fail;

void Near(const char* what, double got, double want, double tol, int at) {
  if (!(std::fabs(got - want) <= tol * (1 + std::fabs(want)))) fail("%s[%d]: %g, expected %g", what, at, got, want);
}

// syevj of Q diag(1..n) Q^T (Q a Householder reflection): the eigenvalues are 1..n.
void Syevj(cusolverDnHandle_t h) {
  const int n = 6;
  std::vector<double> v(n), a(n * n);
  double vv = 0;
  for (int i = 0; i < n; i++) v[i] = 0.3 * i - 0.7, vv += v[i] * v[i];
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      double acc = 0;
      for (int k = 0; k < n; k++) {
        const double qik = (i == k) - 2 * v[i] * v[k] / vv, qjk = (j == k) - 2 * v[j] * v[k] / vv;
        acc += qik * (k + 1) * qjk;
      }
      a[i + j * n] = acc;
    }
  syevjInfo_t info = nullptr;
  CB(cusolverDnCreateSyevjInfo(&info));
  CB(cusolverDnXsyevjSetTolerance(info, 1e-12));
  CB(cusolverDnXsyevjSetMaxSweeps(info, 50));
  CB(cusolverDnXsyevjSetSortEig(info, 1));
  DeviceBuffer<double> da(a), dw(n);
  DeviceBuffer<int> dinfo(1);
  int lwork = 0;
  CB(cusolverDnDsyevj_bufferSize(h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, n, da.get(), n, dw.get(), &lwork, info));
  DeviceBuffer<double> work(lwork);
  CB(cusolverDnDsyevj(h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, n, da.get(), n, dw.get(), work.get(), lwork, dinfo.get(), info));
  auto w = dw.Read();
  if (dinfo.Read()[0] != 0) fail("syevj: info %d", dinfo.Read()[0]);
  for (int i = 0; i < n; i++) Near("syevj eigenvalue", w[i], i + 1, 1e-9, i);
  int sweeps = 0;
  double residual = -1;
  CB(cusolverDnXsyevjGetSweeps(h, info, &sweeps));
  CB(cusolverDnXsyevjGetResidual(h, info, &residual));
  if (sweeps <= 0 || sweeps > 50 || !(residual >= 0 && residual < 1e-6)) fail("syevj: %d sweeps, residual %g", sweeps, residual);
  CB(cusolverDnDestroySyevjInfo(info));
  gpu_test::info("syevj with an info object: eigenvalues 1..%d in %d sweeps, residual %.2g", n, sweeps, residual);
}

// potrfBatched and potrsBatched of three SPD systems through device arrays of device pointers.
// Empty arrays: a solve of order 0 with NULL matrices (CuPy's and PyTorch's empty arrays have
// no memory) reads and writes nothing and succeeds; under Remora a NULL matrix of order 2 is
// refused before the library sees it (natively undefined).
void Empty(cusolverDnHandle_t h) {
  DeviceBuffer<int> info(1);
  CB(cusolverDnDgetrs(h, CUBLAS_OP_N, 0, 1, nullptr, 1, nullptr, nullptr, 1, info.get()));
  CB(cusolverDnSgetrs(h, CUBLAS_OP_N, 0, 3, nullptr, 1, nullptr, nullptr, 1, info.get()));
  CK(cudaDeviceSynchronize());
  if (OnRemora()) {
    const cusolverStatus_t st = cusolverDnDgetrs(h, CUBLAS_OP_N, 2, 1, nullptr, 2, nullptr, nullptr, 2, info.get());
    if (st != CUSOLVER_STATUS_INVALID_VALUE) fail("getrs of order 2 with NULL matrices: status %d, not INVALID_VALUE", static_cast<int>(st));
    CK(cudaDeviceSynchronize());
  }
}

void Batched(cusolverDnHandle_t h) {
  const int n = 4, batch = 3;
  std::vector<DeviceBuffer<double>> as, bs;
  std::vector<std::vector<double>> a_host, b_host;
  for (int k = 0; k < batch; k++) {
    std::vector<double> a(n * n), b(n);
    for (int i = 0; i < n; i++) {
      for (int j = 0; j < n; j++) a[i + j * n] = (i == j ? n + k + 1.0 : 0.5 / (1 + i + j));
      b[i] = i - 1.5 + k;
    }
    a_host.push_back(a), b_host.push_back(b);
    as.emplace_back(a), bs.emplace_back(b);
  }
  std::vector<double*> pa, pb;
  for (int k = 0; k < batch; k++) pa.push_back(as[k].get()), pb.push_back(bs[k].get());
  DeviceBuffer<double*> dpa(pa), dpb(pb);
  DeviceBuffer<int> infos(batch), info(1);
  CB(cusolverDnDpotrfBatched(h, CUBLAS_FILL_MODE_LOWER, n, dpa.get(), n, infos.get(), batch));
  CB(cusolverDnDpotrsBatched(h, CUBLAS_FILL_MODE_LOWER, n, 1, dpa.get(), n, dpb.get(), n, info.get(), batch));
  for (int k = 0; k < batch; k++) {
    auto x = bs[k].Read();
    if (infos.Read()[k] != 0) fail("potrfBatched: info[%d] = %d", k, infos.Read()[k]);
    for (int i = 0; i < n; i++) {
      double acc = 0;
      for (int j = 0; j < n; j++) acc += a_host[k][i + j * n] * x[j];
      Near("potrsBatched residual", acc, b_host[k][i], 1e-9, k * n + i);
    }
  }
  if (OnRemora()) {
    // An array holding an address the application never allocated: refused before the library.
    std::vector<double*> forged = pa;
    forged[1] = reinterpret_cast<double*>(uintptr_t{0x7f0000000000});
    DeviceBuffer<double*> dforged(forged);
    cusolverStatus_t st = cusolverDnDpotrfBatched(h, CUBLAS_FILL_MODE_LOWER, n, dforged.get(), n, infos.get(), batch);
    cudaError_t e = cudaDeviceSynchronize();
    if (st == CUSOLVER_STATUS_SUCCESS && e == cudaSuccess) fail("a pointer array holding a forged address was accepted");
    (void)cudaGetLastError();
  }
  gpu_test::info("potrfBatched/potrsBatched over device arrays of device pointers%s", OnRemora() ? "; a forged pointer refused" : "");
}

struct Csr {
  int rows, cols;
  std::vector<int> off, col;
  std::vector<float> val;
};

Csr Make(int rows, int cols, unsigned seed, bool lower_triangular) {
  Csr m{rows, cols, {0}, {}, {}};
  for (int r = 0; r < rows; r++) {
    for (int c = 0; c < cols; c++) {
      seed = seed * 1103515245u + 12345u;
      const bool diag = lower_triangular && r == c;
      if (diag || (!(lower_triangular && c > r) && (seed >> 16) % 3 == 0)) {
        m.col.push_back(c);
        m.val.push_back(diag ? 2.0f + r : static_cast<float>((seed >> 8) % 7) - 3.0f);
      }
    }
    m.off.push_back(static_cast<int>(m.col.size()));
  }
  return m;
}

std::vector<double> Dense(const Csr& m) {
  std::vector<double> d(static_cast<size_t>(m.rows) * m.cols, 0.0);
  for (int r = 0; r < m.rows; r++)
    for (int e = m.off[r]; e < m.off[r + 1]; e++) d[static_cast<size_t>(r) * m.cols + m.col[e]] = m.val[e];
  return d;
}

// C = A B by SpGEMM's three phases, each buffer first asked for with NULL.
void SpGemm(cusparseHandle_t h) {
  Csr a = Make(5, 6, 7, false), b = Make(6, 4, 11, false);
  DeviceBuffer<int> aoff(a.off), acol(a.col), boff(b.off), bcol(b.col), coff(a.rows + 1);
  DeviceBuffer<float> aval(a.val), bval(b.val);
  cusparseSpMatDescr_t ma, mb, mc;
  CB(cusparseCreateCsr(&ma, a.rows, a.cols, a.val.size(), aoff.get(), acol.get(), aval.get(), CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
                       CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
  CB(cusparseCreateCsr(&mb, b.rows, b.cols, b.val.size(), boff.get(), bcol.get(), bval.get(), CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
                       CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
  CB(cusparseCreateCsr(&mc, a.rows, b.cols, 0, coff.get(), nullptr, nullptr, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
                       CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
  cusparseSpGEMMDescr_t g;
  CB(cusparseSpGEMM_createDescr(&g));
  const float alpha = 1.0f, beta = 0.0f;
  const auto op = CUSPARSE_OPERATION_NON_TRANSPOSE;
  size_t size1 = 0, size2 = 0;
  CB(cusparseSpGEMM_workEstimation(h, op, op, &alpha, ma, mb, &beta, mc, CUDA_R_32F, CUSPARSE_SPGEMM_DEFAULT, g, &size1, nullptr));
  DeviceBuffer<char> buf1(size1);
  CB(cusparseSpGEMM_workEstimation(h, op, op, &alpha, ma, mb, &beta, mc, CUDA_R_32F, CUSPARSE_SPGEMM_DEFAULT, g, &size1, buf1.get()));
  CB(cusparseSpGEMM_compute(h, op, op, &alpha, ma, mb, &beta, mc, CUDA_R_32F, CUSPARSE_SPGEMM_DEFAULT, g, &size2, nullptr));
  auto* buf2 = new DeviceBuffer<char>(size2);
  CB(cusparseSpGEMM_compute(h, op, op, &alpha, ma, mb, &beta, mc, CUDA_R_32F, CUSPARSE_SPGEMM_DEFAULT, g, &size2, buf2->get()));
  int64_t rows = 0, cols = 0, nnz = 0;
  CB(cusparseSpMatGetSize(mc, &rows, &cols, &nnz));
  DeviceBuffer<int> ccol(nnz);
  DeviceBuffer<float> cval(nnz);
  CB(cusparseCsrSetPointers(mc, coff.get(), ccol.get(), cval.get()));
  CB(cusparseSpGEMM_copy(h, op, op, &alpha, ma, mb, &beta, mc, CUDA_R_32F, CUSPARSE_SPGEMM_DEFAULT, g));
  Csr c{static_cast<int>(rows), static_cast<int>(cols), coff.Read(), ccol.Read(), cval.Read()};
  auto da = Dense(a), db = Dense(b), dc = Dense(c);
  for (int i = 0; i < a.rows; i++)
    for (int j = 0; j < b.cols; j++) {
      double want = 0;
      for (int k = 0; k < a.cols; k++) want += da[i * a.cols + k] * db[k * b.cols + j];
      Near("SpGEMM C", dc[i * b.cols + j], want, 1e-5, i * b.cols + j);
    }
  if (OnRemora()) {
    // The compute phase's buffer freed before the copy phase: refused (SpGEMM keeps it).
    CB(cusparseSpGEMM_compute(h, op, op, &alpha, ma, mb, &beta, mc, CUDA_R_32F, CUSPARSE_SPGEMM_DEFAULT, g, &size2, buf2->get()));
    delete buf2;
    buf2 = nullptr;
    cusparseStatus_t st = cusparseSpGEMM_copy(h, op, op, &alpha, ma, mb, &beta, mc, CUDA_R_32F, CUSPARSE_SPGEMM_DEFAULT, g);
    cudaError_t e = cudaDeviceSynchronize();
    if (st == CUSPARSE_STATUS_SUCCESS && e == cudaSuccess) fail("SpGEMM copy after its compute buffer was freed was accepted");
    (void)cudaGetLastError();
  }
  delete buf2;
  CB(cusparseSpGEMM_destroyDescr(g));
  for (auto m : {ma, mb, mc}) CB(cusparseDestroySpMat(m));
  gpu_test::info("SpGEMM (%dx%d, %lld nonzeros) in three phases%s", static_cast<int>(rows), static_cast<int>(cols),
                 static_cast<long long>(nnz), OnRemora() ? "; a buffer freed between the phases refused" : "");
}

// L y = alpha x by SpSV: the analysis phase's buffer, then the solve without it.
void SpSv(cusparseHandle_t h) {
  Csr l = Make(7, 7, 3, true);
  std::vector<float> x(7);
  for (int i = 0; i < 7; i++) x[i] = 1.0f + 0.5f * i;
  DeviceBuffer<int> off(l.off), col(l.col);
  DeviceBuffer<float> val(l.val), dx(x), dy(7);
  cusparseSpMatDescr_t m;
  CB(cusparseCreateCsr(&m, 7, 7, l.val.size(), off.get(), col.get(), val.get(), CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
                       CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
  cusparseFillMode_t fill = CUSPARSE_FILL_MODE_LOWER;
  cusparseDiagType_t diag = CUSPARSE_DIAG_TYPE_NON_UNIT;
  CB(cusparseSpMatSetAttribute(m, CUSPARSE_SPMAT_FILL_MODE, &fill, sizeof(fill)));
  CB(cusparseSpMatSetAttribute(m, CUSPARSE_SPMAT_DIAG_TYPE, &diag, sizeof(diag)));
  cusparseDnVecDescr_t vx, vy;
  CB(cusparseCreateDnVec(&vx, 7, dx.get(), CUDA_R_32F));
  CB(cusparseCreateDnVec(&vy, 7, dy.get(), CUDA_R_32F));
  cusparseSpSVDescr_t d;
  CB(cusparseSpSV_createDescr(&d));
  const float alpha = 2.0f;
  const auto op = CUSPARSE_OPERATION_NON_TRANSPOSE;
  size_t bytes = 0;
  CB(cusparseSpSV_bufferSize(h, op, &alpha, m, vx, vy, CUDA_R_32F, CUSPARSE_SPSV_ALG_DEFAULT, d, &bytes));
  DeviceBuffer<char> buf(bytes);
  CB(cusparseSpSV_analysis(h, op, &alpha, m, vx, vy, CUDA_R_32F, CUSPARSE_SPSV_ALG_DEFAULT, d, buf.get()));
  CB(cusparseSpSV_solve(h, op, &alpha, m, vx, vy, CUDA_R_32F, CUSPARSE_SPSV_ALG_DEFAULT, d));
  auto y = dy.Read();
  auto dl = Dense(l);
  for (int i = 0; i < 7; i++) {
    double acc = 0;
    for (int j = 0; j <= i; j++) acc += dl[i * 7 + j] * y[j];
    Near("SpSV L y", acc, alpha * x[i], 1e-5, i);
  }
  CB(cusparseSpSV_destroyDescr(d));
  CB(cusparseDestroyDnVec(vx));
  CB(cusparseDestroyDnVec(vy));
  CB(cusparseDestroySpMat(m));
  gpu_test::info("SpSV: analysis with its buffer, then the solve");
}

void Legacy(cusparseHandle_t h) {
  cusparseMatDescr_t d = nullptr;
  CB(cusparseCreateMatDescr(&d));
  if (cusparseGetMatType(d) != CUSPARSE_MATRIX_TYPE_GENERAL || cusparseGetMatIndexBase(d) != CUSPARSE_INDEX_BASE_ZERO)
    fail("a new legacy descriptor is not general, base zero");
  CB(cusparseSetMatType(d, CUSPARSE_MATRIX_TYPE_GENERAL));
  CB(cusparseSetMatIndexBase(d, CUSPARSE_INDEX_BASE_ONE));
  CB(cusparseSetMatFillMode(d, CUSPARSE_FILL_MODE_UPPER));
  CB(cusparseSetMatDiagType(d, CUSPARSE_DIAG_TYPE_UNIT));
  if (cusparseGetMatIndexBase(d) != CUSPARSE_INDEX_BASE_ONE || cusparseGetMatFillMode(d) != CUSPARSE_FILL_MODE_UPPER ||
      cusparseGetMatDiagType(d) != CUSPARSE_DIAG_TYPE_UNIT)
    fail("a legacy descriptor's settings did not read back");
  CB(cusparseDestroyMatDescr(d));
  if (OnRemora()) {
    // A descriptor the application never made: refused, never handed to the library.
    int64_t rows = 0, cols = 0, nnz = 0;
    auto forged = reinterpret_cast<cusparseSpMatDescr_t>(uintptr_t{0x1234560});
    if (cusparseSpMatGetSize(forged, &rows, &cols, &nnz) == CUSPARSE_STATUS_SUCCESS) fail("a forged descriptor was accepted");
  }
  (void)h;
  gpu_test::info("legacy matrix descriptor: settings read back%s", OnRemora() ? "; a forged descriptor refused" : "");
}

}  // namespace

int main() {
  cusolverDnHandle_t solver = nullptr;
  cusparseHandle_t sparse = nullptr;
  CB(cusolverDnCreate(&solver));
  CB(cusparseCreate(&sparse));
  // CuPy keeps these handles as intptr_t and passes them on as size_t.
  if (reinterpret_cast<intptr_t>(solver) <= 0 || reinterpret_cast<intptr_t>(sparse) <= 0)
    fail("a handle reads as a negative intptr_t (%p, %p)", static_cast<void*>(solver), static_cast<void*>(sparse));
  Syevj(solver);
  Empty(solver);
  Batched(solver);
  SpGemm(sparse);
  SpSv(sparse);
  Legacy(sparse);
  CB(cusparseDestroy(sparse));
  CB(cusolverDnDestroy(solver));
  gpu_test::pass("info objects (syevj), batched pointer arrays (potrf/potrsBatched), multi-phase buffers (SpGEMM, SpSV), legacy "
                 "descriptors, empty arrays%s", OnRemora() ? "; forged pointers, freed buffers and forged handles refused" : "");
  return 0;
}
