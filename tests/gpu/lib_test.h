// Helpers of the math-library GPU tests (cublas_*.cu, cudnn_*.cu, ...), on top of gpu_test.h:
// a checked library call, device buffers, element conversions. Each library's success status
// is 0, so one macro checks them all.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "gpu_test.h"

// A library call that must succeed: FAIL line with the call and its status otherwise.
#define CB(call)                                                                                  \
  do {                                                                                            \
    int cb_st_ = static_cast<int>(call);                                                          \
    if (cb_st_ != 0) ::gpu_test::fail("%s returned status %d at %s:%d", #call, cb_st_, __FILE__, __LINE__); \
  } while (0)

// Whether this process runs under Remora (remora-run sets REMORA_SERVER): checks of what only
// Remora refuses (a pointer the application never allocated) run only there, since natively
// the library would touch the memory.
inline bool OnRemora() { return std::getenv("REMORA_SERVER") != nullptr; }

inline double ToDouble(double v) { return v; }
inline double ToDouble(float v) { return v; }
inline double ToDouble(int v) { return v; }
inline double ToDouble(__half v) { return __half2float(v); }
inline double ToDouble(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
T FromDouble(double v) {
  if constexpr (std::is_same_v<T, __half>) return __float2half(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16(static_cast<float>(v));
  else return static_cast<T>(v);
}

template <typename T>
std::vector<T> Convert(const std::vector<double>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); i++) out[i] = FromDouble<T>(v[i]);
  return out;
}
template <typename T>
std::vector<double> Widen(const std::vector<T>& v) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); i++) out[i] = ToDouble(v[i]);
  return out;
}

// Device memory holding a copy of a host vector; freed with the object.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const std::vector<T>& host) : n_(host.size()) {
    CK(cudaMalloc(&p_, std::max<size_t>(1, n_) * sizeof(T)));
    if (n_) CK(cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  explicit DeviceBuffer(size_t n) : n_(n) {
    CK(cudaMalloc(&p_, std::max<size_t>(1, n_) * sizeof(T)));
    CK(cudaMemset(p_, 0, std::max<size_t>(1, n_) * sizeof(T)));
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr; }
  DeviceBuffer(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (p_) cudaFree(p_);
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }
  // The contents, after everything before on any stream (a synchronising copy).
  std::vector<T> Read() const {
    CK(cudaDeviceSynchronize());
    std::vector<T> out(n_);
    if (n_) CK(cudaMemcpy(out.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
  }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};
