// Shared helpers of the GPU test programs (tests/gpu). Each program defines GPU_TEST_NAME
// before including this header, uses only the CUDA runtime API, checks its own results and
// ends with exactly one line "PASS <name>: ..." or "FAIL <name>: ..." (exit 0 / 1; 77 = skip).
#pragma once

#include <cuda_runtime.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <time.h>

#ifndef GPU_TEST_NAME
#error "define GPU_TEST_NAME before including gpu_test.h"
#endif

namespace gpu_test {

// Print the final FAIL line and exit. Only for the main thread: worker threads record their
// failure (see ThreadFailure) and let main report it after joining.
[[noreturn]] inline void fail(const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  std::printf("FAIL %s: %s\n", GPU_TEST_NAME, msg);
  std::fflush(stdout);
  std::exit(1);
}

[[noreturn]] inline void fail_cuda(const char* call, cudaError_t e, const char* file, int line) {
  fail("%s returned %s (%s) at %s:%d", call, cudaGetErrorName(e), cudaGetErrorString(e), file,
       line);
}

// CLOCK_REALTIME in ns: comparable with `date +%s%N` in the scripts that time a whole process.
inline long long wall_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
// Taken during static initialisation (after the loader, before main).
inline const long long static_init_ns = wall_ns();

// With GPU_TEST_TIMESTAMPS set, pass() also writes "timestamps: init=NS pass=NS" to stderr so
// that import-time.sh can split a run's wall time into start-up, work and exit.
inline void pass(const char* fmt, ...) {
  if (std::getenv("GPU_TEST_TIMESTAMPS"))
    std::fprintf(stderr, "timestamps: init=%lld pass=%lld\n", static_init_ns, wall_ns());
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  std::printf("PASS %s: %s\n", GPU_TEST_NAME, msg);
  std::fflush(stdout);
}

// Informational line (never the last line of the output).
inline void info(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::printf("  [%s] ", GPU_TEST_NAME);
  std::vprintf(fmt, ap);
  std::printf("\n");
  va_end(ap);
  std::fflush(stdout);
}

// First failure recorded by any thread; main reports it after joining.
class ThreadFailure {
 public:
  void set(const std::string& m) {
    std::lock_guard<std::mutex> lock(mu_);
    if (msg_.empty()) msg_ = m;
  }
  void set_cuda(const char* call, cudaError_t e, const char* file, int line, int thread) {
    char buf[512];
    std::snprintf(buf, sizeof buf, "thread %d: %s returned %s (%s) at %s:%d", thread, call,
                  cudaGetErrorName(e), cudaGetErrorString(e), file, line);
    set(buf);
  }
  bool failed() {
    std::lock_guard<std::mutex> lock(mu_);
    return !msg_.empty();
  }
  std::string message() {
    std::lock_guard<std::mutex> lock(mu_);
    return msg_;
  }

 private:
  std::mutex mu_;
  std::string msg_;
};

// Deterministic inputs: splitmix64 from a fixed seed.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint32_t u32() { return static_cast<uint32_t>(next() >> 32); }
  // Uniform in [lo, hi] (inclusive), for small ranges.
  int range(int lo, int hi) {
    return lo + static_cast<int>(u32() % static_cast<uint32_t>(hi - lo + 1));
  }
  // Uniform float in [-1, 1).
  float sym() { return static_cast<float>(static_cast<int32_t>(u32() >> 8) - (1 << 23)) /
                       static_cast<float>(1 << 23); }

 private:
  uint64_t s_;
};

#ifdef __CUDACC__
// Device-wide nanosecond clock (PTX %globaltimer), for kernels that must run a known time.
__device__ inline uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Busy-wait (with nanosleep) for at least `ns` nanoseconds of wall time.
__device__ inline void spin_ns(uint64_t ns) {
  const uint64_t start = globaltimer_ns();
  while (globaltimer_ns() - start < ns) __nanosleep(2000);
}
#endif

}  // namespace gpu_test

// Main-thread check of a runtime call: FAIL line with call, error name and string, exit 1.
#define CK(call)                                                               \
  do {                                                                         \
    cudaError_t ck_err_ = (call);                                              \
    if (ck_err_ != cudaSuccess)                                                \
      ::gpu_test::fail_cuda(#call, ck_err_, __FILE__, __LINE__);               \
  } while (0)

// After a <<<>>> launch (`what`: a string literal naming the kernel): the launch itself must
// have been accepted.
#define CK_LAUNCH(what)                                                        \
  do {                                                                         \
    cudaError_t ck_err_ = cudaGetLastError();                                  \
    if (ck_err_ != cudaSuccess)                                                \
      ::gpu_test::fail_cuda("launch of " what, ck_err_, __FILE__, __LINE__);   \
  } while (0)

// Worker-thread check: record the first failure in `tf` (a ThreadFailure) and return false
// from the enclosing function.
#define TCK(tf, tid, call)                                                     \
  do {                                                                         \
    cudaError_t ck_err_ = (call);                                              \
    if (ck_err_ != cudaSuccess) {                                              \
      (tf).set_cuda(#call, ck_err_, __FILE__, __LINE__, (tid));                \
      return false;                                                            \
    }                                                                          \
  } while (0)
