#include "driver/driver.h"

#include "error_log.h"
#include "process.h"
#include "remora/base/log.h"
#include "runtime.h"

namespace remora::shim::driver {

CUresult FromRuntime(cudaError_t e) {
  switch (e) {
    case cudaErrorInvalidConfiguration:
    case cudaErrorInvalidPitchValue:
    case cudaErrorInvalidSymbol:
    case cudaErrorInvalidHostPointer:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidMemcpyDirection:
    case cudaErrorInvalidChannelDescriptor:
    case cudaErrorInvalidFilterSetting:
    case cudaErrorInvalidNormSetting:
      return CUDA_ERROR_INVALID_VALUE;
    case cudaErrorInvalidDeviceFunction:
      return CUDA_ERROR_INVALID_HANDLE;
    case cudaErrorMissingConfiguration:
    case cudaErrorNoKernelImageForDevice:
      return CUDA_ERROR_NO_BINARY_FOR_GPU;
    default:
      return static_cast<CUresult>(e);
  }
}

CUresult FromStatus(const Status& st, const char* call) {
  if (st.ok()) return CUDA_SUCCESS;
  LOG_INFO("{} -> {}", call, st.ToString());
  if (st.code() != Err::kNotReady) Process::Get().error_log().Record(call, st.ToString());
  if (st.domain() == Domain::kCuda) return static_cast<CUresult>(st.raw());
  if (st.domain() == Domain::kCudart) return FromRuntime(static_cast<cudaError_t>(st.raw()));
  return CUDA_ERROR_UNKNOWN;
}

RuntimeScope::RuntimeScope() : saved_(Thread().last_error) {}
RuntimeScope::~RuntimeScope() { Thread().last_error = saved_; }

CUresult Invalid(const char* call, const char* what) {
  LOG_INFO("{} -> CUDA_ERROR_INVALID_VALUE: {}", call, what);
  Process::Get().error_log().Record(call, std::string("CUDA_ERROR_INVALID_VALUE: ") + what);
  return CUDA_ERROR_INVALID_VALUE;
}

}  // namespace remora::shim::driver
