// Reductions of the emulated NCCL (nccl_emu_reduce.h).
#include "worker/libs/host/nccl_emu_reduce.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "nccl_types.h"

namespace remora::worker::emu_nccl {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// How an element of a datatype is loaded into the type it is computed in, and stored back.
template <typename T>
struct Native {
  using C = T;
  static C Load(const void* p, size_t i) { return static_cast<const T*>(p)[i]; }
  static void Store(void* p, size_t i, C v) { static_cast<T*>(p)[i] = v; }
  static C Round(C v) { return v; }
};
template <uint16_t (*Enc)(float), float (*Dec)(uint16_t)>
struct Narrow16 {
  using C = float;
  static C Load(const void* p, size_t i) { return Dec(static_cast<const uint16_t*>(p)[i]); }
  static void Store(void* p, size_t i, C v) { static_cast<uint16_t*>(p)[i] = Enc(v); }
  static C Round(C v) { return Dec(Enc(v)); }
};
template <bool E4M3>
struct Fp8 {
  using C = float;
  static C Load(const void* p, size_t i) { return Fp8ToFloat(static_cast<const uint8_t*>(p)[i], E4M3); }
  static void Store(void* p, size_t i, C v) { static_cast<uint8_t*>(p)[i] = FloatToFp8(v, E4M3); }
  static C Round(C v) { return Fp8ToFloat(FloatToFp8(v, E4M3), E4M3); }
};

// Integer arithmetic wraps (as on a GPU), done on the unsigned type.
template <typename C>
C Add(C a, C b) {
  if constexpr (std::is_integral_v<C>) return static_cast<C>(static_cast<std::make_unsigned_t<C>>(a) + static_cast<std::make_unsigned_t<C>>(b));
  else return a + b;
}
template <typename C>
C Mul(C a, C b) {
  if constexpr (std::is_integral_v<C>) return static_cast<C>(static_cast<std::make_unsigned_t<C>>(a) * static_cast<std::make_unsigned_t<C>>(b));
  else return a * b;
}

template <typename A>
void ReduceAs(void* out, const std::vector<const void*>& in, size_t count, const Reduction& r, int nranks) {
  using C = typename A::C;
  C scalar{};
  if (r.premul) scalar = A::Load(r.scalar.data(), 0);
  for (size_t i = 0; i < count; i++) {
    C acc{};
    for (size_t k = 0; k < in.size(); k++) {
      C v = A::Load(in[k], i);
      if (r.premul) v = A::Round(Mul(v, scalar));
      if (k == 0) {
        acc = v;
        continue;
      }
      switch (r.premul ? ncclSum : r.op) {
        case ncclProd: acc = Mul(acc, v); break;
        case ncclMax: acc = v > acc ? v : acc; break;
        case ncclMin: acc = v < acc ? v : acc; break;
        default: acc = Add(acc, v); break;  // sum, avg, pre-multiplied sum
      }
      acc = A::Round(acc);
    }
    if (!r.premul && r.op == ncclAvg) acc = A::Round(static_cast<C>(acc / static_cast<C>(nranks)));
    A::Store(out, i, acc);
  }
}

}  // namespace

int TypeSize(ncclDataType_t t) { return api::NcclTypeSize(t); }

float HalfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu;
  if (exp == 0x1f) return FromBits(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  return FromBits(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t FloatToHalf(float f) {
  uint32_t u = Bits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  float a = std::fabs(f);
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7e00u);
  if (a >= 65520.0f) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to infinity
  if (a < std::ldexp(1.0f, -14)) {
    // Subnormal: units of 2^-24, rounded to nearest even.
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(a, 24))));
  }
  int e = 0;
  float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exp = e - 1 + 15;
  uint32_t mant = static_cast<uint32_t>(std::nearbyint((m * 2.0f - 1.0f) * 1024.0f));
  if (mant == 1024) {
    mant = 0;
    exp++;
  }
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  return static_cast<uint16_t>(sign | (exp << 10) | mant);
}

float Bf16ToFloat(uint16_t b) { return FromBits(static_cast<uint32_t>(b) << 16); }

uint16_t FloatToBf16(float f) {
  uint32_t u = Bits(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float Fp8ToFloat(uint8_t v, bool e4m3) {
  if (!e4m3) return HalfToFloat(static_cast<uint16_t>(v << 8));  // e5m2: a half's top byte
  bool neg = (v & 0x80u) != 0;
  int exp = (v >> 3) & 0xf, mant = v & 7;
  float r;
  if (exp == 15 && mant == 7) return std::numeric_limits<float>::quiet_NaN();
  if (exp == 0) r = std::ldexp(static_cast<float>(mant), -9);
  else r = std::ldexp(1.0f + static_cast<float>(mant) / 8.0f, exp - 7);
  return neg ? -r : r;
}

uint8_t FloatToFp8(float f, bool e4m3) {
  if (!e4m3) {
    uint16_t h = FloatToHalf(f);
    if ((h & 0x7c00u) == 0x7c00u) return static_cast<uint8_t>(h >> 8 | ((h & 0x3ffu) ? 2 : 0));  // inf, NaN
    uint16_t rounded = static_cast<uint16_t>(h + 0x7fu + ((h >> 8) & 1u));
    return static_cast<uint8_t>(rounded >> 8);
  }
  uint8_t sign = std::signbit(f) ? 0x80 : 0;
  float a = std::fabs(f);
  if (std::isnan(f)) return static_cast<uint8_t>(sign | 0x7f);
  if (a >= 448.0f) return static_cast<uint8_t>(sign | 0x7e);  // saturates to the largest finite
  if (a < std::ldexp(1.0f, -6)) return static_cast<uint8_t>(sign | static_cast<uint8_t>(std::nearbyint(std::ldexp(a, 9))));
  int e = 0;
  float m = std::frexp(a, &e);
  int exp = e - 1 + 7;
  int mant = static_cast<int>(std::nearbyint((m * 2.0f - 1.0f) * 8.0f));
  if (mant == 8) {
    mant = 0;
    exp++;
  }
  if (exp > 15 || (exp == 15 && mant == 7)) return static_cast<uint8_t>(sign | 0x7e);
  return static_cast<uint8_t>(sign | (exp << 3) | mant);
}

void Reduce(void* out, const std::vector<const void*>& in, size_t count, ncclDataType_t type, const Reduction& r, int nranks) {
  switch (type) {
    case ncclInt8: return ReduceAs<Native<int8_t>>(out, in, count, r, nranks);
    case ncclUint8: return ReduceAs<Native<uint8_t>>(out, in, count, r, nranks);
    case ncclInt32: return ReduceAs<Native<int32_t>>(out, in, count, r, nranks);
    case ncclUint32: return ReduceAs<Native<uint32_t>>(out, in, count, r, nranks);
    case ncclInt64: return ReduceAs<Native<int64_t>>(out, in, count, r, nranks);
    case ncclUint64: return ReduceAs<Native<uint64_t>>(out, in, count, r, nranks);
    case ncclFloat32: return ReduceAs<Native<float>>(out, in, count, r, nranks);
    case ncclFloat64: return ReduceAs<Native<double>>(out, in, count, r, nranks);
    case ncclFloat16: return ReduceAs<Narrow16<FloatToHalf, HalfToFloat>>(out, in, count, r, nranks);
    case ncclBfloat16: return ReduceAs<Narrow16<FloatToBf16, Bf16ToFloat>>(out, in, count, r, nranks);
    case ncclFloat8e4m3: return ReduceAs<Fp8<true>>(out, in, count, r, nranks);
    case ncclFloat8e5m2: return ReduceAs<Fp8<false>>(out, in, count, r, nranks);
    default: return;
  }
}

}  // namespace remora::worker::emu_nccl
