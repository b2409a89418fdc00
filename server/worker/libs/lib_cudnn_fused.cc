// cuDNN's legacy fusion API on the worker (lib_cudnn.h): a parameter pack's attribute is typed
// by its label - a descriptor of the kind the label names, a placeholder or mode enum, a device
// pointer, a host scalar. The client sends each as a u64; here it becomes what the library
// takes: a descriptor id is translated (a foreign id or one of another kind is refused), a
// device pointer is checked at the set and again, with every pointer of the pack, at each
// execute, a host scalar is kept with the pack (the library reads it at the execute).
#include <map>
#include <optional>
#include <string>

#include "cudnn_api.h"
#include "worker/calls/generated_call.h"
#include "worker/libs/lib_cudnn.h"

namespace remora::worker::gen::cudnn {
namespace {

// A variant pack's host scalars, at stable addresses the library holds until it is destroyed.
struct DnnFusedScalars : LibExtra {
  std::map<int, uint64_t> values;
};

Status Refused(cudnnStatus_t code, std::string what) { return Status(Domain::kCudnn, static_cast<uint32_t>(code), std::move(what)); }
Status Failed(OpContext& x, cudnnStatus_t r, const char* call) {
  return x.LibraryError(Domain::kCudnn, static_cast<uint32_t>(r), Api::StatusName(r), call);
}

// The descriptor kind a constant pack's label takes, or nullopt for a value (an enum).
std::optional<HandleKind> ConstKind(cudnnFusedOpsConstParamLabel_t label) {
  switch (label) {
    case CUDNN_PARAM_XDESC:
    case CUDNN_PARAM_BN_EQSCALEBIAS_DESC:
    case CUDNN_PARAM_YDESC:
    case CUDNN_PARAM_DYDESC:
    case CUDNN_PARAM_YSTATS_DESC:
    case CUDNN_PARAM_BN_SCALEBIAS_MEANVAR_DESC:
    case CUDNN_PARAM_ZDESC:
    case CUDNN_PARAM_BN_Z_EQSCALEBIAS_DESC:
    case CUDNN_PARAM_ACTIVATION_BITMASK_DESC:
    case CUDNN_PARAM_DXDESC:
    case CUDNN_PARAM_DZDESC: return HandleKind::kCudnnTensorDescriptor;
    case CUDNN_PARAM_WDESC:
    case CUDNN_PARAM_DWDESC: return HandleKind::kCudnnFilterDescriptor;
    case CUDNN_PARAM_ACTIVATION_DESC: return HandleKind::kCudnnActivationDescriptor;
    case CUDNN_PARAM_CONV_DESC: return HandleKind::kCudnnConvolutionDescriptor;
    default: return std::nullopt;
  }
}

bool IsScalar(cudnnFusedOpsVariantParamLabel_t label) { return label >= CUDNN_SCALAR_SIZE_T_WORKSPACE_SIZE_IN_BYTES; }

Result<void*> Descriptor(OpContext& x, uint64_t id, HandleKind kind) {
  if (id == 0) return static_cast<void*>(nullptr);
  auto o = x.executor().session().lib_objects().Get(id, kind);
  if (!o.ok()) return Refused(CUDNN_STATUS_BAD_PARAM, fmt::format("a fused-ops parameter names {}", o.status().message()));
  return (*o)->As<void*>();
}

Status CheckPointer(OpContext& x, uint64_t p, const char* what) {
  if (p == 0) return Status::Ok();
  uint64_t checked = 0;
  Status st = x.DevPtr(p, 1, &checked);
  if (!st.ok())
    return Refused(CUDNN_STATUS_BAD_PARAM, fmt::format("{} 0x{:x} is not device memory of this session: {}", what, p, st.message()));
  return Status::Ok();
}

}  // namespace

Status SetFusedOpsConst(OpContext& x, LibObject* pack, cudnnFusedOpsConstParamLabel_t label, uint64_t value) {
  auto p = pack->As<cudnnFusedOpsConstParamPack_t>();
  cudnnStatus_t r;
  if (auto kind = ConstKind(label)) {
    ASSIGN_OR_RETURN(void* d, Descriptor(x, value, *kind));
    r = x.Library<Api>().cudnnSetFusedOpsConstParamPackAttribute(p, label, d);
  } else {
    int v = static_cast<int>(value);  // a cudnnFusedOpsPointerPlaceHolder_t or cudnnBatchNormMode_t
    r = x.Library<Api>().cudnnSetFusedOpsConstParamPackAttribute(p, label, &v);
  }
  return r == CUDNN_STATUS_SUCCESS ? Status::Ok() : Failed(x, r, "cudnnSetFusedOpsConstParamPackAttribute");
}

Status GetFusedOpsConst(OpContext& x, LibObject* pack, cudnnFusedOpsConstParamLabel_t label, uint64_t filled, uint64_t* value,
                        int* is_null) {
  auto p = pack->As<cudnnFusedOpsConstParamPack_t>();
  cudnnStatus_t r;
  *value = 0;
  if (auto kind = ConstKind(label)) {
    // The library fills the application's descriptor; its id goes back.
    if (filled == 0) return Refused(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "no descriptor to fill");
    ASSIGN_OR_RETURN(void* d, Descriptor(x, filled, *kind));
    r = x.Library<Api>().cudnnGetFusedOpsConstParamPackAttribute(p, label, d, is_null);
    *value = filled;
  } else {
    int v = 0;
    r = x.Library<Api>().cudnnGetFusedOpsConstParamPackAttribute(p, label, &v, is_null);
    *value = static_cast<uint64_t>(static_cast<uint32_t>(v));
  }
  return r == CUDNN_STATUS_SUCCESS ? Status::Ok() : Failed(x, r, "cudnnGetFusedOpsConstParamPackAttribute");
}

Status SetFusedOpsVariant(OpContext& x, LibObject* pack, cudnnFusedOpsVariantParamLabel_t label, uint64_t value) {
  void* arg = nullptr;
  if (IsScalar(label)) {
    uint64_t& held = pack->Extra<DnnFusedScalars>().values[label];
    held = value;  // size_t, int64_t or double: 8 bytes
    arg = &held;
  } else {
    RETURN_IF_ERROR(CheckPointer(x, value, "a fused-ops pointer"));
    arg = reinterpret_cast<void*>(static_cast<uintptr_t>(value));
  }
  cudnnStatus_t r = x.Library<Api>().cudnnSetFusedOpsVariantParamPackAttribute(pack->As<cudnnFusedOpsVariantParamPack_t>(), label, arg);
  return r == CUDNN_STATUS_SUCCESS ? Status::Ok() : Failed(x, r, "cudnnSetFusedOpsVariantParamPackAttribute");
}

Status GetFusedOpsVariant(OpContext& x, LibObject* pack, cudnnFusedOpsVariantParamLabel_t label, uint64_t* value) {
  *value = 0;
  cudnnStatus_t r = x.Library<Api>().cudnnGetFusedOpsVariantParamPackAttribute(pack->As<cudnnFusedOpsVariantParamPack_t>(), label, value);
  return r == CUDNN_STATUS_SUCCESS ? Status::Ok() : Failed(x, r, "cudnnGetFusedOpsVariantParamPackAttribute");
}

Status FusedOpsExecute(OpContext& x, LibObject* handle, LibObject* plan, LibObject* pack) {
  // Every pointer the pack holds, as the library holds it, is the session's device memory now.
  auto vp = pack->As<cudnnFusedOpsVariantParamPack_t>();
  for (int label = CUDNN_PTR_XDATA; label <= CUDNN_PTR_BN_DBIAS; label++) {
    void* p = nullptr;
    if (x.Library<Api>().cudnnGetFusedOpsVariantParamPackAttribute(vp, static_cast<cudnnFusedOpsVariantParamLabel_t>(label), &p) !=
        CUDNN_STATUS_SUCCESS)
      continue;
    RETURN_IF_ERROR(CheckPointer(x, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)), "a fused-ops pointer"));
  }
  cudnnStatus_t r = x.Library<Api>().cudnnFusedOpsExecute(handle->As<cudnnHandle_t>(), plan->As<cudnnFusedOpsPlan_t>(), vp);
  return r == CUDNN_STATUS_SUCCESS ? Status::Ok() : Failed(x, r, "cudnnFusedOpsExecute");
}

}  // namespace remora::worker::gen::cudnn
