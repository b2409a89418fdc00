// Streams, events and the synchronising calls.
#include "remora/base/log.h"
#include "worker/ops/handlers.h"
#include "worker/ipc/ipc_state.h"

namespace remora::worker {

Status Handlers::StreamCreate(Executor& ex, uint64_t tag, Req req) {
  auto a = req.getStreamCreate();
  auto gpu = ex.GpuOf(req.getDevice());
  if (!gpu.ok()) return ex.PostReply(tag, gpu.status());
  Status st = ex.resources().Room(Resource::kStreams, ex.session().streams().size() + ex.session().per_thread_streams().size());
  if (st.ok()) st = ex.SetDevice(*gpu);
  if (!st.ok()) return ex.PostReply(tag, st);
  auto s = ex.driver().StreamCreate(a.getFlags(), a.getPriority());
  if (!s.ok()) return ex.PostReply(tag, s.status());
  uint64_t h = ex.session().streams().Insert({*s, *gpu, a.getFlags(), a.getPriority()});
  return ex.PostReply(tag, Status::Ok(), [&](wire::Reply::Builder& r) { r.setHandle(h); });
}

Status Handlers::StreamDestroy(Executor& ex, uint64_t tag, Req req) {
  uint64_t h = req.getStreamDestroy().getHandle();
  auto s = ex.session().streams().Get(h);
  if (!s.ok()) return ReplyOrDefer(ex, tag, s.status());
  Executor::Stream stream = **s;
  ex.session().streams().Erase(h);
  Status st = ex.SetDevice(stream.gpu);
  // Like cuStreamDestroy, returns at once; work already queued still completes.
  if (st.ok()) st = ex.driver().StreamDestroy(stream.stream);
  return ReplyOrDefer(ex, tag, st);
}

Status Handlers::EventCreate(Executor& ex, uint64_t tag, Req req) {
  unsigned flags = req.getEventCreate();
  auto gpu = ex.GpuOf(req.getDevice());
  if (!gpu.ok()) return ex.PostReply(tag, gpu.status());
  Status st = ex.resources().Room(Resource::kEvents, ex.session().events().size());
  if (st.ok()) st = ex.SetDevice(*gpu);
  if (!st.ok()) return ex.PostReply(tag, st);
  auto e = ex.driver().EventCreate(flags);
  if (!e.ok()) return ex.PostReply(tag, e.status());
  uint64_t h = ex.session().events().Insert({*e, *gpu, flags});
  return ex.PostReply(tag, Status::Ok(), [&](wire::Reply::Builder& r) { r.setHandle(h); });
}

Status Handlers::EventDestroy(Executor& ex, uint64_t tag, Req req) {
  uint64_t h = req.getEventDestroy();
  auto e = ex.session().events().Get(h);
  if (!e.ok()) return ReplyOrDefer(ex, tag, e.status());
  Executor::Event ev = **e;
  ex.session().events().Erase(h);
  ex.ipc().EventDestroyed(ex, ev.event);  // an exported event's handle opens nothing more
  Status st = ex.SetDevice(ev.gpu);
  if (st.ok()) st = ex.driver().EventDestroy(ev.event);
  return ReplyOrDefer(ex, tag, st);
}

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
