// Streams and events: creation (a worker handle becomes the application's cudaStream_t /
// cudaEvent_t, recorded in the client's tables), destruction (asynchronous) and the
// properties the client answers itself. Records, waits, queries and synchronisations are
// generated entries (protocol/api/cudart.api, via the driver API).
#include <cuda_runtime_api.h>

#include "cuda_client.h"
#include "export.h"
#include "ipc_client.h"
#include "runtime.h"
#include "stream_core.h"
#include "streams.h"
#include "wire_args.h"

namespace remora::shim {

Status StreamProperties(cudaStream_t s, unsigned* flags, int* priority, int* device) {
  RETURN_IF_ERROR(Runtime::Get().Session().status());
  unsigned f;
  int p, d;
  RETURN_IF_ERROR(Runtime::Get().StreamInfo(s, &f, &p, &d));
  if (flags) *flags = f;
  if (priority) *priority = p;
  if (device) *device = d;
  return Status::Ok();
}

}  // namespace remora::shim

using namespace remora;
using namespace remora::shim;

REMORA_API cudaError_t cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags, int priority) {
  constexpr const char* kCall = "cudaStreamCreate";
  if (pStream == nullptr) return Finish(Error(Err::kInvalidValue, "pStream is NULL"), kCall);
  if (flags & ~static_cast<unsigned>(cudaStreamNonBlocking))
    return Finish(Error(Err::kInvalidValue, "invalid stream flags 0x{:x}", flags), kCall);
  CUstream s = nullptr;
  Status st = gen::cuda::cuStreamCreateWithPriority(CallCtx{false, kCall}, &s, flags, priority);
  if (!st.ok()) return Finish(st, kCall);
  *pStream = reinterpret_cast<cudaStream_t>(s);
  return cudaSuccess;
}

REMORA_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  return cudaStreamCreateWithPriority(pStream, flags, 0);
}

REMORA_API cudaError_t cudaStreamCreate(cudaStream_t* pStream) { return cudaStreamCreateWithPriority(pStream, 0, 0); }

REMORA_API cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  constexpr const char* kCall = "cudaStreamDestroy";
  if (U(stream) <= 2) {  // 0, cudaStreamLegacy, cudaStreamPerThread
    auto c = Runtime::Get().Session();
    return Finish(c.ok() ? Error(Err::kInvalidValue, "the default streams cannot be destroyed") : c.status(), kCall);
  }
  return Finish(gen::cuda::cuStreamDestroy_v2(CallCtx{false, kCall}, reinterpret_cast<CUstream>(stream)), kCall);
}

REMORA_API cudaError_t cudaStreamGetFlags(cudaStream_t s, unsigned int* flags) {
  if (flags == nullptr) return Finish(Error(Err::kInvalidValue, "flags is NULL"), "cudaStreamGetFlags");
  return Finish(StreamProperties(s, flags, nullptr, nullptr), "cudaStreamGetFlags");
}
REMORA_API cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t s, unsigned int* flags) { return cudaStreamGetFlags(s, flags); }
REMORA_API cudaError_t cudaStreamGetPriority(cudaStream_t s, int* priority) {
  if (priority == nullptr) return Finish(Error(Err::kInvalidValue, "priority is NULL"), "cudaStreamGetPriority");
  return Finish(StreamProperties(s, nullptr, priority, nullptr), "cudaStreamGetPriority");
}
REMORA_API cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t s, int* priority) { return cudaStreamGetPriority(s, priority); }
REMORA_API cudaError_t cudaStreamGetDevice(cudaStream_t s, int* device) {
  if (device == nullptr) return Finish(Error(Err::kInvalidValue, "device is NULL"), "cudaStreamGetDevice");
  return Finish(StreamProperties(s, nullptr, nullptr, device), "cudaStreamGetDevice");
}
REMORA_API cudaError_t cudaStreamGetDevice_ptsz(cudaStream_t s, int* device) { return cudaStreamGetDevice(s, device); }

REMORA_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  constexpr const char* kCall = "cudaEventCreate";
  if (event == nullptr) return Finish(Error(Err::kInvalidValue, "event is NULL"), kCall);
  CUevent e = nullptr;
  Status st = gen::cuda::cuEventCreate(CallCtx{false, kCall}, &e, flags);
  if (!st.ok()) return Finish(st, kCall);
  *event = reinterpret_cast<cudaEvent_t>(e);
  return cudaSuccess;
}

REMORA_API cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }

REMORA_API cudaError_t cudaEventDestroy(cudaEvent_t event) {
  return Finish(gen::cuda::cuEventDestroy_v2(CallCtx{false, "cudaEventDestroy"}, reinterpret_cast<CUevent>(event)),
                "cudaEventDestroy");
}

namespace remora::gen::cuda {

void StreamCreated(CUstream* phStream, unsigned int flags, int priority) {
  shim::Runtime& rt = shim::Runtime::Get();
  auto device = rt.CurrentDevice();  // the call's: no argument named another
  rt.AddStream(shim::U(*phStream), device.ok() ? *device : 0, flags, priority);
}

void StreamDestroyed(CUstream stream) { (void)shim::Runtime::Get().RemoveStream(shim::U(stream)); }

void EventCreated(CUevent* phEvent, unsigned int) {
  shim::Runtime& rt = shim::Runtime::Get();
  auto device = rt.CurrentDevice();
  rt.AddEvent(shim::U(*phEvent), device.ok() ? *device : 0);
}

void EventDestroyed(CUevent event) {
  (void)shim::Runtime::Get().RemoveEvent(shim::U(event));
  shim::ForgetIpcEvent(event);
}

bool EventShared(CUevent event) { return shim::IsIpcEvent(event); }

}  // namespace remora::gen::cuda
