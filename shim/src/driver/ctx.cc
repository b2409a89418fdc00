// The driver API's contexts: primary contexts (retained and released by count, flags kept,
// reset with the device), created contexts (which own what was made while they were
// current), and the calling thread's context stack (driver/contexts.h).
#include "cuda_client.h"
#include "device_core.h"
#include "driver/contexts.h"
#include "driver/driver.h"
#include "driver/export_tables.h"
#include "export.h"
#include "memory_core.h"
#include "process.h"
#include "runtime.h"

using namespace remora;
using namespace remora::shim;
using namespace remora::shim::driver;

namespace {

Contexts& Ctxs() { return Process::Get().contexts(); }

// A device ordinal of this session: CUDA_ERROR_INVALID_DEVICE otherwise.
CUresult CheckDevice(CUdevice dev, const char* call) {
  auto d = Runtime::Get().Device(dev);
  if (!d.ok()) return FromStatus(d.status(), call);
  return CUDA_SUCCESS;
}

}  // namespace

REMORA_API CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (pctx == nullptr) return Invalid("cuDevicePrimaryCtxRetain", "pctx is NULL");
  if (CUresult r = CheckDevice(dev, "cuDevicePrimaryCtxRetain"); r != CUDA_SUCCESS) return r;
  Ctxs().Retain(dev);
  *pctx = reinterpret_cast<CUcontext>(Ctxs().Primary(dev));
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  if (CUresult r = CheckDevice(dev, "cuDevicePrimaryCtxRelease"); r != CUDA_SUCCESS) return r;
  auto left = Ctxs().Release(dev);
  return left.ok() ? CUDA_SUCCESS : FromStatus(left.status(), "cuDevicePrimaryCtxRelease");
}

REMORA_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  if (flags == nullptr || active == nullptr) return Invalid("cuDevicePrimaryCtxGetState", "NULL argument");
  if (CUresult r = CheckDevice(dev, "cuDevicePrimaryCtxGetState"); r != CUDA_SUCCESS) return r;
  *flags = Ctxs().PrimaryFlags(dev);
  *active = Ctxs().Active(dev) ? 1 : 0;
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  if (CUresult r = CheckDevice(dev, "cuDevicePrimaryCtxSetFlags"); r != CUDA_SUCCESS) return r;
  constexpr unsigned kKnown = CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST | CU_CTX_LMEM_RESIZE_TO_MAX | CU_CTX_COREDUMP_ENABLE |
                              CU_CTX_USER_COREDUMP_ENABLE | CU_CTX_SYNC_MEMOPS;
  if (flags & ~kKnown) return Invalid("cuDevicePrimaryCtxSetFlags", "unknown flags");
  Ctxs().SetPrimaryFlags(dev, flags);
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  if (CUresult r = CheckDevice(dev, "cuDevicePrimaryCtxReset"); r != CUDA_SUCCESS) return r;
  exports::ContextStorageEnded(Ctxs().Primary(dev));  // the runtime's state of it ends with it
  return CallOnDevice(dev, "cuDevicePrimaryCtxReset", [] { return ResetDevice(); });
}

REMORA_API CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags, CUdevice dev) {
  if (pctx == nullptr) return Invalid("cuCtxCreate", "pctx is NULL");
  if (params != nullptr && (params->execAffinityParams != nullptr || params->cigParams != nullptr))
    return FromStatus(Status(Domain::kCuda, CUDA_ERROR_NOT_SUPPORTED,
                             "execution affinity and CIG contexts are not supported by Remora"), "cuCtxCreate");
  if (CUresult r = CheckDevice(dev, "cuCtxCreate"); r != CUDA_SUCCESS) return r;
  Context* c = Ctxs().Create(dev, flags);
  Push(c);  // a created context is current for the calling thread
  *pctx = reinterpret_cast<CUcontext>(c);
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuCtxDestroy_v2(CUcontext ctx) {
  auto c = Ctxs().Check(ctx);
  if (!c.ok()) return FromStatus(c.status(), "cuCtxDestroy");
  if ((*c)->primary) return FromStatus(Status(Domain::kCuda, CUDA_ERROR_INVALID_CONTEXT, "a primary context cannot be destroyed"),
                                       "cuCtxDestroy");
  exports::ContextStorageEnded(*c);
  // What it made goes with it, newest kind first, on its device.
  Owned owned = Ctxs().TakeOwned(*c);
  (void)CallOnDevice((*c)->device, "cuCtxDestroy", [&] {
    for (uint64_t m : owned.modules) (void)cuModuleUnload(reinterpret_cast<CUmodule>(m));
    for (uint64_t s : owned.streams) (void)gen::cuda::cuStreamDestroy_v2(CallCtx{false, "cuCtxDestroy"}, reinterpret_cast<CUstream>(s));
    for (uint64_t e : owned.events) (void)gen::cuda::cuEventDestroy_v2(CallCtx{false, "cuCtxDestroy"}, reinterpret_cast<CUevent>(e));
    for (uint64_t a : owned.allocations) (void)FreeDevice(reinterpret_cast<void*>(a));
    return Status::Ok();
  });
  Status st = Ctxs().Destroy(*c);
  // It stops being current wherever it is this thread's top.
  ThreadState& t = Thread();
  for (auto& entry : t.ctx_stack)
    if (entry == *c) entry = nullptr;
  std::erase(t.ctx_stack, nullptr);
  return FromStatus(st, "cuCtxDestroy");
}

REMORA_API CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  auto c = Ctxs().Check(ctx);
  if (!c.ok()) return FromStatus(c.status(), "cuCtxPushCurrent");
  Push(*c);
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  Context* c = Pop();
  if (c == nullptr) return FromStatus(Status(Domain::kCuda, CUDA_ERROR_INVALID_CONTEXT, "the context stack is empty"), "cuCtxPopCurrent");
  if (pctx != nullptr) *pctx = reinterpret_cast<CUcontext>(c);
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuCtxSetCurrent(CUcontext ctx) {
  if (ctx == nullptr) {
    SetCurrent(nullptr);
    return CUDA_SUCCESS;
  }
  auto c = Ctxs().Check(ctx);
  if (!c.ok()) return FromStatus(c.status(), "cuCtxSetCurrent");
  SetCurrent(*c);
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuCtxGetCurrent(CUcontext* pctx) {
  if (pctx == nullptr) return Invalid("cuCtxGetCurrent", "pctx is NULL");
  *pctx = reinterpret_cast<CUcontext>(Current());
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuCtxGetDevice(CUdevice* device) {
  if (device == nullptr) return Invalid("cuCtxGetDevice", "device is NULL");
  auto d = CurrentDevice();
  if (!d.ok()) return FromStatus(d.status(), "cuCtxGetDevice");
  *device = *d;
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  if (device == nullptr) return Invalid("cuCtxGetDevice", "device is NULL");
  if (ctx == nullptr) return cuCtxGetDevice(device);
  auto c = Ctxs().Check(ctx);
  if (!c.ok()) return FromStatus(c.status(), "cuCtxGetDevice");
  *device = (*c)->device;
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuCtxGetFlags(unsigned int* flags) {
  if (flags == nullptr) return Invalid("cuCtxGetFlags", "flags is NULL");
  Context* c = Current();
  if (c == nullptr) return FromStatus(Status(Domain::kCuda, CUDA_ERROR_INVALID_CONTEXT, "no current context"), "cuCtxGetFlags");
  *flags = c->flags.load();
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuCtxSetFlags(unsigned int flags) {
  Context* c = Current();
  if (c == nullptr) return FromStatus(Status(Domain::kCuda, CUDA_ERROR_INVALID_CONTEXT, "no current context"), "cuCtxSetFlags");
  c->flags.store(flags);
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuCtxGetId(CUcontext ctx, unsigned long long* id) {
  if (id == nullptr) return Invalid("cuCtxGetId", "ctxId is NULL");
  Context* c = nullptr;
  if (ctx == nullptr) {
    c = Current();
  } else {
    auto checked = Ctxs().Check(ctx);
    if (!checked.ok()) return FromStatus(checked.status(), "cuCtxGetId");
    c = *checked;
  }
  if (c == nullptr) return FromStatus(Status(Domain::kCuda, CUDA_ERROR_INVALID_CONTEXT, "no current context"), "cuCtxGetId");
  *id = c->id;
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  if (version == nullptr) return Invalid("cuCtxGetApiVersion", "version is NULL");
  if (ctx != nullptr) {
    auto c = Ctxs().Check(ctx);
    if (!c.ok()) return FromStatus(c.status(), "cuCtxGetApiVersion");
  }
  *version = 3020;  // the context API version every context of CUDA 12 and 13 reports
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuCtxSynchronize() {
  auto d = CurrentDevice();
  if (!d.ok()) return FromStatus(d.status(), "cuCtxSynchronize");
  return CallOnDevice(*d, "cuCtxSynchronize", [] { return SynchronizeDevice(); });
}

REMORA_API CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  if (ctx == nullptr) return cuCtxSynchronize();
  auto c = Ctxs().Check(ctx);
  if (!c.ok()) return FromStatus(c.status(), "cuCtxSynchronize");
  return CallOnDevice((*c)->device, "cuCtxSynchronize", [] { return SynchronizeDevice(); });
}

REMORA_API CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
  auto p = Ctxs().Check(peer);
  if (!p.ok()) return FromStatus(p.status(), "cuCtxEnablePeerAccess");
  auto d = CurrentDevice();
  if (!d.ok()) return FromStatus(d.status(), "cuCtxEnablePeerAccess");
  if (flags != 0) return Invalid("cuCtxEnablePeerAccess", "flags must be 0");
  int peer_device = (*p)->device;
  return CallOnDevice(*d, "cuCtxEnablePeerAccess", [&] { return SetPeerAccess(peer_device, true, "cuCtxEnablePeerAccess"); });
}

REMORA_API CUresult cuCtxDisablePeerAccess(CUcontext peer) {
  auto p = Ctxs().Check(peer);
  if (!p.ok()) return FromStatus(p.status(), "cuCtxDisablePeerAccess");
  auto d = CurrentDevice();
  if (!d.ok()) return FromStatus(d.status(), "cuCtxDisablePeerAccess");
  int peer_device = (*p)->device;
  return CallOnDevice(*d, "cuCtxDisablePeerAccess",
                      [&] { return SetPeerAccess(peer_device, false, "cuCtxDisablePeerAccess"); });
}
