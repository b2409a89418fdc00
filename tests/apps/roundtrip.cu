// Data round-trips byte for byte through device memory: every copy kind and direction,
// synchronous and asynchronous, pageable and pinned, sizes from 1 byte to 64 MiB, offsets
// inside allocations, memset. Needs no kernel execution.
//
//   app_roundtrip [--max-bytes N]
//
// --max-bytes N skips the round trips of more than N bytes (default: none skipped, so the
// largest is 64 MiB); slow transports (rdma:// over Soft-RoCE in an emulated VM) use it.
#include <cstdint>

#include "app_check.h"

static void RoundTrip(size_t n, unsigned seed) {
  std::vector<unsigned char> src = RandomBytes(n, seed), back(n, 0);
  unsigned char *d1, *d2;
  CHECK(cudaMalloc(&d1, n));
  CHECK(cudaMalloc(&d2, n));
  CHECK(cudaMemcpy(d1, src.data(), n, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d2, d1, n, cudaMemcpyDeviceToDevice));
  CHECK(cudaMemcpy(back.data(), d2, n, cudaMemcpyDeviceToHost));
  REQUIRE(std::memcmp(src.data(), back.data(), n) == 0, "sync round trip of %zu bytes differs", n);

  // cudaMemcpyDefault infers the direction from the pointers (unified addressing).
  std::fill(back.begin(), back.end(), 0);
  CHECK(cudaMemset(d1, 0, n));
  CHECK(cudaMemcpy(d1, src.data(), n, cudaMemcpyDefault));
  CHECK(cudaMemcpy(back.data(), d1, n, cudaMemcpyDefault));
  REQUIRE(std::memcmp(src.data(), back.data(), n) == 0, "cudaMemcpyDefault round trip of %zu bytes differs", n);

  // Asynchronous, through pinned buffers, on a created stream.
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  unsigned char *pin_in, *pin_out;
  CHECK(cudaMallocHost(&pin_in, n));
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&pin_out), n, cudaHostAllocDefault));
  std::memcpy(pin_in, src.data(), n);
  std::memset(pin_out, 0, n);
  CHECK(cudaMemcpyAsync(d2, pin_in, n, cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(pin_out, d2, n, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  REQUIRE(std::memcmp(src.data(), pin_out, n) == 0, "async pinned round trip of %zu bytes differs", n);
  CHECK(cudaFreeHost(pin_in));
  CHECK(cudaFreeHost(pin_out));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d1));
  CHECK(cudaFree(d2));
}

int main(int argc, char** argv) {
  size_t max_bytes = SIZE_MAX;
  for (int i = 1; i < argc; i++) {
    char* end = nullptr;
    if (std::strcmp(argv[i], "--max-bytes") == 0 && i + 1 < argc &&
        (max_bytes = std::strtoull(argv[i + 1], &end, 0), end != argv[i + 1] && *end == '\0')) {
      i++;
    } else {
      std::fprintf(stderr, "usage: %s [--max-bytes N]\n", argv[0]);
      return 2;
    }
  }
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  size_t largest = 0;
  for (size_t n : {size_t(1), size_t(3), size_t(4095), size_t(4096), size_t(65537), size_t(1 << 20) + 7,
                   size_t(16) << 20, size_t(64) << 20}) {
    if (n > max_bytes) continue;
    RoundTrip(n, static_cast<unsigned>(n));
    largest = n;
  }
  if (max_bytes != SIZE_MAX) std::printf("round trips up to %zu bytes (--max-bytes %zu)\n", largest, max_bytes);

  // Offsets inside an allocation, and memset of a sub-range.
  const size_t n = 1 << 20;
  unsigned char* d;
  CHECK(cudaMalloc(&d, n));
  std::vector<unsigned char> pattern = RandomBytes(n, 7), back(n);
  CHECK(cudaMemcpy(d, pattern.data(), n, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(d + 1000, 0xab, 5000));
  CHECK(cudaMemsetAsync(d + 9000, 0x5c, 17, 0));
  CHECK(cudaMemcpy(back.data(), d, n, cudaMemcpyDeviceToHost));
  for (size_t i = 1000; i < 6000; i++) pattern[i] = 0xab;
  for (size_t i = 9000; i < 9017; i++) pattern[i] = 0x5c;
  REQUIRE(std::memcmp(pattern.data(), back.data(), n) == 0, "memset of a sub-range is wrong");
  std::vector<unsigned char> piece(333);
  CHECK(cudaMemcpy(piece.data(), d + 12345, piece.size(), cudaMemcpyDeviceToHost));
  REQUIRE(std::memcmp(piece.data(), pattern.data() + 12345, piece.size()) == 0, "copy from an offset differs");
  CHECK(cudaMemcpy(d + n - 10, piece.data(), 10, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(back.data(), d + n - 10, 10, cudaMemcpyDeviceToHost));
  REQUIRE(std::memcmp(back.data(), piece.data(), 10) == 0, "copy to the last bytes differs");
  CHECK(cudaFree(d));

  // Host-to-host through cudaMemcpy.
  std::vector<unsigned char> a = RandomBytes(1000, 3), b(1000);
  CHECK(cudaMemcpy(b.data(), a.data(), 1000, cudaMemcpyHostToHost));
  REQUIRE(a == b, "host-to-host copy differs");
  CHECK(cudaDeviceSynchronize());
  std::printf("PASS roundtrip\n");
  return 0;
}
