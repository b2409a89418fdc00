// compute_share: the workloads of the compute-share test (tests/gpu/compute-shares.sh). A
// kernel that keeps the GPU busy for a given time: every thread of a grid that fills all SMs
// runs an FMA chain until the GPU's global timer says the time is up, so its duration does not
// depend on clocks or on other tenants' kernels (they wait; it does not stretch).
//
//   compute_share                                  self-check (the GPU suite runs it so): the
//                                                  kernel's duration, a few latencies
//   compute_share throughput SECONDS KERNEL_US [BATCH]   BATCH launches (default 8) then a stream
//       synchronisation, over and over; prints "running" after the first batch and at the end
//       "kernels N seconds S rate R" (kernels per second)
//   compute_share saturate SECONDS KERNEL_US            the same with batches of 64 (a deep queue)
//   compute_share latency SECONDS KERNEL_US THINK_US    one small kernel (one block of 64
//       threads) + cudaStreamSynchronize, then THINK_US (0.5x..1.5x, random) on the host, over
//       and over; prints "latency_us n N p50 A p90 B p99 C mean D"
#define GPU_TEST_NAME "compute_share"
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "gpu_test.h"

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void timed_fma(float* out, unsigned long long ns) {
  const unsigned long long start = global_ns();
  float a = threadIdx.x * 1e-3f, b = 1.0001f, c = 0.9999f;
  while (global_ns() - start < ns) {
#pragma unroll 16
    for (int i = 0; i < 256; ++i) {
      a = fmaf(a, b, c);
      b = fmaf(b, c, a);
    }
  }
  if (a == 12345.0f) out[blockIdx.x] = a + b;  // never true: keeps the chain alive
}

namespace {

using Clock = std::chrono::steady_clock;

struct Gpu {
  float* out = nullptr;
  int full_grid = 1;  // blocks that fill every SM
  cudaStream_t stream = nullptr;
};

Gpu Setup() {
  Gpu g;
  int dev = 0, sms = 0, per_sm = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, timed_fma, 256, 0));
  g.full_grid = std::max(1, sms * std::max(1, per_sm));
  CK(cudaMalloc(&g.out, sizeof(float) * g.full_grid));
  CK(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
  return g;
}

double Seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int Loop(const Gpu& g, double seconds, unsigned long long kernel_ns, int batch) {
  long kernels = 0;
  auto t0 = Clock::now();
  for (;;) {
    for (int i = 0; i < batch; ++i) timed_fma<<<g.full_grid, 256, 0, g.stream>>>(g.out, kernel_ns);
    CK_LAUNCH("timed_fma");
    CK(cudaStreamSynchronize(g.stream));
    if (kernels == 0) {
      std::printf("running\n");
      std::fflush(stdout);
    }
    kernels += batch;
    double s = Seconds(t0);
    if (s >= seconds) {
      std::printf("kernels %ld seconds %.3f rate %.1f\n", kernels, s, kernels / s);
      return 0;
    }
  }
}

std::vector<double> Latencies(const Gpu& g, double seconds, unsigned long long kernel_ns, long think_us) {
  std::mt19937 rng(12345);
  std::uniform_real_distribution<double> jitter(0.5, 1.5);
  std::vector<double> us;
  auto t0 = Clock::now();
  while (Seconds(t0) < seconds) {
    auto a = Clock::now();
    timed_fma<<<1, 64, 0, g.stream>>>(g.out, kernel_ns);
    CK(cudaStreamSynchronize(g.stream));
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - a).count());
    if (think_us > 0) {
      long ns = static_cast<long>(think_us * 1000 * jitter(rng));
      timespec ts{ns / 1000000000, ns % 1000000000};
      nanosleep(&ts, nullptr);
    }
  }
  return us;
}

double Pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  Gpu g = Setup();
  const char* mode = argc > 1 ? argv[1] : "selfcheck";
  if (std::strcmp(mode, "throughput") == 0 || std::strcmp(mode, "saturate") == 0) {
    if (argc < 4) gpu_test::fail("usage: compute_share %s SECONDS KERNEL_US [BATCH]", mode);
    int batch = argc > 4 ? std::atoi(argv[4]) : std::strcmp(mode, "saturate") == 0 ? 64 : 8;
    return Loop(g, std::atof(argv[2]), std::strtoull(argv[3], nullptr, 10) * 1000, batch);
  }
  if (std::strcmp(mode, "latency") == 0) {
    if (argc < 5) gpu_test::fail("usage: compute_share latency SECONDS KERNEL_US THINK_US");
    std::vector<double> us = Latencies(g, std::atof(argv[2]), std::strtoull(argv[3], nullptr, 10) * 1000, std::atol(argv[4]));
    double mean = 0;
    for (double x : us) mean += x;
    mean /= us.empty() ? 1 : static_cast<double>(us.size());
    std::printf("latency_us n %zu p50 %.1f p90 %.1f p99 %.1f mean %.1f\n", us.size(), Pct(us, 0.5), Pct(us, 0.9),
                Pct(us, 0.99), mean);
    return 0;
  }
  // Self-check: a 2 ms kernel takes about 2 ms of GPU time (events), and small kernels answer.
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  timed_fma<<<g.full_grid, 256, 0, g.stream>>>(g.out, 100000);  // warm-up
  CK(cudaEventRecord(e0, g.stream));
  timed_fma<<<g.full_grid, 256, 0, g.stream>>>(g.out, 2000000);
  CK(cudaEventRecord(e1, g.stream));
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  if (ms < 1.9f || ms > 2.6f) gpu_test::fail("a 2 ms kernel took %.3f ms of GPU time", ms);
  std::vector<double> us = Latencies(g, 0.2, 10000, 0);
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaStreamDestroy(g.stream));
  CK(cudaFree(g.out));
  gpu_test::pass("a 2 ms kernel over %d blocks took %.3f ms; %zu launch+sync of a 10 us kernel, p50 %.1f us", g.full_grid,
                 ms, us.size(), Pct(us, 0.5));
  return 0;
}
