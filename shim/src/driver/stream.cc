// The driver API's streams and events: the runtime's (a CUstream is the cudaStream_t, a
// CUevent the cudaEvent_t), created on the current context's device and owned by it when it
// is a created context. Capture queries and host callbacks go down to the stream core
// (stream_core.h) that the runtime's entry points share; nothing here calls the runtime.
#include <cuda_runtime_api.h>

#include "cuda_client.h"
#include "driver/contexts.h"
#include "driver/driver.h"
#include "export.h"
#include "process.h"
#include "runtime.h"
#include "stream_core.h"

using namespace remora;
using namespace remora::shim;
using namespace remora::shim::driver;

namespace {

Contexts& Ctxs() { return Process::Get().contexts(); }
uint64_t H(const void* p) { return reinterpret_cast<uint64_t>(p); }

CUresult CreateStream(CUstream* ph, unsigned flags, int priority, const char* call) {
  if (ph == nullptr) return Invalid(call, "phStream is NULL");
  CUresult r = CallInContext(call, [&] { return gen::cuda::cuStreamCreateWithPriority(CallCtx{false, call}, ph, flags, priority); });
  if (r != CUDA_SUCCESS) return r;
  Ctxs().Own(H(*ph), &Owned::streams);
  return CUDA_SUCCESS;
}

// The context a stream belongs to: the created context that made it, else its device's
// primary context (the default streams: the current context's).
Result<Context*> StreamContext(CUstream s) {
  if (H(s) <= 2) {  // 0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD
    Context* c = Current();
    if (c == nullptr) return Status(Domain::kCuda, CUDA_ERROR_INVALID_CONTEXT, "no context is current on this thread");
    return c;
  }
  if (Context* owner = Ctxs().OwnerOf(H(s), &Owned::streams)) return owner;
  unsigned flags;
  int priority, device;
  RETURN_IF_ERROR(Runtime::Get().StreamInfo(reinterpret_cast<cudaStream_t>(s), &flags, &priority, &device));
  return Ctxs().Primary(device);
}

cudaStream_t AsRuntime(CUstream s) { return reinterpret_cast<cudaStream_t>(s); }

// Host functions (stream_core.h): a callback gets the stream and CUDA_SUCCESS, as CUDA calls it
// once the work before it completed.
CUresult AddCallback(CUstream s, CUstreamCallback cb, void* user, unsigned int flags, bool per_thread) {
  if (cb == nullptr || flags != 0) return Invalid("cuStreamAddCallback", "bad callback or flags");
  return Done(QueueHostFunction(AsRuntime(s), [s, cb, user] { cb(s, CUDA_SUCCESS, user); }, per_thread),
              "cuStreamAddCallback");
}

CUresult LaunchHostFunc(CUstream s, CUhostFn fn, void* user, bool per_thread) {
  if (fn == nullptr) return Invalid("cuLaunchHostFunc", "fn is NULL");
  return Done(QueueHostFunction(AsRuntime(s), [fn, user] { fn(user); }, per_thread, fn, user), "cuLaunchHostFunc");
}

}  // namespace

REMORA_API CUresult cuStreamCreate(CUstream* ph, unsigned int flags) {
  return CreateStream(ph, flags, 0, "cuStreamCreate");
}

REMORA_API CUresult cuStreamCreateWithPriority(CUstream* ph, unsigned int flags, int priority) {
  return CreateStream(ph, flags, priority, "cuStreamCreateWithPriority");
}

REMORA_API CUresult cuStreamDestroy_v2(CUstream s) {
  if (H(s) <= 2) return Invalid("cuStreamDestroy", "the default streams cannot be destroyed");
  CUresult r = Done(gen::cuda::cuStreamDestroy_v2(CallCtx{false, "cuStreamDestroy"}, s), "cuStreamDestroy");
  if (r == CUDA_SUCCESS) Ctxs().Disown(H(s), &Owned::streams);
  return r;
}
REMORA_API CUresult cuStreamDestroy(CUstream s) { return cuStreamDestroy_v2(s); }

REMORA_API CUresult cuStreamGetFlags(CUstream s, unsigned int* flags) {
  if (flags == nullptr) return Invalid("cuStreamGetFlags", "flags is NULL");
  return Done(StreamProperties(AsRuntime(s), flags, nullptr, nullptr), "cuStreamGetFlags");
}
REMORA_API CUresult cuStreamGetFlags_ptsz(CUstream s, unsigned int* flags) { return cuStreamGetFlags(s, flags); }

REMORA_API CUresult cuStreamGetPriority(CUstream s, int* priority) {
  if (priority == nullptr) return Invalid("cuStreamGetPriority", "priority is NULL");
  return Done(StreamProperties(AsRuntime(s), nullptr, priority, nullptr), "cuStreamGetPriority");
}
REMORA_API CUresult cuStreamGetPriority_ptsz(CUstream s, int* priority) { return cuStreamGetPriority(s, priority); }

REMORA_API CUresult cuStreamGetDevice(CUstream s, CUdevice* device) {
  if (device == nullptr) return Invalid("cuStreamGetDevice", "device is NULL");
  int d = 0;
  CUresult r = Done(StreamProperties(AsRuntime(s), nullptr, nullptr, &d), "cuStreamGetDevice");
  if (r == CUDA_SUCCESS) *device = d;
  return r;
}
REMORA_API CUresult cuStreamGetDevice_ptsz(CUstream s, CUdevice* device) { return cuStreamGetDevice(s, device); }

REMORA_API CUresult cuStreamGetCtx(CUstream s, CUcontext* pctx) {
  if (pctx == nullptr) return Invalid("cuStreamGetCtx", "pctx is NULL");
  auto c = StreamContext(s);
  if (!c.ok()) return FromStatus(c.status(), "cuStreamGetCtx");
  *pctx = reinterpret_cast<CUcontext>(*c);
  return CUDA_SUCCESS;
}
REMORA_API CUresult cuStreamGetCtx_ptsz(CUstream s, CUcontext* pctx) { return cuStreamGetCtx(s, pctx); }

REMORA_API CUresult cuStreamGetCtx_v2(CUstream s, CUcontext* pctx, CUgreenCtx* pgreen) {
  if (pctx == nullptr || pgreen == nullptr) return Invalid("cuStreamGetCtx_v2", "NULL argument");
  *pgreen = nullptr;  // Remora makes no green contexts
  return cuStreamGetCtx(s, pctx);
}
REMORA_API CUresult cuStreamGetCtx_v2_ptsz(CUstream s, CUcontext* pctx, CUgreenCtx* pgreen) {
  return cuStreamGetCtx_v2(s, pctx, pgreen);
}

REMORA_API CUresult cuStreamAddCallback(CUstream s, CUstreamCallback cb, void* user, unsigned int flags) {
  return AddCallback(s, cb, user, flags, false);
}
REMORA_API CUresult cuStreamAddCallback_ptsz(CUstream s, CUstreamCallback cb, void* user, unsigned int flags) {
  return AddCallback(s, cb, user, flags, true);
}

REMORA_API CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void* user) { return LaunchHostFunc(s, fn, user, false); }
REMORA_API CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void* user) { return LaunchHostFunc(s, fn, user, true); }

// ---- capture queries (stream_core.h) ---------------------------------------------------------

REMORA_API CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* status) {
  return Done(StreamCaptureStatus(AsRuntime(s), false, "cuStreamIsCapturing", status), "cuStreamIsCapturing");
}
REMORA_API CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus* status) {
  return Done(StreamCaptureStatus(AsRuntime(s), true, "cuStreamIsCapturing", status), "cuStreamIsCapturing");
}

REMORA_API CUresult cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                                              const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* count) {
  return Done(StreamCaptureInfo(AsRuntime(s), false, "cuStreamGetCaptureInfo", status, id, graph, deps, edges, count),
              "cuStreamGetCaptureInfo");
}
REMORA_API CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id,
                                                   CUgraph* graph, const CUgraphNode** deps,
                                                   const CUgraphEdgeData** edges, size_t* count) {
  return Done(StreamCaptureInfo(AsRuntime(s), true, "cuStreamGetCaptureInfo", status, id, graph, deps, edges, count),
              "cuStreamGetCaptureInfo");
}
// _v2 has no edge data: edges are then all plain dependencies (the worker checks).
REMORA_API CUresult cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                                              const CUgraphNode** deps, size_t* count) {
  return cuStreamGetCaptureInfo_v3(s, status, id, graph, deps, nullptr, count);
}
REMORA_API CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id,
                                                   CUgraph* graph, const CUgraphNode** deps, size_t* count) {
  return cuStreamGetCaptureInfo_v3_ptsz(s, status, id, graph, deps, nullptr, count);
}

REMORA_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  int m = mode == nullptr ? 0 : static_cast<int>(*mode);
  Status st = ExchangeCaptureMode(mode == nullptr ? nullptr : &m);
  if (st.ok()) *mode = static_cast<CUstreamCaptureMode>(m);
  return Done(st, "cuThreadExchangeStreamCaptureMode");
}

// ---- events ---------------------------------------------------------------------------------

REMORA_API CUresult cuEventCreate(CUevent* ph, unsigned int flags) {
  if (ph == nullptr) return Invalid("cuEventCreate", "phEvent is NULL");
  CUresult r = CallInContext("cuEventCreate", [&] { return gen::cuda::cuEventCreate(CallCtx{false, "cuEventCreate"}, ph, flags); });
  if (r != CUDA_SUCCESS) return r;
  Ctxs().Own(H(*ph), &Owned::events);
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuEventDestroy_v2(CUevent e) {
  CUresult r = Done(gen::cuda::cuEventDestroy_v2(CallCtx{false, "cuEventDestroy"}, e), "cuEventDestroy");
  if (r == CUDA_SUCCESS) Ctxs().Disown(H(e), &Owned::events);
  return r;
}
REMORA_API CUresult cuEventDestroy(CUevent e) { return cuEventDestroy_v2(e); }
