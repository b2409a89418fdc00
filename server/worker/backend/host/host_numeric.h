// Elements of the CUDA data types the host backend's emulated libraries compute with (real
// 16/32/64-bit floats, 32-bit ints), read as and written from double. Pure functions.
#pragma once

#include <library_types.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace remora::worker::numeric {

inline float HalfToFloat(uint16_t h) {
  uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  float v;
  if (exp == 0) v = std::ldexp(static_cast<float>(man), -24);
  else if (exp == 31) v = man ? NAN : INFINITY;
  else v = std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

inline uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7e00u);
  float a = std::fabs(f);
  if (a >= 65520.0f) return static_cast<uint16_t>(sign | 0x7c00u);
  if (a < 6.103515625e-05f) {  // subnormal: round to a multiple of 2^-24
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 16777216.0f)));
  }
  int e;
  float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  uint32_t man = static_cast<uint32_t>(std::nearbyint((m * 2.0f - 1.0f) * 1024.0f));
  int exp = e - 1 + 15;
  if (man == 1024) {
    man = 0;
    exp++;
  }
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(exp) << 10) | man);
}

inline float Bf16ToFloat(uint16_t b) {
  uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

inline uint16_t FloatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(x >> 16);
}

// Whether the emulation computes with elements of type t.
inline bool Supported(cudaDataType t) {
  return t == CUDA_R_32F || t == CUDA_R_64F || t == CUDA_R_16F || t == CUDA_R_16BF || t == CUDA_R_32I;
}

inline double Load(cudaDataType t, const void* base, int64_t i) {
  const auto* p = static_cast<const std::byte*>(base);
  switch (t) {
    case CUDA_R_32F: { float v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case CUDA_R_64F: { double v; std::memcpy(&v, p + 8 * i, 8); return v; }
    case CUDA_R_16F: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return HalfToFloat(v); }
    case CUDA_R_16BF: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return Bf16ToFloat(v); }
    case CUDA_R_32I: { int32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
    default: return 0;
  }
}

inline void Store(cudaDataType t, void* base, int64_t i, double v) {
  auto* p = static_cast<std::byte*>(base);
  switch (t) {
    case CUDA_R_32F: { float f = static_cast<float>(v); std::memcpy(p + 4 * i, &f, 4); break; }
    case CUDA_R_64F: std::memcpy(p + 8 * i, &v, 8); break;
    case CUDA_R_16F: { uint16_t h = FloatToHalf(static_cast<float>(v)); std::memcpy(p + 2 * i, &h, 2); break; }
    case CUDA_R_16BF: { uint16_t h = FloatToBf16(static_cast<float>(v)); std::memcpy(p + 2 * i, &h, 2); break; }
    case CUDA_R_32I: { int32_t x = static_cast<int32_t>(v); std::memcpy(p + 4 * i, &x, 4); break; }
    default: break;
  }
}

// A column-major matrix operand in host memory: element (i, j) of op(M).
struct MatrixView {
  void* base = nullptr;
  cudaDataType type = CUDA_R_32F;
  int64_t ld = 0;
  bool transposed = false;
  double At(int64_t i, int64_t j) const { return transposed ? Load(type, base, j + i * ld) : Load(type, base, i + j * ld); }
  void Set(int64_t i, int64_t j, double v) const { Store(type, base, i + j * ld, v); }
};

// C = alpha * op(A) op(B) + beta * C for an m x n C and inner dimension k (C is not read
// when beta is 0, as BLAS specifies).
inline void Gemm(int64_t m, int64_t n, int64_t k, double alpha, const MatrixView& a, const MatrixView& b, double beta,
                 const MatrixView& c) {
  for (int64_t j = 0; j < n; j++) {
    for (int64_t i = 0; i < m; i++) {
      double acc = 0;
      for (int64_t l = 0; l < k; l++) acc += a.At(i, l) * b.At(l, j);
      double prior = beta == 0 ? 0 : beta * c.At(i, j);
      c.Set(i, j, alpha * acc + prior);
    }
  }
}

}  // namespace remora::worker::numeric
