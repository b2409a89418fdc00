// stream_idle: a stream drained by a copy into pageable memory has nothing left to wait for,
// and work queued after it (by this thread or another) is waited for. Through Remora
// (tests/integration/stream_idle_census_test.sh) the census of the interval between
// cudaProfilerStart and cudaProfilerStop shows the synchronisations and queries of a drained
// stream answered in the client (PyTorch's .item(): a copy, then cudaStreamSynchronize; issue
// 45) and the others sent: 3 round trips of cuStreamSynchronize (23 over shm, where copies
// into pinned memory are posted without a reply), none of cuStreamQuery.
#define GPU_TEST_NAME "stream_idle"
#include "gpu_test.h"

#include <cuda_profiler_api.h>

#include <thread>

namespace {
constexpr int kBytes = 64;

void Expect(const unsigned char* h, int value, const char* when) {
  for (int i = 0; i < kBytes; i++)
    if (h[i] != static_cast<unsigned char>(value)) gpu_test::fail("%s: byte %d is %d, %d expected", when, i, h[i], value);
}
}  // namespace

int main() {
  cudaStream_t s, other;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  unsigned char* d = nullptr;
  CK(cudaMalloc(&d, kBytes));
  unsigned char h[kBytes];

  CK(cudaProfilerStart());
  // A step: work, a copy into pageable memory, then the stream synchronised and queried.
  for (int i = 0; i < 50; i++) {
    CK(cudaMemsetAsync(d, i, kBytes, s));
    CK(cudaMemcpyAsync(h, d, kBytes, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaStreamQuery(s));
    Expect(h, i, "after a step");
  }
  // The same into pinned memory, asynchronous: where the memory cannot be shared with the
  // server (tcp) the copy's reply drains the stream and the synchronisation waits for it
  // without a round trip of its own; where it is shared (shm) the copy is posted without a
  // reply and the synchronisation is sent (20 round trips).
  unsigned char* pinned = nullptr;
  CK(cudaHostAlloc(reinterpret_cast<void**>(&pinned), kBytes, cudaHostAllocDefault));
  for (int i = 0; i < 20; i++) {
    CK(cudaMemsetAsync(d, 100 + i, kBytes, s));
    CK(cudaMemcpyAsync(pinned, d, kBytes, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaStreamQuery(s));
    Expect(pinned, 100 + i, "after a step into pinned memory");
  }
  // Work queued after the copy is waited for (round trip 1).
  CK(cudaMemcpyAsync(h, d, kBytes, cudaMemcpyDeviceToHost, s));
  CK(cudaMemsetAsync(d, 200, kBytes, s));
  CK(cudaStreamSynchronize(s));
  CK(cudaMemcpyAsync(h, d, kBytes, cudaMemcpyDeviceToHost, s));
  Expect(h, 200, "work queued after the copy");
  // So is work another thread queued after it (round trip 2).
  cudaError_t queued = cudaSuccess;
  std::thread t([&] { queued = cudaMemsetAsync(d, 201, kBytes, s); });
  t.join();
  CK(queued);
  CK(cudaStreamSynchronize(s));
  CK(cudaMemcpyAsync(h, d, kBytes, cudaMemcpyDeviceToHost, s));
  Expect(h, 201, "work another thread queued");
  // Another stream was never drained (round trip 3).
  CK(cudaStreamSynchronize(other));
  // A synchronous copy drains the legacy stream.
  CK(cudaMemcpy(h, d, kBytes, cudaMemcpyDeviceToHost));
  CK(cudaStreamSynchronize(0));
  CK(cudaStreamQuery(cudaStreamLegacy));
  CK(cudaProfilerStop());

  // Managed memory the stream wrote is read right by the host after a synchronisation the
  // copy made needless (through Remora: answered in the client, which must still refresh the
  // host's view of managed memory).
  unsigned char* m = nullptr;
  CK(cudaMallocManaged(&m, kBytes));
  m[0] = 1;
  CK(cudaMemsetAsync(m, 77, kBytes, s));
  CK(cudaMemcpyAsync(h, d, kBytes, cudaMemcpyDeviceToHost, s));
  CK(cudaStreamSynchronize(s));
  Expect(m, 77, "managed memory after the synchronisation");
  CK(cudaFree(m));

  CK(cudaFreeHost(pinned));
  CK(cudaFree(d));
  CK(cudaStreamDestroy(other));
  CK(cudaStreamDestroy(s));
  gpu_test::pass("50 steps of copy and synchronisation, 20 into pinned memory; work queued after a copy, by this thread or another, waited for; managed memory read after");
  return 0;
}
