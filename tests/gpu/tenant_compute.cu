// tenant_compute [SECONDS]: a steady computation that checks every result, for the
// isolation test (tests/gpu/tenancy-gpu.sh): tenant B runs it while tenant A's kernel faults
// on the same GPU; B must see no error and no wrong value. Each round runs a kernel that
// computes y[i] = a*x[i] + i*b (integers, exact) over 4M elements on two streams, copies the
// result back and compares it with the host's. Prints "computing" once the first round
// passed, then runs for SECONDS (default 3).
#define GPU_TEST_NAME "tenant_compute"
#include <chrono>
#include <vector>

#include "gpu_test.h"

__global__ void axpb(const uint32_t* x, uint32_t* y, uint32_t a, uint32_t b, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    y[i] = a * x[i] + uint32_t(i) * b;
}

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 3.0;
  const size_t n = size_t(4) << 20;
  std::vector<uint32_t> x(n), y(n);
  for (size_t i = 0; i < n; ++i) x[i] = uint32_t(i * 2654435761u);
  uint32_t *dx, *dy;
  CK(cudaMalloc(&dx, n * sizeof(uint32_t)));
  CK(cudaMalloc(&dy, n * sizeof(uint32_t)));
  CK(cudaMemcpy(dx, x.data(), n * sizeof(uint32_t), cudaMemcpyHostToDevice));
  cudaStream_t s[2];
  for (auto& st : s) CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  auto start = std::chrono::steady_clock::now();
  long rounds = 0;
  for (;;) {
    const uint32_t a = 3 + uint32_t(rounds) * 7, b = 11 + uint32_t(rounds);
    const size_t half = n / 2;
    for (int k = 0; k < 2; ++k) {
      axpb<<<256, 256, 0, s[k]>>>(dx + k * half, dy + k * half, a, b, half);
      CK_LAUNCH("axpb");
      CK(cudaMemcpyAsync(y.data() + k * half, dy + k * half, half * sizeof(uint32_t), cudaMemcpyDeviceToHost, s[k]));
    }
    for (auto& st : s) CK(cudaStreamSynchronize(st));
    for (size_t i = 0; i < n; ++i) {
      const size_t j = i % half;
      const uint32_t want = a * x[i] + uint32_t(j) * b;
      if (y[i] != want) gpu_test::fail("round %ld: y[%zu] = %u, want %u", rounds, i, y[i], want);
    }
    if (rounds++ == 0) {
      std::printf("computing\n");
      std::fflush(stdout);
    }
    std::chrono::duration<double> d = std::chrono::steady_clock::now() - start;
    if (d.count() >= seconds) break;
  }
  for (auto& st : s) CK(cudaStreamDestroy(st));
  CK(cudaFree(dx));
  CK(cudaFree(dy));
  CK(cudaDeviceSynchronize());
  gpu_test::pass("%ld rounds over %zu elements verified", rounds, n);
  return 0;
}
