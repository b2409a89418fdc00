// vector_add: <<<>>> launches, cudaMalloc/cudaMemcpy/cudaMemset/cudaFree, sizes that are and
// are not multiples of the block size, one-thread-per-element and grid-stride kernels. The
// output buffer has a guard band past n that must stay untouched (bounds checks in kernels).
#define GPU_TEST_NAME "vector_add"
#include "gpu_test.h"

#include <cstring>
#include <vector>

__global__ void add_one_per_thread(const float* a, const float* b, float* c, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

__global__ void add_grid_stride(const float* a, const float* b, float* c, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    c[i] = a[i] + b[i];
}

int main() {
  const int sizes[] = {1, 31, 255, 256, 257, 1000, 4096, 65537, (1 << 20), (1 << 20) + 3,
                       3 * (1 << 20) + 123};
  const int kGuard = 64;     // floats past n, preset to a pattern that must survive
  const int kBlock = 256;
  gpu_test::Rng rng(0x5eed0001);
  size_t elements = 0;
  int launches = 0;

  for (int n : sizes) {
    std::vector<float> a(n), b(n), c(n + kGuard);
    for (int i = 0; i < n; ++i) {
      a[i] = rng.sym() * 1000.0f;
      b[i] = rng.sym() * 1000.0f;
    }
    float *da = nullptr, *db = nullptr, *dc = nullptr;
    CK(cudaMalloc(&da, n * sizeof(float)));
    CK(cudaMalloc(&db, n * sizeof(float)));
    CK(cudaMalloc(&dc, (n + kGuard) * sizeof(float)));
    CK(cudaMemcpy(da, a.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, b.data(), n * sizeof(float), cudaMemcpyHostToDevice));

    for (int variant = 0; variant < 2; ++variant) {
      CK(cudaMemset(dc, 0xFF, (n + kGuard) * sizeof(float)));  // 0xFFFFFFFF: a NaN pattern
      if (variant == 0) {
        add_one_per_thread<<<(n + kBlock - 1) / kBlock, kBlock>>>(da, db, dc, n);
        CK_LAUNCH("add_one_per_thread");
      } else {
        add_grid_stride<<<7, 96>>>(da, db, dc, n);  // few odd-sized blocks, many iterations
        CK_LAUNCH("add_grid_stride");
      }
      ++launches;
      CK(cudaMemcpy(c.data(), dc, (n + kGuard) * sizeof(float), cudaMemcpyDeviceToHost));
      for (int i = 0; i < n; ++i) {
        const float want = a[i] + b[i];  // one IEEE add: bit-exact on host and device
        if (std::memcmp(&c[i], &want, sizeof want) != 0)
          gpu_test::fail("n=%d variant=%d: c[%d]=%.9g, want %.9g", n, variant, i, c[i], want);
      }
      for (int i = n; i < n + kGuard; ++i) {
        uint32_t bits;
        std::memcpy(&bits, &c[i], sizeof bits);
        if (bits != 0xFFFFFFFFu)
          gpu_test::fail("n=%d variant=%d: guard element %d written (0x%08x)", n, variant, i,
                         bits);
      }
    }
    CK(cudaFree(da));
    CK(cudaFree(db));
    CK(cudaFree(dc));
    elements += n;
  }
  CK(cudaDeviceSynchronize());
  gpu_test::pass("%zu sizes, %d launches, %zu elements checked bit-exact, guard bands intact",
                 sizeof sizes / sizeof sizes[0], launches, 2 * elements);
  return 0;
}
