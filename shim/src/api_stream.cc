// Streams and events: creation (a worker handle becomes the application's cudaStream_t /
// cudaEvent_t, recorded in the client's tables), destruction (asynchronous) and the
// properties the client answers itself. Records, waits, queries and synchronisations are
// generated entries (protocol/api/cudart.api, via the driver API).
#include <cuda_runtime_api.h>

#include "export.h"
#include "ipc_client.h"
#include "runtime.h"
#include "wire_args.h"

namespace remora::shim {
namespace {

cudaError_t StreamInfo(cudaStream_t s, unsigned* flags, int* priority, int* device, const char* call) {
  auto c = Runtime::Get().Session();
  if (!c.ok()) return Finish(c.status(), call);
  unsigned f;
  int p, d;
  Status st = Runtime::Get().StreamInfo(s, &f, &p, &d);
  if (!st.ok()) return Finish(st, call);
  if (flags) *flags = f;
  if (priority) *priority = p;
  if (device) *device = d;
  return cudaSuccess;
}

}  // namespace
}  // namespace remora::shim

using namespace remora;
using namespace remora::shim;

REMORA_API cudaError_t cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags, int priority) {
  if (pStream == nullptr) return Finish(Error(Err::kInvalidValue, "pStream is NULL"), "cudaStreamCreate");
  if (flags & ~static_cast<unsigned>(cudaStreamNonBlocking))
    return Finish(Error(Err::kInvalidValue, "invalid stream flags 0x{:x}", flags), "cudaStreamCreate");
  Runtime& rt = Runtime::Get();
  auto dev = rt.CurrentDevice();
  if (!dev.ok()) return Finish(dev.status(), "cudaStreamCreate");
  uint64_t h = 0;
  Status st = (*rt.Session())->Call(*dev, [&](wire::Request::Builder& r) {
    auto s = r.initStreamCreate();
    s.setFlags(flags);
    s.setPriority(priority);
  }, [&](wire::Reply::Reader& r) -> Status {
    h = r.getHandle();
    return Status::Ok();
  });
  if (!st.ok()) return Finish(st, "cudaStreamCreate");
  rt.AddStream(h, *dev, flags, priority);
  *pStream = reinterpret_cast<cudaStream_t>(h);
  return cudaSuccess;
}

REMORA_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  return cudaStreamCreateWithPriority(pStream, flags, 0);
}

REMORA_API cudaError_t cudaStreamCreate(cudaStream_t* pStream) { return cudaStreamCreateWithPriority(pStream, 0, 0); }

REMORA_API cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  Runtime& rt = Runtime::Get();
  auto c = rt.Session();
  if (!c.ok()) return Finish(c.status(), "cudaStreamDestroy");
  int device = 0;
  uint64_t h = U(stream);
  Status st = rt.CheckStream(stream, &device);
  if (st.ok() && h <= 2) st = Error(Err::kInvalidValue, "the default streams cannot be destroyed");
  if (!st.ok()) return Finish(st, "cudaStreamDestroy");
  rt.RemoveStream(h);
  st = (*c)->Post(device, [&](wire::Request::Builder& r) { r.initStreamDestroy().setHandle(h); });
  return Finish(st, "cudaStreamDestroy");
}

REMORA_API cudaError_t cudaStreamGetFlags(cudaStream_t s, unsigned int* flags) {
  if (flags == nullptr) return Finish(Error(Err::kInvalidValue, "flags is NULL"), "cudaStreamGetFlags");
  return StreamInfo(s, flags, nullptr, nullptr, "cudaStreamGetFlags");
}
REMORA_API cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t s, unsigned int* flags) { return cudaStreamGetFlags(s, flags); }
REMORA_API cudaError_t cudaStreamGetPriority(cudaStream_t s, int* priority) {
  if (priority == nullptr) return Finish(Error(Err::kInvalidValue, "priority is NULL"), "cudaStreamGetPriority");
  return StreamInfo(s, nullptr, priority, nullptr, "cudaStreamGetPriority");
}
REMORA_API cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t s, int* priority) { return cudaStreamGetPriority(s, priority); }
REMORA_API cudaError_t cudaStreamGetDevice(cudaStream_t s, int* device) {
  if (device == nullptr) return Finish(Error(Err::kInvalidValue, "device is NULL"), "cudaStreamGetDevice");
  return StreamInfo(s, nullptr, nullptr, device, "cudaStreamGetDevice");
}
REMORA_API cudaError_t cudaStreamGetDevice_ptsz(cudaStream_t s, int* device) { return cudaStreamGetDevice(s, device); }

REMORA_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (event == nullptr) return Finish(Error(Err::kInvalidValue, "event is NULL"), "cudaEventCreate");
  constexpr unsigned kKnown = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (flags & ~kKnown) return Finish(Error(Err::kInvalidValue, "invalid event flags 0x{:x}", flags), "cudaEventCreate");
  if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming))
    return Finish(Error(Err::kInvalidValue, "an interprocess event must disable timing"), "cudaEventCreate");
  Runtime& rt = Runtime::Get();
  auto dev = rt.CurrentDevice();
  if (!dev.ok()) return Finish(dev.status(), "cudaEventCreate");
  uint64_t h = 0;
  Status st = (*rt.Session())->Call(*dev, [&](wire::Request::Builder& r) { r.setEventCreate(flags); },
                                    [&](wire::Reply::Reader& r) -> Status {
                                      h = r.getHandle();
                                      return Status::Ok();
                                    });
  if (!st.ok()) return Finish(st, "cudaEventCreate");
  rt.AddEvent(h, *dev);
  *event = reinterpret_cast<cudaEvent_t>(h);
  return cudaSuccess;
}

REMORA_API cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }

REMORA_API cudaError_t cudaEventDestroy(cudaEvent_t event) {
  Runtime& rt = Runtime::Get();
  auto c = rt.Session();
  if (!c.ok()) return Finish(c.status(), "cudaEventDestroy");
  const int device = std::max(rt.EventDevice(U(event)), 0);  // its server's (several servers)
  if (!rt.RemoveEvent(U(event)))
    return Finish(Error(Err::kInvalidValue, "{} is not a live event of this process", static_cast<void*>(event)), "cudaEventDestroy");
  auto build = [&](wire::Request::Builder& r) { r.setEventDestroy(U(event)); };
  // A shared event's export is revoked by the time this returns (another process told to
  // open it next is refused); any other destruction is posted.
  Status st = ForgetIpcEvent(reinterpret_cast<CUevent>(event))
                  ? (*c)->Call(device, build, [](wire::Reply::Reader&) { return Status::Ok(); })
                  : (*c)->Post(device, build);
  return Finish(st, "cudaEventDestroy");
}
