// Size expressions and other small helpers that protocol/api/cuda.api names (the contract
// between the client's encoder and the worker's decoder). Included by the generated code of
// both ends; pure functions of their arguments.
#pragma once

#include <cuda.h>

#include <cstddef>

namespace remora::api::cuda {

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

}  // namespace remora::api::cuda
