// hold_memory BYTES [SECONDS]: allocates BYTES of device memory, prints "holding", keeps it
// for SECONDS (default: until killed), asking the server for its memory information every
// 100 ms so that a lost server is noticed at once. Used by the quota and shutdown tests.
#include <unistd.h>

#include "app_check.h"

int main(int argc, char** argv) {
  size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 0) : (1 << 20);
  int seconds = argc > 2 ? std::atoi(argv[2]) : -1;
  void* d;
  CHECK(cudaMalloc(&d, bytes));
  std::printf("holding\n");
  std::fflush(stdout);
  for (int i = 0; seconds < 0 || i < seconds * 10; i++) {
    size_t free_b, total_b;
    CHECK(cudaMemGetInfo(&free_b, &total_b));
    usleep(100000);
  }
  CHECK(cudaFree(d));
  return 0;
}
