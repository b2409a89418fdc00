// Copies 64 MiB back and forth until killed; prints "copying" once the first round trip is
// done (the SIGKILL-mid-copy test waits for that line).
#include "app_check.h"

int main() {
  const size_t n = 64 << 20;
  std::vector<unsigned char> h = RandomBytes(n, 5), back(n);
  void* d;
  CHECK(cudaMalloc(&d, n));
  for (long i = 0;; i++) {
    CHECK(cudaMemcpy(d, h.data(), n, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(back.data(), d, n, cudaMemcpyDeviceToHost));
    if (i == 0) {
      REQUIRE(back == h, "first round trip differs");
      std::printf("copying\n");
      std::fflush(stdout);
    }
  }
}
