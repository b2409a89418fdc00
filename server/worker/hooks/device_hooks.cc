#include "worker/hooks/device_hooks.h"

#include "worker/calls/generated_call.h"
#include "worker/ipc/ipc_state.h"
#include "worker/session/executor.h"

namespace remora::worker {

Status MemAllocPitch(OpContext& x, CUdeviceptr* dptr, size_t* pitch, size_t w, size_t h, unsigned int elementSize) {
  if (elementSize != 4 && elementSize != 8 && elementSize != 16)
    return Error(Err::kInvalidValue, "ElementSizeBytes must be 4, 8 or 16, not {}", elementSize);
  *dptr = 0;
  *pitch = 0;
  if (w == 0 || h == 0) return Status::Ok();
  if (w > (1ull << 40) || h > (1ull << 32)) return Error(Err::kMemoryAllocation, "pitched allocation too large");
  Executor& ex = x.executor();
  const int gpu = x.gpu();
  // Charge a bound first (pitch is a multiple of at most 512), then settle to the real size.
  uint64_t bound;
  if (__builtin_mul_overflow(AlignUp(w, 512), h, &bound))
    return Error(Err::kMemoryAllocation, "pitched allocation of {} x {} does not fit in memory", w, h);
  RETURN_IF_ERROR(ex.Charge(gpu, bound));
  auto p = ex.driver().MemAllocPitch(w, h);
  if (!p.ok()) {
    ex.ReleaseCharge(gpu, bound);
    return p.status();
  }
  uint64_t actual;
  if (__builtin_mul_overflow(p->second, h, &actual)) actual = ~0ull;  // a driver's pitch past the bound: refused below
  if (actual < bound) {
    ex.ReleaseCharge(gpu, bound - actual);
  } else if (actual > bound) {
    Status more = ex.Charge(gpu, actual - bound);
    if (!more.ok()) {
      (void)ex.driver().MemFree(p->first);
      ex.ReleaseCharge(gpu, bound);
      return more;
    }
  }
  Allocation al;
  al.base = p->first;
  al.size = actual;
  al.device = gpu;
  al.reserved = actual;
  if (Status in = ex.session().allocations().Insert(al); !in.ok()) {  // never lose track of driver memory
    (void)ex.driver().MemFree(p->first);
    ex.ReleaseCharge(gpu, actual);
    return in;
  }
  *dptr = p->first;
  *pitch = p->second;
  return Status::Ok();
}

Status MemcpyPeer(OpContext& x, CUstream stream, CUdeviceptr dst, int dstDevice, CUdeviceptr src, int srcDevice,
                  size_t size) {
  Executor& ex = x.executor();
  ASSIGN_OR_RETURN(Allocation d, ex.session().CheckRange(dst, size == 0 ? 1 : size));
  ASSIGN_OR_RETURN(Allocation s, ex.session().CheckRange(src, size == 0 ? 1 : size));
  if (d.device != dstDevice || s.device != srcDevice)
    return Error(Err::kInvalidValue, "a pointer does not belong to the device named with it");
  if (size == 0) return Status::Ok();
  return ex.driver().MemcpyPeer(dst, dstDevice, src, srcDevice, size, stream);  // the stream's GPU is current
}

Status PoolCreate(OpContext& x, CUmemoryPool* pool, int device, size_t maxSize, unsigned int handleTypes) {
  Executor& ex = x.executor();
  uint64_t created = 0;
  ex.session().pools().ForEach([&](uint64_t, Executor::Pool& p) { created += p.created; });
  RETURN_IF_ERROR(ex.resources().Room(Resource::kPools, created));
  RETURN_IF_ERROR(x.ChooseGpu(device));
  ASSIGN_OR_RETURN(DPool p, ex.driver().MemPoolCreate(device, maxSize, handleTypes));
  *pool = reinterpret_cast<CUmemoryPool>(ex.session().pools().Insert({p, device, true}));
  return Status::Ok();
}

Status PoolDestroy(OpContext& x, CUmemoryPool pool) {
  Executor& ex = x.executor();
  const uint64_t id = x.handle_id();
  ASSIGN_OR_RETURN(Executor::Pool * p, ex.session().pools().Get(id));
  if (!p->created) return Error(Err::kInvalidValue, "a device's default pool cannot be destroyed");
  Status st = ex.driver().MemPoolDestroy(pool);
  ex.ipc().PoolDestroyed(ex, id, p->import_id);
  ex.session().pools().Erase(id);
  return st;
}

Status PeerAccess(OpContext& x, int device, int peer, unsigned int enable) {
  if (device == peer) return Error(Err::kInvalidDevice, "a device is not its own peer");
  RETURN_IF_ERROR(x.ChooseGpu(device));
  Driver& d = x.executor().driver();
  return enable != 0 ? d.EnablePeerAccess(peer) : d.DisablePeerAccess(peer);
}

}  // namespace remora::worker
