#include "dnn_backend.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "cudnn_hooks.h"
#include "cudnn_known.h"
#include "runtime.h"

namespace remora::gen::cudnn {
namespace {

struct Attr {
  cudnnBackendAttributeType_t type{};
  std::vector<std::byte> bytes;
};

struct Desc {
  cudnnBackendDescriptorType_t type{};
  std::map<int, Attr> attrs;
  std::map<int64_t, uint32_t> by_value;  // unique id -> bytes, gathered at finalize
  // Finalized by an answered call that succeeded: every attribute set before it was accepted,
  // so the library holds exactly what `attrs` says.
  bool exact = false;
  std::optional<api::dnn::KnownNode> known;  // what the library computed (cudnn_known.h)
};

class Mirror {
 public:
  static Mirror& Get() {
    static Mirror* m = new Mirror;  // used until the process ends
    return *m;
  }

  void Create(uint64_t id, cudnnBackendDescriptorType_t type) {
    std::lock_guard<std::mutex> lock(mu_);
    descs_[id].type = type;
  }
  void Reset(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = descs_.find(id);
    if (it == descs_.end()) return;
    it->second.attrs.clear();
    it->second.by_value.clear();
    it->second.exact = false;
    it->second.known.reset();
  }
  void Destroy(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    descs_.erase(id);
  }
  void Set(uint64_t id, int name, cudnnBackendAttributeType_t type, const void* elements, uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = descs_.find(id);
    if (it == descs_.end()) return;
    it->second.exact = false;
    it->second.known.reset();
    Attr& a = it->second.attrs[name];
    a.type = type;
    a.bytes.assign(static_cast<const std::byte*>(elements), static_cast<const std::byte*>(elements) + (elements ? bytes : 0));
  }
  std::optional<cudnnBackendDescriptorType_t> Type(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = descs_.find(id);
    if (it == descs_.end()) return std::nullopt;
    return it->second.type;
  }
  // The descriptor's by-value tensors: its own, if it is one, and those of every descriptor
  // its attributes name.
  void Finalize(uint64_t id, bool answered) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = descs_.find(id);
    if (it == descs_.end()) return;
    Desc& d = it->second;
    d.exact = answered;
    d.known.reset();
    d.by_value.clear();
    if (d.type == CUDNN_BACKEND_TENSOR_DESCRIPTOR && Scalar<uint8_t>(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN) == 1) {
      uint64_t n = api::dnn::DataTypeBytes(static_cast<cudnnDataType_t>(
          Scalar<int32_t>(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE).value_or(-1)));
      for (int64_t dim : Values<int64_t>(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64)) n *= dim > 0 ? dim : 0;
      auto uid = Scalar<int64_t>(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64);
      if (uid && n > 0 && n <= api::dnn::kMaxByValueBytes) d.by_value[*uid] = static_cast<uint32_t>(n);
    }
    for (const auto& [name, a] : d.attrs) {
      if (a.type != CUDNN_TYPE_BACKEND_DESCRIPTOR) continue;
      for (uint64_t ref : Values<uint64_t>(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR)) Gather(ref, &d.by_value);
    }
  }
  // Descriptors a query of `id` filled in (heuristics' results, a plan's configuration) have
  // what `id` has.
  void Filled(uint64_t id, const uint64_t* filled, size_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = descs_.find(id);
    if (it == descs_.end()) return;
    for (size_t i = 0; i < n; i++) {
      auto f = descs_.find(filled[i]);
      if (f != descs_.end() && f != it) f->second.by_value.insert(it->second.by_value.begin(), it->second.by_value.end());
    }
  }
  // An attribute the application set on a descriptor the library holds exactly so, read with
  // the type it was set with (anything else is the library's to answer: false).
  bool Get(uint64_t id, int name, cudnnBackendAttributeType_t type, int64_t requested, int64_t* count, void* elements) {
    if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR || type == CUDNN_TYPE_HANDLE || requested < 0 || (requested > 0 && elements == nullptr))
      return false;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = descs_.find(id);
    if (it == descs_.end() || !it->second.exact) return false;
    auto a = it->second.attrs.find(name);
    if (a == it->second.attrs.end() || a->second.type != type) return false;
    const size_t elem = api::dnn::AttributeElementBytes(type);
    if (elem == 0) return false;
    const int64_t have = static_cast<int64_t>(a->second.bytes.size() / elem);
    if (count != nullptr) *count = have;
    const int64_t copy = have < requested ? have : requested;
    if (copy > 0) std::memcpy(elements, a->second.bytes.data(), static_cast<size_t>(copy) * elem);
    return true;
  }
  void Known(uint64_t id, const void* tree, size_t n) {
    api::dnn::KnownNode node;
    if (n == 0 || !api::dnn::ParseKnown(tree, n, &node)) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = descs_.find(id);
    if (it != descs_.end() && node.type == it->second.type) it->second.known = std::move(node);
  }
  bool KnownGet(uint64_t id, int name, cudnnBackendAttributeType_t type, int64_t requested, int64_t* count, void* elements,
                std::vector<uint64_t>* fill) {
    if (requested < 0) return false;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = descs_.find(id);
    if (it == descs_.end() || !it->second.known) return false;
    auto a = it->second.known->attrs.find(name);
    if (a == it->second.known->attrs.end() || a->second.type != type) return false;
    const api::dnn::KnownAttr& k = a->second;
    if (type != CUDNN_TYPE_BACKEND_DESCRIPTOR) {
      // The library writes min(requested, count) elements and reports count.
      const int64_t want = std::min(requested, k.count);
      const size_t elem = api::dnn::AttributeElementBytes(type);
      if (elem == 0 || (elements != nullptr && want > static_cast<int64_t>(k.bytes.size() / elem))) return false;
      if (elements != nullptr && want > 0) std::memcpy(elements, k.bytes.data(), static_cast<size_t>(want) * elem);
      if (count != nullptr) *count = k.count;
      return true;
    }
    if (elements == nullptr || requested == 0) {  // how many there are
      if (count != nullptr) *count = k.count;
      return true;
    }
    // The library's answer is known for the worker's own request, and for any larger one when
    // the worker asked for every element it counted.
    if (requested != k.asked && !(k.asked == k.count && requested > k.asked)) return false;
    const int64_t want = static_cast<int64_t>(k.children.size());
    if (requested > api::dnn::kMaxKnownFill) return false;
    // The same request goes to the worker (FillPosted), so the library fills the same ones.
    std::vector<uint64_t> ids(static_cast<size_t>(requested));
    std::memcpy(ids.data(), elements, ids.size() * sizeof(uint64_t));
    // Descriptors of the types the library fills, or the library is to say what is wrong.
    for (size_t i = 0; i < static_cast<size_t>(want); i++) {
      auto t = descs_.find(ids[i]);
      if (t == descs_.end() || t == it || t->second.type != k.children[i].type) return false;
    }
    for (size_t i = 0; i < static_cast<size_t>(want); i++) {
      Desc& t = descs_[ids[i]];
      t.attrs.clear();
      t.exact = false;
      t.known = k.children[i];
      t.by_value.insert(it->second.by_value.begin(), it->second.by_value.end());
    }
    if (count != nullptr) *count = want;  // how many it filled
    if (want > 0) *fill = std::move(ids);  // (none filled: nothing for the worker to do)
    return true;
  }
  Status ByValues(uint64_t plan, uint64_t pack, std::vector<std::byte>* out) {
    std::vector<uint64_t> ptrs;
    std::vector<int64_t> uids;
    std::map<int64_t, uint32_t> by_value;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto pk = descs_.find(pack);
      if (pk == descs_.end()) return Status::Ok();  // the worker refuses what it cannot check
      ptrs = Values<uint64_t>(pk->second, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR);
      uids = Values<int64_t>(pk->second, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64);
      if (auto pl = descs_.find(plan); pl != descs_.end()) by_value = pl->second.by_value;
    }
    shim::Runtime& rt = shim::Runtime::Get();
    for (size_t i = 0; i < ptrs.size(); i++) {
      uint64_t p = ptrs[i];
      if (p == 0 || rt.FindDevice(p)) continue;
      auto bv = i < uids.size() ? by_value.find(uids[i]) : by_value.end();
      if (bv == by_value.end())
        return Status(Domain::kCudnn, CUDNN_STATUS_BAD_PARAM,
                      fmt::format("cudnnBackendExecute: variant pack pointer 0x{:x} (unique id {}) is neither device memory of "
                                  "this session nor a by-value tensor of the plan's operation graph", p,
                                  i < uids.size() ? uids[i] : -1));
      api::dnn::AppendByValue(out, uids[i], reinterpret_cast<const void*>(static_cast<uintptr_t>(p)), bv->second);
    }
    return Status::Ok();
  }

 private:
  // The elements of an attribute set with `type` (none if it was set with another).
  template <typename T>
  static std::vector<T> Values(const Desc& d, int name, cudnnBackendAttributeType_t type) {
    auto it = d.attrs.find(name);
    if (it == d.attrs.end() || it->second.type != type) return {};
    std::vector<T> v(it->second.bytes.size() / sizeof(T));
    if (!v.empty()) std::memcpy(v.data(), it->second.bytes.data(), v.size() * sizeof(T));
    return v;
  }
  template <typename T>
  static std::optional<T> Scalar(const Desc& d, int name, cudnnBackendAttributeType_t type) {
    auto v = Values<T>(d, name, type);
    if (v.empty()) return std::nullopt;
    return v[0];
  }
  void Gather(uint64_t ref, std::map<int64_t, uint32_t>* into) {
    auto it = descs_.find(ref);
    if (it != descs_.end()) into->insert(it->second.by_value.begin(), it->second.by_value.end());
  }

  std::mutex mu_;
  std::unordered_map<uint64_t, Desc> descs_;
};

uint64_t Id(cudnnBackendDescriptor_t d) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(d)); }

}  // namespace

void MirrorBackendCreate(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t* descriptor) {
  Mirror::Get().Create(Id(*descriptor), type);
}

void MirrorBackendDestroy(cudnnBackendDescriptor_t descriptor) { Mirror::Get().Destroy(Id(descriptor)); }

void MirrorBackendSet(cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                      int64_t count, const void* elements) {
  Mirror::Get().Set(Id(descriptor), name, type, elements, api::dnn::AttributeBytes(type, count));
}

void MirrorBackendGet(cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t type,
                      int64_t requested, int64_t* count, void* elements) {
  if (type != CUDNN_TYPE_BACKEND_DESCRIPTOR || elements == nullptr || requested <= 0) return;
  int64_t n = count != nullptr && *count < requested ? *count : requested;
  if (n <= 0) return;
  std::vector<uint64_t> filled(static_cast<size_t>(n));
  std::memcpy(filled.data(), elements, filled.size() * sizeof(uint64_t));
  Mirror::Get().Filled(Id(descriptor), filled.data(), filled.size());
}

void MirrorBackendFinalize(cudnnBackendDescriptor_t descriptor) {
  Mirror::Get().Finalize(Id(descriptor), FinalizeAnswered(descriptor));
}

bool LocalGetAttribute(cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                       int64_t requested, int64_t* count, void* elements) {
  return Mirror::Get().Get(Id(descriptor), name, type, requested, count, elements);
}

void MirrorBackendInitialize(cudnnBackendDescriptor_t descriptor) { Mirror::Get().Reset(Id(descriptor)); }

int BackendTypeOf(cudnnBackendDescriptor_t descriptor) {
  auto type = Mirror::Get().Type(Id(descriptor));
  return type ? static_cast<int>(*type) : -1;
}

bool FinalizeAnswered(cudnnBackendDescriptor_t descriptor) {
  auto type = Mirror::Get().Type(Id(descriptor));
  if (!type) return true;
  switch (*type) {
    // What a graph is built of: a failure surfaces at the graph's (answered) finalize.
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
    case CUDNN_BACKEND_POINTWISE_DESCRIPTOR:
    case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR:
    case CUDNN_BACKEND_MATMUL_DESCRIPTOR:
    case CUDNN_BACKEND_REDUCTION_DESCRIPTOR:
    case CUDNN_BACKEND_RESAMPLE_DESCRIPTOR:
    case CUDNN_BACKEND_RNG_DESCRIPTOR:
    case CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_BN_FINALIZE_STATISTICS_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_RESAMPLE_FWD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_RESAMPLE_BWD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONCAT_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_SIGNAL_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_PAGED_CACHE_LOAD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_BLOCK_SCALE_QUANTIZE_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_BLOCK_SCALE_DEQUANTIZE_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_EXPAND_BAND_MATRIX_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONTRACT_BAND_MATRIX_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_MOE_GROUPED_MATMUL_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR:
    // Made for one execute: its failure surfaces as the execute's (posted too).
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR: return false;
    // Operation graphs, heuristics, engines, configurations, plans and whatever this client
    // does not know: their status decides what cudnn-frontend does next.
    default: return true;
  }
}

bool FinalizeBringsKnown(cudnnBackendDescriptor_t descriptor) {
  auto type = Mirror::Get().Type(Id(descriptor));
  return type && api::dnn::FinalizeBringsKnown(*type) && FinalizeAnswered(descriptor);
}

void MirrorBackendKnown(cudnnBackendDescriptor_t descriptor, const void* tree, size_t n) { Mirror::Get().Known(Id(descriptor), tree, n); }

bool KnownGetAttribute(cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                       int64_t requested, int64_t* count, void* elements, std::vector<uint64_t>* fill) {
  return Mirror::Get().KnownGet(Id(descriptor), name, type, requested, count, elements, fill);
}

Status ByValues(cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack, std::vector<std::byte>* values) {
  return Mirror::Get().ByValues(Id(plan), Id(pack), values);
}

}  // namespace remora::gen::cudnn
