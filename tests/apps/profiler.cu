// profiler: CUPTI's activity API as kineto (torch.profiler) uses it, linked against NVIDIA's
// libcupti.so.13 and run through remora-run, which puts Remora's in its place (issue 43). A
// kernel, a copy and a memset, each under an external correlation id, must come back as
// records in the buffers the program gives: with their names, sizes and the external ids
// linked through correlation ids, times inside the program's own clock window; nothing while
// collection is off; CUPTI's errors where CUPTI gives them. Ends with "PASS profiler".
#include <cupti.h>

#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "app_check.h"

#define CUPTI(call)                                                              \
  do {                                                                           \
    CUptiResult r_ = (call);                                                     \
    if (r_ != CUPTI_SUCCESS) {                                                   \
      const char* s_ = "?";                                                      \
      cuptiGetResultString(r_, &s_);                                             \
      std::printf("FAIL %s:%d: %s -> %s\n", __FILE__, __LINE__, #call, s_);     \
      std::exit(1);                                                              \
    }                                                                            \
  } while (0)

__global__ void scale(float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}

namespace {

struct Seen {
  std::vector<CUpti_ActivityKernel10> kernels;
  std::vector<std::string> kernel_names;
  std::vector<CUpti_ActivityMemcpy6> copies;
  std::vector<CUpti_ActivityMemset4> memsets;
  std::map<uint32_t, uint64_t> external;  // correlation id -> external id (CUSTOM0)
  int buffers = 0;
};
Seen g_seen;

void CUPTIAPI Requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 1 << 16;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI Completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  g_seen.buffers++;
  CUpti_Activity* a = nullptr;
  CUptiResult r;
  while ((r = cuptiActivityGetNextRecord(buffer, valid, &a)) == CUPTI_SUCCESS) {
    switch (a->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(a);
        g_seen.kernels.push_back(*k);
        g_seen.kernel_names.push_back(k->name ? k->name : "");
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: g_seen.copies.push_back(*reinterpret_cast<CUpti_ActivityMemcpy6*>(a)); break;
      case CUPTI_ACTIVITY_KIND_MEMSET: g_seen.memsets.push_back(*reinterpret_cast<CUpti_ActivityMemset4*>(a)); break;
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        auto* e = reinterpret_cast<CUpti_ActivityExternalCorrelation*>(a);
        REQUIRE(e->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, "external kind %d", int(e->externalKind));
        g_seen.external[e->correlationId] = e->externalId;
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME: break;  // NVIDIA's CUPTI gives them (Remora's none)
      default: REQUIRE(false, "a record of kind %d that was not enabled", int(a->kind));
    }
  }
  REQUIRE(r == CUPTI_ERROR_MAX_LIMIT_REACHED, "the end of a buffer answers %d", int(r));
  std::free(buffer);
}

// The application's clock, registered as kineto registers the CPU's time-stamp counter: not
// nanoseconds (three ticks each) and far from CUPTI's own.
uint64_t CUPTIAPI Ticks() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec)) * 3 + (1ull << 50);
}

uint64_t ExternalOf(uint32_t correlation) {
  auto it = g_seen.external.find(correlation);
  return it == g_seen.external.end() ? 0 : it->second;
}

}  // namespace

int main() {
  constexpr int n = 1 << 18;
  float* d = nullptr;
  CHECK(cudaMalloc(&d, n * sizeof(float)));
  std::vector<float> h(n, 1.0f);

  // Errors CUPTI gives, before anything is collected.
  uint64_t last = 0;
  REQUIRE(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last) == CUPTI_ERROR_QUEUE_EMPTY,
          "a pop of an empty stack");
  uint32_t version = 0;
  CUPTI(cuptiGetVersion(&version));
  REQUIRE(version >= 130000, "CUPTI API version %u", version);

  CUPTI(cuptiActivityRegisterCallbacks(Requested, Completed));
  CUPTI(cuptiActivityRegisterTimestampCallback(Ticks));
  for (auto k : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
                 CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, CUPTI_ACTIVITY_KIND_RUNTIME})
    CUPTI(cuptiActivityEnable(k));
  const uint64_t t0 = Ticks();

  CUPTI(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, 42));
  scale<<<n / 256, 256>>>(d, 2.0f, n);
  CHECK(cudaGetLastError());
  CUPTI(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last));
  REQUIRE(last == 42, "the pop gave %llu", (unsigned long long)last);
  // 50 ms pass in the application's clock before the copy, so that a wrong rate shows: the
  // kernel's record must fall before the pause and the copy's after it (bounds taken from
  // what happened, not from how fast: a loaded machine or a sanitizer slows everything).
  CHECK(cudaDeviceSynchronize());
  const uint64_t kernel_done = Ticks();
  usleep(50000);
  const uint64_t pause_end = Ticks();
  CUPTI(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, 43));
  CHECK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(d, 7, 4096));
  CUPTI(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last));
  CHECK(cudaDeviceSynchronize());
  const uint64_t t1 = Ticks();
  CUPTI(cuptiActivityFlushAll(0));

  REQUIRE(g_seen.kernels.size() == 1, "%zu kernel records", g_seen.kernels.size());
  const auto& k = g_seen.kernels[0];
  REQUIRE(g_seen.kernel_names[0].find("scale") != std::string::npos, "kernel name '%s'", g_seen.kernel_names[0].c_str());
  REQUIRE(k.gridX == n / 256 && k.gridY == 1 && k.blockX == 256 && k.blockY == 1, "grid %d block %d", k.gridX, k.blockX);
  REQUIRE(k.deviceId == 0, "device %u", k.deviceId);
  REQUIRE(ExternalOf(k.correlationId) == 42, "the kernel's external id is %llu", (unsigned long long)ExternalOf(k.correlationId));
  // Record times are the server's clock mapped to this one through round trips: allowed off by
  // `slack` (a wrong rate puts them more than 30 ms off here).
  constexpr uint64_t kMs = 3'000'000;  // Ticks() per millisecond
  constexpr uint64_t slack = 5 * kMs;
  REQUIRE(k.end <= kernel_done + slack, "the kernel's record ends %.1f ms after its synchronisation returned",
          double(k.end - kernel_done) / kMs);
  REQUIRE(k.start + slack >= t0 && k.end <= t1 + slack && k.start <= k.end, "kernel times [%llu, %llu] outside [%llu, %llu]",
          (unsigned long long)k.start, (unsigned long long)k.end, (unsigned long long)t0, (unsigned long long)t1);
  // The copy from pageable memory may reach the GPU in pieces (through a staging buffer): each
  // piece a record, all of them the call's.
  REQUIRE(!g_seen.copies.empty(), "no copy record");
  uint64_t copied = 0;
  for (const auto& c : g_seen.copies) {
    REQUIRE(c.copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, "copy kind %d", int(c.copyKind));
    REQUIRE(ExternalOf(c.correlationId) == 43, "the copy's external id is %llu", (unsigned long long)ExternalOf(c.correlationId));
    REQUIRE(c.start + slack >= t0 && c.end <= t1 + slack && c.start <= c.end, "copy times outside the window");
    REQUIRE(c.start + slack >= pause_end, "the copy's record starts %.1f ms before the pause ended",
            double(pause_end - c.start) / kMs);
    copied += c.bytes;
  }
  REQUIRE(copied == n * sizeof(float), "copy records of %llu bytes", (unsigned long long)copied);
  const auto& c = g_seen.copies[0];
  REQUIRE(g_seen.memsets.size() == 1, "%zu memset records", g_seen.memsets.size());
  const auto& m = g_seen.memsets[0];
  REQUIRE(m.bytes == 4096 && m.value == 7, "memset of %llu bytes to %u", (unsigned long long)m.bytes, m.value);
  REQUIRE(ExternalOf(m.correlationId) == 43, "the memset's external id");
  REQUIRE(m.correlationId != c.correlationId && c.correlationId != k.correlationId, "correlation ids are per call");
  size_t dropped = 1;
  CUPTI(cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped));
  REQUIRE(dropped == 0, "%zu records dropped", dropped);

  // Off: nothing more is recorded.
  const size_t copies = g_seen.copies.size();
  for (auto kind : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
                    CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, CUPTI_ACTIVITY_KIND_RUNTIME})
    CUPTI(cuptiActivityDisable(kind));
  scale<<<1, 32>>>(d, 1.0f, 32);
  CHECK(cudaMemcpy(d, h.data(), 64, cudaMemcpyHostToDevice));
  CHECK(cudaDeviceSynchronize());
  CUPTI(cuptiActivityFlushAll(0));
  REQUIRE(g_seen.kernels.size() == 1 && g_seen.copies.size() == copies, "records after collection stopped");

  // On again: only the new work.
  CUPTI(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  scale<<<2, 64>>>(d, 1.0f, 128);
  CHECK(cudaDeviceSynchronize());
  CUPTI(cuptiActivityFlushAll(0));
  REQUIRE(g_seen.kernels.size() == 2 && g_seen.kernels[1].gridX == 2, "%zu kernel records after enabling again",
          g_seen.kernels.size());
  // As kineto stops: collection disabled first, then a forced flush hands over what was
  // collected while it was on.
  scale<<<3, 32>>>(d, 1.0f, 96);
  CHECK(cudaDeviceSynchronize());
  CUPTI(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  CUPTI(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  REQUIRE(g_seen.kernels.size() == 3 && g_seen.kernels[2].gridX == 3, "%zu kernel records after a disable and a flush",
          g_seen.kernels.size());
  // A burst (a profiled training step launches thousands of kernels): every record arrives,
  // though the worker's answer to one flush is larger than one reply frame (its results are
  // held and read back in pieces: server/worker/session/held_results.h).
  const size_t memsets = g_seen.memsets.size();
  constexpr int kBurst = 12000;
  CUPTI(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET));
  for (int i = 0; i < kBurst; i++) CHECK(cudaMemsetAsync(d + (i % 1024), i & 0xff, 4));
  CHECK(cudaDeviceSynchronize());
  CUPTI(cuptiActivityFlushAll(0));
  CUPTI(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMSET));
  REQUIRE(g_seen.memsets.size() == memsets + kBurst, "%zu memset records of a burst of %d", g_seen.memsets.size() - memsets, kBurst);
  for (int i = 0; i < kBurst; i += 997) {
    const auto& r = g_seen.memsets[memsets + i];
    REQUIRE(r.bytes == 4 && r.value == unsigned(i & 0xff), "burst record %d: %llu bytes of %u", i, (unsigned long long)r.bytes, r.value);
  }
  CUPTI(cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped));
  REQUIRE(dropped == 0, "%zu records of the burst dropped", dropped);
  CUPTI(cuptiFinalize());
  CHECK(cudaFree(d));
  std::printf("PASS profiler: %zu kernel, %zu copy, %zu memset records in %d buffers, external ids linked\n",
              g_seen.kernels.size(), g_seen.copies.size(), g_seen.memsets.size(), g_seen.buffers);
  return 0;
}
