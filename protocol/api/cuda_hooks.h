// Size expressions and other small helpers that protocol/api/cuda.api names (the contract
// between the client's encoder and the worker's decoder). Included by the generated code of
// both ends; pure functions of their arguments.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace remora::api::cuda {

// Extents computed from a caller's sizes saturate instead of wrapping, so an overflowing
// request can never pass the allocation check as a small one (the check then refuses it).
inline uint64_t Mul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}
inline uint64_t Add(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}
// Bytes a 2D operation of `height` rows of `width` bytes, `pitch` apart, reaches from its base.
inline uint64_t Extent2D(uint64_t pitch, uint64_t width, uint64_t height) {
  if (height == 0 || width == 0) return 0;
  return Add(Mul(pitch, height - 1), width);
}
// cuTensorMapEncode*: a tensor of rank r has r - 1 strides.
inline uint64_t RankMinusOne(uint64_t rank) { return rank == 0 ? 0 : rank - 1; }

// Bytes behind the `void* value` of cuMemPoolSet/GetAttribute.
inline size_t PoolAttributeSize(CUmemPool_attribute a) {
  switch (a) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      return sizeof(int);
    default:
      return sizeof(cuuint64_t);
  }
}

// Bytes of one channel of an array element of `format`; 0 for the formats Remora does not
// handle (the client refuses them before sending, the worker again before the driver).
inline uint32_t ArrayFormatBytes(CUarray_format format) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
      return 4;
    default:
      return 0;
  }
}

}  // namespace remora::api::cuda
