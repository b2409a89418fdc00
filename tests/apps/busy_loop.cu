// busy_loop SECONDS KERNEL_US [BATCH]: keeps "the GPU" busy for SECONDS with a kernel that the
// host-emulated backend runs for gridDim.x microseconds (any kernel whose name contains
// remora_emulated_busy_us; on a real GPU this one does nothing): BATCH launches of KERNEL_US
// (default 4), then cudaStreamSynchronize, over and over. Prints "running" after the first
// batch and, at the end, "kernels N seconds S". For the compute-share integration test
// (tests/integration/compute_test.cc): a tenant's kernel count is its share of GPU time.
#include <chrono>

#include "app_check.h"

extern "C" __global__ void remora_emulated_busy_us() {}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::printf("usage: busy_loop SECONDS KERNEL_US [BATCH]\n");
    return 2;
  }
  const double seconds = std::atof(argv[1]);
  const unsigned kernel_us = static_cast<unsigned>(std::atoi(argv[2]));
  const int batch = argc > 3 ? std::atoi(argv[3]) : 4;
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  long kernels = 0;
  auto start = std::chrono::steady_clock::now();
  for (;;) {
    for (int i = 0; i < batch; i++) remora_emulated_busy_us<<<kernel_us, 1, 0, s>>>();
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(s));
    if (kernels == 0) {
      std::printf("running\n");
      std::fflush(stdout);
    }
    kernels += batch;
    std::chrono::duration<double> d = std::chrono::steady_clock::now() - start;
    if (d.count() >= seconds) {
      std::printf("kernels %ld seconds %.3f\n", kernels, d.count());
      break;
    }
  }
  CHECK(cudaStreamDestroy(s));
  std::printf("PASS busy_loop\n");
  return 0;
}
