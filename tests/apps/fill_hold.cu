// fill_hold STEP_BYTES [DEVICE]: allocates STEP_BYTES at a time on DEVICE (default 0) until
// the quota refuses (cudaErrorMemoryAllocation; any other error fails the program), prints
// "held N" (the bytes it holds), then keeps them until its standard input ends, frees them
// and prints "PASS fill_hold". For the pool test: clients of one tenant on several servers
// filling its pool-wide limit at once.
#include <unistd.h>

#include "app_check.h"

int main(int argc, char** argv) {
  REQUIRE(argc >= 2, "usage: fill_hold STEP_BYTES [DEVICE]");
  size_t step = std::strtoull(argv[1], nullptr, 0);
  int device = argc > 2 ? std::atoi(argv[2]) : 0;
  REQUIRE(step > 0, "STEP_BYTES must be positive");
  CHECK(cudaSetDevice(device));
  std::vector<void*> held;
  for (;;) {
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, step);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      break;
    }
    CHECK(e);
    held.push_back(p);
  }
  std::printf("held %zu\n", held.size() * step);
  std::fflush(stdout);
  char buf[64];
  while (read(0, buf, sizeof(buf)) > 0) {
  }
  for (void* p : held) CHECK(cudaFree(p));
  std::printf("PASS fill_hold\n");
  return 0;
}
