#include "worker/session/executor.h"
#include "worker/ipc/ipc_state.h"

#include <fmt/ranges.h>
#include <sys/mman.h>

#include <cstring>
#include <typeinfo>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "remora/protocol/message.h"
#include "cuda_api.h"
#include "worker/loop/call_stats.h"
#include "worker/calls/generated_call.h"
#include "worker/loop/compute_hook.h"
#include "worker/calls/gen_tables.h"
#include "worker/ops/handlers.h"
#include "worker/session/peer_log.h"

namespace remora::worker {

namespace {
constexpr uint64_t kControlPollNs = 1'000'000;
constexpr uint64_t kOverheadPollNs = 2'000'000'000;  // re-measure context overhead (NVML)
}  // namespace

Executor::Executor(Connection& conn, Driver& driver, StagingAllocator& staging, SessionConfig config,
                   ControlSource* control)
    : conn_(conn), driver_(driver), config_(std::move(config)), control_(control), staging_(staging), frames_(conn, config_.limits.spill_bytes),
      replies_(conn), ipc_(std::make_unique<IpcState>()) {
  session_.SetWindow(config_.window);
  BindLibrary(static_cast<uint16_t>(Domain::kCuda), &gen::cuda::Ops(), &driver_.cuda());
  if (config_.compute != nullptr) compute_ = std::make_unique<ComputeHook>(*config_.compute, config_.ledger_slot, *this);
}

Result<const Executor::LibraryBinding*> Executor::Library(uint16_t id) {
  if (const LibraryBinding* b = library(id)) return b;
  const OpTable* ops = MathLibraryOps(id);
  if (ops == nullptr) return Error(Err::kNotSupported, "library {} is not served by this server", id);
  ASSIGN_OR_RETURN(void* api, driver_.Library(static_cast<Domain>(id)));
  if (static_cast<Domain>(id) == Domain::kNccl) {
    // NCCL: the generated operations call the session's NCCL, which calls the real one.
    nccl_ = MakeNcclSession(*this, api);
    api = NcclSessionApi(nccl_.get());
  }
  BindLibrary(id, ops, api);
  LOG_INFO("session {}: serving {} ({})", config_.session_id, ops->name, driver_.name());
  return library(id);
}

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

int Executor::OrdinalOf(int gpu) const {
  for (size_t i = 0; i < config_.gpus.size(); i++)
    if (config_.gpus[i] == gpu) return static_cast<int>(i);
  return -1;
}

Result<Executor::Stream> Executor::ResolveStream(uint64_t h, bool per_thread_flag, uint64_t thread, int ordinal) {
  bool per_thread = h == 2 || (h == 0 && per_thread_flag);
  if (h == 0 || h == 1 || h == 2) {
    ASSIGN_OR_RETURN(int gpu, GpuOf(ordinal));
    if (!per_thread) return Stream{nullptr, gpu, 0};
    auto key = std::make_pair(thread, gpu);
    auto& per_thread = session_.per_thread_streams();
    auto it = per_thread.find(key);
    if (it != per_thread.end()) return Stream{it->second, gpu, 0};
    RETURN_IF_ERROR(resources_.Room(Resource::kStreams, session_.streams().size() + per_thread.size()));
    RETURN_IF_ERROR(SetDevice(gpu));
    // A per-thread default stream synchronises with the legacy stream, like CUDA's.
    ASSIGN_OR_RETURN(DStream s, driver_.StreamCreate(0, 0));
    per_thread.emplace(key, s);
    return Stream{s, gpu, 0};
  }
  ASSIGN_OR_RETURN(Stream * s, session_.streams().Get(h));
  if (config_.gpus.empty() || std::find(config_.gpus.begin(), config_.gpus.end(), s->gpu) == config_.gpus.end())
    return Error(Err::kDevicesUnavailable, "the stream's GPU was detached");
  return *s;
}

Result<std::byte*> Executor::RegionRange(uint64_t region, uint64_t offset, uint64_t n) {
  auto it = session_.host_regions().find(region);
  if (it == session_.host_regions().end()) return Error(Err::kInvalidValue, "host region {} is not registered by this session", region);
  if (offset > it->second.size || n > it->second.size - offset)
    return Error(Err::kInvalidValue, "{} bytes at offset {} run past the {}-byte host region", n, offset, it->second.size);
  return it->second.base + offset;
}

void Executor::DeferError(const Status& st) {
  // Posted work on a GPU the administrator detached (a live session's only source of
  // kDevicesUnavailable besides the real driver's, and no GPU is detached then): every later
  // call on that device - its streams, its ordinal - fails with the same error, and CUDA keeps
  // devices' errors apart, so it is not reported by the next synchronising call, which may be
  // another device's (executor_detach_test).
  if (st.code() == Err::kDevicesUnavailable &&
      std::find_if(config_.gpus.begin(), config_.gpus.end(), [](int g) { return g < 0; }) != config_.gpus.end()) {
    LOG_DEBUG("asynchronous call on a detached GPU failed (reported by that GPU's calls): {}", st.ToString());
    return;
  }
  if (!st.ok() && deferred_.ok()) {
    LOG_DEBUG("asynchronous call failed: {}", st.ToString());
    deferred_ = st;
  }
}

Result<bool> Executor::Capturing(const Stream& s) {
  if (session_.graphs().active_captures() == 0) return false;
  RETURN_IF_ERROR(SetDevice(s.gpu));
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult r = driver_.cuda().cuStreamIsCapturing(static_cast<CUstream>(s.stream), &status);
  if (r != CUDA_SUCCESS)
    return Status(Domain::kCuda, static_cast<uint32_t>(r), "cuStreamIsCapturing: the stream cannot be used while another captures");
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

Status Executor::CaptureViolation(const Stream& s) {
  CUresult r = driver_.cuda().cuStreamQuery(static_cast<CUstream>(s.stream));
  if (r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_READY) r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  return Status(Domain::kCuda, static_cast<uint32_t>(r), "operation not permitted when the stream is capturing");
}

void Executor::ApplyCaptureMode(uint64_t thread, int mode) {
  GraphTables& g = session_.graphs();
  bool own = false, global = false;
  for (const auto& [stream, c] : g.captures()) {
    if (c.thread == thread && c.mode != CU_STREAM_CAPTURE_MODE_RELAXED) own = true;
    if (c.mode == CU_STREAM_CAPTURE_MODE_GLOBAL) global = true;
  }
  // CUDA: a thread in global mode may not make unsafe calls while it, or any thread in
  // global mode, captures; in thread-local mode while it captures; in relaxed mode never.
  bool prohibited = (mode == CU_STREAM_CAPTURE_MODE_GLOBAL && (own || global)) ||
                    (mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL && own);
  int want = prohibited ? CU_STREAM_CAPTURE_MODE_GLOBAL : CU_STREAM_CAPTURE_MODE_RELAXED;
  if (want == g.worker_mode) return;
  if (driver_.SetCaptureMode(want).ok()) g.worker_mode = want;
}

Result<bool> Executor::PostCallbackNotices() {
  auto items = session_.graphs().notices()->Take();
  for (const CallbackNotices::Item& it : items) {
    if (it.sync != nullptr) {
      RETURN_IF_ERROR(Handlers::AnnounceHostNode(*this, *it.sync));
      continue;
    }
    RETURN_IF_ERROR(PostNotice([&](wire::Notice::Builder& n) {
      if (it.repeat) n.setRepeatCallback(it.id);
      else n.setRunCallback(it.id);
    }));
  }
  return !items.empty();
}

void Executor::NoteGpuWork(const Stream& s) {
  if (compute_) compute_->Issued(s);
}

Status Executor::Dispatch(const InFrame& frame) {
  if (frame.kind() != FrameKind::kRequest)
    return Error(Err::kInvalidValue, "client sent a frame of kind {} where a request was expected", frame.header.kind);
  uint64_t tag = frame.header.tag;
  Status decoded = GuardDecode("request", [&]() -> Status {
    BodyReader reader(frame.body);
    auto req = reader.Root<wire::Request>();
    // GPU work waits (at the head of the queue) while its GPU is another session's to use.
    if (compute_ && frame.header.bulk_bytes == 0 && !compute_->Admit(req)) {
      gated_ = true;
      return Status::Ok();
    }
    StallWatch::Scope watched(stall_watch_, static_cast<int>(req.which()));
    if (config_.stats != nullptr) CountRequest(*config_.stats, req);
    if (session_.graphs().active_captures() > 0) ApplyCaptureMode(req.getThread(), req.getCaptureMode());
    using W = wire::Request;
    // Calls that may be asynchronous answer only when the client waits for them.
    uint64_t async_tag = ExpectsReply(frame) ? tag : 0;
    // Only these calls carry data. Another one with data is inconsistent: nothing would read
    // the data, and the transport cannot resynchronise (found by fuzz target `request`).
    if (frame.header.bulk_bytes > 0 && req.which() != W::MEMCPY_HTO_D && req.which() != W::MODULE_LOAD &&
        req.which() != W::COPY3_D && req.which() != W::MIGRATE_MODULE)
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
      case W::DEVICE_SYNCHRONIZE: return Handlers::DeviceSynchronize(*this, tag, req);
      case W::DEVICE_RESET: return Handlers::DeviceReset(*this, tag, req);
      case W::GOODBYE:
        goodbye_ = true;
        return ExpectsReply(frame) ? PostReply(tag, Status::Ok()) : Status::Ok();
      case W::PING:
        return PostReply(tag, Status::Ok());
      case W::MODULE_LOAD: return Handlers::ModuleLoad(*this, frame, req);
      case W::GET_FUNCTION: return Handlers::GetFunction(*this, tag, req);
      case W::LINK: return Handlers::Link(*this, tag, req);
      case W::MIGRATE_EXPORT: return Handlers::MigrateExport(*this, tag, req);
      case W::MIGRATE_IMPORT: return Handlers::MigrateImport(*this, tag, req);
      case W::MIGRATE_MODULE: return Handlers::MigrateModule(*this, frame, req);
      case W::MIGRATE_FAILED: {
        // The answer to a move the administrator ordered, taken once (N6); a report nobody
        // asked for is dropped (its client's to send, not to log or forward).
        if (std::exchange(migrate_ordered_, false)) {
          auto text = req.getMigrateFailed();
          std::string why = Printable(std::string_view(text.cStr(), text.size()), 512);
          LOG_WARN("session {}: the client did not move: {}", config_.session_id, why);
          if (control_ != nullptr) control_->MigrateFailed(why);
        } else {
          LOG_PEER(PeerLog(), Info, "session {}: a report of a failed move nobody ordered: ignored",
                   config_.session_id);
        }
        return ExpectsReply(frame) ? PostReply(tag, Status::Ok()) : Status::Ok();
      }
      case W::GET_GLOBAL: return Handlers::GetGlobal(*this, tag, req);
      case W::LAUNCH_KERNEL: return Handlers::LaunchKernel(*this, async_tag, req);
      case W::COPY3_D: return Handlers::Copy3D(*this, frame, req);
      case W::MEMSET3_D: return Handlers::Memset3D(*this, async_tag, req);
      case W::MALLOC_ASYNC: return Handlers::MallocAsync(*this, tag, req);
      case W::FREE_ASYNC: return Handlers::FreeAsync(*this, async_tag, req);
      case W::HOST_FUNC: return Handlers::HostFunc(*this, async_tag, req);
      case W::CALLBACK_DONE: return Handlers::CallbackDone(*this, async_tag, req);
      case W::GRAPH_HOST_NODE_DONE: return Handlers::GraphHostNodeDone(*this, req);
      case W::REGISTER_HOST_REGION: return Handlers::RegisterHostRegion(*this, tag, req);
      case W::UNREGISTER_HOST_REGION: return Handlers::UnregisterHostRegion(*this, tag, req);
      case W::API_CALL: return DispatchApiCall(*this, frame, req);
      // Retired members (now generated calls, wire::ApiCall): a current client never sends them.
      case W::MEMCPY_PEER:
      case W::MALLOC_PITCH:
      case W::MODULE_UNLOAD:
      case W::POOL_CREATE:
      case W::POOL_DESTROY:
      case W::PEER_ACCESS:
      case W::FUNC_GET_ATTRIBUTES:
      case W::FUNC_SET_ATTRIBUTE:
      case W::FUNC_SET_CACHE_CONFIG:
      case W::OCCUPANCY:
      case W::STREAM_CREATE:
      case W::STREAM_DESTROY:
      case W::EVENT_CREATE:
      case W::EVENT_DESTROY:
      case W::STREAM_SYNCHRONIZE:
      case W::STREAM_QUERY:
      case W::STREAM_WAIT_EVENT:
      case W::EVENT_RECORD:
      case W::EVENT_SYNCHRONIZE:
      case W::EVENT_QUERY:
      case W::EVENT_ELAPSED_TIME:
      case W::DEVICE_LIMIT:
      case W::STREAM_PRIORITY_RANGE:
      case W::DEFAULT_MEM_POOL:
      case W::GET_MEM_POOL:
      case W::SET_MEM_POOL:
      case W::POOL_SET_ATTRIBUTE:
      case W::POOL_GET_ATTRIBUTE:
      case W::POOL_TRIM_TO:
        break;
    }
    // A call this worker does not know (a newer shim): answer, never crash.
    Status st = Error(Err::kNotSupported, "request type {} is not supported by this server", static_cast<int>(req.which()));
    return ExpectsReply(frame) ? PostReply(tag, st) : (DeferError(st), Status::Ok());
  });
  if (decoded.code() == Err::kInvalidValue && decoded.message().rfind("malformed", 0) == 0) {
    // A request that does not decode: report it to the caller, keep serving. Its bulk (if
    // any) was announced in the frame header and must still be drained.
    LOG_WARN("session {}: {}", config_.session_id, decoded.message());
    if (frame.header.bulk_bytes > 0) return decoded;  // cannot resynchronise safely: end
    if (ExpectsReply(frame)) return PostReply(tag, decoded);
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
    auto which = reader.Root<wire::Request>().which();
    control = which == wire::Request::CALLBACK_DONE || which == wire::Request::GRAPH_HOST_NODE_DONE;
    return Status::Ok();
  });
  return control;
}

Result<bool> Executor::DispatchFrames() {
  bool any = false;
  for (int budget = 64; budget > 0 && !goodbye_; budget--) {
    bool held = false, replies_held = false, transport_held = false;
    for (auto& op : pending_) {
      held |= op->HoldsQueue();
      replies_held |= op->HoldsReplies();
      transport_held |= op->HoldsTransport();
    }
    // Whether a request may be dispatched past the pending ops (PendingOp::HoldsReplies).
    auto may_go = [&](const InFrame& f) { return !held && (!replies_held || !ExpectsReply(f)); };
    if (frames_.spilling()) {
      ASSIGN_OR_RETURN(bool done, frames_.Spill());
      if (!done) break;
      any = true;
    }
    if (!frames_.empty() && !may_go(frames_.front().view())) held = true;  // later frames stay behind it
    if (!held && !frames_.empty()) {
      ASSIGN_OR_RETURN(FrameQueue::Frame f, frames_.Pop());
      RETURN_IF_ERROR(Dispatch(f.view()));
      if (!gated_) {
        any = true;
        continue;
      }
      gated_ = false;  // held back by the compute scheduler: first in line, later frames behind it
      frames_.PushFront(std::move(f));
      held = true;
    }
    if (transport_held || frames_.blocked()) break;
    // Back-pressure: a client that queues work faster than it completes waits in its send.
    if (!resources_.MayRead(pending_.size() + frames_.size())) break;
    polled_ = true;
    ASSIGN_OR_RETURN(std::optional<InFrame> frame, conn_.Poll());
    if (!frame) break;
    any = true;
    last_heard_ns_ = MonotonicNanos();
    heard_any_ = true;
    if (frame->kind() == FrameKind::kHeartbeat) {
      if (frame->header.bulk_bytes != 0) return Error(Err::kInvalidValue, "client sent a heartbeat with data");
      continue;
    }
    if (may_go(*frame) || IsControl(*frame)) {
      RETURN_IF_ERROR(Dispatch(*frame));
      if (gated_) {
        gated_ = false;
        frames_.Push(*frame);
      }
      continue;
    }
    // A transfer holds the queue: keep the frame for later, in order. (A host function
    // waiting in a stream needs the client's callbackDone to get through meanwhile.)
    frames_.Push(*frame);
  }
  return any;
}

void Executor::FreeHostWhenIdle(void* p) {
  if (MayWaitForDevice()) driver_.HostFree(p);
  else deferred_host_frees_.push_back(p);
}

Result<bool> Executor::PollPending() {
  bool progressed = false;
  if (!deferred_host_frees_.empty() && MayWaitForDevice()) {
    for (void* p : deferred_host_frees_) driver_.HostFree(p);
    deferred_host_frees_.clear();
  }
  if (pending_.empty()) return false;  // nothing to poll or to watch (the common case)
  StallWatch::Scope watched(stall_watch_, -1);
  for (auto it = pending_.begin(); it != pending_.end();) {
    const PendingOp& op = **it;
    stall_watch_.Name(typeid(op).name());  // the operation's type, named if it stalls
    Result<bool> polled = (*it)->Poll(*this);
    if (!polled.ok()) {
      // The connection's own failures end the session; any other fails the op's call alone.
      Status error = polled.take_status();
      if (error.code() == Err::kDevicesUnavailable) return error;
      std::unique_ptr<PendingOp> rest = (*it)->Recover(*this, error);
      if (rest == nullptr) return error;
      LOG_PEER(PeerLog(), Warn, "session {}: a transfer failed, its call fails and the session goes on: {}",
               config_.session_id, error.ToString());
      *it = std::move(rest);
      progressed = true;
      continue;  // polled again at once: it may finish now
    }
    bool done = *polled;
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
  if (ev.kind == ControlEvent::Kind::kNcclAnswer || ev.kind == ControlEvent::Kind::kNcclLost) {
    if (nccl_) NcclControl(nccl_.get(), ev);
    return Status::Ok();
  }
  if (ev.kind == ControlEvent::Kind::kIpcRelease) {
    ipc_->Release(*this, ev.export_id);
    return Status::Ok();
  }
  if (ev.kind == ControlEvent::Kind::kMigrate) {
    LOG_INFO("session {}: the administrator moves it to {}", config_.session_id, ev.url);
    migrate_ordered_ = true;
    return PostNotice([&](wire::Notice::Builder& n) {
      auto m = n.initMigrate();
      m.setUrl(ev.url);
      m.setToken(ev.token);
    });
  }
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

// Sends the client its heartbeat and gives a silent client up. Silence counts only while the
// loop reads: a pass that did not poll the connection (a transfer waiting for its stream, the
// client's queue full, the compute scheduler holding work) is the executor's own doing.
Status Executor::CheckClient() {
  if (config_.client_deadline_ns == 0) return Status::Ok();
  uint64_t now = MonotonicNanos();
  if (!polled_ || last_heard_ns_ == 0) last_heard_ns_ = now;
  polled_ = false;
  // Not before the client's first frame: until then the supervisor's Welcome may still be on
  // its way through the same socket, and the client reads handshake frames only.
  if (heard_any_ && now - last_beat_ns_ >= config_.heartbeat_ns) {
    last_beat_ns_ = now;
    RETURN_IF_ERROR(replies_.Post(HeartbeatFrame(), 0));
  }
  if (now - last_heard_ns_ <= config_.client_deadline_ns) return Status::Ok();
  end_reason_ = fmt::format("the client sent nothing for {:.1f} s (deadline {:.1f} s, remora-server --deadline)",
                            double(now - last_heard_ns_) / 1e9, double(config_.client_deadline_ns) / 1e9);
  LOG_WARN("session {}: {}: ending it", config_.session_id, end_reason_);
  return Error(Err::kDevicesUnavailable, "{}", end_reason_);
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
    auto notices = PostCallbackNotices();
    if (!notices.ok()) {
      exit_status = notices.take_status();
      break;
    }
    progressed |= *notices;
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
    if (compute_) compute_->Poll();
    Status cs = PollControl();
    if (cs.ok()) cs = CheckClient();
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
    // The compute scheduler may need a poll soon (GPU work measured in flight, a turn awaited).
    uint64_t cap_us = compute_ ? compute_->MaxWaitUs() : UINT64_MAX;
    if (pending_.empty() && cap_us != 0) {
      // Nothing in flight: sleep until the client acts.
      conn_.WaitForActivity(static_cast<int64_t>(std::min<uint64_t>(cap_us, 10'000)));
      continue;
    }
    // GPU work in flight: poll it (and the client) in a tight loop at first, so a short
    // kernel's completion is answered within a microsecond; back off for long ones.
    if (idle < 2'000'000 || cap_us == 0) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
      continue;
    }
    conn_.WaitForActivity(static_cast<int64_t>(std::min<uint64_t>(cap_us, idle < 20'000'000 ? 20 : idle < 200'000'000 ? 200 : 1000)));
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

}  // namespace remora::worker
