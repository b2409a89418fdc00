// The host backend's cuDNN: handles and their streams, versions, and the backend API's
// descriptors - attributes kept as the application set them and read back, finalize checks,
// heuristics with one engine, plans, variant packs and execution of the graphs
// host_lib_cudnn.h says it emulates. Not NVIDIA's library: for CI's tests of the path a
// cuDNN call takes through Remora. The legacy API answers CUDNN_STATUS_NOT_SUPPORTED.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "cudnn_api.h"
#include "cudnn_hooks.h"
#include "worker/libs/host/host_lib_cudnn.h"
#include "worker/libs/host/host_libraries.h"

namespace remora::worker {
namespace {

using host_dnn::Desc;

struct EmuHandle {
  DStream stream = nullptr;
};

class HostCudnn final : public gen::cudnn::Api {
 public:
  explicit HostCudnn(EmulatedDevice& d) : d_(d) {}
  ~HostCudnn() override {
    for (auto* h : handles_) delete h;
    for (auto* d : descs_) delete d;
  }

  cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) override {
    if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    auto* h = new EmuHandle;
    handles_.insert(h);
    *handle = reinterpret_cast<cudnnHandle_t>(h);
    return CUDNN_STATUS_SUCCESS;
  }
  cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) override {
    EmuHandle* h = Handle(handle);
    if (h == nullptr) return CUDNN_STATUS_BAD_PARAM;
    handles_.erase(h);
    delete h;
    return CUDNN_STATUS_SUCCESS;
  }
  cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) override {
    EmuHandle* h = Handle(handle);
    if (h == nullptr) return CUDNN_STATUS_BAD_PARAM;
    h->stream = static_cast<DStream>(stream);
    return CUDNN_STATUS_SUCCESS;
  }
  cudnnStatus_t cudnnGetProperty(libraryPropertyType type, int* value) override {
    switch (type) {
      case MAJOR_VERSION: *value = CUDNN_MAJOR; return CUDNN_STATUS_SUCCESS;
      case MINOR_VERSION: *value = CUDNN_MINOR; return CUDNN_STATUS_SUCCESS;
      case PATCH_LEVEL: *value = CUDNN_PATCHLEVEL; return CUDNN_STATUS_SUCCESS;
    }
    return CUDNN_STATUS_BAD_PARAM;
  }
  size_t cudnnGetVersion() override { return CUDNN_VERSION; }
  size_t cudnnGetMaxDeviceVersion() override { return 900; }  // the emulated GPU's sm_90
  size_t cudnnGetCudartVersion() override { return CUDART_VERSION; }
  void cudnnGetLastErrorString(char* message, size_t max_size) override {
    if (message == nullptr || max_size == 0) return;
    std::snprintf(message, max_size, "%s", last_.c_str());
  }

  // ---- the backend API ------------------------------------------------------------------
  cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t* out) override {
    if (out == nullptr) return Fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "no descriptor to create");
    if (type < CUDNN_BACKEND_POINTWISE_DESCRIPTOR || type > CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR)
      return Fail(CUDNN_STATUS_BAD_PARAM, "unknown descriptor type");
    auto* d = new Desc;
    d->type = type;
    descs_.insert(d);
    *out = reinterpret_cast<cudnnBackendDescriptor_t>(d);
    return CUDNN_STATUS_SUCCESS;
  }
  cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t desc) override {
    Desc* d = Live(desc);
    if (d == nullptr) return Fail(CUDNN_STATUS_BAD_PARAM, "not a live descriptor");
    descs_.erase(d);
    delete d;
    return CUDNN_STATUS_SUCCESS;
  }
  cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t desc, cudnnBackendAttributeName_t name,
                                         cudnnBackendAttributeType_t type, int64_t count, const void* elements) override {
    Desc* d = Live(desc);
    if (d == nullptr) return Fail(CUDNN_STATUS_BAD_PARAM, "not a live descriptor");
    if (d->finalized) return Fail(CUDNN_STATUS_BAD_PARAM, "the descriptor is finalized");
    if (count < 0 || api::dnn::AttributeElementBytes(type) == 0) return Fail(CUDNN_STATUS_BAD_PARAM, "bad element count or type");
    if (count > 0 && elements == nullptr) return Fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "no elements");
    if (auto want = Expected(d->type, name); want && *want != type)
      return Fail(CUDNN_STATUS_BAD_PARAM, "the attribute is set with another type than its own");
    host_dnn::Attr& a = d->attrs[name];
    a.type = type;
    a.count = count;
    a.bytes.assign(static_cast<const unsigned char*>(elements),
                   static_cast<const unsigned char*>(elements) + api::dnn::AttributeBytes(type, count));
    return CUDNN_STATUS_SUCCESS;
  }
  cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t desc) override {
    Desc* d = Live(desc);
    if (d == nullptr) return Fail(CUDNN_STATUS_BAD_PARAM, "not a live descriptor");
    if (d->finalized) return Fail(CUDNN_STATUS_BAD_PARAM, "the descriptor is finalized already");
    cudnnStatus_t r = host_dnn::FinalizeGraphPart(*d, &FindFor, this);
    if (r != CUDNN_STATUS_SUCCESS)
      return Fail(r, r == CUDNN_STATUS_NOT_SUPPORTED ? "Remora's host backend does not emulate this descriptor"
                                                     : "the descriptor's attributes are incomplete or inconsistent");
    d->finalized = true;
    return CUDNN_STATUS_SUCCESS;
  }
  cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t desc, cudnnBackendAttributeName_t name,
                                         cudnnBackendAttributeType_t type, int64_t requested, int64_t* count, void* elements) override {
    Desc* d = Live(desc);
    if (d == nullptr) return Fail(CUDNN_STATUS_BAD_PARAM, "not a live descriptor");
    if (!d->finalized) return Fail(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "the descriptor is not finalized");
    // (No array with a positive request: only the count, as NVIDIA's library answers it.)
    if (requested < 0) return Fail(CUDNN_STATUS_BAD_PARAM, "bad requested count");
    if (elements == nullptr) requested = 0;
    if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR) return GetDescriptors(*d, name, requested, count, elements);
    auto put = [&](cudnnBackendAttributeType_t t, const void* v, int64_t n) -> cudnnStatus_t {
      if (t != type) return Fail(CUDNN_STATUS_BAD_PARAM, "the attribute is read with another type than its own");
      if (count != nullptr) *count = n;
      int64_t copy = std::min(n, requested);
      if (copy > 0 && v != nullptr) std::memcpy(elements, v, static_cast<size_t>(api::dnn::AttributeBytes(t, copy)));
      return CUDNN_STATUS_SUCCESS;
    };
    const int64_t ws = d->graph ? static_cast<int64_t>(d->graph->workspace) : 0, one = 1, zero = 0;
    switch (name) {
      case CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE:
      case CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE: return put(CUDNN_TYPE_INT64, &ws, 1);
      case CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT: return put(CUDNN_TYPE_INT64, &one, 1);
      case CUDNN_ATTR_ENGINE_NUMERICAL_NOTE: return put(CUDNN_TYPE_NUMERICAL_NOTE, nullptr, 0);
      case CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE: return put(CUDNN_TYPE_BEHAVIOR_NOTE, nullptr, 0);
      case CUDNN_ATTR_ENGINE_GLOBAL_INDEX:
        if (!d->attrs.count(name)) return put(CUDNN_TYPE_INT64, &zero, 1);
        break;
      default: break;
    }
    auto it = d->attrs.find(name);
    if (it == d->attrs.end()) return Fail(CUDNN_STATUS_NOT_SUPPORTED, "Remora's host backend does not know this attribute's value");
    return put(it->second.type, it->second.bytes.data(), it->second.count);
  }
  cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack) override {
    EmuHandle* h = Handle(handle);
    Desc* p = Live(plan);
    Desc* v = Live(pack);
    if (h == nullptr || p == nullptr || v == nullptr || p->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR ||
        v->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)
      return Fail(CUDNN_STATUS_BAD_PARAM, "not a handle, a plan and a variant pack");
    if (!p->finalized || !v->finalized || !p->graph) return Fail(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "not finalized");
    auto ptrs = v->Values<uint64_t>(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR);
    auto uids = v->Values<int64_t>(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64);
    auto ws = v->Values<uint64_t>(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR);
    std::map<int64_t, uint64_t> pointers;
    for (size_t i = 0; i < ptrs.size() && i < uids.size(); i++) pointers[uids[i]] = ptrs[i];
    cudnnStatus_t r = host_dnn::ExecuteGraph(d_, h->stream, *p->graph, pointers, ws.empty() ? 0 : ws[0]);
    return r == CUDNN_STATUS_SUCCESS ? r : Fail(r, "a tensor of the graph has no valid pointer in the variant pack");
  }

 private:
  cudnnStatus_t Fail(cudnnStatus_t r, const char* why) {
    last_ = std::string("Remora host backend (emulated cuDNN): ") + why;
    return r;
  }
  EmuHandle* Handle(cudnnHandle_t h) {
    auto* e = reinterpret_cast<EmuHandle*>(h);
    return handles_.count(e) ? e : nullptr;
  }
  Desc* Live(cudnnBackendDescriptor_t d) {
    auto* e = reinterpret_cast<Desc*>(d);
    return descs_.count(e) ? e : nullptr;
  }
  static Desc* FindFor(void* self, uint64_t bits) {
    return static_cast<HostCudnn*>(self)->Live(reinterpret_cast<cudnnBackendDescriptor_t>(static_cast<uintptr_t>(bits)));
  }
  // The type an attribute of a descriptor of `type` is set with, where the emulation knows it.
  static std::optional<cudnnBackendAttributeType_t> Expected(cudnnBackendDescriptorType_t type, cudnnBackendAttributeName_t name) {
    switch (name) {
      case CUDNN_ATTR_TENSOR_DATA_TYPE: return CUDNN_TYPE_DATA_TYPE;
      case CUDNN_ATTR_TENSOR_DIMENSIONS:
      case CUDNN_ATTR_TENSOR_STRIDES:
      case CUDNN_ATTR_TENSOR_UNIQUE_ID:
      case CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT:
      case CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS:
      case CUDNN_ATTR_ENGINE_GLOBAL_INDEX: return CUDNN_TYPE_INT64;
      case CUDNN_ATTR_TENSOR_IS_VIRTUAL:
      case CUDNN_ATTR_TENSOR_IS_BY_VALUE: return CUDNN_TYPE_BOOLEAN;
      case CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS:
      case CUDNN_ATTR_VARIANT_PACK_WORKSPACE: return CUDNN_TYPE_VOID_PTR;
      case CUDNN_ATTR_OPERATIONGRAPH_OPS:
      case CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH:
      case CUDNN_ATTR_ENGINE_OPERATION_GRAPH:
      case CUDNN_ATTR_ENGINECFG_ENGINE:
      case CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG: return CUDNN_TYPE_BACKEND_DESCRIPTOR;
      case CUDNN_ATTR_OPERATIONGRAPH_HANDLE:
      case CUDNN_ATTR_EXECUTION_PLAN_HANDLE: return CUDNN_TYPE_HANDLE;
      default: (void)type; return std::nullopt;
    }
  }
  // A query of descriptors: the caller's (live, of the right type) are made copies of what
  // the attribute names - heuristics' results (one configuration of the one engine), a plan's
  // configuration, a configuration's engine, an engine's graph - or of what was set.
  cudnnStatus_t GetDescriptors(const Desc& d, cudnnBackendAttributeName_t name, int64_t requested, int64_t* count, void* elements) {
    cudnnBackendDescriptorType_t want{};
    std::vector<const Desc*> from;
    Desc made;
    switch (name) {
      case CUDNN_ATTR_ENGINEHEUR_RESULTS:
      case CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG:
      case CUDNN_ATTR_ENGINECFG_ENGINE:
      case CUDNN_ATTR_ENGINE_OPERATION_GRAPH:
        want = name == CUDNN_ATTR_ENGINECFG_ENGINE      ? CUDNN_BACKEND_ENGINE_DESCRIPTOR
               : name == CUDNN_ATTR_ENGINE_OPERATION_GRAPH ? CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR
                                                           : CUDNN_BACKEND_ENGINECFG_DESCRIPTOR;
        made.type = want;
        made.finalized = true;
        made.graph = d.graph;
        if (want == CUDNN_BACKEND_ENGINE_DESCRIPTOR) {
          int64_t zero = 0;
          made.attrs[CUDNN_ATTR_ENGINE_GLOBAL_INDEX] = {CUDNN_TYPE_INT64, 1, {}};
          made.attrs[CUDNN_ATTR_ENGINE_GLOBAL_INDEX].bytes.assign(reinterpret_cast<unsigned char*>(&zero),
                                                                   reinterpret_cast<unsigned char*>(&zero) + sizeof(zero));
        }
        if (d.graph) from.push_back(&made);
        break;
      case CUDNN_ATTR_ENGINE_KNOB_INFO:
      case CUDNN_ATTR_ENGINECFG_KNOB_CHOICES:
      case CUDNN_ATTR_ENGINE_LAYOUT_INFO: break;  // the one engine has no knobs
      default: {
        auto it = d.attrs.find(name);
        if (it == d.attrs.end() || it->second.type != CUDNN_TYPE_BACKEND_DESCRIPTOR)
          return Fail(CUDNN_STATUS_NOT_SUPPORTED, "Remora's host backend does not know this attribute's value");
        for (uint64_t bits : d.Values<uint64_t>(name, CUDNN_TYPE_BACKEND_DESCRIPTOR)) from.push_back(FindFor(this, bits));
      }
    }
    if (count != nullptr) *count = static_cast<int64_t>(from.size());
    auto* out = static_cast<cudnnBackendDescriptor_t*>(elements);
    for (int64_t i = 0; i < requested && i < static_cast<int64_t>(from.size()); i++) {
      Desc* target = Live(out[i]);
      if (target == nullptr || from[static_cast<size_t>(i)] == nullptr) return Fail(CUDNN_STATUS_BAD_PARAM, "not a live descriptor");
      if (target->type != from[static_cast<size_t>(i)]->type)
        return Fail(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE, "the descriptor to fill is of another type");
      *target = *from[static_cast<size_t>(i)];
    }
    return CUDNN_STATUS_SUCCESS;
  }

  EmulatedDevice& d_;
  std::set<EmuHandle*> handles_;
  std::set<Desc*> descs_;
  std::string last_;
};

}  // namespace

std::shared_ptr<void> MakeHostCudnn(EmulatedDevice& device) {
  auto api = std::make_shared<HostCudnn>(device);
  return std::shared_ptr<void>(api, static_cast<gen::cudnn::Api*>(api.get()));
}

}  // namespace remora::worker
