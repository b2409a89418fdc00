// Shared checks for the host-backend test programs: every CUDA call is checked, and a
// program ends with "PASS <name>" (exit 0) or the first failure (exit 1).
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#define CHECK(call)                                                                            \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess) {                                                                   \
      std::printf("FAIL %s:%d: %s -> %s (%s)\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_), \
                  cudaGetErrorString(e_));                                                      \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

// The call must fail with exactly `want`.
#define EXPECT_ERR(call, want)                                                                 \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    if (e_ != (want)) {                                                                        \
      std::printf("FAIL %s:%d: %s -> %s, expected %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_), \
                  cudaGetErrorName(want));                                                      \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

#define REQUIRE(cond, ...)                          \
  do {                                              \
    if (!(cond)) {                                  \
      std::printf("FAIL %s:%d: ", __FILE__, __LINE__); \
      std::printf(__VA_ARGS__);                     \
      std::printf("\n");                            \
      std::exit(1);                                 \
    }                                               \
  } while (0)

inline std::vector<unsigned char> RandomBytes(size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  std::mt19937_64 rng(seed);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x = rng();
    std::memcpy(&v[i], &x, 8);
  }
  for (; i < n; i++) v[i] = static_cast<unsigned char>(rng());
  return v;
}
