// Streams and events. Creation answers with a worker handle that becomes the application's
// cudaStream_t / cudaEvent_t; records, waits and destruction are asynchronous; queries and
// synchronisations are answered when the GPU reaches that point.
#include <cuda_runtime_api.h>

#include "export.h"
#include "runtime.h"
#include "wire_args.h"

namespace remora::shim {
namespace {

constexpr auto Ok = [](wire::Reply::Reader&) { return Status::Ok(); };

cudaError_t StreamSync(cudaStream_t s, bool per_thread, const char* call) {
  Runtime& rt = Runtime::Get();
  auto c = rt.Session();
  if (!c.ok()) return Finish(c.status(), call);
  int device = 0;
  Status st = rt.CheckStream(s, &device);
  if (!st.ok()) return Finish(st, call);
  st = (*c)->Call(device, [&](wire::Request::Builder& r) { SetStream(r.initStreamSynchronize(), s, per_thread); }, Ok);
  return FinishSync(*c, st, call);
}

cudaError_t StreamQuery(cudaStream_t s, bool per_thread, const char* call) {
  Runtime& rt = Runtime::Get();
  auto c = rt.Session();
  if (!c.ok()) return Finish(c.status(), call);
  int device = 0;
  Status st = rt.CheckStream(s, &device);
  if (!st.ok()) return Finish(st, call);
  st = (*c)->Call(device, [&](wire::Request::Builder& r) { SetStream(r.initStreamQuery(), s, per_thread); }, Ok);
  if (st.code() == Err::kNotReady) return cudaErrorNotReady;
  return FinishSync(*c, st, call);
}

cudaError_t StreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags, bool per_thread, const char* call) {
  Runtime& rt = Runtime::Get();
  auto c = rt.Session();
  if (!c.ok()) return Finish(c.status(), call);
  int device = 0;
  Status st = rt.CheckStream(s, &device);
  if (st.ok()) st = rt.CheckEvent(e);
  if (!st.ok()) return Finish(st, call);
  st = (*c)->Post(device, [&](wire::Request::Builder& r) {
    auto w = r.initStreamWaitEvent();
    SetStream(w.initStream(), s, per_thread);
    w.setEvent(U(e));
    w.setFlags(flags);
  });
  return Finish(st, call);
}

cudaError_t EventRecord(cudaEvent_t e, cudaStream_t s, bool per_thread, const char* call) {
  Runtime& rt = Runtime::Get();
  auto c = rt.Session();
  if (!c.ok()) return Finish(c.status(), call);
  int device = 0;
  Status st = rt.CheckStream(s, &device);
  if (st.ok()) st = rt.CheckEvent(e);
  if (!st.ok()) return Finish(st, call);
  st = (*c)->Post(device, [&](wire::Request::Builder& r) {
    auto rec = r.initEventRecord();
    rec.setEvent(U(e));
    SetStream(rec.initStream(), s, per_thread);
  });
  return Finish(st, call);
}

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

REMORA_API cudaError_t cudaStreamSynchronize(cudaStream_t s) { return StreamSync(s, false, "cudaStreamSynchronize"); }
REMORA_API cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s) { return StreamSync(s, true, "cudaStreamSynchronize"); }
REMORA_API cudaError_t cudaStreamQuery(cudaStream_t s) { return StreamQuery(s, false, "cudaStreamQuery"); }
REMORA_API cudaError_t cudaStreamQuery_ptsz(cudaStream_t s) { return StreamQuery(s, true, "cudaStreamQuery"); }
REMORA_API cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
  return StreamWaitEvent(s, e, flags, false, "cudaStreamWaitEvent");
}
REMORA_API cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
  return StreamWaitEvent(s, e, flags, true, "cudaStreamWaitEvent");
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
  if (flags & cudaEventInterprocess)
    return Finish(Error(Err::kNotSupported, "interprocess events are not supported by Remora"), "cudaEventCreate");
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
  if (!rt.RemoveEvent(U(event)))
    return Finish(Error(Err::kInvalidValue, "{} is not a live event of this process", static_cast<void*>(event)), "cudaEventDestroy");
  Status st = (*c)->Post(0, [&](wire::Request::Builder& r) { r.setEventDestroy(U(event)); });
  return Finish(st, "cudaEventDestroy");
}

REMORA_API cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { return EventRecord(e, s, false, "cudaEventRecord"); }
REMORA_API cudaError_t cudaEventRecord_ptsz(cudaEvent_t e, cudaStream_t s) { return EventRecord(e, s, true, "cudaEventRecord"); }
REMORA_API cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned int flags) {
  if (flags & ~static_cast<unsigned>(cudaEventRecordExternal))
    return Finish(Error(Err::kInvalidValue, "invalid event record flags"), "cudaEventRecordWithFlags");
  return EventRecord(e, s, false, "cudaEventRecordWithFlags");
}
REMORA_API cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t e, cudaStream_t s, unsigned int flags) {
  if (flags & ~static_cast<unsigned>(cudaEventRecordExternal))
    return Finish(Error(Err::kInvalidValue, "invalid event record flags"), "cudaEventRecordWithFlags");
  return EventRecord(e, s, true, "cudaEventRecordWithFlags");
}

REMORA_API cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  Runtime& rt = Runtime::Get();
  auto c = rt.Session();
  if (!c.ok()) return Finish(c.status(), "cudaEventSynchronize");
  Status st = rt.CheckEvent(event);
  if (st.ok()) st = (*c)->Call(0, [&](wire::Request::Builder& r) { r.setEventSynchronize(U(event)); }, Ok);
  return FinishSync(*c, st, "cudaEventSynchronize");
}

REMORA_API cudaError_t cudaEventQuery(cudaEvent_t event) {
  Runtime& rt = Runtime::Get();
  auto c = rt.Session();
  if (!c.ok()) return Finish(c.status(), "cudaEventQuery");
  Status st = rt.CheckEvent(event);
  if (st.ok()) st = (*c)->Call(0, [&](wire::Request::Builder& r) { r.setEventQuery(U(event)); }, Ok);
  if (st.code() == Err::kNotReady) return cudaErrorNotReady;
  return FinishSync(*c, st, "cudaEventQuery");
}

REMORA_API cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr) return Finish(Error(Err::kInvalidValue, "ms is NULL"), "cudaEventElapsedTime");
  Runtime& rt = Runtime::Get();
  auto c = rt.Session();
  if (!c.ok()) return Finish(c.status(), "cudaEventElapsedTime");
  Status st = rt.CheckEvent(start);
  if (st.ok()) st = rt.CheckEvent(end);
  if (st.ok())
    st = (*c)->Call(0, [&](wire::Request::Builder& r) {
      auto p = r.initEventElapsedTime();
      p.setStart(U(start));
      p.setEnd(U(end));
    }, [&](wire::Reply::Reader& r) -> Status {
      *ms = r.getElapsedMs();
      return Status::Ok();
    });
  if (st.code() == Err::kNotReady) return Finish(st, "cudaEventElapsedTime");
  return Finish(st, "cudaEventElapsedTime");
}
