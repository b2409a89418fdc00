#include "worker/hooks/device_hooks.h"

#include "worker/calls/generated_call.h"
#include "worker/ipc/ipc_state.h"
#include "worker/session/executor.h"

namespace remora::worker {

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
