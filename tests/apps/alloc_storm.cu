// alloc_storm SEED ITERATIONS MAX_BYTES: allocates and frees random sizes (1..MAX_BYTES) in a
// loop (ITERATIONS 0: until killed), as one of several clients of a tenant racing for its
// quota. A refused allocation
// must be cudaErrorMemoryAllocation (anything else fails the program); every 8th allocation
// is written and read back. Prints "storming" once running, then
// "PASS alloc_storm: max held N bytes, refused R of A".
#include "app_check.h"

int main(int argc, char** argv) {
  REQUIRE(argc == 4, "usage: alloc_storm SEED ITERATIONS MAX_BYTES");
  std::mt19937_64 rng(std::strtoull(argv[1], nullptr, 0));
  const long iterations = std::strtol(argv[2], nullptr, 0);
  const size_t max_bytes = std::strtoull(argv[3], nullptr, 0);
  std::vector<std::pair<void*, size_t>> held;
  size_t current = 0, max_held = 0, refused = 0, attempts = 0;
  std::printf("storming\n");
  std::fflush(stdout);
  for (long i = 0; iterations == 0 || i < iterations; i++) {
    if (held.empty() || rng() % 3 != 0) {
      size_t bytes = 1 + rng() % max_bytes;
      void* p = nullptr;
      attempts++;
      cudaError_t e = cudaMalloc(&p, bytes);
      if (e == cudaErrorMemoryAllocation) {
        refused++;
        (void)cudaGetLastError();
        continue;
      }
      CHECK(e);
      held.emplace_back(p, bytes);
      current += bytes;
      max_held = std::max(max_held, current);
      if (attempts % 8 == 0) {
        size_t n = std::min<size_t>(bytes, 512);
        std::vector<unsigned char> v = RandomBytes(n, static_cast<unsigned>(i)), back(n);
        CHECK(cudaMemcpy(p, v.data(), n, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(back.data(), p, n, cudaMemcpyDeviceToHost));
        REQUIRE(v == back, "data mismatch");
      }
    } else {
      size_t k = rng() % held.size();
      CHECK(cudaFree(held[k].first));
      current -= held[k].second;
      held[k] = held.back();
      held.pop_back();
    }
  }
  for (auto& [p, n] : held) CHECK(cudaFree(p));
  std::printf("PASS alloc_storm: max held %zu bytes, refused %zu of %zu\n", max_held, refused, attempts);
  return 0;
}
