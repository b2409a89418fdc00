// busy_loop SECONDS KERNEL_US [BATCH [THINK_US]]: keeps "the GPU" busy for SECONDS with a kernel
// that the host-emulated backend runs for gridDim.x microseconds (any kernel whose name contains
// remora_emulated_busy_us; on a real GPU this one does nothing): BATCH launches of KERNEL_US
// (default 4), then cudaStreamSynchronize, over and over. Prints "running" after the first
// batch and, at the end, "kernels N seconds S". For the compute-share integration test
// (tests/integration/compute_test.cc): a tenant's kernel count is its share of GPU time.
// With THINK_US, a latency-sensitive client instead: after each synchronisation it sleeps
// THINK_US (0.5x..1.5x, random) and at the end also prints
// "latency_us n N p50 A p90 B p99 C" (launches to synchronised, per batch).
// With BUSY_LOOP_GATE=PATH in the environment it prints "ready" once its session is up and
// starts the clock only when PATH exists, so that tests can start two clients at the same
// instant however long their processes take to start (a sanitizer build's take seconds).
#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "app_check.h"

extern "C" __global__ void remora_emulated_busy_us() {}

namespace {
double Pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::printf("usage: busy_loop SECONDS KERNEL_US [BATCH [THINK_US]]\n");
    return 2;
  }
  const double seconds = std::atof(argv[1]);
  const unsigned kernel_us = static_cast<unsigned>(std::atoi(argv[2]));
  const int batch = argc > 3 ? std::atoi(argv[3]) : 4;
  const long think_us = argc > 4 ? std::atol(argv[4]) : -1;
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  if (const char* gate = std::getenv("BUSY_LOOP_GATE")) {
    std::printf("ready\n");
    std::fflush(stdout);
    struct stat st;
    for (int waited_ms = 0; ::stat(gate, &st) != 0; waited_ms++) {
      if (waited_ms > 300000) {
        std::printf("FAIL busy_loop: %s did not appear in 300 s\n", gate);
        return 1;
      }
      timespec ms{0, 1000000};
      nanosleep(&ms, nullptr);
    }
  }
  std::mt19937 rng(12345);
  std::uniform_real_distribution<double> jitter(0.5, 1.5);
  std::vector<double> latencies;
  long kernels = 0;
  auto start = std::chrono::steady_clock::now();
  for (;;) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < batch; i++) remora_emulated_busy_us<<<kernel_us, 1, 0, s>>>();
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(s));
    auto t1 = std::chrono::steady_clock::now();
    if (kernels == 0) {
      std::printf("running\n");
      std::fflush(stdout);
    }
    kernels += batch;
    std::chrono::duration<double> d = t1 - start;
    if (d.count() >= seconds) {
      std::printf("kernels %ld seconds %.3f\n", kernels, d.count());
      break;
    }
    if (think_us >= 0) {
      latencies.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      long ns = static_cast<long>(static_cast<double>(think_us) * 1000 * jitter(rng));
      timespec ts{ns / 1000000000, ns % 1000000000};
      nanosleep(&ts, nullptr);
    }
  }
  if (think_us >= 0)
    std::printf("latency_us n %zu p50 %.1f p90 %.1f p99 %.1f\n", latencies.size(), Pct(latencies, 0.5),
                Pct(latencies, 0.9), Pct(latencies, 0.99));
  CHECK(cudaStreamDestroy(s));
  std::printf("PASS busy_loop\n");
  return 0;
}
