#include "remora/base/status.h"

namespace remora {

std::string_view ErrName(Err e) {
  switch (e) {
#define REMORA_ERR_NAME(k, n) \
  case Err::k:                \
    return n;
    REMORA_ERR_NAME(kSuccess, "cudaSuccess")
    REMORA_ERR_NAME(kInvalidValue, "cudaErrorInvalidValue")
    REMORA_ERR_NAME(kMemoryAllocation, "cudaErrorMemoryAllocation")
    REMORA_ERR_NAME(kInitializationError, "cudaErrorInitializationError")
    REMORA_ERR_NAME(kCudartUnloading, "cudaErrorCudartUnloading")
    REMORA_ERR_NAME(kInvalidConfiguration, "cudaErrorInvalidConfiguration")
    REMORA_ERR_NAME(kInvalidPitchValue, "cudaErrorInvalidPitchValue")
    REMORA_ERR_NAME(kInvalidSymbol, "cudaErrorInvalidSymbol")
    REMORA_ERR_NAME(kInvalidHostPointer, "cudaErrorInvalidHostPointer")
    REMORA_ERR_NAME(kInvalidDevicePointer, "cudaErrorInvalidDevicePointer")
    REMORA_ERR_NAME(kInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection")
    REMORA_ERR_NAME(kDevicesUnavailable, "cudaErrorDevicesUnavailable")
    REMORA_ERR_NAME(kInvalidKernelImage, "cudaErrorInvalidKernelImage")
    REMORA_ERR_NAME(kInvalidDeviceFunction, "cudaErrorInvalidDeviceFunction")
    REMORA_ERR_NAME(kNoDevice, "cudaErrorNoDevice")
    REMORA_ERR_NAME(kInvalidDevice, "cudaErrorInvalidDevice")
    REMORA_ERR_NAME(kNoKernelImageForDevice, "cudaErrorNoKernelImageForDevice")
    REMORA_ERR_NAME(kInvalidResourceHandle, "cudaErrorInvalidResourceHandle")
    REMORA_ERR_NAME(kSymbolNotFound, "cudaErrorSymbolNotFound")
    REMORA_ERR_NAME(kNotReady, "cudaErrorNotReady")
    REMORA_ERR_NAME(kIllegalAddress, "cudaErrorIllegalAddress")
    REMORA_ERR_NAME(kLaunchOutOfResources, "cudaErrorLaunchOutOfResources")
    REMORA_ERR_NAME(kPeerAccessAlreadyEnabled, "cudaErrorPeerAccessAlreadyEnabled")
    REMORA_ERR_NAME(kPeerAccessNotEnabled, "cudaErrorPeerAccessNotEnabled")
    REMORA_ERR_NAME(kHostMemoryAlreadyRegistered, "cudaErrorHostMemoryAlreadyRegistered")
    REMORA_ERR_NAME(kHostMemoryNotRegistered, "cudaErrorHostMemoryNotRegistered")
    REMORA_ERR_NAME(kLaunchFailure, "cudaErrorLaunchFailure")
    REMORA_ERR_NAME(kNotPermitted, "cudaErrorNotPermitted")
    REMORA_ERR_NAME(kNotSupported, "cudaErrorNotSupported")
    REMORA_ERR_NAME(kTimeout, "cudaErrorTimeout")
    REMORA_ERR_NAME(kUnknown, "cudaErrorUnknown")
#undef REMORA_ERR_NAME
  }
  return "cudaError(other)";
}

std::string_view DomainName(Domain d) {
  switch (d) {
    case Domain::kCudart: return "cudart";
    case Domain::kCuda: return "cuda";
    case Domain::kCublas: return "cublas";
    case Domain::kCublasLt: return "cublasLt";
    case Domain::kCudnn: return "cudnn";
    case Domain::kCufft: return "cufft";
    case Domain::kCurand: return "curand";
    case Domain::kCusolver: return "cusolver";
    case Domain::kCusparse: return "cusparse";
    case Domain::kNccl: return "nccl";
    case Domain::kNvrtc: return "nvrtc";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "cudaSuccess";
  std::string s;
  if (domain_ == Domain::kCudart || domain_ == Domain::kCuda) {
    s = ErrName(static_cast<Err>(code_));
    if (s == "cudaError(other)") s = fmt::format("cudaError({})", code_);
    if (domain_ == Domain::kCuda) s = fmt::format("CUresult {} ({})", code_, s);
  } else {
    s = fmt::format("{} status {}", DomainName(domain_), code_);
  }
  if (!message_.empty()) {
    s += ": ";
    s += message_;
  }
  return s;
}

}  // namespace remora
