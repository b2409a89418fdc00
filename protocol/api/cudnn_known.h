// What the worker reads of a backend descriptor the library has just finalized, so that the
// client answers cudnn-frontend's queries of it without a round trip (issues 42 and 45).
//
// cudnn-frontend follows each answered finalize with queries whose answers the library
// computed: an operation graph's engine count; the heuristics' results, and for each
// configuration its engine, the engine's notes and global index, the knob choices, the
// workspace (not an engine's knob information: cudnn-frontend reads it only for engines it
// builds by index, and it would make trees of convolutions' heuristics too large); a plan's workspace and configuration. Each was a round trip (36 per generated
// token in GPT-2 decoding with cuDNN's attention). remoraCudnnBackendFinalizeKnown finalizes
// and answers with a Known tree of those values: the attributes KnownAttributes() lists,
// descriptor-valued ones (heuristics' results, a configuration's engine and knob choices, a
// plan's configuration) with a tree per element, read into descriptors the worker creates and
// destroys for the purpose. A query the tree cannot answer exactly still goes to the library.
//
// Wire form (host byte order, as every argument): Node = u32 descriptor type, u32 attribute
// count, then per attribute: i32 name, i32 type, i64 element count and i64 elements asked for
// (KnownAttr), u32 byte count + the bytes of the elements read, u32 child count + a Node per
// child (descriptor-valued attributes only). Pure functions.
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <vector>

namespace remora::api::dnn {

struct KnownNode;
struct KnownAttr {
  cudnnBackendAttributeType_t type{};
  // The element count the library reported: for a value attribute, with `asked` elements
  // requested; for a descriptor attribute, to a query of none (how many there are).
  int64_t count = 0;
  int64_t asked = 0;                // the elements the worker requested
  std::vector<std::byte> bytes;     // the elements read (value attributes)
  // The trees of the descriptors the library filled when `asked` were requested (it may fill
  // fewer than it counted: cuDNN's heuristics count configurations they then do not give).
  std::vector<KnownNode> children;
};
struct KnownNode {
  cudnnBackendDescriptorType_t type{};
  std::map<int, KnownAttr> attrs;
};

// An attribute the worker reads after a finalize of a descriptor of some type: its name and
// type, the most elements read, and for a descriptor-valued one the type of its elements.
struct KnownAttribute {
  cudnnBackendAttributeName_t name;
  cudnnBackendAttributeType_t type;
  int64_t max;
  cudnnBackendDescriptorType_t child;
};

// The attributes read of a descriptor of `type` (none: nothing is read).
inline std::vector<KnownAttribute> KnownAttributes(cudnnBackendDescriptorType_t type) {
  constexpr auto D = CUDNN_TYPE_BACKEND_DESCRIPTOR;
  constexpr auto none = CUDNN_BACKEND_POINTWISE_DESCRIPTOR;  // (unused for value attributes)
  switch (type) {
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: return {{CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1, none}};
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR: return {{CUDNN_ATTR_ENGINEHEUR_RESULTS, D, 64, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR}};
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
      return {{CUDNN_ATTR_ENGINECFG_ENGINE, D, 1, CUDNN_BACKEND_ENGINE_DESCRIPTOR},
              {CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, D, CUDNN_KNOB_TYPE_COUNTS, CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR},
              {CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, none},
              {CUDNN_ATTR_ENGINECFG_SHARED_MEMORY_USED, CUDNN_TYPE_INT32, 1, none}};
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
      return {{CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, none},
              {CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT, none},
              {CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, none}};
    case CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR:
      return {{CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, none}, {CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, none}};
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
      return {{CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, none},
              {CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, D, 1, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR},
              {CUDNN_ATTR_EXECUTION_PLAN_COMPUTED_INTERMEDIATE_UIDS, CUDNN_TYPE_INT64, 64, none},
              {CUDNN_ATTR_EXECUTION_PLAN_RUN_ONLY_INTERMEDIATE_UIDS, CUDNN_TYPE_INT64, 64, none}};
    default: return {};
  }
}

// Whether an answered finalize of a descriptor of `type` brings its Known tree back.
inline bool FinalizeBringsKnown(cudnnBackendDescriptorType_t type) {
  return type == CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR || type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR ||
         type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR;
}

// The room a client gives a Known tree in the finalize's reply (only the tree's bytes travel:
// out(used=)); a larger tree is not sent (the queries then go to the library, as before).
inline constexpr size_t kKnownCapacity = 65536;
// The most descriptors a fill answered in the client names (a larger request asks the library).
inline constexpr int64_t kMaxKnownFill = 1024;
// Trees nest at most this deep (heuristics -> configuration -> engine).
inline constexpr int kKnownDepth = 3;

namespace known_detail {
template <typename T>
void Put(std::vector<std::byte>* out, T v) {
  size_t at = out->size();
  out->resize(at + sizeof(T));
  std::memcpy(out->data() + at, &v, sizeof(T));
}
template <typename T>
bool Take(const std::byte* p, size_t n, size_t* at, T* v) {
  if (n - *at < sizeof(T)) return false;
  std::memcpy(v, p + *at, sizeof(T));
  *at += sizeof(T);
  return true;
}
inline bool ParseNode(const std::byte* p, size_t n, size_t* at, int depth, KnownNode* node) {
  uint32_t type = 0, attrs = 0;
  if (depth > kKnownDepth || !Take(p, n, at, &type) || !Take(p, n, at, &attrs)) return false;
  node->type = static_cast<cudnnBackendDescriptorType_t>(type);
  for (uint32_t i = 0; i < attrs; i++) {
    int32_t name = 0, atype = 0;
    uint32_t bytes = 0, children = 0;
    KnownAttr a;
    if (!Take(p, n, at, &name) || !Take(p, n, at, &atype) || !Take(p, n, at, &a.count) || !Take(p, n, at, &a.asked) ||
        !Take(p, n, at, &bytes))
      return false;
    if (n - *at < bytes) return false;
    a.type = static_cast<cudnnBackendAttributeType_t>(atype);
    a.bytes.assign(p + *at, p + *at + bytes);
    *at += bytes;
    if (!Take(p, n, at, &children) || children > n - *at) return false;  // (a child takes 8 bytes at least)
    a.children.resize(children);
    for (auto& c : a.children)
      if (!ParseNode(p, n, at, depth + 1, &c)) return false;
    node->attrs[name] = std::move(a);
  }
  return true;
}
}  // namespace known_detail

inline void AppendKnown(std::vector<std::byte>* out, const KnownNode& node) {
  using known_detail::Put;
  Put<uint32_t>(out, static_cast<uint32_t>(node.type));
  Put<uint32_t>(out, static_cast<uint32_t>(node.attrs.size()));
  for (const auto& [name, a] : node.attrs) {
    Put<int32_t>(out, name);
    Put<int32_t>(out, static_cast<int32_t>(a.type));
    Put<int64_t>(out, a.count);
    Put<int64_t>(out, a.asked);
    Put<uint32_t>(out, static_cast<uint32_t>(a.bytes.size()));
    out->insert(out->end(), a.bytes.begin(), a.bytes.end());
    Put<uint32_t>(out, static_cast<uint32_t>(a.children.size()));
    for (const auto& c : a.children) AppendKnown(out, c);
  }
}

// False if `n` bytes at `p` are not exactly one Node (truncated, nested too deep, trailing bytes).
inline bool ParseKnown(const void* p, size_t n, KnownNode* node) {
  size_t at = 0;
  *node = KnownNode{};
  return known_detail::ParseNode(static_cast<const std::byte*>(p), n, &at, 0, node) && at == n;
}

}  // namespace remora::api::dnn
