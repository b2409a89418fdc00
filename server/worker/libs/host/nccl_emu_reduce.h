// Reductions of the emulated NCCL (host_lib_nccl.cc), on host memory: every NCCL datatype and
// operator, the contributions folded in rank order so every rank computes the same bits.
// Half, bfloat16 and fp8 values are computed in float and rounded back at each step. Pure
// functions; thread-safe.
#pragma once

#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace remora::worker::emu_nccl {

// What a reduction does: a built-in operator, or a pre-multiplied sum with `scalar` (the
// scalar's bytes in the datatype).
struct Reduction {
  ncclRedOp_t op = ncclSum;
  bool premul = false;
  std::vector<std::byte> scalar;
};

int TypeSize(ncclDataType_t t);

// out[i] = reduce over k of in[k][i] (k in rank order), `count` elements; `out` may be one of
// the inputs. `nranks` divides an average.
void Reduce(void* out, const std::vector<const void*>& in, size_t count, ncclDataType_t type, const Reduction& r, int nranks);

// Float <-> the narrow types (round to nearest even), exposed for tests.
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float Bf16ToFloat(uint16_t b);
uint16_t FloatToBf16(float f);
float Fp8ToFloat(uint8_t v, bool e4m3);
uint8_t FloatToFp8(float f, bool e4m3);

}  // namespace remora::worker::emu_nccl
