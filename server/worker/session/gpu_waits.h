// Replies that wait for the GPU without blocking the executor: pending operations that answer
// once the work queued on streams, or an event, completes (the request handlers' and the
// generated calls' synchronising replies), and the memory a completed wait lets the stream-ordered
// pools give back (ReconcilePools). Executor thread only.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "worker/session/executor.h"

namespace remora::worker {

// A pending operation for a driver call that waits for the GPU in the driver (unloading a
// module, page-locking or freeing host memory): it first waits, by polling events recorded on
// the session's streams when it was made, for the work queued before it, so that the
// executor never waits in the driver while a stream may be held by a host function only the
// executor can let go (docs/ARCHITECTURE.md, "Host callbacks"); then, once no host function
// of the session is outstanding (work queued since may hold one: Executor::MayWaitForDevice),
// it runs Then().
class AfterQueuedWorkOp : public PendingOp {
 public:
  // Waits for the streams of GPU `gpu`, or of every GPU of the session (gpu < 0).
  AfterQueuedWorkOp(Executor& ex, int gpu);
  Result<bool> Poll(Executor& ex) final;
  void Abandon(Executor& ex) final;

 protected:
  // The call itself, its reply posted (errors other than the connection's are the reply's).
  virtual Status Then(Executor& ex) = 0;
  // The session ends before Then ran: give back what the operation owns.
  virtual void Dropped(Executor& ex) { (void)ex; }

 private:
  std::vector<std::pair<int, DEvent>> events_;
};

// Replies to `tag` once the work issued so far on `streams` completes.
Status ReplyWhenDone(Executor& ex, uint64_t tag, std::vector<Executor::Stream> streams);
// Replies to `tag` once `event` (of `gpu`) has completed.
Status ReplyWhenEvent(Executor& ex, uint64_t tag, int gpu, DEvent event);
// All streams of `gpu` the session knows (legacy, created, per-thread).
std::vector<Executor::Stream> StreamsOf(Executor& ex, int gpu);
// The flag of a request that wants no reply (asynchronous call).
inline bool ExpectsReply(const InFrame& f) { return (f.header.flags & kFlagExpectsReply) != 0; }
// Answers `tag` with `st`, or, for an asynchronous call (tag 0), keeps a failure for the
// next synchronising reply.
inline Status ReplyOrDefer(Executor& ex, uint64_t tag, const Status& st) {
  if (tag != 0) return ex.PostReply(tag, st);
  ex.DeferError(st);
  return Status::Ok();
}
// Gives back the charge of memory freed into `gpu`'s pools that they no longer keep.
void ReconcilePools(Executor& ex, int gpu);

}  // namespace remora::worker
