// cudaLaunchHostFunc and cudaStreamAddCallback, on the host functions of stream_core.h.
#include <cuda_runtime_api.h>

#include "callbacks.h"
#include "export.h"
#include "runtime.h"
#include "stream_core.h"

namespace remora::shim {

Status QueueHostFunction(cudaStream_t stream, std::function<void()> fn, bool per_thread, cudaHostFn_t raw,
                         void* raw_data) {
  Runtime& rt = Runtime::Get();
  ASSIGN_OR_RETURN(Client * c, rt.Session());
  int device = 0;
  RETURN_IF_ERROR(rt.CheckStream(stream, &device));
  // A function queued on a detached device would never run (the worker refuses it too, for
  // the detaches this process has not heard of yet).
  ASSIGN_OR_RETURN(auto dev, rt.Device(device));
  if (dev->lost) return Error(Err::kDevicesUnavailable, "device {}'s Remora server stopped answering", device);
  if (dev->detached) return Error(Err::kDevicesUnavailable, "device {} was detached", device);
  uint64_t id = HostCallbacks::Get().Add(std::move(fn), raw, raw_data, c->LinkFor(device));
  Status st = c->Post(device, [&](wire::Request::Builder& r) {
    auto h = r.initHostFunc();
    auto s = h.initStream();
    s.setHandle(reinterpret_cast<uint64_t>(stream));
    s.setPerThread(per_thread);
    h.setId(id);
  });
  if (!st.ok()) HostCallbacks::Get().Cancel(id);
  return st;
}

cudaError_t EnqueueHostWork(cudaStream_t stream, std::function<void()> fn, bool per_thread, const char* call) {
  return Finish(QueueHostFunction(stream, std::move(fn), per_thread), call);
}

}  // namespace remora::shim

using namespace remora;
using namespace remora::shim;

REMORA_API cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  if (fn == nullptr) return Finish(Error(Err::kInvalidValue, "fn is NULL"), "cudaLaunchHostFunc");
  return Finish(QueueHostFunction(stream, [fn, userData] { fn(userData); }, false, fn, userData), "cudaLaunchHostFunc");
}
REMORA_API cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  if (fn == nullptr) return Finish(Error(Err::kInvalidValue, "fn is NULL"), "cudaLaunchHostFunc");
  return Finish(QueueHostFunction(stream, [fn, userData] { fn(userData); }, true, fn, userData), "cudaLaunchHostFunc");
}
REMORA_API cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback, void* userData,
                                             unsigned int flags) {
  if (callback == nullptr || flags != 0) return Finish(Error(Err::kInvalidValue, "bad callback or flags"), "cudaStreamAddCallback");
  return Finish(QueueHostFunction(stream, [stream, callback, userData] { callback(stream, cudaSuccess, userData); }, false),
                "cudaStreamAddCallback");
}
REMORA_API cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t stream, cudaStreamCallback_t callback, void* userData,
                                                  unsigned int flags) {
  if (callback == nullptr || flags != 0) return Finish(Error(Err::kInvalidValue, "bad callback or flags"), "cudaStreamAddCallback");
  return Finish(QueueHostFunction(stream, [stream, callback, userData] { callback(stream, cudaSuccess, userData); }, true),
                "cudaStreamAddCallback");
}


