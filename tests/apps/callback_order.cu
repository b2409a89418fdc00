// callback_order: host functions and copies keep stream order on every transport, without
// kernels (so it runs on the host-emulated backend too):
//  - each of 8 steps ships that step's data host->device, copies it back into pinned memory
//    asynchronously, then enqueues a host function (even steps) or stream callback (odd) that
//    must see exactly that step's data, in step order;
//  - a host function writes a pinned buffer that a later H2D copy in the same stream reads:
//    the copy must see what the host function wrote, not what was there at enqueue time;
//  - a host function on the legacy stream runs after everything on blocking streams.
#include <atomic>
#include <chrono>
#include <thread>

#include "app_check.h"

namespace {

constexpr int kSteps = 8;
constexpr int kN = 1 << 16;

std::atomic<int> g_sequence{0};
std::atomic<int> g_steps_done{0};

struct Step {
  int step;
  const int* snapshot;
  int order = -1;
  int bad_index = -1;
  cudaStream_t got_stream = nullptr;
};

int Value(int step, int i) { return step * 1000003 + i * 7; }

void Check(Step* c) {
  c->order = g_sequence.fetch_add(1);
  for (int i = 0; i < kN; ++i) {
    if (c->snapshot[i] != Value(c->step, i)) {
      c->bad_index = i;
      break;
    }
  }
  if (c->step == 2) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a slow one
  g_steps_done.fetch_add(1);
}

void CUDART_CB HostFn(void* user) { Check(static_cast<Step*>(user)); }

void CUDART_CB StreamCb(cudaStream_t stream, cudaError_t status, void* user) {
  auto* c = static_cast<Step*>(user);
  c->got_stream = status == cudaSuccess ? stream : nullptr;
  Check(c);
}

struct HostWrite {
  int* pinned;
  int base;
};

void CUDART_CB WritePinned(void* user) {
  auto* h = static_cast<HostWrite*>(user);
  for (int i = 0; i < kN; ++i) h->pinned[i] = h->base + i;
}

void CUDART_CB ObserveSteps(void* user) { *static_cast<int*>(user) = g_steps_done.load(); }

}  // namespace

int main() {
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  int* d;
  CHECK(cudaMalloc(&d, kN * sizeof(int)));
  int* snaps;
  CHECK(cudaMallocHost(&snaps, size_t{kSteps} * kN * sizeof(int)));
  std::memset(snaps, 0, size_t{kSteps} * kN * sizeof(int));

  std::vector<std::vector<int>> data(kSteps, std::vector<int>(kN));
  Step steps[kSteps];
  for (int k = 0; k < kSteps; ++k) {
    for (int i = 0; i < kN; ++i) data[k][i] = Value(k, i);
    steps[k].step = k;
    steps[k].snapshot = snaps + size_t(k) * kN;
    // Pageable source: CUDA stages it before returning, so the vector may change after.
    CHECK(cudaMemcpyAsync(d, data[k].data(), kN * sizeof(int), cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyAsync(snaps + size_t(k) * kN, d, kN * sizeof(int), cudaMemcpyDeviceToHost, s));
    if (k % 2 == 0) CHECK(cudaLaunchHostFunc(s, HostFn, &steps[k]));
    else CHECK(cudaStreamAddCallback(s, StreamCb, &steps[k], 0));
  }
  int legacy_seen = -1;
  CHECK(cudaLaunchHostFunc(cudaStreamLegacy, ObserveSteps, &legacy_seen));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaDeviceSynchronize());
  for (int k = 0; k < kSteps; ++k) {
    const Step& c = steps[k];
    REQUIRE(c.order == k, "step %d's callback ran in position %d", k, c.order);
    REQUIRE(c.bad_index < 0, "step %d's callback saw %d at [%d], want %d (copy not done before the callback?)", k,
            c.snapshot[c.bad_index], c.bad_index, Value(k, c.bad_index));
    if (k % 2 == 1) REQUIRE(c.got_stream == s, "step %d's stream callback got the wrong stream or status", k);
  }
  REQUIRE(legacy_seen == kSteps, "the legacy-stream host function saw %d steps done, want %d", legacy_seen, kSteps);

  // A host function writes pinned memory that the next H2D copy in the stream reads.
  int* pinned_src;
  int* pinned_dst;
  CHECK(cudaMallocHost(&pinned_src, kN * sizeof(int)));
  CHECK(cudaMallocHost(&pinned_dst, kN * sizeof(int)));
  for (int i = 0; i < kN; ++i) pinned_src[i] = -1;  // stale at enqueue time
  int* d2;
  CHECK(cudaMalloc(&d2, kN * sizeof(int)));
  HostWrite hw{pinned_src, 5000};
  CHECK(cudaLaunchHostFunc(s, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }, nullptr));
  CHECK(cudaLaunchHostFunc(s, WritePinned, &hw));
  CHECK(cudaMemcpyAsync(d, pinned_src, kN * sizeof(int), cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(d2, d, kN * sizeof(int), cudaMemcpyDeviceToDevice, s));
  CHECK(cudaMemcpyAsync(pinned_dst, d2, kN * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < kN; ++i)
    REQUIRE(pinned_dst[i] == 5000 + i, "the H2D copy after a host function read %d at [%d], want %d", pinned_dst[i], i,
            5000 + i);

  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d));
  CHECK(cudaFree(d2));
  CHECK(cudaFreeHost(snaps));
  CHECK(cudaFreeHost(pinned_src));
  CHECK(cudaFreeHost(pinned_dst));
  std::printf("PASS callback_order\n");
  return 0;
}
