// liveness MODE [ARG]: the client of the failure-model tests (tests/integration/failover_test.cc).
//   watch        allocates 16 MiB, prints "ready", then synchronises every 20 ms until a call
//                fails, and prints "failed <error> after <ms> ms" (how long the failing call
//                was blocked), "next <error>" (the next runtime call), "driver <CUresult>"
//                (cuCtxSynchronize through the driver facade), and exits 0.
//   long US      runs a kernel that the host-emulated backend makes last US microseconds and
//                synchronises; then stays US microseconds without a CUDA call and synchronises
//                again; then copies 16 MiB to and from the device, each queued behind such a
//                kernel. All must succeed however long US is against the deadlines: prints
//                "PASS liveness".
#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <vector>

#include "app_check.h"

extern "C" __global__ void remora_emulated_busy_us() {}

namespace {
double MsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  void* d = nullptr;
  CHECK(cudaMalloc(&d, 16 << 20));
  if (mode == "watch") {
    std::printf("ready\n");
    std::fflush(stdout);
    for (;;) {
      auto t0 = std::chrono::steady_clock::now();
      cudaError_t e = cudaDeviceSynchronize();
      if (e != cudaSuccess) {
        std::printf("failed %s after %.0f ms\n", cudaGetErrorName(e), MsSince(t0));
        void* more = nullptr;
        std::printf("next %s\n", cudaGetErrorName(cudaMalloc(&more, 4096)));
        auto sync = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "cuCtxSynchronize"));
        std::printf("driver %d\n", sync != nullptr ? sync() : -1);
        return 0;
      }
      usleep(20000);
    }
  }
  if (mode == "long" && argc > 2) {
    unsigned us = static_cast<unsigned>(std::atol(argv[2]));
    auto t0 = std::chrono::steady_clock::now();
    remora_emulated_busy_us<<<us, 1>>>();
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    std::printf("kernel of %u us took %.0f ms\n", us, MsSince(t0));
    usleep(us);
    CHECK(cudaDeviceSynchronize());
    // Copies queued behind such kernels: their data waits for the stream (the worker stops
    // reading, the client's send or receive stalls) and neither side may take that for silence.
    std::vector<unsigned char> h(16 << 20), back(h.size());
    for (size_t i = 0; i < h.size(); i++) h[i] = static_cast<unsigned char>(i * 7 + 3);
    remora_emulated_busy_us<<<us, 1>>>();
    CHECK(cudaMemcpy(d, h.data(), h.size(), cudaMemcpyHostToDevice));
    remora_emulated_busy_us<<<us, 1>>>();
    CHECK(cudaMemcpy(back.data(), d, back.size(), cudaMemcpyDeviceToHost));
    if (back != h) {
      std::printf("FAIL data differs after the copies\n");
      return 1;
    }
    CHECK(cudaFree(d));
    std::printf("PASS liveness\n");
    return 0;
  }
  std::printf("usage: liveness watch | liveness long US\n");
  return 2;
}
