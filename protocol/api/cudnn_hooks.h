// Extents of cuDNN arguments: the size expressions protocol/api/cudnn.api names on both ends
// of the wire (the client's encoding and the worker's check of what arrived). Pure functions.
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <cstdint>

namespace remora::api::dnn {

// The element count of a dimension array (a negative count sends none; the library refuses it).
inline int64_t Dims(int64_t n) { return n < 0 ? 0 : n; }

// Bytes of one element of a backend attribute of `type` (cudnn_graph.h: the C type each
// CUDNN_TYPE_* stands for), or 0 for a type Remora does not know.
inline size_t AttributeElementBytes(cudnnBackendAttributeType_t type) {
  switch (type) {
    case CUDNN_TYPE_HANDLE:
    case CUDNN_TYPE_VOID_PTR:
    case CUDNN_TYPE_BACKEND_DESCRIPTOR: return sizeof(void*);
    case CUDNN_TYPE_BOOLEAN:
    case CUDNN_TYPE_CHAR: return 1;
    case CUDNN_TYPE_INT64:
    case CUDNN_TYPE_DOUBLE: return 8;
    case CUDNN_TYPE_FLOAT:
    case CUDNN_TYPE_INT32: return 4;
    case CUDNN_TYPE_FRACTION: return sizeof(cudnnFraction_t);
    case CUDNN_TYPE_DATA_TYPE:
    case CUDNN_TYPE_CONVOLUTION_MODE:
    case CUDNN_TYPE_HEUR_MODE:
    case CUDNN_TYPE_KNOB_TYPE:
    case CUDNN_TYPE_NUMERICAL_NOTE:
    case CUDNN_TYPE_LAYOUT_TYPE:
    case CUDNN_TYPE_ATTRIB_NAME:
    case CUDNN_TYPE_POINTWISE_MODE:
    case CUDNN_TYPE_GENSTATS_MODE:
    case CUDNN_TYPE_BN_FINALIZE_STATS_MODE:
    case CUDNN_TYPE_REDUCTION_OPERATOR_TYPE:
    case CUDNN_TYPE_BEHAVIOR_NOTE:
    case CUDNN_TYPE_TENSOR_REORDERING_MODE:
    case CUDNN_TYPE_RESAMPLE_MODE:
    case CUDNN_TYPE_PADDING_MODE:
    case CUDNN_TYPE_SIGNAL_MODE:
    case CUDNN_TYPE_NORM_MODE:
    case CUDNN_TYPE_NORM_FWD_PHASE:
    case CUDNN_TYPE_RNG_DISTRIBUTION:
    case CUDNN_TYPE_MOE_GROUPED_MATMUL_MODE: return 4;  // a C enum
    case CUDNN_TYPE_NAN_PROPOGATION: return 4;  // a C enum
    default: return 0;
  }
}

// Bytes of `count` elements of `type` (0 for a negative count or an unknown type: the call
// then carries no elements and the library refuses it).
inline uint64_t AttributeBytes(cudnnBackendAttributeType_t type, int64_t count) {
  if (count <= 0) return 0;
  return static_cast<uint64_t>(count) * AttributeElementBytes(type);
}

}  // namespace remora::api::dnn
