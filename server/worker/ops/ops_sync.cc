// Streams, events and the synchronising calls.
#include "remora/base/log.h"
#include "worker/ops/handlers.h"
#include "worker/ipc/ipc_state.h"

namespace remora::worker {

namespace {

// Runs on the driver's callback thread when the stream reaches the host function: tells the
// executor, then blocks (and with it the stream) until the client has run the callback.
// Owns one reference to the callback state (the executor may drop its own meanwhile).
void HostFuncTrampoline(void* arg) {
  auto* ref = static_cast<std::shared_ptr<Executor::HostCallback>*>(arg);
  Executor::HostCallback& cb = **ref;
  cb.reached.store(true, std::memory_order_release);
  {
    std::unique_lock<std::mutex> lock(cb.mu);
    cb.cv.wait(lock, [&] { return cb.done; });
  }
  delete ref;
}

// Announces the callback to the client once the stream gets there.
class HostFuncOp final : public PendingOp {
 public:
  explicit HostFuncOp(std::shared_ptr<Executor::HostCallback> cb) : cb_(std::move(cb)) {}
  Result<bool> Poll(Executor& ex) override {
    if (!cb_->reached.load(std::memory_order_acquire)) return false;
    RETURN_IF_ERROR(ex.PostNotice([&](wire::Notice::Builder& n) { n.setHostCallback(cb_->id); }));
    return true;
  }

 private:
  std::shared_ptr<Executor::HostCallback> cb_;
};

// A host function that will never run: the client must not wait for it (its application
// would hang in the next synchronous copy); the refusal surfaces at the next synchronising call.
Status Refuse(Executor& ex, uint64_t tag, uint64_t id, const Status& why) {
  RETURN_IF_ERROR(ex.PostNotice([&](wire::Notice::Builder& n) { n.setHostCallbackCancelled(id); }));
  return ReplyOrDefer(ex, tag, why);
}

}  // namespace

Status Handlers::HostFunc(Executor& ex, uint64_t tag, Req req) {
  auto a = req.getHostFunc();
  // A duplicate id is a misbehaving client: the pending callback of that id stays.
  if (ex.session().host_callbacks().count(a.getId())) return ReplyOrDefer(ex, tag, Error(Err::kInvalidValue, "duplicate callback id"));
  Status room = ex.resources().Room(Resource::kCallbacks, ex.session().host_callbacks().size());
  if (!room.ok()) return ReplyOrDefer(ex, tag, room);
  // The stream's device may have been detached after the client queued this.
  auto s = ex.ResolveStream(a.getStream(), req.getThread(), req.getDevice());
  if (!s.ok()) return Refuse(ex, tag, a.getId(), s.status());
  auto capturing = ex.Capturing(*s);
  if (!capturing.ok()) return Refuse(ex, tag, a.getId(), capturing.status());
  if (*capturing) {
    // Captured: the host node calls the client's function at every launch of the graph.
    Status st = ex.SetDevice(s->gpu);
    if (st.ok()) st = ex.driver().LaunchHostFunc(s->stream, RepeatCallbackTrampoline, ex.session().graphs().Repeat(a.getId()));
    if (!st.ok()) return Refuse(ex, tag, a.getId(), st);
    return ReplyOrDefer(ex, tag, ex.PostNotice([&](wire::Notice::Builder& n) { n.setCallbackCaptured(a.getId()); }));
  }
  auto cb = std::make_shared<Executor::HostCallback>();
  cb->id = a.getId();
  Status st = ex.SetDevice(s->gpu);
  // The driver thread gets its own reference; the session's end releases every waiting one.
  auto* ref = new std::shared_ptr<Executor::HostCallback>(cb);
  if (st.ok()) st = ex.driver().LaunchHostFunc(s->stream, HostFuncTrampoline, ref);
  if (!st.ok()) {
    delete ref;
    return Refuse(ex, tag, a.getId(), st);
  }
  ex.session().host_callbacks()[cb->id] = cb;
  ex.AddPending(std::make_unique<HostFuncOp>(cb));
  return ReplyOrDefer(ex, tag, Status::Ok());
}

Status Handlers::CallbackDone(Executor& ex, uint64_t tag, Req req) {
  auto it = ex.session().host_callbacks().find(req.getCallbackDone());
  if (it == ex.session().host_callbacks().end()) {
    // A graph's host function: one more of its calls is done.
    auto& repeat = ex.session().graphs().repeat_callbacks();
    auto r = repeat.find(req.getCallbackDone());
    if (r == repeat.end()) return ReplyOrDefer(ex, tag, Error(Err::kInvalidValue, "unknown callback id"));
    {
      std::lock_guard<std::mutex> lock(r->second->mu);
      if (r->second->done < r->second->reached) r->second->done++;
    }
    r->second->cv.notify_all();
    return ReplyOrDefer(ex, tag, Status::Ok());
  }
  {
    std::lock_guard<std::mutex> lock(it->second->mu);
    it->second->done = true;
  }
  it->second->cv.notify_all();
  ex.session().host_callbacks().erase(it);
  return ReplyOrDefer(ex, tag, Status::Ok());
}

}  // namespace remora::worker
