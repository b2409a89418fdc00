// Streams and events without kernels: creation flags and priorities, records, waits,
// queries, synchronisation, elapsed time, per-thread and legacy default streams; and that a
// device synchronisation waits for work queued since the last one even where Remora answers
// it without a round trip (nothing queued since).
#include "app_check.h"

// The host-emulated backend runs it for (grid.x) microseconds; on a GPU it does nothing.
extern "C" __global__ void remora_emulated_busy_us() {}

int main() {
  int lo = 0;
  cudaStream_t a, b, c;
  CHECK(cudaStreamCreate(&a));
  CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithPriority(&c, cudaStreamNonBlocking, -1));
  unsigned flags = 99;
  CHECK(cudaStreamGetFlags(b, &flags));
  REQUIRE(flags == cudaStreamNonBlocking, "stream flags %u", flags);
  CHECK(cudaStreamGetPriority(c, &lo));
  REQUIRE(lo == -1, "stream priority %d", lo);
  int dev = -1;
  CHECK(cudaStreamGetDevice(b, &dev));
  REQUIRE(dev == 0, "stream device %d", dev);

  cudaEvent_t start, stop, nt;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  CHECK(cudaEventCreateWithFlags(&nt, cudaEventDisableTiming));

  const size_t n = 8 << 20;
  char* d;
  CHECK(cudaMalloc(&d, n));
  std::vector<char> h = [&] { auto v = RandomBytes(n, 11); return std::vector<char>(v.begin(), v.end()); }();
  CHECK(cudaEventRecord(start, a));
  CHECK(cudaMemcpyAsync(d, h.data(), n, cudaMemcpyHostToDevice, a));
  CHECK(cudaEventRecord(stop, a));
  CHECK(cudaEventRecord(nt, a));
  CHECK(cudaStreamWaitEvent(b, stop, 0));
  std::vector<char> back(n);
  CHECK(cudaMemcpyAsync(back.data(), d, n, cudaMemcpyDeviceToHost, b));
  CHECK(cudaStreamSynchronize(b));
  REQUIRE(std::memcmp(back.data(), h.data(), n) == 0, "data through two streams differs");
  CHECK(cudaEventSynchronize(stop));
  CHECK(cudaEventQuery(stop));
  CHECK(cudaStreamQuery(a));
  float ms = -1;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  REQUIRE(ms >= 0, "elapsed time %f", ms);
  EXPECT_ERR(cudaEventElapsedTime(&ms, start, nt), cudaErrorInvalidResourceHandle);

  // The default streams.
  CHECK(cudaMemsetAsync(d, 1, 100, cudaStreamPerThread));
  CHECK(cudaStreamSynchronize(cudaStreamPerThread));
  CHECK(cudaMemsetAsync(d, 2, 100, cudaStreamLegacy));
  CHECK(cudaStreamSynchronize(cudaStreamLegacy));
  CHECK(cudaStreamSynchronize(0));
  CHECK(cudaDeviceSynchronize());
  char x = 0;
  CHECK(cudaMemcpy(&x, d + 50, 1, cudaMemcpyDeviceToHost));
  REQUIRE(x == 2, "memset on the legacy stream gave %d", x);

  // Synchronous copies queue nothing that outlives them: the second synchronisation has
  // nothing to wait for. Then a 200 ms kernel (host-emulated) on a non-blocking stream, which
  // a synchronous copy on the legacy stream does not wait for: the device synchronisation must.
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(&x, d + 50, 1, cudaMemcpyDeviceToHost));
  CHECK(cudaDeviceSynchronize());
  (void)cudaGetLastError();  // the refused cudaEventElapsedTime above is still the last error
  remora_emulated_busy_us<<<200000, 1, 0, b>>>();
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(&x, d + 50, 1, cudaMemcpyDeviceToHost));
  CHECK(cudaDeviceSynchronize());
  REQUIRE(cudaStreamQuery(b) == cudaSuccess, "cudaDeviceSynchronize returned before a kernel queued after the last one");

  // A small synchronous copy on the legacy stream behind a 200 ms kernel on a blocking
  // stream: it waits for that stream (the worker's short wait for small copies runs out and
  // the copy is finished through an event), returns its data, and returns only once done.
  remora_emulated_busy_us<<<200000, 1, 0, a>>>();
  CHECK(cudaMemsetAsync(d, 7, 100, a));
  CHECK(cudaMemcpy(&x, d + 50, 1, cudaMemcpyDeviceToHost));
  REQUIRE(x == 7, "a copy on the legacy stream read %d before the blocking stream's memset", x);
  REQUIRE(cudaStreamQuery(a) == cudaSuccess, "a synchronous copy returned before the blocking stream it waits for");
  // From pinned memory (from pageable memory CUDA may return once the bytes are staged).
  char* y = nullptr;
  CHECK(cudaMallocHost(&y, 1));
  *y = 9;
  remora_emulated_busy_us<<<200000, 1, 0, a>>>();
  CHECK(cudaMemcpy(d + 60, y, 1, cudaMemcpyHostToDevice));
  REQUIRE(cudaStreamQuery(a) == cudaSuccess, "a synchronous host-to-device copy returned before the stream it waits for");
  CHECK(cudaMemcpy(&x, d + 60, 1, cudaMemcpyDeviceToHost));
  REQUIRE(x == 9, "the host-to-device copy wrote %d", x);
  CHECK(cudaFreeHost(y));

  for (cudaStream_t s : {a, b, c}) CHECK(cudaStreamDestroy(s));
  for (cudaEvent_t e : {start, stop, nt}) CHECK(cudaEventDestroy(e));
  CHECK(cudaFree(d));
  std::printf("PASS streams_events\n");
  return 0;
}
