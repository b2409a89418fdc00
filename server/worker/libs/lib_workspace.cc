#include "worker/libs/lib_workspace.h"

#include "worker/calls/generated_call.h"

namespace remora::worker {

Status GiveWorkspace(OpContext& x, LibObject* object, uint64_t bytes, Domain domain, uint32_t nomem) {
  Executor& ex = x.executor();
  if (Status st = ex.Charge(object->gpu, bytes); !st.ok()) {
    x.DestroyObject(object);
    return Status(domain, nomem, "its workspace does not fit the quota: " + st.message());
  }
  auto p = ex.driver().MemAlloc(bytes);
  if (!p.ok()) {
    ex.ReleaseCharge(object->gpu, bytes);
    x.DestroyObject(object);
    return Status(domain, nomem, "its workspace: " + p.status().message());
  }
  object->workspace = *p;
  object->workspace_bytes = bytes;
  return Status::Ok();
}

}  // namespace remora::worker
