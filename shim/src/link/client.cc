#include "client.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "cuda_wire.h"
#include "remora/base/log.h"
#include "remora/base/util.h"
#include "watchdog.h"
#include "remora/protocol/message.h"

namespace remora::shim {

int& ThreadCaptureMode() {
  thread_local int mode = 0;  // cudaStreamCaptureModeGlobal
  return mode;
}

uint64_t ThreadId() {
  static std::atomic<uint64_t> next{1};
  thread_local uint64_t id = next.fetch_add(1);
  return id;
}

Client::Client(std::unique_ptr<Connection> conn, SessionInfo session)
    : conn_(std::move(conn)), session_(std::move(session)) {
  census_ = Census::Get();
  last_heard_ns_.store(MonotonicNanos());
}

Client::~Client() {
  watchdog_.reset();  // its threads use this client
  // Waiters of asynchronous calls nobody waits for are owned here (the others belong to
  // threads in Call, which cannot be running now).
  for (auto& [tag, w] : waiters_)
    if (w->detached) delete w;
  if (bounce_.base != nullptr) ::munmap(bounce_.base, bounce_.size);
}

namespace {
// A domain number from the wire; unknown ones (a newer server) read as cudart.
Domain DomainOf(uint16_t d) { return d < kNumDomains ? static_cast<Domain>(d) : Domain::kCudart; }

// Requests whose work is complete when the server answers them (when the caller waits for
// that answer): synchronous copies between host and device, allocations, frees (cudaFree
// waits for the device), device synchronisations, and the stream synchronisations and
// queries (the calls cuda.api marks `idle`), which queue nothing. Everything else may leave
// work queued.
bool CompleteWhenAnswered(wire::Request::Reader r) {
  switch (r.which()) {
    case wire::Request::API_CALL: {
      auto a = r.getApiCall();
      return a.getLibrary() == gen::cuda::kLibrary &&
             (a.getFunction() == gen::cuda::k_cuStreamSynchronize || a.getFunction() == gen::cuda::k_cuStreamQuery);
    }
    case wire::Request::DEVICE_SYNCHRONIZE:
    case wire::Request::MEM_ALLOC:
    case wire::Request::MEM_FREE:
      return true;
    case wire::Request::MEMCPY_DTO_H:
      return !r.getMemcpyDtoH().getAsync();
    case wire::Request::MEMCPY_HTO_D:
      return !r.getMemcpyHtoD().getAsync();
    default:
      return false;
  }
}

// Errors after which CUDA's context is unusable: every later call returns them.
bool IsSticky(Err e) {
  switch (static_cast<int>(e)) {
    case 700: case 702: case 714: case 715: case 716: case 717: case 718: case 719:
      return true;
    default:
      return false;
  }
}
}  // namespace

// Holds a place inside the link's gate for one call (Client::Quiesce): waits while a
// migration holds the gate closed, unless the caller is that migration.
class GateEntry {
 public:
  explicit GateEntry(Client& c, bool wait = true) : c_(c) {
    if (c.gate_owner_.load(std::memory_order_acquire) == std::this_thread::get_id()) return;
    std::unique_lock<std::mutex> lock(c.gate_mu_);
    if (c.gate_closed_ && !wait) return;
    c.gate_cv_.wait(lock, [&] { return !c.gate_closed_; });
    c.gate_active_++;
    inside_ = true;
  }
  ~GateEntry() {
    if (!inside_) return;
    std::lock_guard<std::mutex> lock(c_.gate_mu_);
    if (--c_.gate_active_ == 0) c_.gate_cv_.notify_all();
  }
  // False for an entry that did not wait and found the gate closed (or the migration itself).
  bool inside() const { return inside_; }
  GateEntry(const GateEntry&) = delete;
  GateEntry& operator=(const GateEntry&) = delete;

 private:
  Client& c_;
  bool inside_ = false;
};

SessionInfo Client::session() {
  GateEntry gate(*this);
  return session_;
}

Capabilities Client::capabilities() {
  GateEntry gate(*this);
  return conn_->capabilities();
}

Status Client::RegisterHostMemory(const void* p, size_t n) {
  GateEntry gate(*this);
  return conn_->RegisterHostMemory(p, n);
}

Status Client::UnregisterHostMemory(const void* p) {
  GateEntry gate(*this);
  return conn_->UnregisterHostMemory(p);
}

uint64_t Client::receive_progress() const {
  std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mu_));  // SwapConnection replaces conn_ under it
  return conn_->ReceiveProgress();
}

bool Client::Quiesce(int timeout_ms) {
  std::unique_lock<std::mutex> lock(gate_mu_);
  gate_closed_ = true;
  if (!gate_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return gate_active_ == 0; })) {
    gate_closed_ = false;
    gate_cv_.notify_all();
    return false;
  }
  gate_owner_.store(std::this_thread::get_id(), std::memory_order_release);
  return true;
}

void Client::Resume() {
  {
    std::lock_guard<std::mutex> lock(gate_mu_);
    gate_owner_.store(std::thread::id(), std::memory_order_release);
    gate_closed_ = false;
  }
  gate_cv_.notify_all();
}

bool Client::SwapConnection(std::unique_ptr<Connection>* conn, SessionInfo session) {
  std::lock_guard<std::mutex> send(send_mu_);
  std::lock_guard<std::mutex> lock(mu_);
  if (!waiters_.empty() || receiving_) return false;  // a reply still to come, or a frame being read
  std::swap(conn_, *conn);
  session_ = std::move(session);
  last_heard_ns_.store(MonotonicNanos(), std::memory_order_relaxed);
  return true;
}

Status Client::sticky() const {
  std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mu_));
  return sticky_;
}

Status Client::broken() const {
  std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mu_));
  return broken_;
}

Status Client::Send(int device, BuildFn build, SendKind kind, uint64_t tag, ConstBytes bulk, MutableBytes reply_bulk,
                    int fd, uint64_t* sent_seq) {
  ScratchMessage msg;
  auto req = msg.InitRoot<wire::Request>();
  req.setDevice(device);
  req.setThread(ThreadId());
  if (int mode = ThreadCaptureMode(); mode != 0) req.setCaptureMode(static_cast<uint8_t>(mode));
  build(req);
  const bool leaves_work = !(kind == SendKind::kCall && CompleteWhenAnswered(req.asReader()));
  if (census_) census_->Count(req.asReader(), kind == SendKind::kCall || kind == SendKind::kCallWithFd);
  OutFrame f;
  f.kind = FrameKind::kRequest;
  f.flags = kind == SendKind::kPost ? 0 : kFlagExpectsReply;
  f.tag = tag;
  f.body = msg.Flatten();
  Status st;
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    if (fd >= 0) st = conn_->PassFd(fd);
    if (st.ok()) st = conn_->Send(f, bulk, reply_bulk);
    // After the frame went out: a synchronisation that read the sequence before this was
    // sent itself went out earlier and does not cover it (StreamIdle, SyncedAt). Under the
    // send lock, so that this link's sequence steps are in wire order (`sent_seq`).
    uint64_t after = leaves_work ? work_seq_->fetch_add(1, std::memory_order_acq_rel) + 1 : work_sequence();
    if (sent_seq != nullptr) *sent_seq = after;
  }
  if (!st.ok()) MarkBroken(st);
  return st;
}

bool Client::StreamIdle(const StreamKey& key, bool wait) {
  DrainedStreams::Look look = drained_.Find(key, work_sequence());
  if (look.state == DrainedStreams::State::kAwaiting && wait) {
    AwaitReply(look.tag);
    look = drained_.Find(key, work_sequence());
  }
  if (look.state != DrainedStreams::State::kIdle) return false;
  return captures_active() == 0 && broken().ok() && sticky().ok();
}

Status Client::Flush() {
  GateEntry gate(*this);
  Status st;
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    st = conn_->Flush();
  }
  if (!st.ok()) MarkBroken(st);
  return st;
}

void Client::SetLinks(const DeviceRouter* router, std::atomic<uint64_t>* shared_sequence, std::vector<Client*> links) {
  router_ = router;
  work_seq_ = shared_sequence;
  links_ = std::move(links);
}

Status Client::Call(int device, BuildFn build, ReplyFn on_reply, ConstBytes bulk, MutableBytes reply_bulk) {
  return Route(&device)->CallHere(device, build, on_reply, bulk, reply_bulk);
}
Status Client::CallWithFd(int device, int fd, BuildFn build, ReplyFn on_reply) {
  return Route(&device)->CallWithFdHere(device, fd, build, on_reply);
}
Status Client::Post(int device, BuildFn build, ConstBytes bulk) { return Route(&device)->PostHere(device, build, bulk); }
Status Client::PostExpectingBulk(int device, BuildFn build, MutableBytes reply_bulk, const StreamKey* drains) {
  return Route(&device)->PostExpectingBulkHere(device, build, reply_bulk, drains);
}

uint32_t Client::captures_active() const {
  if (links_.empty()) return captures_.load(std::memory_order_acquire);
  uint32_t n = 0;
  for (const Client* l : links_) n += l->captures_.load(std::memory_order_acquire);
  return n;
}

Status Client::CallHere(int device, BuildFn build, ReplyFn on_reply, ConstBytes bulk, MutableBytes reply_bulk) {
  return CallAs(SendKind::kCall, device, -1, build, on_reply, bulk, reply_bulk);
}

Status Client::CallWithFdHere(int device, int fd, BuildFn build, ReplyFn on_reply) {
  return CallAs(SendKind::kCallWithFd, device, fd, build, on_reply, {}, {});
}

Status Client::CallAs(SendKind kind, int device, int fd, BuildFn build, ReplyFn on_reply, ConstBytes bulk,
                      MutableBytes reply_bulk) {
  GateEntry gate(*this);
  uint64_t tag = next_tag_.fetch_add(1);
  Waiter w;
  w.on_reply = &on_reply;
  w.reply_bulk = reply_bulk;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok()) return broken_;
    waiters_.emplace(tag, &w);
  }
  Status st = Send(device, build, kind, tag, bulk, reply_bulk, fd);
  if (!st.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    waiters_.erase(tag);
    return broken_.ok() ? st : broken_;
  }
  WaitFor(w);
  return w.status;
}

Status Client::PostHere(int device, BuildFn build, ConstBytes bulk) {
  GateEntry gate(*this);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok()) return broken_;
  }
  return Send(device, build, SendKind::kPost, next_tag_.fetch_add(1), bulk, {});
}

Status Client::PostExpectingBulkHere(int device, BuildFn build, MutableBytes reply_bulk, const StreamKey* drains) {
  GateEntry gate(*this);
  uint64_t tag = next_tag_.fetch_add(1);
  auto* w = new Waiter;
  w->reply_bulk = reply_bulk;
  w->detached = true;
  w->drains = drains != nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok()) {
      delete w;
      return broken_;
    }
    waiters_.emplace(tag, w);
  }
  // Noted before the send: the reply may be handled by another thread before Send returns.
  if (drains != nullptr) drained_.Pending(*drains, tag);
  uint64_t sent = 0;
  Status st = Send(device, build, SendKind::kPostWithReply, tag, {}, reply_bulk, -1, &sent);
  if (!st.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    // MarkBroken already completed and freed every waiter, this one included.
    return broken_.ok() ? st : broken_;
  }
  if (drains != nullptr) drained_.Sent(tag, sent);
  return Status::Ok();
}

void Client::AwaitLandingsInto(const void* p, size_t n) {
  std::vector<Client*> links = links_.empty() ? std::vector<Client*>{this} : links_;
  for (Client* c : links) {
    GateEntry gate(*c);
    std::unique_lock<std::mutex> lock(c->mu_);
    auto lo = reinterpret_cast<uintptr_t>(p), hi = lo + n;
    c->ReceiveWhile(lock, [&] {
      if (!c->broken_.ok()) return false;
      for (const auto& [tag, w] : c->waiters_) {
        auto b = reinterpret_cast<uintptr_t>(w->reply_bulk.data());
        if (w->detached && !w->done && b < hi && lo < b + w->reply_bulk.size()) return true;
      }
      return false;
    });
  }
}

void Client::AwaitReply(uint64_t tag) {
  GateEntry gate(*this);
  std::unique_lock<std::mutex> lock(mu_);
  ReceiveWhile(lock, [&] { return broken_.ok() && drained_.Awaiting(tag); });
}

Status Client::TakeOwnAsyncError() {
  std::lock_guard<std::mutex> lock(mu_);
  Status st = std::move(async_error_);
  async_error_ = Status();
  return st;
}

Status Client::TakeAsyncError() {
  Status st = TakeOwnAsyncError();
  for (Client* l : links_) {
    if (!st.ok()) break;
    if (l != this) st = l->TakeOwnAsyncError();
  }
  return st;
}

void Client::WaitFor(Waiter& w) {
  std::unique_lock<std::mutex> lock(mu_);
  ReceiveWhile(lock, [&] { return !w.done; });
}

void Client::ReceiveWhile(std::unique_lock<std::mutex>& lock, FunctionRef<bool()> waiting) {
  while (waiting()) {
    if (!receiving_) {
      receiving_ = true;
      lock.unlock();
      ReceiveOne(-1);
      lock.lock();
      receiving_ = false;
      cv_.notify_all();
    } else {
      cv_.wait(lock);
    }
  }
}

void Client::Pump(int timeout_ms) {
  GateEntry gate(*this, false);
  if (!gate.inside()) {  // a migration holds the link: its own calls receive
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(timeout_ms, 10)));
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (!broken_.ok()) return;
  if (receiving_) {
    cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms));
    return;
  }
  receiving_ = true;
  lock.unlock();
  ReceiveOne(timeout_ms);
  lock.lock();
  receiving_ = false;
  cv_.notify_all();
}

void Client::Watch(uint64_t deadline_ns) {
  if (deadline_ns == 0 || watchdog_) return;
  watchdog_ = std::make_unique<Watchdog>(*this, deadline_ns);
}

Status Client::SendHeartbeat() {
  Status st;
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    st = conn_->Send(HeartbeatFrame());
  }
  if (!st.ok()) MarkBroken(st);
  return st;
}

void Client::GiveUp(const Status& why) {
  MarkBroken(why);
  std::lock_guard<std::mutex> lock(mu_);  // SwapConnection replaces conn_ under it
  conn_->Abort();
}

void Client::PollIdle() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!broken_.ok() || receiving_) return;
  receiving_ = true;
  lock.unlock();
  for (int i = 0; i < 256; i++) {
    uint64_t before = last_heard_ns_.load(std::memory_order_relaxed);
    ReceiveOne(0);
    if (last_heard_ns_.load(std::memory_order_relaxed) == before) break;
  }
  lock.lock();
  receiving_ = false;
  cv_.notify_all();
}

void Client::ReceiveOne(int timeout_ms) {
  auto frame = conn_->Receive(timeout_ms);
  if (!frame.ok()) {
    if (frame.status().code() != Err::kTimeout) MarkBroken(frame.status());
    return;
  }
  last_heard_ns_.store(MonotonicNanos(), std::memory_order_relaxed);
  switch (frame->kind()) {
    case FrameKind::kHeartbeat:
      if (frame->header.bulk_bytes > 0) MarkBroken(Error(Err::kDevicesUnavailable, "protocol error: a heartbeat with data"));
      return;
    case FrameKind::kReply:
      HandleReply(*frame);
      return;
    case FrameKind::kNotice:
      HandleNotice(*frame);
      if (frame->header.bulk_bytes > 0) {
        Status st = DrainBulk(frame->header.bulk_bytes);
        if (!st.ok()) MarkBroken(st);
      }
      return;
    default:
      MarkBroken(Error(Err::kDevicesUnavailable, "protocol error: unexpected frame kind {} from the server", frame->header.kind));
  }
}

// Bulk nobody asked for is read and dropped, up to a bound. The size is the server's word: a
// larger announcement is a broken (or hostile) server, never an allocation of that size
// (found by fuzz target `reply`: 1 TiB announced, the application aborted in bad_alloc).
Status Client::DrainBulk(uint64_t bytes) {
  constexpr uint64_t kMaxDrainBytes = 1 << 20;
  if (bytes > kMaxDrainBytes)
    return Error(Err::kDevicesUnavailable, "protocol error: the server sent {} bytes of data nobody asked for", bytes);
  std::vector<std::byte> sink(bytes);
  return conn_->ReceiveBulk(sink);
}

void Client::HandleReply(const InFrame& f) {
  Waiter* w = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = waiters_.find(f.header.tag);
    if (it != waiters_.end()) {
      w = it->second;
      waiters_.erase(it);
    }
  }
  if (w == nullptr) {
    LOG_WARN("reply for unknown request {} ignored", f.header.tag);
    if (f.header.bulk_bytes > 0) {
      Status st = DrainBulk(f.header.bulk_bytes);
      if (!st.ok()) MarkBroken(st);
    }
    return;
  }
  Status own;
  Status decoded = GuardDecode("reply", [&]() -> Status {
    BodyReader reader(f.body);
    auto r = reader.Root<wire::Reply>();
    generation_.store(r.getDeviceGeneration(), std::memory_order_relaxed);
    captures_.store(r.getCapturesActive(), std::memory_order_release);
    if (r.getAsyncError() != 0)
      NoteAsyncError(Status(DomainOf(r.getAsyncErrorDomain()), r.getAsyncError(), r.getAsyncMessage().cStr()));
    if (r.getError() != 0) {
      own = Status(DomainOf(r.getErrorDomain()), r.getError(), r.getMessage().cStr());
    } else if (w->on_reply != nullptr) {
      own = (*w->on_reply)(r);
    }
    return Status::Ok();
  });
  if (!decoded.ok()) own = decoded;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (sticky_.ok() && IsSticky(own.code())) sticky_ = own;
    if (sticky_.ok() && IsSticky(async_error_.code())) sticky_ = async_error_;
  }
  if (f.header.bulk_bytes > 0) {
    Status st = f.header.bulk_bytes == w->reply_bulk.size()
                    ? conn_->ReceiveBulk(w->reply_bulk)
                    : DrainBulk(f.header.bulk_bytes);
    if (!st.ok()) {
      own = st;
      MarkBroken(st);
    } else if (f.header.bulk_bytes != w->reply_bulk.size()) {
      own = Error(Err::kUnknown, "server sent {} bytes where {} were expected", f.header.bulk_bytes, w->reply_bulk.size());
    }
  }
  // Before the waiter is done: a synchronisation in AwaitReply returns once this is noted.
  if (w->drains) drained_.Answered(f.header.tag, own.ok());
  std::lock_guard<std::mutex> lock(mu_);
  if (w->detached) {
    if (!own.ok() && async_error_.ok()) async_error_ = own;
    delete w;
    return;
  }
  w->status = own;
  w->done = true;
}

void Client::HandleNotice(const InFrame& f) {
  work_seq_->fetch_add(1, std::memory_order_acq_rel);  // something happened: synchronise for real
  Status st = GuardDecode("notice", [&]() -> Status {
    BodyReader reader(f.body);
    auto n = reader.Root<wire::Notice>();
    if (n.isDevicesChanged()) {
      generation_.store(n.getDevicesChanged(), std::memory_order_relaxed);
      LOG_INFO("the server changed this session's devices (generation {})", n.getDevicesChanged());
    } else if (n.isHostCallback()) {
      if (callback_sink_) callback_sink_(CallbackEvent::kReached, n.getHostCallback());
    } else if (n.isHostCallbackCancelled()) {
      if (callback_sink_) callback_sink_(CallbackEvent::kCancelled, n.getHostCallbackCancelled());
    } else if (n.isRepeatCallback()) {
      if (callback_sink_) callback_sink_(CallbackEvent::kRepeat, n.getRepeatCallback());
    } else if (n.isCallbackCaptured()) {
      if (callback_sink_) callback_sink_(CallbackEvent::kCaptured, n.getCallbackCaptured());
    } else if (n.isRunCallback()) {
      if (callback_sink_) callback_sink_(CallbackEvent::kRun, n.getRunCallback());
    } else if (n.isGraphHostNode()) {
      if (graph_node_sink_) graph_node_sink_(n.getGraphHostNode());
    } else if (n.isMigrate()) {
      std::string url = n.getMigrate().getUrl(), token = n.getMigrate().getToken();
      LOG_INFO("the administrator moves this session to {}", url);
      if (migration_sink_) migration_sink_(std::move(url), std::move(token));
      else LOG_WARN("this process cannot move its session (no migration here); it stays");
    } else if (n.isSessionEnding()) {
      std::string why = n.getSessionEnding();
      LOG_ERROR("the Remora server ended this session: {}", why);
      MarkBroken(Status(Err::kDevicesUnavailable, "the Remora server ended this session: " + why));
    }
    return Status::Ok();
  });
  if (!st.ok()) LOG_WARN("{}", st.message());
}

void Client::NoteAsyncError(const Status& st) {
  std::lock_guard<std::mutex> lock(mu_);
  if (async_error_.ok()) async_error_ = st;
}

void Client::MarkBroken(const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!broken_.ok()) return;
  broken_ = Status(Err::kDevicesUnavailable,
                   why.code() == Err::kDevicesUnavailable ? why.message() : "lost the Remora server: " + why.ToString());
  LOG_ERROR("{}", broken_.message());
  for (auto& [tag, w] : waiters_) {
    if (w->detached) {
      delete w;
      continue;
    }
    w->status = broken_;
    w->done = true;
  }
  waiters_.clear();
  cv_.notify_all();
}

}  // namespace remora::shim
