// cuSOLVER's dense solvers against the CPU: LU (getrf with its workspace from
// getrf_bufferSize, pivots and info in device memory, then getrs) of a general 7x7 system with
// 3 right-hand sides in double and single precision, and Cholesky (potrf, potrs) of a
// symmetric positive definite 6x6 one; each solution is checked by its residual A x - b on the
// CPU, info must be 0; the same through the 64-bit API (cusolverDnX*, as PyTorch calls it); the
// handle runs on the application's stream. Under Remora, a getrf
// workspace smaller than the library asks for is refused before the library sees it.
// On Remora's host-emulated backend (CI) the same checks run against its emulation of these
// solvers (server/worker/libs/host/host_lib_cusolver.cc).
#define GPU_TEST_NAME "cusolver_solve"
#include <cusolverDn.h>

#include <cmath>
#include <vector>

#include "gpu_test.h"
#include "lib_test.h"

namespace {

using gpu_test::fail;

std::vector<double> Random(size_t n, unsigned seed) {
  std::vector<double> v(n);
  unsigned s = seed;
  for (auto& e : v) {
    s = s * 1664525u + 1013904223u;
    e = static_cast<double>((s >> 8) % 2001) / 1000.0 - 1.0;
  }
  return v;
}

// max |A x - b| over the right-hand sides (column-major n x n A, n x nrhs x and b).
double Residual(const std::vector<double>& a, const std::vector<double>& xs, const std::vector<double>& b, int n, int nrhs) {
  double worst = 0;
  for (int r = 0; r < nrhs; r++)
    for (int i = 0; i < n; i++) {
      double acc = 0;
      for (int j = 0; j < n; j++) acc += a[j * n + i] * xs[r * n + j];
      worst = std::max(worst, std::fabs(acc - b[r * n + i]));
    }
  return worst;
}

template <typename T>
void Lu(cusolverDnHandle_t h, double tol) {
  const int n = 7, nrhs = 3;
  auto a = Random(n * n, 1), b = Random(n * nrhs, 2);
  for (int i = 0; i < n; i++) a[i * n + i] += 4;  // well conditioned
  DeviceBuffer<T> da(Convert<T>(a)), db(Convert<T>(b));
  DeviceBuffer<int> ipiv(n), info(1);
  int lwork = 0;
  if constexpr (sizeof(T) == 8) CB(cusolverDnDgetrf_bufferSize(h, n, n, da.get(), n, &lwork));
  else CB(cusolverDnSgetrf_bufferSize(h, n, n, da.get(), n, &lwork));
  DeviceBuffer<T> work(lwork);
  if constexpr (sizeof(T) == 8) {
    CB(cusolverDnDgetrf(h, n, n, da.get(), n, work.get(), ipiv.get(), info.get()));
    CB(cusolverDnDgetrs(h, CUBLAS_OP_N, n, nrhs, da.get(), n, ipiv.get(), db.get(), n, info.get()));
  } else {
    CB(cusolverDnSgetrf(h, n, n, da.get(), n, work.get(), ipiv.get(), info.get()));
    CB(cusolverDnSgetrs(h, CUBLAS_OP_N, n, nrhs, da.get(), n, ipiv.get(), db.get(), n, info.get()));
  }
  if (info.Read()[0] != 0) fail("getrf/getrs (%zu-byte) info %d", sizeof(T), info.Read()[0]);
  double r = Residual(a, Widen(db.Read()), b, n, nrhs);
  if (r > tol) fail("LU (%zu-byte): residual %g", sizeof(T), r);
  if (OnRemora() && lwork > 1) {
    DeviceBuffer<T> short_work(1);
    cusolverStatus_t st;
    if constexpr (sizeof(T) == 8) st = cusolverDnDgetrf(h, n, n, da.get(), n, short_work.get(), ipiv.get(), info.get());
    else st = cusolverDnSgetrf(h, n, n, da.get(), n, short_work.get(), ipiv.get(), info.get());
    cudaError_t e = cudaDeviceSynchronize();
    if (st == CUSOLVER_STATUS_SUCCESS && e == cudaSuccess) fail("a getrf workspace shorter than the library's was accepted");
    (void)cudaGetLastError();
  }
}

template <typename T>
void Cholesky(cusolverDnHandle_t h, double tol) {
  const int n = 6, nrhs = 2;
  auto m = Random(n * n, 3), b = Random(n * nrhs, 4);
  std::vector<double> a(n * n, 0.0);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      for (int k = 0; k < n; k++) a[j * n + i] += m[k * n + i] * m[k * n + j];  // M M^T
      if (i == j) a[j * n + i] += n;
    }
  DeviceBuffer<T> da(Convert<T>(a)), db(Convert<T>(b));
  DeviceBuffer<int> info(1);
  int lwork = 0;
  if constexpr (sizeof(T) == 8) CB(cusolverDnDpotrf_bufferSize(h, CUBLAS_FILL_MODE_LOWER, n, da.get(), n, &lwork));
  else CB(cusolverDnSpotrf_bufferSize(h, CUBLAS_FILL_MODE_LOWER, n, da.get(), n, &lwork));
  DeviceBuffer<T> work(lwork);
  if constexpr (sizeof(T) == 8) {
    CB(cusolverDnDpotrf(h, CUBLAS_FILL_MODE_LOWER, n, da.get(), n, work.get(), lwork, info.get()));
    CB(cusolverDnDpotrs(h, CUBLAS_FILL_MODE_LOWER, n, nrhs, da.get(), n, db.get(), n, info.get()));
  } else {
    CB(cusolverDnSpotrf(h, CUBLAS_FILL_MODE_LOWER, n, da.get(), n, work.get(), lwork, info.get()));
    CB(cusolverDnSpotrs(h, CUBLAS_FILL_MODE_LOWER, n, nrhs, da.get(), n, db.get(), n, info.get()));
  }
  if (info.Read()[0] != 0) fail("potrf/potrs (%zu-byte) info %d", sizeof(T), info.Read()[0]);
  double r = Residual(a, Widen(db.Read()), b, n, nrhs);
  if (r > tol) fail("Cholesky (%zu-byte): residual %g", sizeof(T), r);
}

// PyTorch's calls: the 64-bit API with a params object (cusolverDnXgetrf/Xgetrs, Xpotrf/Xpotrs),
// device and host workspaces from the *_bufferSize queries, 64-bit pivots.
void SixtyFour(cusolverDnHandle_t h) {
  const int64_t n = 5, nrhs = 2;
  auto a = Random(n * n, 5), b = Random(n * nrhs, 6);
  for (int i = 0; i < n; i++) a[i * n + i] += 3;
  DeviceBuffer<double> da(a), db(b);
  DeviceBuffer<int64_t> ipiv(n);
  DeviceBuffer<int> info(1);
  cusolverDnParams_t params;
  CB(cusolverDnCreateParams(&params));
  size_t dev_bytes = 0, host_bytes = 0;
  CB(cusolverDnXgetrf_bufferSize(h, params, n, n, CUDA_R_64F, da.get(), n, CUDA_R_64F, &dev_bytes, &host_bytes));
  DeviceBuffer<char> dev_work(dev_bytes);
  std::vector<char> host_work(host_bytes + 1);
  CB(cusolverDnXgetrf(h, params, n, n, CUDA_R_64F, da.get(), n, ipiv.get(), CUDA_R_64F, dev_work.get(), dev_bytes,
                      host_work.data(), host_bytes, info.get()));
  CB(cusolverDnXgetrs(h, params, CUBLAS_OP_N, n, nrhs, CUDA_R_64F, da.get(), n, ipiv.get(), CUDA_R_64F, db.get(), n, info.get()));
  if (info.Read()[0] != 0) fail("Xgetrf/Xgetrs info %d", info.Read()[0]);
  double r = Residual(a, db.Read(), b, n, nrhs);
  if (r > 1e-10) fail("64-bit LU: residual %g", r);
  // Cholesky of A A^T + n I.
  std::vector<double> spd(n * n, 0.0);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      for (int k = 0; k < n; k++) spd[j * n + i] += a[k * n + i] * a[k * n + j];
      if (i == j) spd[j * n + i] += n;
    }
  DeviceBuffer<double> ds(spd), db2(b);
  CB(cusolverDnXpotrf_bufferSize(h, params, CUBLAS_FILL_MODE_UPPER, n, CUDA_R_64F, ds.get(), n, CUDA_R_64F, &dev_bytes, &host_bytes));
  DeviceBuffer<char> dev_work2(dev_bytes);
  std::vector<char> host_work2(host_bytes + 1);
  CB(cusolverDnXpotrf(h, params, CUBLAS_FILL_MODE_UPPER, n, CUDA_R_64F, ds.get(), n, CUDA_R_64F, dev_work2.get(), dev_bytes,
                      host_work2.data(), host_bytes, info.get()));
  CB(cusolverDnXpotrs(h, params, CUBLAS_FILL_MODE_UPPER, n, nrhs, CUDA_R_64F, ds.get(), n, CUDA_R_64F, db2.get(), n, info.get()));
  if (info.Read()[0] != 0) fail("Xpotrf/Xpotrs info %d", info.Read()[0]);
  r = Residual(spd, db2.Read(), b, n, nrhs);
  if (r > 1e-10) fail("64-bit Cholesky: residual %g", r);
  CB(cusolverDnDestroyParams(params));
}

}  // namespace

int main() {
  cusolverDnHandle_t h = nullptr;
  cusolverStatus_t created = cusolverDnCreate(&h);
  CB(created);
  int version = 0;
  CB(cusolverGetVersion(&version));
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));
  CB(cusolverDnSetStream(h, stream));
  cudaStream_t got = nullptr;
  CB(cusolverDnGetStream(h, &got));
  if (got != stream) fail("cusolverDnGetStream answered another stream");
  Lu<double>(h, 1e-10);
  Lu<float>(h, 1e-4);
  Cholesky<double>(h, 1e-10);
  Cholesky<float>(h, 1e-4);
  SixtyFour(h);
  CB(cusolverDnDestroy(h));
  CK(cudaStreamDestroy(stream));
  gpu_test::pass("cuSOLVER %d: LU (getrf, getrs) and Cholesky (potrf, potrs) in double and single precision and in the "
                 "64-bit API solve their systems%s", version, OnRemora() ? "; a short getrf workspace refused" : "");
  return 0;
}
