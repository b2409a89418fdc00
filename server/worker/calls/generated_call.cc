#include "worker/calls/generated_call.h"

#include <algorithm>
#include <cstring>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "worker/calls/call_profile.h"
#include "worker/session/gpu_waits.h"
#include "worker/session/held_results.h"
#include "worker/session/peer_log.h"

namespace remora::worker {

OpContext::OpContext(Executor& ex, wire::Request::Reader req, api::ArgReader in, void* library, Domain domain)
    : ex_(ex), req_(req), in_(in), library_(library), domain_(domain) {}

void OpContext::ForgetObject(LibObject* object) {
  if (object == nullptr) return;
  std::unique_ptr<LibObject> o = ex_.session().lib_objects().Take(object->id);
  if (!o) return;
  if (o->workspace != 0 && ex_.SetDevice(o->gpu).ok()) (void)ex_.driver().MemFree(o->workspace);
  ex_.ReleaseCharge(o->gpu, o->workspace_bytes + o->charged);
}

void OpContext::DestroyObject(LibObject* object) {
  if (object == nullptr) return;
  const Executor::LibraryBinding* lib = ex_.library(static_cast<uint16_t>(object->library));
  if (lib != nullptr && lib->table->destroy != nullptr && object->bits != 0) {
    Status st = lib->table->destroy(lib->api, object->kind, object->bits);
    if (!st.ok()) LOG_PEER(PeerLog(), Warn, "destroying a {}: {}", HandleKindName(object->kind), st.ToString());
  }
  ForgetObject(object);
}

Status OpContext::ScalarMode(const LibObject* object, int bit, bool on_device, const char* what) const {
  bool mirrored = object != nullptr && ((object->mode >> bit) & 1u) != 0;
  if (mirrored != on_device)
    return Malformed(on_device ? "a scalar is sent as a device pointer in host pointer mode"
                               : "a scalar is sent as a host value in device pointer mode");
  (void)what;
  return Status::Ok();
}

Status OpContext::DevPtrArray(uint64_t addr, uint64_t count, uint64_t bytes, const LibObject* owner, uint64_t* checked) {
  RETURN_IF_ERROR(DevPtrArrayOf(addr, count, owner, [bytes](uint64_t) { return bytes; }));
  *checked = addr;
  return Status::Ok();
}

Status OpContext::DevPtrArrayOf(uint64_t addr, uint64_t count, const LibObject* owner, const std::function<uint64_t(uint64_t)>& bytes_of) {
  if (count > api::kMaxArgBytes / sizeof(uint64_t)) return Malformed("an array of device pointers is too long");
  uint64_t checked = 0;
  RETURN_IF_ERROR(DevPtr(addr, count * sizeof(uint64_t), &checked));
  std::vector<uint64_t> ptrs(static_cast<size_t>(count));
  DStream s = owner != nullptr ? owner->stream : nullptr;
  RETURN_IF_ERROR(ex_.driver().MemcpyDtoH(ptrs.data(), addr, count * sizeof(uint64_t), s));
  RETURN_IF_ERROR(ex_.driver().StreamSynchronize(s));
  for (uint64_t i = 0; i < count; i++) {
    const uint64_t bytes = bytes_of(i);
    auto a = ex_.session().allocations().CheckRange(ptrs[i], bytes == 0 ? 1 : bytes);
    if (!a.ok()) return Error(Err::kInvalidValue, "an array of device pointers holds 0x{:x}: {}", ptrs[i], a.status().message());
  }
  return Status::Ok();
}

void OpContext::KeepRange(LibObject* object, const char* slot, uint64_t addr, uint64_t bytes) {
  if (object == nullptr) return;
  auto& kept = object->kept;
  auto it = std::find_if(kept.begin(), kept.end(), [&](const LibObject::KeptRange& k) { return std::strcmp(k.slot, slot) == 0; });
  if (addr == 0) {
    if (it != kept.end()) kept.erase(it);
    return;
  }
  const LibObject::KeptRange range{slot, addr, bytes == 0 ? 1 : bytes};
  if (it != kept.end()) {
    *it = range;
  } else {
    kept.push_back(range);
  }
}

Status OpContext::RecheckObject(const LibObject* object, const char* what) {
  if (object == nullptr) return Status::Ok();
  for (const LibObject::KeptRange& k : object->kept) {
    auto a = ex_.session().allocations().CheckRange(k.addr, k.bytes);
    if (!a.ok())
      return Error(Err::kInvalidValue, "{}'s {} (0x{:x}, {} bytes, given by an earlier call) is no longer device memory of this session: {}",
                   what, k.slot, k.addr, k.bytes, a.status().message());
  }
  return Status::Ok();
}

Result<void*> OpContext::HostWork(LibObject* owner, uint64_t bytes) {
  if (bytes == 0) return static_cast<void*>(nullptr);
  if (owner == nullptr) return Error(Err::kInvalidValue, "a host workspace without the object it belongs to");
  if (bytes > kMaxHostWork)
    return Error(Err::kMemoryAllocation, "a host workspace of {} bytes is larger than the worker keeps ({} bytes)", bytes, kMaxHostWork);
  if (owner->host_work.size() < bytes) owner->host_work.resize(static_cast<size_t>(bytes));
  return static_cast<void*>(owner->host_work.data());
}

namespace {
constexpr uint64_t kNotMeasured = ~0ull;
}  // namespace

uint64_t OpContext::MeasureBegin() {
  if (ex_.ledger() == nullptr || gpu_ < 0) return kNotMeasured;
  auto used = ex_.driver().ProcessMemory(gpu_);
  return used.ok() ? *used : kNotMeasured;
}

Status OpContext::MeasureEnd(uint64_t before, LibObject* object, Domain domain, bool created, uint32_t nomem) {
  if (before == kNotMeasured) return Status::Ok();
  auto after = ex_.driver().ProcessMemory(gpu_);
  if (!after.ok() || *after <= before) return Status::Ok();
  uint64_t grew = *after - before;
  Status st = ex_.Charge(gpu_, grew);
  if (st.ok()) {
    if (object != nullptr) object->charged += grew;
    LOG_DEBUG("a library call holds {} more on GPU {}: charged", grew, gpu_);
    return Status::Ok();
  }
  std::string why = fmt::format("the library allocated {} bytes the quota does not allow: {}", grew, st.message());
  if (created) DestroyObject(object);
  return Status(domain, nomem, why);
}

Status OpContext::Stream(void** stream) {
  uint64_t h = in_.Get<uint64_t>();
  bool per_thread = in_.Get<uint8_t>() != 0;
  if (!in_.ok()) return in_.Finish();
  ASSIGN_OR_RETURN(Executor::Stream s, ex_.ResolveStream(h, per_thread, req_.getThread(), req_.getDevice()));
  handle_id_ = h > 2 ? h : 0;
  RETURN_IF_ERROR(ex_.SetDevice(s.gpu));
  if (gpu_ < 0) gpu_ = s.gpu;
  if (num_streams_ < 2) streams_[num_streams_++] = s;
  *stream = s.stream;
  return Status::Ok();
}

Status OpContext::Handle(HandleKind kind, bool nullable, void** handle) {
  uint64_t h = in_.Get<uint64_t>();
  if (!in_.ok()) return in_.Finish();
  *handle = nullptr;
  handle_id_ = h;
  if (h == 0) {
    if (nullable) return Status::Ok();
    return Error(Err::kInvalidResourceHandle, "a NULL {} handle", HandleKindName(kind));
  }
  int gpu = -1;
  switch (kind) {
    case HandleKind::kStream: {
      ASSIGN_OR_RETURN(Executor::Stream * s, ex_.session().streams().Get(h));
      *handle = s->stream;
      gpu = s->gpu;
      if (num_streams_ < 2) streams_[num_streams_++] = *s;
      break;
    }
    case HandleKind::kEvent: {
      ASSIGN_OR_RETURN(Executor::Event * e, ex_.session().events().Get(h));
      *handle = e->event;
      gpu = e->gpu;
      if (num_events_ < 2) events_[num_events_++] = {e->gpu, e->event};
      break;
    }
    case HandleKind::kModule: {
      ASSIGN_OR_RETURN(Executor::Module * m, ex_.session().modules().Get(h));
      *handle = m->module;
      gpu = m->gpu;
      break;
    }
    case HandleKind::kFunction: {
      ASSIGN_OR_RETURN(Executor::Function * f, ex_.session().functions().Get(h));
      *handle = f->function;
      gpu = f->gpu;
      break;
    }
    case HandleKind::kPool: {
      ASSIGN_OR_RETURN(Executor::Pool * p, ex_.session().pools().Get(h));
      *handle = p->pool;
      gpu = p->gpu;
      break;
    }
    case HandleKind::kGraph: {
      ASSIGN_OR_RETURN(Graph * g, ex_.session().graphs().graphs().Get(h));
      *handle = g->graph;
      gpu = g->gpu;
      graph_ = h;
      break;
    }
    case HandleKind::kGraphExec: {
      ASSIGN_OR_RETURN(GraphExec * e, ex_.session().graphs().execs().Get(h));
      *handle = e->exec;
      gpu = e->gpu;
      break;
    }
    case HandleKind::kGraphNode: {
      ASSIGN_OR_RETURN(GraphNode * n, ex_.session().graphs().nodes().Get(h));
      *handle = n->node;
      graph_ = n->graph;
      if (Graph* g = ex_.session().graphs().graphs().Find(n->graph)) gpu = g->gpu;
      break;
    }
    case HandleKind::kUserObject: {
      ASSIGN_OR_RETURN(UserObject * o, ex_.session().graphs().user_objects().Get(h));
      *handle = o->object;
      break;
    }
    default:
      return Error(Err::kInvalidValue, "{} handles are not accepted here", HandleKindName(kind));
  }
  if (gpu_ < 0 && gpu >= 0) {
    RETURN_IF_ERROR(ex_.SetDevice(gpu));
    gpu_ = gpu;
  }
  return Status::Ok();
}

Status OpContext::Handles(HandleKind kind, void** handles, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint64_t h = reinterpret_cast<uint64_t>(handles[i]);
    if (h == 0) return Error(Err::kInvalidValue, "a NULL {} handle in an array", HandleKindName(kind));
    void* real = nullptr;
    switch (kind) {
      case HandleKind::kGraphNode: {
        ASSIGN_OR_RETURN(GraphNode * node, ex_.session().graphs().nodes().Get(h));
        real = node->node;
        if (graph_ == 0) graph_ = node->graph;
        break;
      }
      case HandleKind::kEvent: {
        ASSIGN_OR_RETURN(Executor::Event * e, ex_.session().events().Get(h));
        real = e->event;
        break;
      }
      default:
        return Error(Err::kInvalidValue, "arrays of {} handles are not accepted here", HandleKindName(kind));
    }
    handles[i] = real;
  }
  return Status::Ok();
}

Status OpContext::Device(int* device) {
  int32_t ordinal = in_.Get<int32_t>();
  if (!in_.ok()) return in_.Finish();
  ASSIGN_OR_RETURN(int gpu, ex_.GpuOf(ordinal));
  *device = gpu;
  return Status::Ok();
}

Status OpContext::DevPtr(uint64_t addr, uint64_t bytes, uint64_t* checked) {
  ASSIGN_OR_RETURN(Allocation a, ex_.session().CheckRange(addr, bytes == 0 ? 1 : bytes));
  if (gpu_ < 0) {
    RETURN_IF_ERROR(ex_.SetDevice(a.device));
    gpu_ = a.device;
  }
  *checked = addr;
  return Status::Ok();
}

Status OpContext::ChooseGpu(int gpu) {
  RETURN_IF_ERROR(ex_.SetDevice(gpu));
  gpu_ = gpu;
  return Status::Ok();
}

Status OpContext::Ready() {
  if (gpu_ >= 0) return Status::Ok();
  ASSIGN_OR_RETURN(int gpu, ex_.GpuOf(req_.getDevice()));
  RETURN_IF_ERROR(ex_.SetDevice(gpu));
  gpu_ = gpu;
  return Status::Ok();
}

Status OpContext::HandleRoom(HandleKind kind) {
  SessionState& s = ex_.session();
  switch (kind) {
    case HandleKind::kStream:
      return ex_.resources().Room(Resource::kStreams, s.streams().size() + s.per_thread_streams().size());
    case HandleKind::kEvent:
      return ex_.resources().Room(Resource::kEvents, s.events().size());
    case HandleKind::kGraph:
    case HandleKind::kGraphExec:
    case HandleKind::kUserObject: {
      // Graphs (child and capture graphs included), executable graphs and user objects.
      GraphTables& g = s.graphs();
      return ex_.resources().Room(Resource::kGraphs, g.graphs().size() + g.execs().size() + g.user_objects().size());
    }
    case HandleKind::kGraphNode:
      return ex_.resources().Room(Resource::kGraphNodes, s.graphs().node_count());
    default:
      // Pools come back as the device's own (bounded by the devices) or from the MemPool
      // handler, which counts them; physical memory is charged to the quota (or, imported,
      // bounded by its exporter's IPC exports); math-library objects are counted by
      // CheckNewObject.
      return Status::Ok();
  }
}

uint64_t OpContext::AdoptHandle(HandleKind kind, void* handle) {
  int gpu = gpu_ < 0 ? 0 : gpu_;
  switch (kind) {
    case HandleKind::kPool: {
      // A device's pools are the same objects each time they are asked for: one handle each.
      uint64_t found = 0;
      ex_.session().pools().ForEach([&](uint64_t id, Executor::Pool& p) {
        if (p.pool == handle) found = id;
      });
      return found != 0 ? found : ex_.session().pools().Insert({handle, gpu, false});
    }
    case HandleKind::kStream:
      return ex_.session().streams().Insert({handle, gpu, 0});
    case HandleKind::kEvent: {
      // An event a graph node names is one of the session's (or a capture's private one).
      uint64_t found = 0;
      ex_.session().events().ForEach([&](uint64_t id, Executor::Event& e) {
        if (e.event == handle) found = id;
      });
      return found != 0 ? found : ex_.session().events().Insert({handle, gpu, 0});
    }
    case HandleKind::kGraph: {
      GraphTables& g = ex_.session().graphs();
      if (uint64_t known = g.GraphOf(handle)) return known;
      // A graph returned next to a graph argument is that graph's (a child graph's);
      // otherwise a new graph of the application's.
      return graph_ != 0 ? g.AdoptGraph(handle, gpu, graph_, false) : g.AdoptGraph(handle, gpu, 0, true);
    }
    case HandleKind::kGraphNode:
      return ex_.session().graphs().AdoptNode(handle, graph_);
    case HandleKind::kGraphExec:
      return ex_.session().graphs().AdoptExec(handle, gpu);
    case HandleKind::kUserObject:
      return ex_.session().graphs().AdoptUserObject(handle);
    default:
      LOG_ERROR("internal: a generated call created a {} handle, which has no table", HandleKindName(kind));
      return 0;
  }
}

Status OpContext::LibraryError(Domain domain, uint32_t code, const char* name, const char* call) {
  return Status(domain, code, name ? fmt::format("{}: {}", call, name) : fmt::format("{}: status {}", call, code));
}

Executor::Stream OpContext::launch_stream() const {
  if (has_launch_stream_) return launch_stream_;
  if (num_streams_ > 0) return streams_[0];
  return Executor::Stream{nullptr, gpu_ < 0 ? 0 : gpu_, 0};
}

const OpEntry* OpTable::Find(uint32_t number) const {
  const OpEntry* end = ops + count;
  const OpEntry* it = std::lower_bound(ops, end, number, [](const OpEntry& e, uint32_t n) { return e.number < n; });
  return it != end && it->number == number ? it : nullptr;
}

Status DispatchApiCall(Executor& ex, const InFrame& frame, wire::Request::Reader req) {
  uint64_t tag = frame.header.tag;
  bool expects_reply = ExpectsReply(frame);
  auto answer = [&](const Status& st) -> Status {
    if (expects_reply) return ex.PostReply(tag, st);
    ex.DeferError(st);
    return Status::Ok();
  };
  auto call = req.getApiCall();
  auto bound = ex.Library(call.getLibrary());
  if (!bound.ok()) return answer(bound.status());
  const Executor::LibraryBinding* lib = *bound;
  const OpEntry* op = lib->table->Find(call.getFunction());
  if (op == nullptr)
    return answer(Error(Err::kNotSupported, "{} function {} is not supported by this server", lib->table->name, call.getFunction()));
  if (op->cls != CallClass::kOrdered && !expects_reply) {
    ex.DeferError(Error(Err::kInvalidValue, "malformed request: {} was posted but it is answered", op->name));
    return Status::Ok();
  }
  auto args = call.getArgs();
  api::ArgReader reader(args.begin(), args.size());
  std::vector<std::byte> staged;  // arguments sent ahead (outlives the call's decoding)
  if (call.getStagedArgs() != 0) {
    if (args.size() != 0) return answer(Error(Err::kInvalidValue, "malformed request: {} has arguments twice", op->name));
    auto taken = ex.session().staged_args().Take(call.getStagedArgs());
    if (!taken.ok()) return answer(taken.status());
    staged = std::move(*taken);
    reader = api::ArgReader(staged.data(), staged.size());
  }
  OpContext x(ex, req, reader, lib->api, lib->table->domain);
  x.set_answered(expects_reply);
  x.set_tag(expects_reply ? tag : 0);
  ex.stall_watch().Name(op->name);
  CallProfile* profile = CallProfile::Get();
  uint64_t started = profile != nullptr ? MonotonicNanos() : 0;
  Status st = op->run(x);
  if (profile != nullptr) profile->Add(op->name, MonotonicNanos() - started);
  if (op->launches && st.ok()) ex.NoteGpuWork(x.launch_stream());
  x.Settle(st.ok());
  switch (op->cls) {
    case CallClass::kOrdered:
      return answer(st);
    case CallClass::kSync: {
      if (!st.ok()) return ex.PostReply(tag, st);
      if (x.answers_later()) return Status::Ok();  // its operation answers (AnswerLater)
      const std::vector<std::byte>& out = x.out().bytes();
      if (out.empty()) return ex.PostReply(tag, Status::Ok());  // nothing to return
      if (out.size() > HeldResults::kInlineBytes) {
        // Too large for one frame: held, and read back in pieces (session/held_results.h). The call
        // itself succeeded; holding may not (the session holds too much): its status then.
        const uint64_t size = out.size();
        auto id = ex.session().held_results().Hold(x.out().Take());  // `out` is not read after this
        if (!id.ok()) return ex.PostReply(tag, id.status());
        return ex.PostReply(tag, Status::Ok(), [&](wire::Reply::Builder& r) {
          auto h = r.initApiResultHeld();
          h.setId(*id);
          h.setSize(size);
        });
      }
      return ex.PostReply(tag, Status::Ok(), [&](wire::Reply::Builder& r) {
        r.setApiResult(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(out.data()), out.size()));
      });
    }
    case CallClass::kWait:
      if (!st.ok()) return ex.PostReply(tag, st);
      if (x.has_wait_event()) return ReplyWhenEvent(ex, tag, x.wait_event().first, x.wait_event().second);
      return ReplyWhenDone(ex, tag, x.wait_streams());
  }
  return answer(Error(Err::kUnknown, "internal: {} has no call class", op->name));
}

}  // namespace remora::worker
