// Helpers of the hand-written driver-API entry points (shim/src/driver/*.cc), the `local`
// entries of protocol/api/cuda.api. Many driver functions are the runtime's with another
// spelling: they call the core's runtime implementation and convert its cudaError_t, without
// touching the runtime's last error (the driver API has none).
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "driver/contexts.h"
#include "remora/base/status.h"
#include "remote_call.h"
#include "runtime.h"

namespace remora::shim::driver {

// The CUresult of a runtime error code. The numbers coincide for every code both APIs have;
// runtime-only argument errors become CUDA_ERROR_INVALID_VALUE.
CUresult FromRuntime(cudaError_t e);
// The CUresult of a Status (any domain), logged like the runtime's errors.
CUresult FromStatus(const Status& st, const char* call);

// A generated call's Status as a driver entry point returns it (noted in the driver's log).
inline CUresult Done(const Status& st, const char* call) { return static_cast<CUresult>(FinishApi(Domain::kCuda, st, call)); }

// Runs a runtime implementation for a driver entry point: the thread's runtime last error is
// left as it was.
class RuntimeScope {
 public:
  RuntimeScope();
  ~RuntimeScope();
  RuntimeScope(const RuntimeScope&) = delete;
  RuntimeScope& operator=(const RuntimeScope&) = delete;

 private:
  cudaError_t saved_;
};

template <typename Fn>
CUresult ViaRuntime(Fn&& fn) {
  RuntimeScope scope;
  return FromRuntime(fn());
}

// Runs `fn` (runtime calls) with the thread's runtime device set to `device`, restored after.
template <typename Fn>
CUresult OnDevice(int device, Fn&& fn) {
  ThreadState& t = Thread();
  int saved = t.device;
  t.device = device;
  CUresult r = ViaRuntime(fn);
  t.device = saved;
  return r;
}

// Runs `fn` on the current context's device; CUDA_ERROR_INVALID_CONTEXT without one.
template <typename Fn>
CUresult InContext(const char* call, Fn&& fn) {
  auto d = CurrentDevice();
  if (!d.ok()) return FromStatus(d.status(), call);
  return OnDevice(*d, fn);
}

// Runs a core or generated call (`fn` returns its Status) with `device` as the calling
// thread's device while it runs (restored after); its Status converted for `call`.
template <typename Fn>
CUresult CallOnDevice(int device, const char* call, Fn&& fn) {
  ThreadState& t = Thread();
  const int saved = t.device;
  t.device = device;
  Status st = fn();
  t.device = saved;
  return Done(st, call);
}

// CallOnDevice on the current context's device; CUDA_ERROR_INVALID_CONTEXT without a context.
template <typename Fn>
CUresult CallInContext(const char* call, Fn&& fn) {
  auto d = CurrentDevice();
  if (!d.ok()) return FromStatus(d.status(), call);
  return CallOnDevice(*d, call, fn);
}

// Loads a code image (a fat binary, nvcc's wrapper of one, an ELF cubin or PTX) as a module
// of its own on the current context's device, as cuModuleLoadData: shipped through the
// server's content cache. For the runtime's private interface (export_cudart_interface.cc).
CUresult LoadModule(CUmodule* module, const void* image, const char* call);

// An invalid argument, logged once per call site's message.
CUresult Invalid(const char* call, const char* what);

}  // namespace remora::shim::driver
