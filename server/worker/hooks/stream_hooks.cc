#include "worker/hooks/stream_hooks.h"

#include "worker/calls/generated_call.h"
#include "worker/ipc/ipc_state.h"
#include "worker/session/executor.h"

namespace remora::worker {

Status StreamCreate(OpContext& x, CUstream* stream, unsigned int flags, int priority) {
  if (flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING)) return Error(Err::kInvalidValue, "invalid stream flags 0x{:x}", flags);
  RETURN_IF_ERROR(x.HandleRoom(HandleKind::kStream));
  Executor& ex = x.executor();
  ASSIGN_OR_RETURN(DStream s, ex.driver().StreamCreate(flags, priority));
  uint64_t h = ex.session().streams().Insert({s, x.gpu(), flags, priority});
  *stream = reinterpret_cast<CUstream>(h);
  return Status::Ok();
}

Status StreamDestroy(OpContext& x, CUstream stream) {
  const uint64_t h = x.handle_id();
  if (h == 0) return Error(Err::kInvalidValue, "the default streams cannot be destroyed");
  Executor& ex = x.executor();
  ex.session().streams().Erase(h);
  return ex.driver().StreamDestroy(stream);  // its GPU is current (the stream argument's)
}

Status EventCreate(OpContext& x, CUevent* event, unsigned int flags) {
  constexpr unsigned kKnown = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (flags & ~kKnown) return Error(Err::kInvalidValue, "invalid event flags 0x{:x}", flags);
  if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING))
    return Error(Err::kInvalidValue, "an interprocess event must disable timing");
  RETURN_IF_ERROR(x.HandleRoom(HandleKind::kEvent));
  Executor& ex = x.executor();
  ASSIGN_OR_RETURN(DEvent e, ex.driver().EventCreate(flags));
  uint64_t h = ex.session().events().Insert({e, x.gpu(), flags});
  *event = reinterpret_cast<CUevent>(h);
  return Status::Ok();
}

Status EventDestroy(OpContext& x, CUevent event) {
  Executor& ex = x.executor();
  ex.session().events().Erase(x.handle_id());
  ex.ipc().EventDestroyed(ex, event);  // an exported event's handle opens nothing more
  return ex.driver().EventDestroy(event);  // its GPU is current (the event argument's)
}

}  // namespace remora::worker
