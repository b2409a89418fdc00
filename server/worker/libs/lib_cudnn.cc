#include "worker/libs/lib_cudnn.h"

#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "cudnn_api.h"
#include "cudnn_hooks.h"
#include "worker/calls/generated_call.h"

namespace remora::worker::gen::cudnn {
namespace {

Status Failed(OpContext& x, cudnnStatus_t r, const char* call) {
  return x.LibraryError(Domain::kCudnn, static_cast<uint32_t>(r), Api::StatusName(r), call);
}

Status Refused(cudnnStatus_t code, std::string what) { return Status(Domain::kCudnn, static_cast<uint32_t>(code), std::move(what)); }

DnnDescriptor* Desc(LibObject* o) { return o == nullptr ? nullptr : dynamic_cast<DnnDescriptor*>(o->extra.get()); }

// The failure `o` holds, taken (it is reported by whoever returns it), or OK.
Status TakeError(LibObject* o) {
  DnnDescriptor* d = Desc(o);
  return d == nullptr ? Status::Ok() : std::exchange(d->error, Status());
}

// A posted or answered call on descriptor `o`: while `o` holds an unreported failure a posted
// call is skipped and an answered one reports it; otherwise `call` runs, and a posted call's
// failure is kept on `o` (see lib_cudnn.h).
template <typename F>
Status OnDescriptor(OpContext& x, LibObject* o, F&& call) {
  DnnDescriptor* d = Desc(o);
  if (d != nullptr && !d->error.ok()) return x.answered() ? std::exchange(d->error, Status()) : Status::Ok();
  Status st = call();
  if (st.ok() || x.answered() || d == nullptr) return st;
  d->error = st;
  return Status::Ok();
}

// The session's object `id` of `kind` (0: none).
Result<LibObject*> Object(OpContext& x, uint64_t id, HandleKind kind) {
  if (id == 0) return static_cast<LibObject*>(nullptr);
  auto o = x.executor().session().lib_objects().Get(id, kind);
  if (!o.ok()) return Refused(CUDNN_STATUS_BAD_PARAM, fmt::format("a backend attribute names {}", o.status().message()));
  return *o;
}

Status CheckPointer(OpContext& x, uint64_t p, uint64_t bytes, const char* what) {
  if (p == 0) return Status::Ok();
  uint64_t checked = 0;
  Status st = x.DevPtr(p, bytes, &checked);
  if (!st.ok())
    return Refused(CUDNN_STATUS_BAD_PARAM, fmt::format("{} 0x{:x} is not device memory of this session: {}", what, p, st.message()));
  return Status::Ok();
}

// An attribute as the library holds it (none if it cannot say; `ok`, if given, says whether it
// could).
template <typename T>
std::vector<T> Attribute(OpContext& x, const LibObject* d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                         int64_t max, bool* ok = nullptr) {
  std::vector<T> v(static_cast<size_t>(max));
  int64_t n = 0;
  bool read = x.Library<Api>().cudnnBackendGetAttribute(d->As<cudnnBackendDescriptor_t>(), name, type, max, &n, v.data()) ==
              CUDNN_STATUS_SUCCESS;
  if (!read) n = 0;
  if (ok != nullptr) *ok = read;
  v.resize(static_cast<size_t>(n < 0 ? 0 : (n > max ? max : n)));
  return v;
}

bool IsVariantPack(LibObject* o) {
  DnnDescriptor* d = Desc(o);
  return d != nullptr && d->type == CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR;
}

Status SetNow(OpContext& x, LibObject* desc, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
              const void* elements) {
  if (count > 0 && api::dnn::AttributeElementBytes(type) == 0)
    return Refused(CUDNN_STATUS_NOT_SUPPORTED, fmt::format("backend attribute type {} is not remoted", static_cast<int>(type)));
  std::vector<uint64_t> words;
  const void* arg = elements;
  if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR || type == CUDNN_TYPE_HANDLE || type == CUDNN_TYPE_VOID_PTR) {
    words.resize(static_cast<size_t>(count > 0 ? count : 0));
    if (!words.empty()) std::memcpy(words.data(), elements, words.size() * sizeof(uint64_t));
    for (uint64_t& w : words) {
      if (type == CUDNN_TYPE_VOID_PTR) {
        // A variant pack's data pointers are checked at every execute instead: a by-value
        // tensor's is a host address of the client, which no execution is ever given.
        if (IsVariantPack(desc) && name == CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS) continue;
        RETURN_IF_ERROR(CheckPointer(x, w, 1, "a backend attribute's pointer"));
        continue;
      }
      HandleKind kind = type == CUDNN_TYPE_HANDLE ? HandleKind::kCudnnHandle : HandleKind::kCudnnBackendDescriptor;
      ASSIGN_OR_RETURN(LibObject * o, Object(x, w, kind));
      // A descriptor whose posted calls failed: the failure moves to this one.
      if (Status e = TakeError(o); !e.ok()) return e;
      w = o == nullptr ? 0 : o->bits;
    }
    arg = words.empty() ? nullptr : words.data();
  }
  cudnnStatus_t r = x.Library<Api>().cudnnBackendSetAttribute(desc->As<cudnnBackendDescriptor_t>(), name, type, count, arg);
  if (r != CUDNN_STATUS_SUCCESS) return Failed(x, r, "cudnnBackendSetAttribute");
  if (IsVariantPack(desc) && api::dnn::AttributeElementBytes(type) == sizeof(uint64_t)) {
    std::vector<uint64_t>& kept = Desc(desc)->pack[static_cast<int>(name)];
    kept.assign(static_cast<size_t>(count > 0 ? count : 0), 0);
    if (!kept.empty()) std::memcpy(kept.data(), elements, kept.size() * sizeof(uint64_t));
  }
  return Status::Ok();
}

Status GetNow(OpContext& x, LibObject* desc, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t requested,
              int64_t* count, void* elements) {
  if (type == CUDNN_TYPE_HANDLE)
    return Refused(CUDNN_STATUS_NOT_SUPPORTED, "reading a cudnnHandle_t back from a backend descriptor is not remoted");
  if (requested > 0 && api::dnn::AttributeElementBytes(type) == 0)
    return Refused(CUDNN_STATUS_NOT_SUPPORTED, fmt::format("backend attribute type {} is not remoted", static_cast<int>(type)));
  std::vector<uint64_t> ids;
  if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR && elements != nullptr && requested > 0) {
    // The caller's descriptors, which the library fills: as the library's objects for the
    // call, as the caller's ids in the reply.
    ids.resize(static_cast<size_t>(requested));
    std::memcpy(ids.data(), elements, ids.size() * sizeof(uint64_t));
    std::vector<uint64_t> real(ids.size());
    for (size_t i = 0; i < ids.size(); i++) {
      ASSIGN_OR_RETURN(LibObject * o, Object(x, ids[i], HandleKind::kCudnnBackendDescriptor));
      real[i] = o == nullptr ? 0 : o->bits;
    }
    std::memcpy(elements, real.data(), real.size() * sizeof(uint64_t));
  }
  cudnnStatus_t r = x.Library<Api>().cudnnBackendGetAttribute(desc->As<cudnnBackendDescriptor_t>(), name, type, requested, count,
                                                              elements);
  if (!ids.empty()) std::memcpy(elements, ids.data(), ids.size() * sizeof(uint64_t));
  if (r != CUDNN_STATUS_SUCCESS) return Failed(x, r, "cudnnBackendGetAttribute");
  return Status::Ok();
}

// Runs `run` (an execute, a CUDA graph's population) with `pack` as the plan's variant pack:
// each data pointer the session's device memory now, or a by-value tensor whose bytes are in
// `values` (then a pack of the worker's own goes to the library, its pointers into worker
// buffers holding the bytes).
template <typename Run>
Status WithCheckedPack(OpContext& x, LibObject* plan, LibObject* pack, const std::vector<api::dnn::ByValue>& values, const char* call,
                       Run&& run) {
  // A failure a posted call left on the plan or the pack is this execute's (posted: the
  // session's next synchronising call reports it).
  for (LibObject* o : {plan, pack})
    if (Status e = TakeError(o); !e.ok()) return e;
  constexpr int64_t kMaxTensors = 4096;
  // The pack's attributes as they were set (the worker saw every set; cuDNN 9 reads none of a
  // variant pack back), else as the library answers them (the host backend's).
  const DnnDescriptor* kept = Desc(pack);
  auto attr = [&](cudnnBackendAttributeName_t n, cudnnBackendAttributeType_t t, int64_t max, bool* ok = nullptr) {
    if (kept != nullptr) {
      auto it = kept->pack.find(static_cast<int>(n));
      if (it != kept->pack.end()) {
        if (ok != nullptr) *ok = true;
        return it->second;
      }
    }
    return Attribute<uint64_t>(x, pack, n, t, max, ok);
  };
  bool readable = false;
  auto ptrs = attr(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, kMaxTensors, &readable);
  // Pointers nobody checked never reach an execution.
  if (!readable)
    return Refused(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "the variant pack's data pointers cannot be read back (is it finalized?)");
  std::vector<int64_t> uids;
  for (uint64_t u : attr(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, kMaxTensors)) uids.push_back(static_cast<int64_t>(u));
  std::map<int64_t, const api::dnn::ByValue*> by_uid;
  for (const auto& v : values)
    if (!by_uid.emplace(v.uid, &v).second) return x.Malformed("a by-value tensor is sent twice");
  // Worker buffers for the by-value bytes, zero-padded so a library reading a wider type than
  // the client's never reads past them.
  std::vector<std::vector<uint64_t>> held;
  std::vector<uint64_t> replaced = ptrs;
  size_t used = 0;
  for (size_t i = 0; i < ptrs.size(); i++) {
    auto it = i < uids.size() ? by_uid.find(uids[i]) : by_uid.end();
    if (it == by_uid.end()) {
      RETURN_IF_ERROR(CheckPointer(x, ptrs[i], 1, "a variant pack's data pointer"));
      continue;
    }
    held.emplace_back(4 + it->second->size / sizeof(uint64_t), 0);
    std::memcpy(held.back().data(), it->second->data, it->second->size);
    replaced[i] = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(held.back().data()));
    used++;
  }
  if (used != values.size())
    return Refused(CUDNN_STATUS_BAD_PARAM, "a by-value tensor's unique id is not in the variant pack");
  auto ws = attr(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1);
  auto ws_size = Attribute<int64_t>(x, plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1);
  if (!ws.empty() && ws[0] != 0)
    RETURN_IF_ERROR(CheckPointer(x, ws[0], ws_size.empty() || ws_size[0] <= 0 ? 1 : static_cast<uint64_t>(ws_size[0]),
                                 "a variant pack's workspace"));
  else if (!ws_size.empty() && ws_size[0] > 0)
    return Refused(CUDNN_STATUS_BAD_PARAM, fmt::format("the plan needs a workspace of {} bytes and the variant pack has none", ws_size[0]));
  auto inter = attr(CUDNN_ATTR_VARIANT_PACK_INTERMEDIATES, CUDNN_TYPE_VOID_PTR, kMaxTensors);
  for (uint64_t p : inter) RETURN_IF_ERROR(CheckPointer(x, p, 1, "a variant pack's intermediate"));
  Api& api = x.Library<Api>();
  if (used == 0) {
    cudnnStatus_t r = run(pack->As<cudnnBackendDescriptor_t>());
    return r == CUDNN_STATUS_SUCCESS ? Status::Ok() : Failed(x, r, call);
  }
  cudnnBackendDescriptor_t own = nullptr;
  cudnnStatus_t r = api.cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &own);
  if (r != CUDNN_STATUS_SUCCESS) return Failed(x, r, "cudnnBackendCreateDescriptor (the by-value variant pack)");
  auto set = [&](cudnnBackendAttributeName_t n, cudnnBackendAttributeType_t t, size_t count, const void* v) {
    if (r == CUDNN_STATUS_SUCCESS && count > 0) r = api.cudnnBackendSetAttribute(own, n, t, static_cast<int64_t>(count), v);
  };
  set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, replaced.size(), replaced.data());
  set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids.size(), uids.data());
  set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, ws.size(), ws.data());
  set(CUDNN_ATTR_VARIANT_PACK_INTERMEDIATES, CUDNN_TYPE_VOID_PTR, inter.size(), inter.data());
  if (r == CUDNN_STATUS_SUCCESS) r = api.cudnnBackendFinalize(own);
  if (r == CUDNN_STATUS_SUCCESS) r = run(own);  // the library reads the by-value bytes now
  (void)api.cudnnBackendDestroyDescriptor(own);
  return r == CUDNN_STATUS_SUCCESS ? Status::Ok() : Failed(x, r, call);
}

Status Execute(OpContext& x, LibObject* handle, LibObject* plan, LibObject* pack, const std::vector<api::dnn::ByValue>& values) {
  return WithCheckedPack(x, plan, pack, values, "cudnnBackendExecute", [&](cudnnBackendDescriptor_t p) {
    return x.Library<Api>().cudnnBackendExecute(handle->As<cudnnHandle_t>(), plan->As<cudnnBackendDescriptor_t>(), p);
  });
}

}  // namespace

uint64_t TensorBytes(OpContext& x, const LibObject* desc) {
  size_t n = 0;
  if (desc == nullptr || x.Library<Api>().cudnnGetTensorSizeInBytes(desc->As<cudnnTensorDescriptor_t>(), &n) != CUDNN_STATUS_SUCCESS)
    return 0;
  return n;
}

uint64_t FilterBytes(OpContext& x, const LibObject* desc) {
  size_t n = 0;
  if (desc == nullptr || x.Library<Api>().cudnnGetFilterSizeInBytes(desc->As<cudnnFilterDescriptor_t>(), &n) != CUDNN_STATUS_SUCCESS)
    return 0;
  return n;
}

Status DnnVersions(OpContext& x, size_t* versions) {
  versions[0] = x.Library<Api>().cudnnGetVersion();
  versions[1] = x.Library<Api>().cudnnGetMaxDeviceVersion();
  versions[2] = x.Library<Api>().cudnnGetCudartVersion();
  if (versions[0] == 0) return Refused(CUDNN_STATUS_NOT_SUPPORTED, "the server's cuDNN does not report its version");
  return Status::Ok();
}

Status DnnLastError(OpContext& x, char* message, size_t max_size) {
  if (max_size == 0) return Status::Ok();
  message[0] = '\0';
  x.Library<Api>().cudnnGetLastErrorString(message, max_size);
  message[max_size - 1] = '\0';
  return Status::Ok();
}

Status BackendCreated(OpContext&, cudnnBackendDescriptorType_t type, LibObject* desc) {
  if (desc != nullptr) desc->Extra<DnnDescriptor>().type = type;
  return Status::Ok();
}

Status BackendDestroyed(OpContext& x, LibObject* desc) {
  if (Status e = TakeError(desc); !e.ok()) x.executor().DeferError(e);
  return Status::Ok();
}

Status BackendSetAttribute(OpContext& x, LibObject* desc, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                           int64_t count, const void* elements) {
  return OnDescriptor(x, desc, [&] { return SetNow(x, desc, name, type, count, elements); });
}

Status BackendGetAttribute(OpContext& x, LibObject* desc, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                           int64_t requested, int64_t* count, void* elements) {
  return OnDescriptor(x, desc, [&] { return GetNow(x, desc, name, type, requested, count, elements); });
}

Status BackendFinalize(OpContext& x, LibObject* desc) {
  return OnDescriptor(x, desc, [&]() -> Status {
    cudnnStatus_t r = x.Library<Api>().cudnnBackendFinalize(desc->As<cudnnBackendDescriptor_t>());
    return r == CUDNN_STATUS_SUCCESS ? Status::Ok() : Failed(x, r, "cudnnBackendFinalize");
  });
}

Status BackendExecute(OpContext& x, LibObject* handle, LibObject* plan, LibObject* pack) {
  return Execute(x, handle, plan, pack, {});
}

Status BackendExecuteByValue(OpContext& x, LibObject* handle, LibObject* plan, LibObject* pack, const void* values, size_t size) {
  std::vector<api::dnn::ByValue> parsed;
  if (!api::dnn::ParseByValues(values, size, &parsed)) return x.Malformed("the by-value tensors are not well formed");
  return Execute(x, handle, plan, pack, parsed);
}

Status BackendCudaGraph(OpContext& x, LibObject* handle, LibObject* plan, LibObject* pack, cudaGraph_t graph, int update,
                        const void* values, size_t size) {
  std::vector<api::dnn::ByValue> parsed;
  if (!api::dnn::ParseByValues(values, size, &parsed)) return x.Malformed("the by-value tensors are not well formed");
  const char* call = update ? "cudnnBackendUpdateCudaGraph" : "cudnnBackendPopulateCudaGraph";
  return WithCheckedPack(x, plan, pack, parsed, call, [&](cudnnBackendDescriptor_t p) {
    auto h = handle->As<cudnnHandle_t>();
    auto pl = plan->As<cudnnBackendDescriptor_t>();
    return update ? x.Library<Api>().cudnnBackendUpdateCudaGraph(h, pl, p, graph)
                  : x.Library<Api>().cudnnBackendPopulateCudaGraph(h, pl, p, graph);
  });
}

Status DnnQueryRuntimeError(OpContext& x, LibObject* handle, cudnnStatus_t* rstatus) {
  cudnnStatus_t r = x.Library<Api>().cudnnQueryRuntimeError(handle->As<cudnnHandle_t>(), rstatus, CUDNN_ERRQUERY_NONBLOCKING, nullptr);
  return r == CUDNN_STATUS_SUCCESS ? Status::Ok() : Failed(x, r, "cudnnQueryRuntimeError");
}

}  // namespace remora::worker::gen::cudnn
