// The matrix multiply users start from, unmodified in spirit: cudaMallocManaged for A, B and
// C (1024x1024 floats), filled on the host, one naive kernel, cudaDeviceSynchronize, every
// element of C checked on the host against a double-precision reference. Prints the wall time
// from the first allocation to the end of the check (for the 1.5x-native comparison over shm).
#define GPU_TEST_NAME "managed_matmul"
#include <cmath>
#include <vector>

#include "gpu_test.h"

namespace {

__global__ void matmul(const float* a, const float* b, float* c, int n) {
  int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= n || col >= n) return;
  float s = 0.f;
  for (int k = 0; k < n; k++) s += a[row * n + k] * b[k * n + col];
  c[row * n + col] = s;
}

}  // namespace

int main() {
  const int n = 1024;
  long long t0 = gpu_test::wall_ns();
  float *a, *b, *c;
  CK(cudaMallocManaged(&a, sizeof(float) * n * n));
  CK(cudaMallocManaged(&b, sizeof(float) * n * n));
  CK(cudaMallocManaged(&c, sizeof(float) * n * n));
  gpu_test::Rng rng(42);
  for (int i = 0; i < n * n; i++) a[i] = rng.sym();
  for (int i = 0; i < n * n; i++) b[i] = rng.sym();
  dim3 block(16, 16), grid((n + 15) / 16, (n + 15) / 16);
  matmul<<<grid, block>>>(a, b, c, n);
  CK_LAUNCH("matmul");
  CK(cudaDeviceSynchronize());
  // Every result, against a reference computed on the host from the same managed inputs.
  std::vector<double> row(n);
  int bad = 0;
  double worst = 0;
  for (int i = 0; i < n; i++) {
    std::fill(row.begin(), row.end(), 0.0);
    for (int k = 0; k < n; k++) {
      double aik = a[i * n + k];
      const float* bk = b + static_cast<size_t>(k) * n;
      for (int j = 0; j < n; j++) row[j] += aik * bk[j];
    }
    for (int j = 0; j < n; j++) {
      double err = std::fabs(c[i * n + j] - row[j]);
      worst = std::max(worst, err);
      if (err > 1e-3 + 1e-4 * std::fabs(row[j])) bad++;
    }
  }
  long long t1 = gpu_test::wall_ns();
  if (bad != 0) gpu_test::fail("%d of %d results wrong (worst error %g)", bad, n * n, worst);
  CK(cudaFree(a));
  CK(cudaFree(b));
  CK(cudaFree(c));
  gpu_test::info("wall %.1f ms from the first cudaMallocManaged to the last check", (t1 - t0) / 1e6);
  gpu_test::pass("%dx%d managed SGEMM, all %d results within tolerance (worst %.2g)", n, n, n * n, worst);
  return 0;
}
