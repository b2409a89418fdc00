// many_modules [USED]: a program built from REMORA_MANY_MODULES translation units, each its
// own fat binary (as a large application or framework is), that uses kernels from only
// USED of them (default 2: the first and the last). Measures what a program pays at start
// for code it mostly never runs: natively every fat binary is registered with the driver;
// under Remora they are registered locally and only the used ones are shipped, once, to a
// server that caches them by content hash across sessions.
// Prints "PASS many_modules: ..." with the time from main() to the first kernel's result.
#define GPU_TEST_NAME "many_modules"
#include "gpu_test.h"

#include <chrono>
#include <vector>

#include "many_modules_table.inc"  // kModuleCount and kLaunch[]: one launcher per module

int main(int argc, char** argv) {
  auto t0 = std::chrono::steady_clock::now();
  int used = argc > 1 ? std::atoi(argv[1]) : 2;
  if (used < 1 || used > kModuleCount) gpu_test::fail("USED must be 1..%d", kModuleCount);
  constexpr int kN = 1 << 12;
  int* d;
  CK(cudaMalloc(&d, kN * sizeof(int)));
  CK(cudaMemset(d, 0, kN * sizeof(int)));
  // Modules 0, last, then evenly in between.
  std::vector<int> which;
  for (int k = 0; k < used; k++) which.push_back(used == 1 ? 0 : k * (kModuleCount - 1) / (used - 1));
  long want = 0;
  double first_ms = 0;
  for (size_t k = 0; k < which.size(); k++) {
    kLaunch[which[k]](d, kN);
    CK_LAUNCH("module kernel");
    want += 8L * (which[k] + 1);  // each module's 8 instantiations add (module index + 1)
    if (k == 0) {
      CK(cudaDeviceSynchronize());
      first_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
  }
  std::vector<int> h(kN);
  CK(cudaMemcpy(h.data(), d, kN * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < kN; i++)
    if (h[i] != want) gpu_test::fail("element %d is %d, want %ld", i, h[i], want);
  CK(cudaFree(d));
  gpu_test::pass("%d of %d fat binaries used; first kernel done %.1f ms after main()", used, kModuleCount, first_ms);
  return 0;
}
