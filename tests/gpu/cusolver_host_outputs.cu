// cuSOLVER's outputs in the library's own host memory, which Remora copies from the worker:
// cusolverRf's factors (cusolverRfExtractBundledFactorsHost, cusolverRfExtractSplitFactorsHost,
// arrays the caller frees) after a refactorization of a tridiagonal 6x6 system set up from its
// LU factors on the host, each checked by L U == A on the CPU; the mixed-precision solver's
// residual history (cusolverDnIRSXgesv with a residual requested, then
// cusolverDnIRSInfosGetResidualHistory), its rows finite and the solution's residual small.
// On Remora's host-emulated backend (REMORA_TEST_HOST_BACKEND=1, CI), which emulates neither,
// it checks that forged handles are refused and that nothing else is answered.
#define GPU_TEST_NAME "cusolver_host_outputs"
#include <cusolverDn.h>
#include <cusolverRf.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "gpu_test.h"
#include "lib_test.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

using gpu_test::fail;

constexpr int kN = 6;

struct Csr {
  std::vector<int> row, col;
  std::vector<double> val;
  int nnz() const { return static_cast<int>(val.size()); }
};

// Dense n x n (row-major) from CSR; a missing diagonal in `unit_diagonal` mode counts as 1.
std::vector<double> Dense(int n, const int* row, const int* col, const double* val, bool unit_diagonal) {
  std::vector<double> d(static_cast<size_t>(n) * n, 0.0);
  for (int i = 0; i < n; i++) {
    for (int k = row[i]; k < row[i + 1]; k++) {
      if (col[k] < 0 || col[k] >= n) fail("column %d out of range in row %d", col[k], i);
      d[i * n + col[k]] = val[k];
    }
    if (unit_diagonal && d[i * n + i] == 0.0) d[i * n + i] = 1.0;
  }
  return d;
}

void CheckProduct(const char* what, const std::vector<double>& l, const std::vector<double>& u, const std::vector<double>& a) {
  for (int i = 0; i < kN; i++)
    for (int j = 0; j < kN; j++) {
      double acc = 0;
      for (int k = 0; k < kN; k++) acc += l[i * kN + k] * u[k * kN + j];
      if (std::fabs(acc - a[i * kN + j]) > 1e-10) fail("%s: (L U)[%d][%d] = %g, A has %g", what, i, j, acc, a[i * kN + j]);
    }
}

void Refactorization() {
  // A: 4 on the diagonal, -1 beside it. L (unit diagonal, stored) and U without pivoting.
  Csr a, l, u;
  std::vector<double> lower(kN, 0.0), diag(kN, 4.0);  // L's subdiagonal, U's diagonal
  for (int i = 1; i < kN; i++) {
    lower[i] = -1.0 / diag[i - 1];
    diag[i] = 4.0 + lower[i];  // 4 - l_i * (-1)
  }
  for (int i = 0; i < kN; i++) {
    a.row.push_back(a.nnz());
    l.row.push_back(l.nnz());
    u.row.push_back(u.nnz());
    for (int j = i - 1; j <= i + 1; j++)
      if (j >= 0 && j < kN) a.col.push_back(j), a.val.push_back(j == i ? 4.0 : -1.0);
    if (i > 0) l.col.push_back(i - 1), l.val.push_back(lower[i]);
    l.col.push_back(i), l.val.push_back(1.0);
    u.col.push_back(i), u.val.push_back(diag[i]);
    if (i + 1 < kN) u.col.push_back(i + 1), u.val.push_back(-1.0);
  }
  a.row.push_back(a.nnz());
  l.row.push_back(l.nnz());
  u.row.push_back(u.nnz());
  std::vector<double> dense_a = Dense(kN, a.row.data(), a.col.data(), a.val.data(), false);
  CheckProduct("the test's own factors", Dense(kN, l.row.data(), l.col.data(), l.val.data(), false),
               Dense(kN, u.row.data(), u.col.data(), u.val.data(), false), dense_a);
  std::vector<int> p(kN), q(kN);
  for (int i = 0; i < kN; i++) p[i] = q[i] = i;

  cusolverRfHandle_t rf;
  CB(cusolverRfCreate(&rf));
  CB(cusolverRfSetupHost(kN, a.nnz(), a.row.data(), a.col.data(), a.val.data(), l.nnz(), l.row.data(), l.col.data(), l.val.data(),
                         u.nnz(), u.row.data(), u.col.data(), u.val.data(), p.data(), q.data(), rf));
  CB(cusolverRfAnalyze(rf));
  CB(cusolverRfRefactor(rf));
  CK(cudaDeviceSynchronize());

  int nnz_m = 0;
  int *mp = nullptr, *mi = nullptr;
  double* mx = nullptr;
  CB(cusolverRfExtractBundledFactorsHost(rf, &nnz_m, &mp, &mi, &mx));
  if (mp == nullptr || mi == nullptr || mx == nullptr || mp[0] != 0 || mp[kN] != nnz_m)
    fail("bundled factors: nnz %d, row pointers %d..%d", nnz_m, mp ? mp[0] : -1, mp ? mp[kN] : -1);
  // M = L + U - I: its strict lower part is L's (unit diagonal), the rest U's.
  std::vector<double> m = Dense(kN, mp, mi, mx, false), ml(kN * kN, 0.0), mu(kN * kN, 0.0);
  for (int i = 0; i < kN; i++)
    for (int j = 0; j < kN; j++) (j < i ? ml : mu)[i * kN + j] = m[i * kN + j];
  for (int i = 0; i < kN; i++) ml[i * kN + i] = 1.0;
  CheckProduct("cusolverRfExtractBundledFactorsHost", ml, mu, dense_a);
  std::free(mp);
  std::free(mi);
  std::free(mx);

  int nnz_l = 0, nnz_u = 0;
  int *lp = nullptr, *li = nullptr, *up = nullptr, *ui = nullptr;
  double *lx = nullptr, *ux = nullptr;
  CB(cusolverRfExtractSplitFactorsHost(rf, &nnz_l, &lp, &li, &lx, &nnz_u, &up, &ui, &ux));
  if (lp == nullptr || up == nullptr || lp[kN] != nnz_l || up[kN] != nnz_u) fail("split factors: nnz %d and %d", nnz_l, nnz_u);
  CheckProduct("cusolverRfExtractSplitFactorsHost", Dense(kN, lp, li, lx, true), Dense(kN, up, ui, ux, false), dense_a);
  for (void* f : {static_cast<void*>(lp), static_cast<void*>(li), static_cast<void*>(lx), static_cast<void*>(up),
                  static_cast<void*>(ui), static_cast<void*>(ux)})
    std::free(f);
  CB(cusolverRfDestroy(rf));
}

void ResidualHistory() {
  const int n = 24, nrhs = 1;
  std::vector<double> a(n * n), b(n);
  unsigned s = 7;
  for (auto& e : a) {
    s = s * 1664525u + 1013904223u;
    e = static_cast<double>((s >> 8) % 2001) / 1000.0 - 1.0;
  }
  for (int i = 0; i < n; i++) a[i * n + i] += n, b[i] = 1.0 + i % 3;
  DeviceBuffer<double> da(a), db(b), dx(static_cast<size_t>(n));
  DeviceBuffer<int> dinfo(static_cast<size_t>(1));
  cusolverDnHandle_t h;
  cusolverDnIRSParams_t params;
  cusolverDnIRSInfos_t infos;
  CB(cusolverDnCreate(&h));
  CB(cusolverDnIRSParamsCreate(&params));
  CB(cusolverDnIRSParamsSetSolverPrecisions(params, CUSOLVER_R_64F, CUSOLVER_R_32F));
  CB(cusolverDnIRSParamsSetRefinementSolver(params, CUSOLVER_IRS_REFINE_CLASSICAL));
  CB(cusolverDnIRSInfosCreate(&infos));
  CB(cusolverDnIRSInfosRequestResidual(infos));
  size_t work = 0;
  CB(cusolverDnIRSXgesv_bufferSize(h, params, n, nrhs, &work));
  DeviceBuffer<char> dwork(work);
  cusolver_int_t niters = 0, outer = 0, max_iters = 0;
  CB(cusolverDnIRSXgesv(h, params, infos, n, nrhs, da.get(), n, db.get(), n, dx.get(), n, dwork.get(), work, &niters, dinfo.get()));
  if (dinfo.Read()[0] != 0) fail("cusolverDnIRSXgesv: info %d", dinfo.Read()[0]);
  auto x = dx.Read();
  for (int i = 0; i < n; i++) {
    double acc = 0;
    for (int j = 0; j < n; j++) acc += a[j * n + i] * x[j];
    if (std::fabs(acc - b[i]) > 1e-8) fail("cusolverDnIRSXgesv: residual %g in row %d", acc - b[i], i);
  }
  CB(cusolverDnIRSInfosGetOuterNiters(infos, &outer));
  CB(cusolverDnIRSInfosGetMaxIters(infos, &max_iters));
  void* history = nullptr;
  CB(cusolverDnIRSInfosGetResidualHistory(infos, &history));
  if (history == nullptr) fail("cusolverDnIRSInfosGetResidualHistory: no history");
  const auto* rows = static_cast<const double*>(history);
  int filled = std::min(std::abs(outer), max_iters) + 1;
  for (int r = 0; r < filled; r++)
    if (!std::isfinite(rows[r]) || !std::isfinite(rows[max_iters + 1 + r])) fail("residual history row %d is not finite", r);
  std::printf("IRS: %d iterations (%d outer), history of %d rows, first residual %g\n", niters, outer, filled, rows[max_iters + 1]);
  CB(cusolverDnIRSInfosDestroy(infos));
  CB(cusolverDnIRSParamsDestroy(params));
  CB(cusolverDnDestroy(h));
}

// Handles the process never had (Remora refuses them; NVIDIA's library would dereference them).
void Forged() {
  auto rf = reinterpret_cast<cusolverRfHandle_t>(0x5151000);
  auto infos = reinterpret_cast<cusolverDnIRSInfos_t>(0x5152000);
  int nnz = 0;
  int *p = nullptr, *i = nullptr;
  double* x = nullptr;
  void* history = nullptr;
  cusolverStatus_t e = cusolverRfExtractBundledFactorsHost(rf, &nnz, &p, &i, &x);
  cusolverStatus_t r = cusolverDnIRSInfosGetResidualHistory(infos, &history);
  if (e == CUSOLVER_STATUS_SUCCESS || r == CUSOLVER_STATUS_SUCCESS || p != nullptr || history != nullptr)
    fail("forged handles accepted: cusolverRfExtractBundledFactorsHost %d, cusolverDnIRSInfosGetResidualHistory %d", e, r);
}

}  // namespace

int main() {
  if (std::getenv("REMORA_TEST_HOST_BACKEND") != nullptr) {
    Forged();
    gpu_test::pass("host backend: forged cusolverRf and IRS infos handles refused");
    return 0;
  }
  Refactorization();
  ResidualHistory();
  if (OnRemora()) Forged();
  gpu_test::pass("cusolverRf's host factors (bundled, split) give L U == A; the IRS residual history is read%s",
                 OnRemora() ? "; forged handles refused" : "");
  return 0;
}
