#include "worker/lib_cudnn.h"

#include <cstring>
#include <vector>

#include "cudnn_api.h"
#include "cudnn_hooks.h"
#include "worker/api_op.h"

namespace remora::worker::gen::cudnn {
namespace {

Status Failed(OpContext& x, cudnnStatus_t r, const char* call) {
  return x.LibraryError(Domain::kCudnn, static_cast<uint32_t>(r), Api::StatusName(r), call);
}

Status Refused(cudnnStatus_t code, std::string what) { return Status(Domain::kCudnn, static_cast<uint32_t>(code), std::move(what)); }

// The session's object `id` of `kind`, as the library's handle.
Result<void*> Translate(OpContext& x, uint64_t id, HandleKind kind) {
  if (id == 0) return static_cast<void*>(nullptr);
  auto o = x.executor().session().lib_objects().Get(id, kind);
  if (!o.ok()) return Refused(CUDNN_STATUS_BAD_PARAM, fmt::format("a backend attribute names {}", o.status().message()));
  return (*o)->As<void*>();
}

Status CheckPointer(OpContext& x, uint64_t p, uint64_t bytes, const char* what) {
  if (p == 0) return Status::Ok();
  uint64_t checked = 0;
  Status st = x.DevPtr(p, bytes, &checked);
  if (!st.ok())
    return Refused(CUDNN_STATUS_BAD_PARAM, fmt::format("{} 0x{:x} is not device memory of this session (by-value tensors are "
                                                       "not remoted): {}", what, p, st.message()));
  return Status::Ok();
}

template <typename T>
std::vector<T> Attribute(OpContext& x, const LibObject* d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                         int64_t max) {
  std::vector<T> v(static_cast<size_t>(max));
  int64_t n = 0;
  if (x.Library<Api>().cudnnBackendGetAttribute(d->As<cudnnBackendDescriptor_t>(), name, type, max, &n, v.data()) !=
      CUDNN_STATUS_SUCCESS)
    n = 0;
  v.resize(static_cast<size_t>(n < 0 ? 0 : (n > max ? max : n)));
  return v;
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

Status BackendSetAttribute(OpContext& x, LibObject* desc, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                           int64_t count, const void* elements) {
  if (count > 0 && api::dnn::AttributeElementBytes(type) == 0)
    return Refused(CUDNN_STATUS_NOT_SUPPORTED, fmt::format("backend attribute type {} is not remoted", static_cast<int>(type)));
  std::vector<uint64_t> words;
  const void* arg = elements;
  if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR || type == CUDNN_TYPE_HANDLE || type == CUDNN_TYPE_VOID_PTR) {
    words.resize(static_cast<size_t>(count > 0 ? count : 0));
    if (!words.empty()) std::memcpy(words.data(), elements, words.size() * sizeof(uint64_t));
    for (uint64_t& w : words) {
      if (type == CUDNN_TYPE_VOID_PTR) {
        RETURN_IF_ERROR(CheckPointer(x, w, 1, "a backend attribute's pointer"));
        continue;
      }
      HandleKind kind = type == CUDNN_TYPE_HANDLE ? HandleKind::kCudnnHandle : HandleKind::kCudnnBackendDescriptor;
      ASSIGN_OR_RETURN(void* real, Translate(x, w, kind));
      w = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(real));
    }
    arg = words.empty() ? nullptr : words.data();
  }
  cudnnStatus_t r = x.Library<Api>().cudnnBackendSetAttribute(desc->As<cudnnBackendDescriptor_t>(), name, type, count, arg);
  if (r != CUDNN_STATUS_SUCCESS) return Failed(x, r, "cudnnBackendSetAttribute");
  return Status::Ok();
}

Status BackendGetAttribute(OpContext& x, LibObject* desc, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                           int64_t requested, int64_t* count, void* elements) {
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
      ASSIGN_OR_RETURN(void* p, Translate(x, ids[i], HandleKind::kCudnnBackendDescriptor));
      real[i] = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p));
    }
    std::memcpy(elements, real.data(), real.size() * sizeof(uint64_t));
  }
  cudnnStatus_t r = x.Library<Api>().cudnnBackendGetAttribute(desc->As<cudnnBackendDescriptor_t>(), name, type, requested, count,
                                                              elements);
  if (!ids.empty()) std::memcpy(elements, ids.data(), ids.size() * sizeof(uint64_t));
  if (r != CUDNN_STATUS_SUCCESS) return Failed(x, r, "cudnnBackendGetAttribute");
  return Status::Ok();
}

Status BackendExecute(OpContext& x, LibObject* handle, LibObject* plan, LibObject* pack) {
  // The variant pack as the library holds it: every data pointer and the workspace must be
  // the session's device memory now (the workspace with the plan's size).
  constexpr int64_t kMaxTensors = 4096;
  for (uint64_t p : Attribute<uint64_t>(x, pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, kMaxTensors))
    RETURN_IF_ERROR(CheckPointer(x, p, 1, "a variant pack's data pointer"));
  auto ws = Attribute<uint64_t>(x, pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1);
  auto ws_size = Attribute<int64_t>(x, plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1);
  if (!ws.empty() && ws[0] != 0)
    RETURN_IF_ERROR(CheckPointer(x, ws[0], ws_size.empty() || ws_size[0] <= 0 ? 1 : static_cast<uint64_t>(ws_size[0]),
                                 "a variant pack's workspace"));
  else if (!ws_size.empty() && ws_size[0] > 0)
    return Refused(CUDNN_STATUS_BAD_PARAM, fmt::format("the plan needs a workspace of {} bytes and the variant pack has none", ws_size[0]));
  cudnnStatus_t r = x.Library<Api>().cudnnBackendExecute(handle->As<cudnnHandle_t>(), plan->As<cudnnBackendDescriptor_t>(),
                                                         pack->As<cudnnBackendDescriptor_t>());
  if (r != CUDNN_STATUS_SUCCESS) return Failed(x, r, "cudnnBackendExecute");
  return Status::Ok();
}

}  // namespace remora::worker::gen::cudnn
