#include "worker/executor.h"

#include <fmt/ranges.h>
#include <sys/mman.h>

#include <cstring>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "remora/protocol/message.h"
#include "worker/handlers.h"

namespace remora::worker {

namespace {
constexpr size_t kBounceBytes = 64 << 10;
constexpr uint64_t kControlPollNs = 1'000'000;
constexpr uint64_t kOverheadPollNs = 2'000'000'000;  // re-measure context overhead (NVML)
constexpr uint64_t kMaxSpillBytes = 512ull << 20;  // read-ahead budget for backlogged bulk
constexpr uint64_t kReplayChunkBytes = 1 << 20;
}  // namespace

Executor::Executor(Connection& conn, Driver& driver, StagingAllocator& staging, SessionConfig config,
                   ControlSource* control)
    : conn_(conn), driver_(driver), config_(std::move(config)), control_(control), staging_(staging) {}

Result<const DeviceDescription*> Executor::Description(int gpu) {
  auto it = descriptions_.find(gpu);
  if (it == descriptions_.end()) {
    ASSIGN_OR_RETURN(DeviceDescription d, driver_.Describe(gpu));
    it = descriptions_.emplace(gpu, std::move(d)).first;
  }
  return &it->second;
}

Executor::~Executor() { ReleaseEverything(); }

Status Executor::SetDevice(int gpu) {
  if (gpu == current_gpu_) return Status::Ok();
  RETURN_IF_ERROR(driver_.SetDevice(gpu));
  current_gpu_ = gpu;
  if (measured_gpus_.insert(gpu).second) MeasureOverhead(gpu);
  return Status::Ok();
}

void Executor::MeasureOverhead(int gpu) {
  if (config_.ledger == nullptr) return;
  auto used = driver_.ProcessMemory(gpu);
  if (!used.ok()) return;  // not measurable here: reported as 0
  uint64_t charged = config_.ledger->SessionUsed(config_.ledger_slot, static_cast<uint32_t>(gpu));
  config_.ledger->SetContextOverhead(config_.ledger_slot, static_cast<uint32_t>(gpu), *used > charged ? *used - charged : 0);
}

Result<int> Executor::GpuOf(int ordinal) const {
  if (ordinal < 0 || static_cast<size_t>(ordinal) >= config_.gpus.size())
    return Error(Err::kInvalidDevice, "device {} does not exist (this session has {})", ordinal, config_.gpus.size());
  int gpu = config_.gpus[static_cast<size_t>(ordinal)];
  if (gpu < 0)
    return Error(Err::kDevicesUnavailable, "device {} was detached from tenant '{}' by the administrator", ordinal, config_.tenant);
  return gpu;
}

Result<Executor::Stream> Executor::ResolveStream(wire::StreamRef::Reader ref, uint64_t thread, int ordinal) {
  uint64_t h = ref.getHandle();
  bool per_thread = h == 2 || (h == 0 && ref.getPerThread());
  if (h == 0 || h == 1 || h == 2) {
    ASSIGN_OR_RETURN(int gpu, GpuOf(ordinal));
    if (!per_thread) return Stream{nullptr, gpu, 0};
    auto key = std::make_pair(thread, gpu);
    auto it = per_thread_streams_.find(key);
    if (it != per_thread_streams_.end()) return Stream{it->second, gpu, 0};
    RETURN_IF_ERROR(SetDevice(gpu));
    // A per-thread default stream synchronises with the legacy stream, like CUDA's.
    ASSIGN_OR_RETURN(DStream s, driver_.StreamCreate(0, 0));
    per_thread_streams_.emplace(key, s);
    return Stream{s, gpu, 0};
  }
  ASSIGN_OR_RETURN(Stream * s, streams_.Get(h));
  if (config_.gpus.empty() || std::find(config_.gpus.begin(), config_.gpus.end(), s->gpu) == config_.gpus.end())
    return Error(Err::kDevicesUnavailable, "the stream's GPU was detached");
  return *s;
}

Result<std::byte*> Executor::RegionRange(uint64_t region, uint64_t offset, uint64_t n) {
  auto it = host_regions_.find(region);
  if (it == host_regions_.end()) return Error(Err::kInvalidValue, "host region {} is not registered by this session", region);
  if (offset > it->second.size || n > it->second.size - offset)
    return Error(Err::kInvalidValue, "{} bytes at offset {} run past the {}-byte host region", n, offset, it->second.size);
  return it->second.base + offset;
}

void Executor::DeferError(const Status& st) {
  if (!st.ok() && deferred_.ok()) {
    LOG_DEBUG("asynchronous call failed: {}", st.ToString());
    deferred_ = st;
  }
}

Result<DEvent> Executor::AcquirePoolEvent(int gpu) {
  auto& pool = event_pool_[gpu];
  if (!pool.empty()) {
    DEvent e = pool.back();
    pool.pop_back();
    return e;
  }
  RETURN_IF_ERROR(SetDevice(gpu));
  ASSIGN_OR_RETURN(DEvent e, driver_.EventCreate(0x2 /* disable timing */));
  pool_event_owner_.emplace_back(gpu, e);
  return e;
}

void Executor::ReleasePoolEvent(int gpu, DEvent e) { event_pool_[gpu].push_back(e); }

Result<DEvent> Executor::RecordPoolEvent(const Stream& s) {
  RETURN_IF_ERROR(SetDevice(s.gpu));
  ASSIGN_OR_RETURN(DEvent e, AcquirePoolEvent(s.gpu));
  Status st = driver_.EventRecord(e, s.stream);
  if (!st.ok()) {
    ReleasePoolEvent(s.gpu, e);
    return st;
  }
  return e;
}

Result<std::byte*> Executor::AcquireBounce() {
  if (!bounce_free_.empty()) {
    std::byte* p = bounce_free_.back();
    bounce_free_.pop_back();
    return p;
  }
  ASSIGN_OR_RETURN(void* p, driver_.HostAlloc(kBounceBytes));
  bounce_all_.push_back(static_cast<std::byte*>(p));
  return static_cast<std::byte*>(p);
}

void Executor::ReleaseBounce(std::byte* p) { bounce_free_.push_back(p); }

Status Executor::EndBulkReply() {
  bulk_reply_active_ = false;
  while (!queued_replies_.empty()) {
    QueuedReply& q = queued_replies_.front();
    OutFrame f;
    f.kind = q.kind;
    f.tag = q.tag;
    f.body = {q.body.data(), q.body.size()};
    RETURN_IF_ERROR(conn_.Post(f, 0));
    queued_replies_.pop_front();
  }
  return Status::Ok();
}

Status Executor::Dispatch(const InFrame& frame) {
  if (frame.kind() != FrameKind::kRequest)
    return Error(Err::kInvalidValue, "client sent a frame of kind {} where a request was expected", frame.header.kind);
  uint64_t tag = frame.header.tag;
  Status decoded = GuardDecode("request", [&]() -> Status {
    BodyReader reader(frame.body);
    auto req = reader.Root<wire::Request>();
    using W = wire::Request;
    // Calls that may be asynchronous answer only when the client waits for them.
    uint64_t async_tag = Handlers::ExpectsReply(frame) ? tag : 0;
    // Only these calls carry data. Another one with data is inconsistent: nothing would read
    // the data, and the transport cannot resynchronise (found by fuzz target `request`).
    if (frame.header.bulk_bytes > 0 && req.which() != W::MEMCPY_HTO_D && req.which() != W::MODULE_LOAD &&
        req.which() != W::COPY3_D)
      return Error(Err::kInvalidValue, "request type {} carries {} bytes of data it does not take",
                   static_cast<int>(req.which()), frame.header.bulk_bytes);
    switch (req.which()) {
      case W::GET_DEVICES: return Handlers::GetDevices(*this, tag, req);
      case W::MEM_ALLOC: return Handlers::MemAlloc(*this, tag, req);
      case W::MEM_FREE: return Handlers::MemFree(*this, tag, req);
      case W::MEMCPY_HTO_D: return Handlers::MemcpyHtoD(*this, frame, req);
      case W::MEMCPY_DTO_H: return Handlers::MemcpyDtoH(*this, tag, req);
      case W::MEMCPY_DTO_D: return Handlers::MemcpyDtoD(*this, async_tag, req);
      case W::MEMSET: return Handlers::Memset(*this, async_tag, req);
      case W::MEM_GET_INFO: return Handlers::MemGetInfo(*this, tag, req);
      case W::STREAM_CREATE: return Handlers::StreamCreate(*this, tag, req);
      case W::STREAM_DESTROY: return Handlers::StreamDestroy(*this, async_tag, req);
      case W::STREAM_SYNCHRONIZE: return Handlers::StreamSynchronize(*this, tag, req);
      case W::STREAM_QUERY: return Handlers::StreamQuery(*this, tag, req);
      case W::STREAM_WAIT_EVENT: return Handlers::StreamWaitEvent(*this, async_tag, req);
      case W::EVENT_CREATE: return Handlers::EventCreate(*this, tag, req);
      case W::EVENT_DESTROY: return Handlers::EventDestroy(*this, async_tag, req);
      case W::EVENT_RECORD: return Handlers::EventRecord(*this, async_tag, req);
      case W::EVENT_SYNCHRONIZE: return Handlers::EventSynchronize(*this, tag, req);
      case W::EVENT_QUERY: return Handlers::EventQuery(*this, tag, req);
      case W::EVENT_ELAPSED_TIME: return Handlers::EventElapsedTime(*this, tag, req);
      case W::DEVICE_SYNCHRONIZE: return Handlers::DeviceSynchronize(*this, tag, req);
      case W::DEVICE_RESET: return Handlers::DeviceReset(*this, tag, req);
      case W::GOODBYE:
        goodbye_ = true;
        return Handlers::ExpectsReply(frame) ? PostReply(tag, Status::Ok()) : Status::Ok();
      case W::PING:
        return PostReply(tag, Status::Ok());
      case W::MODULE_LOAD: return Handlers::ModuleLoad(*this, frame, req);
      case W::GET_FUNCTION: return Handlers::GetFunction(*this, tag, req);
      case W::GET_GLOBAL: return Handlers::GetGlobal(*this, tag, req);
      case W::LAUNCH_KERNEL: return Handlers::LaunchKernel(*this, async_tag, req);
      case W::FUNC_GET_ATTRIBUTES: return Handlers::FuncGetAttributes(*this, tag, req);
      case W::FUNC_SET_ATTRIBUTE: return Handlers::FuncSetAttribute(*this, tag, req);
      case W::FUNC_SET_CACHE_CONFIG: return Handlers::FuncSetCacheConfig(*this, tag, req);
      case W::OCCUPANCY: return Handlers::Occupancy(*this, tag, req);
      case W::COPY3_D: return Handlers::Copy3D(*this, frame, req);
      case W::MEMSET3_D: return Handlers::Memset3D(*this, async_tag, req);
      case W::MALLOC_PITCH: return Handlers::MallocPitch(*this, tag, req);
      case W::MALLOC_ASYNC: return Handlers::MallocAsync(*this, tag, req);
      case W::FREE_ASYNC: return Handlers::FreeAsync(*this, async_tag, req);
      case W::DEFAULT_MEM_POOL:
      case W::GET_MEM_POOL:
      case W::SET_MEM_POOL:
      case W::POOL_CREATE:
      case W::POOL_DESTROY:
      case W::POOL_SET_ATTRIBUTE:
      case W::POOL_GET_ATTRIBUTE:
      case W::POOL_TRIM_TO: return Handlers::MemPool(*this, tag, req);
      case W::MEMCPY_PEER: return Handlers::MemcpyPeer(*this, async_tag, req);
      case W::PEER_ACCESS: return Handlers::PeerAccess(*this, tag, req);
      case W::DEVICE_LIMIT: return Handlers::DeviceLimit(*this, tag, req);
      case W::STREAM_PRIORITY_RANGE: return Handlers::StreamPriorityRange(*this, tag, req);
      case W::HOST_FUNC: return Handlers::HostFunc(*this, async_tag, req);
      case W::CALLBACK_DONE: return Handlers::CallbackDone(*this, async_tag, req);
      case W::REGISTER_HOST_REGION: return Handlers::RegisterHostRegion(*this, tag, req);
      case W::UNREGISTER_HOST_REGION: return Handlers::UnregisterHostRegion(*this, tag, req);
    }
    // A call this worker does not know (a newer shim): answer, never crash.
    Status st = Error(Err::kNotSupported, "request type {} is not supported by this server", static_cast<int>(req.which()));
    return Handlers::ExpectsReply(frame) ? PostReply(tag, st) : (DeferError(st), Status::Ok());
  });
  if (decoded.code() == Err::kInvalidValue && decoded.message().rfind("malformed", 0) == 0) {
    // A request that does not decode: report it to the caller, keep serving. Its bulk (if
    // any) was announced in the frame header and must still be drained.
    LOG_WARN("session {}: {}", config_.session_id, decoded.message());
    if (frame.header.bulk_bytes > 0) return decoded;  // cannot resynchronise safely: end
    if (Handlers::ExpectsReply(frame)) return PostReply(tag, decoded);
    DeferError(decoded);
    return Status::Ok();
  }
  return decoded;
}

bool Executor::IsControl(const InFrame& frame) {
  if (frame.kind() != FrameKind::kRequest || frame.header.bulk_bytes != 0) return false;
  bool control = false;
  (void)GuardDecode("request", [&]() -> Status {
    BodyReader reader(frame.body);
    control = reader.Root<wire::Request>().which() == wire::Request::CALLBACK_DONE;
    return Status::Ok();
  });
  return control;
}

Result<bool> Executor::DispatchFrames() {
  bool any = false;
  for (int budget = 64; budget > 0 && !goodbye_; budget--) {
    bool held = false, transport_held = false;
    for (auto& op : pending_) {
      held |= op->HoldsQueue();
      transport_held |= op->HoldsTransport();
    }
    if (spilling_) {
      ASSIGN_OR_RETURN(bool done, SpillBulk());
      if (!done) break;
      any = true;
    }
    if (!held && !backlog_.empty()) {
      Backlogged b = std::move(backlog_.front());
      backlog_.pop_front();
      if (b.spilled) {
        spilled_bytes_ -= b.bulk.size();
        if (replay_released_ < replay_.size())
          return Error(Err::kUnknown, "internal: spilled bulk replayed while the previous one is in use");
        replay_ = std::move(b.bulk);
        replay_polled_ = replay_released_ = 0;
      } else if (b.header.bulk_bytes > 0) {
        backlog_has_bulk_ = false;
      }
      RETURN_IF_ERROR(Dispatch(InFrame{b.header, {b.body.data(), b.body.size()}}));
      any = true;
      continue;
    }
    if (transport_held || backlog_has_bulk_) break;
    ASSIGN_OR_RETURN(std::optional<InFrame> frame, conn_.Poll());
    if (!frame) break;
    any = true;
    if (!held || IsControl(*frame)) {
      RETURN_IF_ERROR(Dispatch(*frame));
      continue;
    }
    // A transfer holds the queue: keep the frame for later, in order. (A host function
    // waiting in a stream needs the client's callbackDone to get through meanwhile.)
    Backlogged b{frame->header, std::vector<uint64_t>(frame->body.begin(), frame->body.end()), {}, false};
    uint64_t bulk = frame->header.bulk_bytes;
    if (bulk > 0 && spilled_bytes_ + bulk <= kMaxSpillBytes) {
      b.spilled = true;
      b.bulk.resize(bulk);
      spilled_bytes_ += bulk;
      spilling_ = true;
      spill_filled_ = 0;
    } else if (bulk > 0) {
      backlog_has_bulk_ = true;
    }
    backlog_.push_back(std::move(b));
  }
  return any;
}

Result<bool> Executor::SpillBulk() {
  std::vector<std::byte>& dst = backlog_.back().bulk;
  while (spill_filled_ < dst.size()) {
    ASSIGN_OR_RETURN(std::optional<BulkChunk> c, conn_.PollBulkChunk());
    if (!c) return false;
    if (c->offset != spill_filled_ || c->size > dst.size() - spill_filled_)
      return Error(Err::kInvalidValue, "bulk chunk out of order or past the frame's bulk");
    std::memcpy(dst.data() + spill_filled_, c->data, c->size);
    spill_filled_ += c->size;
    conn_.ReleaseBulkChunk(*c);
  }
  spilling_ = false;
  return true;
}

Result<std::optional<BulkChunk>> Executor::PollBulk() {
  if (replay_polled_ < replay_.size()) {
    size_t n = std::min<uint64_t>(kReplayChunkBytes, replay_.size() - replay_polled_);
    BulkChunk c{replay_.data() + replay_polled_, n, replay_polled_, 0};
    replay_polled_ += n;
    return std::optional<BulkChunk>(c);
  }
  if (!replay_.empty()) return std::optional<BulkChunk>();  // the op wants more than was sent
  return conn_.PollBulkChunk();
}

void Executor::ReleaseBulk(const BulkChunk& chunk) {
  if (!replay_.empty() && chunk.data >= replay_.data() && chunk.data < replay_.data() + replay_.size()) {
    replay_released_ += chunk.size;
    if (replay_released_ >= replay_.size()) {
      replay_.clear();
      replay_.shrink_to_fit();
      replay_polled_ = replay_released_ = 0;
    }
    return;
  }
  conn_.ReleaseBulkChunk(chunk);
}

Result<bool> Executor::PollPending() {
  bool progressed = false;
  for (auto it = pending_.begin(); it != pending_.end();) {
    ASSIGN_OR_RETURN(bool done, (*it)->Poll(*this));
    if (done) {
      it = pending_.erase(it);
      progressed = true;
    } else {
      ++it;
    }
  }
  return progressed;
}

Status Executor::ApplyControl(const ControlEvent& ev) {
  if (ev.kind == ControlEvent::Kind::kEndSession) {
    end_reason_ = ev.reason;
    (void)PostNotice([&](wire::Notice::Builder& n) { n.setSessionEnding(ev.reason); });
    stop_.store(true);
    return Status::Ok();
  }
  // Ordinals are stable: a detached GPU keeps its ordinal (its calls fail), new GPUs append.
  std::vector<int> next = config_.gpus;
  for (int& g : next)
    if (g >= 0 && std::find(ev.gpus.begin(), ev.gpus.end(), g) == ev.gpus.end()) g = -1;
  for (int g : ev.gpus) {
    auto it = std::find(config_.gpus.begin(), config_.gpus.end(), g);
    if (it != config_.gpus.end()) next[static_cast<size_t>(it - config_.gpus.begin())] = g;
    else next.push_back(g);
  }
  if (next == config_.gpus) return Status::Ok();
  config_.gpus = next;
  generation_++;
  LOG_INFO("session {}: devices are now {} (generation {})", config_.session_id, fmt::join(next, ","), generation_);
  return PostNotice([&](wire::Notice::Builder& n) { n.setDevicesChanged(generation_); });
}

Status Executor::PollControl() {
  if (control_ == nullptr) return Status::Ok();
  uint64_t now = MonotonicNanos();
  if (now - last_control_poll_ns_ < kControlPollNs) return Status::Ok();
  last_control_poll_ns_ = now;
  if (now - last_overhead_ns_ >= kOverheadPollNs) {
    last_overhead_ns_ = now;
    for (int gpu : measured_gpus_) MeasureOverhead(gpu);
  }
  for (;;) {
    ASSIGN_OR_RETURN(std::optional<ControlEvent> ev, control_->Poll());
    if (!ev) return Status::Ok();
    RETURN_IF_ERROR(ApplyControl(*ev));
    if (ev->kind == ControlEvent::Kind::kEndSession) return Status::Ok();  // nothing after the end
  }
}

Status Executor::Run() {
  // Pinned staging and host registration need a context: make the first GPU current.
  for (int gpu : config_.gpus) {
    if (gpu < 0) continue;
    Status st = SetDevice(gpu);
    if (!st.ok()) LOG_WARN("cannot initialise GPU {}: {}", gpu, st.ToString());
    break;
  }
  conn_.SetStaging(&staging_);
  for (const SharedRegion& r : conn_.SharedRegions()) {
    // Let the GPU reach the client's shared segment directly (zero-copy staging).
    Status st = driver_.HostRegister(r.base, r.size);
    if (!st.ok()) LOG_WARN("cannot register the shared segment with the driver ({}); copies will be slower", st.ToString());
    else registered_.push_back(r);
  }
  uint64_t idle_since = 0;
  Status exit_status;
  while (!stop_.load(std::memory_order_relaxed) && !goodbye_) {
    bool progressed = false;
    auto pending = PollPending();
    if (!pending.ok()) {
      exit_status = pending.take_status();
      break;
    }
    progressed |= *pending;
    auto dispatched = DispatchFrames();
    if (!dispatched.ok()) {
      exit_status = dispatched.take_status();
      break;
    }
    progressed |= *dispatched;
    auto moved = conn_.Progress();
    if (!moved.ok()) {
      exit_status = moved.take_status();
      break;
    }
    progressed |= *moved;
    Status cs = PollControl();
    if (!cs.ok()) {
      exit_status = cs;
      break;
    }
    if (progressed) {
      idle_since = 0;
      continue;
    }
    uint64_t now = MonotonicNanos();
    if (idle_since == 0) idle_since = now;
    uint64_t idle = now - idle_since;
    if (pending_.empty()) {
      conn_.WaitForActivity(10'000);  // nothing in flight: sleep until the client acts
      continue;
    }
    // GPU work in flight: poll it (and the client) in a tight loop at first, so a short
    // kernel's completion is answered within a microsecond; back off for long ones.
    if (idle < 2'000'000) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
      continue;
    }
    conn_.WaitForActivity(idle < 20'000'000 ? 20 : idle < 200'000'000 ? 200 : 1000);
  }
  if (goodbye_) {
    // Flush the goodbye reply (best effort: the client may already be gone).
    for (int i = 0; i < 100; i++) {
      auto r = conn_.Progress();
      if (!r.ok() || !*r) break;
    }
  }
  if (!end_reason_.empty()) return Error(Err::kDevicesUnavailable, "session ended: {}", end_reason_);
  if (goodbye_ || stop_.load()) return Status::Ok();
  return exit_status;
}

void Executor::ReleaseEverything() {
  // Driver threads blocked in host functions must not wait for a client that is gone.
  for (auto& [id, cb] : host_callbacks_) {
    std::lock_guard<std::mutex> lock(cb->mu);
    cb->done = true;
    cb->cv.notify_all();
  }
  host_callbacks_.clear();
  for (auto& op : pending_) op->Abandon(*this);
  pending_.clear();
  for (auto& [key, s] : per_thread_streams_) {
    if (SetDevice(key.second).ok()) (void)driver_.StreamDestroy(s);
  }
  per_thread_streams_.clear();
  streams_.ForEach([&](uint64_t, Stream& s) {
    if (SetDevice(s.gpu).ok()) (void)driver_.StreamDestroy(s.stream);
  });
  events_.ForEach([&](uint64_t, Event& e) {
    if (SetDevice(e.gpu).ok()) (void)driver_.EventDestroy(e.event);
  });
  modules_.ForEach([&](uint64_t, Module& m) {
    if (SetDevice(m.gpu).ok()) (void)driver_.ModuleUnload(m.module);
    ReleaseCharge(m.gpu, m.charged);
  });
  pools_.ForEach([&](uint64_t, Pool& p) {
    if (p.created && SetDevice(p.gpu).ok()) (void)driver_.MemPoolDestroy(p.pool);
  });
  for (auto& [gpu, e] : pool_event_owner_)
    if (SetDevice(gpu).ok()) (void)driver_.EventDestroy(e);
  pool_event_owner_.clear();
  event_pool_.clear();
  uint64_t left = 0;
  for (const Allocation& a : allocs_.All()) {
    if (a.kind == AllocKind::kModule) continue;  // goes with its module
    if (SetDevice(a.device).ok()) (void)driver_.MemFree(a.base);
    ReleaseCharge(a.device, a.reserved);
    left += a.size;
  }
  if (allocs_.size() > 0)
    LOG_INFO("released {} in {} allocation(s) the client left behind", FormatSize(left), allocs_.size());
  allocs_.Clear();
  for (std::byte* b : bounce_all_) driver_.HostFree(b);
  bounce_all_.clear();
  bounce_free_.clear();
  for (const SharedRegion& r : registered_) driver_.HostUnregister(r.base);
  registered_.clear();
  for (auto& [id, r] : host_regions_) {
    if (r.registered) driver_.HostUnregister(r.base);
    ::munmap(r.base, r.size);
  }
  host_regions_.clear();
}

}  // namespace remora::worker
