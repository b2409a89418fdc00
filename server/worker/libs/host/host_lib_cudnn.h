// The host backend's cuDNN, shared by its two files: the backend API's descriptors
// (host_lib_cudnn.cc: attributes kept as the application set them, finalize checks, the
// queries cudnn-frontend makes) and the operation graphs it can execute on the CPU
// (host_lib_cudnn_graph.cc). What it emulates, for CI's tests of the whole path (by-value
// attributes, posted calls, pointers checked): graphs of pointwise operations (add, sub, mul,
// max, min, identity, ReLU, with alpha scaling and broadcasting) and batched matrix products
// over FP32 tensors, whose by-value scalars may be FP32 or FP64, one engine (global index 0)
// with a 256-byte workspace when the graph multiplies matrices. Any other operation or data
// type is refused at its finalize with CUDNN_STATUS_NOT_SUPPORTED (the graph, whose finalize
// is answered, then reports it); the legacy API answers CUDNN_STATUS_NOT_SUPPORTED. Used by
// the executor's single thread (execution runs later on the emulated stream's thread, on
// copies of what it needs).
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "worker/backend/host/host_device.h"

namespace remora::worker::host_dnn {

struct TensorInfo {
  int64_t uid = 0;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  std::vector<int64_t> dims, strides;
  bool is_virtual = false, by_value = false;
  int64_t Elements() const;
  // Bytes from the first element to past the last one (strides in elements).
  uint64_t Span() const;
};

struct OpInfo {
  enum class Kind { kPointwise, kMatmul } kind = Kind::kPointwise;
  cudnnPointwiseMode_t mode = CUDNN_POINTWISE_IDENTITY;
  double alpha1 = 1, alpha2 = 1;
  // Pointwise: x (and b) in, y out. Matmul: a, b in, y out.
  TensorInfo x, b, y;
  bool has_b = false;
};

struct GraphInfo {
  std::vector<OpInfo> ops;
  uint64_t workspace = 0;  // bytes the plan asks for
};

// Attribute values as the application set them.
struct Attr {
  cudnnBackendAttributeType_t type{};
  int64_t count = 0;
  std::vector<unsigned char> bytes;
};

struct Desc {
  cudnnBackendDescriptorType_t type{};
  bool finalized = false;
  std::map<int, Attr> attrs;
  // What a finalize derived, copied by value (the descriptors named may be destroyed later).
  std::optional<TensorInfo> tensor;
  std::optional<OpInfo> op;
  std::shared_ptr<const GraphInfo> graph;  // graphs, heuristics, engines, configurations, plans
  cudnnPointwiseMode_t pw_mode = CUDNN_POINTWISE_IDENTITY;  // a pointwise descriptor's

  // Elements of attribute `name` set with `type` (empty if absent or set with another type).
  template <typename T>
  std::vector<T> Values(int name, cudnnBackendAttributeType_t type) const {
    auto it = attrs.find(name);
    if (it == attrs.end() || it->second.type != type) return {};
    std::vector<T> v(it->second.bytes.size() / sizeof(T));
    if (!v.empty()) std::memcpy(v.data(), it->second.bytes.data(), v.size() * sizeof(T));
    return v;
  }
};

// What the finalize of `d` derives (the descriptors named by its attributes are looked up with
// `find`, which answers nullptr for one that is not live): CUDNN_STATUS_SUCCESS or the status
// the real library would give for what is wrong, CUDNN_STATUS_NOT_SUPPORTED for what is not
// emulated.
cudnnStatus_t FinalizeGraphPart(Desc& d, Desc* (*find)(void* ctx, uint64_t bits), void* ctx);

// Runs `graph` on the CPU in `stream`'s order: `pointers` by unique id (device addresses, or
// for a by-value tensor the address of its host value, read now), `workspace` the variant
// pack's.
cudnnStatus_t ExecuteGraph(EmulatedDevice& device, DStream stream, const GraphInfo& graph, const std::map<int64_t, uint64_t>& pointers,
                           uint64_t workspace);

}  // namespace remora::worker::host_dnn
