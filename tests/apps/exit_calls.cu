// exit_calls: CUDA and cuBLAS calls made while the process exits, after main() returned - as
// PyTorch's handle pools make them from static destructors (its cuSOLVER pool destroys its
// handles there). glibc's exit() has destroyed the main thread's thread_local objects by then,
// so a shim that keeps per-thread state in plain thread_locals writes into freed memory here
// (run under valgrind by the integration test, which then fails). Prints
// "PASS exit_calls: ..." from the last destructor; exits 1 on a wrong result or status.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <unistd.h>

namespace {

void Fail(const char* what, int code) {
  std::printf("FAIL exit_calls: %s returned %d\n", what, code);
  std::fflush(stdout);
  _exit(1);
}

#define CK(x)                                  \
  do {                                         \
    auto _r = (x);                             \
    if (_r != 0) Fail(#x, static_cast<int>(_r)); \
  } while (0)

constexpr int kN = 4096;

// Made in main(), used and destroyed only at exit.
struct AtExit {
  cublasHandle_t blas = nullptr;
  cudaStream_t stream = nullptr;
  float* x = nullptr;
  float* y = nullptr;

  ~AtExit() {
    if (blas == nullptr) return;  // main() failed before setting up
    float host[kN];
    for (int round = 0; round < 20; ++round) {  // many calls, each through the per-thread encoder
      for (int i = 0; i < kN; ++i) host[i] = static_cast<float>(i % 97 + round);
      CK(cudaMemcpyAsync(x, host, sizeof(host), cudaMemcpyHostToDevice, stream));
      CK(cudaMemsetAsync(y, 0, sizeof(host), stream));
      const float alpha = 2.0f;
      CK(cublasSaxpy(blas, kN, &alpha, x, 1, y, 1));  // y = 2x
      CK(cudaMemcpyAsync(host, y, sizeof(host), cudaMemcpyDeviceToHost, stream));
      CK(cudaStreamSynchronize(stream));
      for (int i = 0; i < kN; ++i) {
        if (host[i] != 2.0f * static_cast<float>(i % 97 + round)) {
          std::printf("FAIL exit_calls: round %d, y[%d] = %g\n", round, i, host[i]);
          std::fflush(stdout);
          _exit(1);
        }
      }
    }
    CK(cublasDestroy(blas));
    CK(cudaFree(x));
    CK(cudaFree(y));
    CK(cudaStreamDestroy(stream));
    std::printf("PASS exit_calls: 20 rounds of copies, memsets, cublasSaxpy and frees after main() returned\n");
    std::fflush(stdout);
  }
};

AtExit g_at_exit;

}  // namespace

int main() {
  // Every per-thread state of the shim is created here, on the main thread, before exit.
  CK(cudaStreamCreateWithFlags(&g_at_exit.stream, cudaStreamNonBlocking));
  CK(cudaMalloc(&g_at_exit.x, kN * sizeof(float)));
  CK(cudaMalloc(&g_at_exit.y, kN * sizeof(float)));
  CK(cublasCreate(&g_at_exit.blas));
  CK(cublasSetStream(g_at_exit.blas, g_at_exit.stream));
  int dev = -1;
  CK(cudaGetDevice(&dev));
  std::printf("exit_calls: set up on device %d; the calls follow at exit\n", dev);
  return 0;
}
