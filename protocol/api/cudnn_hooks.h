// Extents of cuDNN arguments: the size expressions protocol/api/cudnn.api names on both ends
// of the wire (the client's encoding and the worker's check of what arrived). Pure functions.
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

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

// Bytes of one element of a tensor of `type` (a sub-byte type takes a byte), or 0 for a type
// Remora does not know.
inline size_t DataTypeBytes(cudnnDataType_t type) {
  switch (type) {
    case CUDNN_DATA_INT8:
    case CUDNN_DATA_UINT8:
    case CUDNN_DATA_BOOLEAN:
    case CUDNN_DATA_FP8_E4M3:
    case CUDNN_DATA_FP8_E5M2:
    case CUDNN_DATA_FP8_E8M0:
    case CUDNN_DATA_FP4_E2M1:
    case CUDNN_DATA_INT4:
    case CUDNN_DATA_UINT4: return 1;
    case CUDNN_DATA_HALF:
    case CUDNN_DATA_BFLOAT16: return 2;
    case CUDNN_DATA_FLOAT:
    case CUDNN_DATA_INT32:
    case CUDNN_DATA_UINT32:
    case CUDNN_DATA_FAST_FLOAT_FOR_FP8: return 4;
    case CUDNN_DATA_DOUBLE:
    case CUDNN_DATA_INT64:
    case CUDNN_DATA_COMPLEX_FP32: return 8;
    case CUDNN_DATA_COMPLEX_FP64: return 16;
    default: return 0;
  }
}

// Whether a fused-ops constant parameter of `label` is a descriptor (the rest are 4-byte
// enums: pointer placeholders, the batch-norm mode).
inline bool FusedConstIsDescriptor(int label) {
  switch (label) {
    case CUDNN_PARAM_XDESC:
    case CUDNN_PARAM_BN_EQSCALEBIAS_DESC:
    case CUDNN_PARAM_ACTIVATION_DESC:
    case CUDNN_PARAM_CONV_DESC:
    case CUDNN_PARAM_WDESC:
    case CUDNN_PARAM_DWDESC:
    case CUDNN_PARAM_YDESC:
    case CUDNN_PARAM_DYDESC:
    case CUDNN_PARAM_YSTATS_DESC:
    case CUDNN_PARAM_BN_SCALEBIAS_MEANVAR_DESC:
    case CUDNN_PARAM_ZDESC:
    case CUDNN_PARAM_BN_Z_EQSCALEBIAS_DESC:
    case CUDNN_PARAM_ACTIVATION_BITMASK_DESC:
    case CUDNN_PARAM_DXDESC:
    case CUDNN_PARAM_DZDESC: return true;
    default: return false;
  }
}

// The values of an execution's by-value tensors (remoraCudnnBackendExecuteByValue): records of
// i64 unique id, u32 size, then the bytes, one after the other. A by-value tensor is a scalar:
// at most kMaxByValueBytes each, kMaxByValues of them.
inline constexpr uint32_t kMaxByValueBytes = 64;
inline constexpr size_t kMaxByValues = 256;
struct ByValue {
  int64_t uid = 0;
  uint32_t size = 0;
  const unsigned char* data = nullptr;
};
inline void AppendByValue(std::vector<std::byte>* blob, int64_t uid, const void* data, uint32_t size) {
  size_t at = blob->size();
  blob->resize(at + sizeof(uid) + sizeof(size) + size);
  std::memcpy(blob->data() + at, &uid, sizeof(uid));
  std::memcpy(blob->data() + at + sizeof(uid), &size, sizeof(size));
  if (size > 0) std::memcpy(blob->data() + at + sizeof(uid) + sizeof(size), data, size);
}
// False if `blob` is not such records (a size past the end or over the bound, too many).
inline bool ParseByValues(const void* blob, size_t n, std::vector<ByValue>* out) {
  const auto* p = static_cast<const unsigned char*>(blob);
  size_t at = 0;
  out->clear();
  while (at < n) {
    ByValue v;
    if (n - at < sizeof(v.uid) + sizeof(v.size) || out->size() >= kMaxByValues) return false;
    std::memcpy(&v.uid, p + at, sizeof(v.uid));
    std::memcpy(&v.size, p + at + sizeof(v.uid), sizeof(v.size));
    at += sizeof(v.uid) + sizeof(v.size);
    if (v.size == 0 || v.size > kMaxByValueBytes || n - at < v.size) return false;
    v.data = p + at;
    at += v.size;
    out->push_back(v);
  }
  return true;
}

}  // namespace remora::api::dnn
