// cudaLaunchHostFunc and cudaStreamAddCallback.
#include <cuda_runtime_api.h>

#include "callbacks.h"
#include "export.h"
#include "runtime.h"

namespace remora::shim {
namespace {

cudaError_t HostFunc(cudaStream_t stream, std::function<void()> fn, bool per_thread, const char* call,
                     cudaHostFn_t raw = nullptr, void* raw_data = nullptr) {
  Runtime& rt = Runtime::Get();
  auto c = rt.Session();
  if (!c.ok()) return Finish(c.status(), call);
  int device = 0;
  Status st = rt.CheckStream(stream, &device);
  if (!st.ok()) return Finish(st, call);
  // A function queued on a detached device would never run (the worker refuses it too, for
  // the detaches this process has not heard of yet).
  auto dev = rt.Device(device);
  if (!dev.ok()) return Finish(dev.status(), call);
  if ((*dev)->lost) return Finish(Error(Err::kDevicesUnavailable, "device {}'s Remora server stopped answering", device), call);
  if ((*dev)->detached) return Finish(Error(Err::kDevicesUnavailable, "device {} was detached", device), call);
  uint64_t id = HostCallbacks::Get().Add(std::move(fn), raw, raw_data, (*c)->LinkFor(device));
  st = (*c)->Post(device, [&](wire::Request::Builder& r) {
    auto h = r.initHostFunc();
    auto s = h.initStream();
    s.setHandle(reinterpret_cast<uint64_t>(stream));
    s.setPerThread(per_thread);
    h.setId(id);
  });
  if (!st.ok()) HostCallbacks::Get().Cancel(id);
  return Finish(st, call);
}

}  // namespace

cudaError_t EnqueueHostWork(cudaStream_t stream, std::function<void()> fn, bool per_thread, const char* call) {
  return HostFunc(stream, std::move(fn), per_thread, call);
}

}  // namespace remora::shim

using namespace remora;
using namespace remora::shim;

REMORA_API cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  if (fn == nullptr) return Finish(Error(Err::kInvalidValue, "fn is NULL"), "cudaLaunchHostFunc");
  return HostFunc(stream, [fn, userData] { fn(userData); }, false, "cudaLaunchHostFunc", fn, userData);
}
REMORA_API cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  if (fn == nullptr) return Finish(Error(Err::kInvalidValue, "fn is NULL"), "cudaLaunchHostFunc");
  return HostFunc(stream, [fn, userData] { fn(userData); }, true, "cudaLaunchHostFunc", fn, userData);
}
REMORA_API cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback, void* userData,
                                             unsigned int flags) {
  if (callback == nullptr || flags != 0) return Finish(Error(Err::kInvalidValue, "bad callback or flags"), "cudaStreamAddCallback");
  return HostFunc(stream, [stream, callback, userData] { callback(stream, cudaSuccess, userData); }, false, "cudaStreamAddCallback");
}
REMORA_API cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t stream, cudaStreamCallback_t callback, void* userData,
                                                  unsigned int flags) {
  if (callback == nullptr || flags != 0) return Finish(Error(Err::kInvalidValue, "bad callback or flags"), "cudaStreamAddCallback");
  return HostFunc(stream, [stream, callback, userData] { callback(stream, cudaSuccess, userData); }, true, "cudaStreamAddCallback");
}


