// remora-demo: the README's first command runs this through the shim. It shows the GPU it
// was given, moves data through device memory and, on a real GPU, runs a kernel.
#include "app_check.h"

__global__ void Saxpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

int main() {
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  cudaDeviceProp p;
  CHECK(cudaGetDeviceProperties(&p, 0));
  size_t free_b, total_b;
  CHECK(cudaMemGetInfo(&free_b, &total_b));
  bool emulated = std::strstr(p.name, "host-emulated") != nullptr;
  std::printf("remora-demo: %d device(s); device 0 is \"%s\" (%zu MiB for this tenant)\n", count, p.name, total_b >> 20);

  const int n = 1 << 20;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; i++) {
    x[i] = static_cast<float>(i % 1000);
    y[i] = 1.0f;
  }
  float *dx, *dy;
  CHECK(cudaMalloc(&dx, n * sizeof(float)));
  CHECK(cudaMalloc(&dy, n * sizeof(float)));
  CHECK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  std::vector<float> back(n);
  CHECK(cudaMemcpy(back.data(), dx, n * sizeof(float), cudaMemcpyDeviceToHost));
  REQUIRE(back == x, "data did not survive the round trip");
  std::printf("remora-demo: copied %zu MiB to the device and back: identical\n", 2 * n * sizeof(float) >> 20);

  if (emulated) {
    std::printf("remora-demo: host-emulated backend: kernels are not executed, so saxpy is skipped\n");
  } else {
    Saxpy<<<(n + 255) / 256, 256>>>(n, 2.0f, dx, dy);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(back.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) REQUIRE(back[i] == 2.0f * x[i] + 1.0f, "saxpy wrong at %d: %f", i, back[i]);
    std::printf("remora-demo: saxpy on %d elements on the GPU: correct\n", n);
  }
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dy));
  std::printf("remora-demo: done\n");
  return 0;
}
