// Bad calls get CUDA's error codes, the process keeps working afterwards, and the error
// state (cudaGetLastError / cudaPeekAtLastError) behaves as in CUDA.
#include <cstring>
#include <string>
#include <vector>

#include "app_check.h"

int main() {
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  char* d;
  CHECK(cudaMalloc(&d, 4096));
  std::vector<char> host(8192, 1);

  // Free of a pointer that was never allocated, and of an interior pointer.
  EXPECT_ERR(cudaFree(reinterpret_cast<void*>(0x7e5e0000)), cudaErrorInvalidValue);
  EXPECT_ERR(cudaFree(d + 16), cudaErrorInvalidValue);
  // Copies past an allocation's end, in both directions and device to device.
  EXPECT_ERR(cudaMemcpy(d, host.data(), 4097, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_ERR(cudaMemcpy(host.data(), d + 1, 4096, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_ERR(cudaMemcpy(d, d + 2048, 4096, cudaMemcpyDeviceToDevice), cudaErrorInvalidValue);
  EXPECT_ERR(cudaMemset(d + 4000, 0, 100), cudaErrorInvalidValue);
  // A host pointer where device memory is required, and an invalid kind.
  EXPECT_ERR(cudaMemcpy(host.data(), host.data() + 10, 10, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_ERR(cudaMemcpy(host.data(), host.data() + 10, 10, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_ERR(cudaMemcpy(d, host.data(), 10, static_cast<cudaMemcpyKind>(42)), cudaErrorInvalidMemcpyDirection);
  // Invalid and destroyed streams and events.
  cudaStream_t bogus = reinterpret_cast<cudaStream_t>(0xdead0000);
  EXPECT_ERR(cudaStreamSynchronize(bogus), cudaErrorInvalidValue);
  EXPECT_ERR(cudaMemcpyAsync(d, host.data(), 16, cudaMemcpyHostToDevice, bogus), cudaErrorInvalidValue);
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CHECK(cudaStreamDestroy(s));
  EXPECT_ERR(cudaStreamQuery(s), cudaErrorInvalidValue);
  cudaEvent_t ev;
  CHECK(cudaEventCreate(&ev));
  CHECK(cudaEventDestroy(ev));
  EXPECT_ERR(cudaEventRecord(ev, 0), cudaErrorInvalidValue);
  EXPECT_ERR(cudaStreamCreateWithFlags(&s, 0x40), cudaErrorInvalidValue);
  // Devices that do not exist.
  EXPECT_ERR(cudaSetDevice(count + 5), cudaErrorInvalidDevice);
  cudaDeviceProp prop;
  EXPECT_ERR(cudaGetDeviceProperties(&prop, -1), cudaErrorInvalidDevice);
  // Freeing host memory that cudaMallocHost did not allocate.
  EXPECT_ERR(cudaFreeHost(host.data()), cudaErrorInvalidValue);

  // Error state: the last error sticks until read; peek does not clear it.
  EXPECT_ERR(cudaFree(d + 1), cudaErrorInvalidValue);
  EXPECT_ERR(cudaPeekAtLastError(), cudaErrorInvalidValue);
  EXPECT_ERR(cudaPeekAtLastError(), cudaErrorInvalidValue);
  EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidValue);
  CHECK(cudaGetLastError());
  REQUIRE(std::strcmp(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation") == 0, "error name");
  REQUIRE(std::strcmp(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument") == 0, "error string");
  REQUIRE(std::strcmp(cudaGetErrorString(static_cast<cudaError_t>(12345)), "unrecognized error code") == 0, "unknown code");

  // The error log (cudaLogs*): an error is a line naming its call, given to a callback as it
  // happens and kept for the dumps; an iterator reads each line once.
  cudaLogIterator it = 0;
  CHECK(cudaLogsCurrent(&it, 0));
  std::vector<std::string> seen;
  cudaLogsCallbackHandle cb = nullptr;
  CHECK(cudaLogsRegisterCallback(
      [](void* user, cudaLogLevel, char* message, size_t length) {
        static_cast<std::vector<std::string>*>(user)->emplace_back(message, length);
      },
      &seen, &cb));
  EXPECT_ERR(cudaFree(d + 1), cudaErrorInvalidValue);
  EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidValue);
  auto names_free = [](const std::string& line) {
    return line.find("[CUDA][E]") != std::string::npos &&
           (line.find("cudaFree") != std::string::npos || line.find("cuMemFree") != std::string::npos);
  };
  REQUIRE(!seen.empty() && names_free(seen.back()), "the callback saw %zu lines, the last: %s", seen.size(),
          seen.empty() ? "" : seen.back().c_str());
  char text[8192];
  size_t n = sizeof(text);
  CHECK(cudaLogsDumpToMemory(&it, text, &n, 0));
  REQUIRE(n > 0 && n == std::strlen(text) && names_free(text), "dumped %zu bytes: %s", n, text);
  n = sizeof(text);
  CHECK(cudaLogsDumpToMemory(&it, text, &n, 0));
  REQUIRE(n == 0, "the iterator did not advance: %zu more bytes", n);
  CHECK(cudaLogsUnregisterCallback(cb));
  EXPECT_ERR(cudaLogsUnregisterCallback(cb), cudaErrorInvalidValue);
  EXPECT_ERR(cudaLogsDumpToMemory(&it, nullptr, &n, 0), cudaErrorInvalidValue);
  EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidValue);
  // Asynchronous notifications: registrations are checked and kept.
  cudaAsyncCallbackHandle_t nh = nullptr;
  auto on_note = [](cudaAsyncNotificationInfo_t*, void*, cudaAsyncCallbackHandle_t) {};
  CHECK(cudaDeviceRegisterAsyncNotification(0, on_note, nullptr, &nh));
  EXPECT_ERR(cudaDeviceRegisterAsyncNotification(count + 5, on_note, nullptr, &nh), cudaErrorInvalidDevice);
  CHECK(cudaDeviceUnregisterAsyncNotification(0, nh));
  EXPECT_ERR(cudaDeviceUnregisterAsyncNotification(0, nh), cudaErrorInvalidValue);
  EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidValue);

  // Everything still works after the errors.
  CHECK(cudaMemcpy(d, host.data(), 4096, cudaMemcpyHostToDevice));
  std::vector<char> back(4096, 0);
  CHECK(cudaMemcpy(back.data(), d, 4096, cudaMemcpyDeviceToHost));
  REQUIRE(std::memcmp(back.data(), host.data(), 4096) == 0, "copy after errors differs");
  CHECK(cudaFree(d));
  CHECK(cudaDeviceSynchronize());
  std::printf("PASS bad_calls\n");
  return 0;
}
