// NcclSession (nccl_session.h): the communicators' state, the calls the generated operations
// make, the polling of what is in progress, and the supervisor's answers and notices. The
// hand-written operations that create, end and query communicators are nccl_create.cc.
#include "worker/libs/nccl_session.h"

#include <cstring>

#include "remora/base/log.h"
#include "worker/calls/generated_call.h"

namespace remora::worker {
namespace {

// How many of a communicator's first launches are followed by a measurement of NCCL's memory
// (connections, and their buffers, are made as a communicator first uses them).
constexpr int kMeasuredLaunches = 4;

// The pending operation that polls the session's NCCL while anything is in progress.
class NcclProgressOp final : public PendingOp {
 public:
  explicit NcclProgressOp(NcclSession& s) : s_(s) {}
  Result<bool> Poll(Executor&) override { return s_.Poll(); }
  bool HoldsQueue() const override { return s_.HoldsQueue(); }

 private:
  NcclSession& s_;
};

const char* PhaseName(NcclComm::Phase p) {
  switch (p) {
    case NcclComm::Phase::kStarting: return "being created";
    case NcclComm::Phase::kReady: return "ready";
    case NcclComm::Phase::kBusy: return "launching";
    case NcclComm::Phase::kFinalizing: return "finalizing";
    case NcclComm::Phase::kRegistering: return "registering";
    case NcclComm::Phase::kFailed: return "failed";
  }
  return "?";
}

}  // namespace

NcclSession::NcclSession(Executor& ex, gen::nccl::Api& real) : ex_(ex), real_(real) {}

NcclSession::~NcclSession() { Teardown(); }

NcclComm* NcclSession::ByBits(ncclComm_t comm) {
  auto it = by_bits_.find(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(comm)));
  return it == by_bits_.end() ? nullptr : it->second;
}

NcclComm* NcclSession::ById(uint64_t id) {
  auto it = comms_.find(id);
  return it == comms_.end() ? nullptr : it->second.get();
}

NcclComm* NcclSession::Adopt(std::unique_ptr<NcclComm> c) {
  NcclComm* raw = c.get();
  by_bits_[raw->bits] = raw;
  comms_[raw->id] = std::move(c);
  return raw;
}

void NcclSession::Schedule() {
  if (scheduled_) return;
  scheduled_ = true;
  ex_.AddPending(std::make_unique<NcclProgressOp>(*this));
}

bool NcclSession::HoldsQueue() const {
  for (const auto& [id, c] : comms_)
    if (c->phase == NcclComm::Phase::kBusy) return true;
  return false;
}

// ---- memory ------------------------------------------------------------------------------------

std::optional<uint64_t> NcclSession::Unaccounted(int gpu) {
  if (auto* emu = dynamic_cast<NcclEmulation*>(&real_)) return emu->InternalBytes(gpu);
  if (ex_.ledger() == nullptr) return std::nullopt;
  auto used = ex_.driver().ProcessMemory(gpu);
  if (!used.ok()) return std::nullopt;
  uint64_t charged = ex_.ledger()->SessionUsed(ex_.ledger_slot(), static_cast<uint32_t>(gpu));
  return *used > charged ? *used - charged : 0;
}

void NcclSession::Charge(NcclComm& c, uint64_t before) {
  auto after = Unaccounted(c.gpu);
  if (!after || *after <= before) return;
  uint64_t grew = *after - before;
  LibObject* o = ex_.session().lib_objects().Find(c.id);
  Status st = ex_.Charge(c.gpu, grew);
  if (!st.ok()) {
    Fail(c, ncclSystemError,
         fmt::format("NCCL's memory for the communicator ({} bytes) is beyond the tenant's quota: {}", grew, st.message()));
    return;
  }
  if (o != nullptr) o->charged += grew;
  LOG_DEBUG("NCCL communicator 0x{:x} holds {} more bytes on GPU {}: charged", c.id, grew, c.gpu);
}

// ---- failure -----------------------------------------------------------------------------------

void NcclSession::Fail(NcclComm& c, ncclResult_t error, const std::string& why) {
  if (c.phase == NcclComm::Phase::kFailed) return;
  LOG_WARN("session {}: NCCL communicator 0x{:x} (rank {} of {}) fails: {}", ex_.config().session_id, c.id, c.rank,
           c.nranks, why);
  if (c.real != nullptr) {
    Status set = ex_.SetDevice(c.gpu);
    (void)set;
    ncclResult_t r = real_.ncclCommAbort(c.real);
    if (r != ncclSuccess && r != ncclInProgress) LOG_WARN("ncclCommAbort: {}", ncclGetErrorStringOf(r));
  }
  // The generated operations pass LibObject::bits: from now on a value no library hands out
  // (ids are multiples of 16), which finds this communicator, failed.
  by_bits_.erase(c.bits);
  c.bits = c.id | 1;
  by_bits_[c.bits] = &c;
  c.real = nullptr;
  c.phase = NcclComm::Phase::kFailed;
  c.error = error;
  c.why = why;
  if (LibObject* o = ex_.session().lib_objects().Find(c.id)) {
    o->bits = c.bits;
    ex_.ReleaseCharge(o->gpu, o->charged);  // aborted: NCCL gave its memory back
    o->charged = 0;
  }
}

void NcclSession::Forget(uint64_t id) {
  auto it = comms_.find(id);
  if (it != comms_.end()) {
    by_bits_.erase(it->second->bits);
    comms_.erase(it);
  }
  std::unique_ptr<LibObject> o = ex_.session().lib_objects().Take(id);
  if (o) ex_.ReleaseCharge(o->gpu, o->charged);
}

void NcclSession::Leave(const NcclComm& gone) {
  ControlSource* control = ex_.control();
  if (control == nullptr) return;
  for (const auto& clique : gone.cliques) {
    bool held = false;
    for (const auto& [id, c] : comms_)
      if (c.get() != &gone && c->phase != NcclComm::Phase::kFailed)
        for (const auto& other : c->cliques) held |= other == clique;
    if (held) continue;
    NcclQuestion q;
    q.op = NcclQuestion::Op::kLeave;
    q.request = next_request_++;
    q.clique_server = clique.first;
    q.clique_id = clique.second;
    if (Status st = control->NcclAsk(q); !st.ok()) LOG_DEBUG("cannot leave an NCCL clique: {}", st.message());
  }
}

// ---- collectives ---------------------------------------------------------------------------------

template <typename F>
ncclResult_t NcclSession::Launch(ncclComm_t comm, const char* call, F&& f) {
  // A posted call's failure is its communicator's, reported by ncclCommGetAsyncError (never the
  // session's deferred error, which the next CUDA synchronisation would answer as its own).
  NcclComm* c = ByBits(comm);
  if (c == nullptr) return ncclInvalidArgument;  // (the operation found its object: cannot happen)
  if (c->phase == NcclComm::Phase::kFailed) {
    LOG_DEBUG("{} on a failed communicator: {}", call, c->why);
    return ncclSuccess;  // dropped: the communicator reports its failure
  }
  if (c->phase == NcclComm::Phase::kStarting || c->phase == NcclComm::Phase::kFinalizing ||
      c->phase == NcclComm::Phase::kRegistering) {
    LOG_WARN("{}: the communicator is {} (poll ncclCommGetAsyncError until it answers ncclSuccess)", call, PhaseName(c->phase));
    c->deferred = ncclInvalidUsage;
    return ncclSuccess;
  }
  std::optional<uint64_t> before;
  if (c->launches_measured < kMeasuredLaunches) before = Unaccounted(c->gpu);
  ncclResult_t r = f();
  if (r != ncclSuccess && r != ncclInProgress) {
    LOG_WARN("{}: {}", call, ncclGetErrorStringOf(r));
    if (c->deferred == ncclSuccess) c->deferred = r;
    return ncclSuccess;
  }
  if (before) {
    c->launches_measured++;
    c->launch_before = *before;
    c->measure_launch = true;
  }
  if (in_group_) {
    touched_.insert(c);
    return ncclSuccess;
  }
  if (r == ncclInProgress) {
    c->phase = NcclComm::Phase::kBusy;
    Schedule();
  } else if (c->measure_launch) {
    c->measure_launch = false;
    Charge(*c, c->launch_before);
  }
  return ncclSuccess;
}

ncclResult_t NcclSession::ncclGetUniqueId(ncclUniqueId* uniqueId) { return real_.ncclGetUniqueId(uniqueId); }

ncclResult_t NcclSession::ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  NcclComm* c = ByBits(comm);
  if (c == nullptr) return ncclInvalidArgument;
  if (c->phase == NcclComm::Phase::kFailed) return c->error;
  return real_.ncclCommRegister(c->real, buff, size, handle);
}

ncclResult_t NcclSession::ncclCommDeregister(const ncclComm_t comm, void* handle) {
  NcclComm* c = ByBits(comm);
  if (c == nullptr) return ncclInvalidArgument;
  if (c->phase == NcclComm::Phase::kFailed) return ncclSuccess;  // it went with its communicator
  return real_.ncclCommDeregister(c->real, handle);
}

ncclResult_t NcclSession::ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  NcclComm* c = ByBits(comm);
  if (c == nullptr) return ncclInvalidArgument;
  if (c->phase == NcclComm::Phase::kFailed) return ncclSuccess;
  return real_.ncclRedOpDestroy(op, c->real);
}

#define REMORA_NCCL_LAUNCH(call, ...) \
  Launch(comm, #call, [&] { return real_.call(__VA_ARGS__); })

ncclResult_t NcclSession::ncclAllReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t comm,
                                        cudaStream_t st) {
  return REMORA_NCCL_LAUNCH(ncclAllReduce, s, r, n, t, op, ByBits(comm)->real, st);
}
ncclResult_t NcclSession::ncclBroadcast(const void* s, void* r, size_t n, ncclDataType_t t, int root, ncclComm_t comm,
                                        cudaStream_t st) {
  return REMORA_NCCL_LAUNCH(ncclBroadcast, s, r, n, t, root, ByBits(comm)->real, st);
}
ncclResult_t NcclSession::ncclBcast(void* b, size_t n, ncclDataType_t t, int root, ncclComm_t comm, cudaStream_t st) {
  return REMORA_NCCL_LAUNCH(ncclBcast, b, n, t, root, ByBits(comm)->real, st);
}
ncclResult_t NcclSession::ncclReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op, int root,
                                     ncclComm_t comm, cudaStream_t st) {
  return REMORA_NCCL_LAUNCH(ncclReduce, s, r, n, t, op, root, ByBits(comm)->real, st);
}
ncclResult_t NcclSession::ncclReduceScatter(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                                            ncclComm_t comm, cudaStream_t st) {
  return REMORA_NCCL_LAUNCH(ncclReduceScatter, s, r, n, t, op, ByBits(comm)->real, st);
}
ncclResult_t NcclSession::ncclAllGather(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t comm, cudaStream_t st) {
  return REMORA_NCCL_LAUNCH(ncclAllGather, s, r, n, t, ByBits(comm)->real, st);
}
ncclResult_t NcclSession::ncclAlltoAll(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t comm, cudaStream_t st) {
  return REMORA_NCCL_LAUNCH(ncclAlltoAll, s, r, n, t, ByBits(comm)->real, st);
}
ncclResult_t NcclSession::ncclGather(const void* s, void* r, size_t n, ncclDataType_t t, int root, ncclComm_t comm,
                                     cudaStream_t st) {
  return REMORA_NCCL_LAUNCH(ncclGather, s, r, n, t, root, ByBits(comm)->real, st);
}
ncclResult_t NcclSession::ncclScatter(const void* s, void* r, size_t n, ncclDataType_t t, int root, ncclComm_t comm,
                                      cudaStream_t st) {
  return REMORA_NCCL_LAUNCH(ncclScatter, s, r, n, t, root, ByBits(comm)->real, st);
}
ncclResult_t NcclSession::ncclSend(const void* s, size_t n, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t st) {
  return REMORA_NCCL_LAUNCH(ncclSend, s, n, t, peer, ByBits(comm)->real, st);
}
ncclResult_t NcclSession::ncclRecv(void* r, size_t n, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t st) {
  return REMORA_NCCL_LAUNCH(ncclRecv, r, n, t, peer, ByBits(comm)->real, st);
}
#undef REMORA_NCCL_LAUNCH

// ---- progress --------------------------------------------------------------------------------------

Result<bool> NcclSession::Poll() {
  for (auto& [id, cp] : comms_) {
    NcclComm& c = *cp;
    if (c.phase != NcclComm::Phase::kStarting && c.phase != NcclComm::Phase::kBusy &&
        c.phase != NcclComm::Phase::kFinalizing && c.phase != NcclComm::Phase::kRegistering)
      continue;
    ncclResult_t state = ncclInProgress;
    ncclResult_t r = real_.ncclCommGetAsyncError(c.real, &state);
    if (r != ncclSuccess) state = r;
    if (state == ncclInProgress) continue;
    if (state != ncclSuccess) {
      Fail(c, state, fmt::format("NCCL reported {} while the communicator was {}", ncclGetErrorStringOf(state), PhaseName(c.phase)));
      continue;
    }
    NcclComm::Phase was = c.phase;
    c.phase = NcclComm::Phase::kReady;
    if (was == NcclComm::Phase::kStarting) {
      Ready(c);
    } else if (was == NcclComm::Phase::kFinalizing) {
      c.finalized = true;
    } else if (c.measure_launch) {
      c.measure_launch = false;
      Charge(c, c.launch_before);
    }
  }
  RETURN_IF_ERROR(PollBatches());
  PollDevWaits();
  bool idle = registering_.empty() && asked_.empty() && batches_.empty() && dev_waits_.empty();
  for (const auto& [id, c] : comms_)
    if (c->phase == NcclComm::Phase::kStarting || c->phase == NcclComm::Phase::kBusy ||
        c->phase == NcclComm::Phase::kFinalizing || c->phase == NcclComm::Phase::kRegistering)
      idle = false;
  if (idle) scheduled_ = false;
  return idle;
}

void NcclSession::Ready(NcclComm& c) {
  // A split's or shrink's size and rank are NCCL's to decide.
  int n = 0, rank = -1;
  if (c.nranks <= 0 && real_.ncclCommCount(c.real, &n) == ncclSuccess && real_.ncclCommUserRank(c.real, &rank) == ncclSuccess) {
    c.nranks = n;
    c.rank = rank;
  }
  if (c.measured_start) Charge(c, c.unaccounted_before);
  LOG_DEBUG("session {}: NCCL communicator 0x{:x} is ready (rank {} of {})", ex_.config().session_id, c.id, c.rank, c.nranks);
}

// ---- the supervisor ----------------------------------------------------------------------------------

Result<uint64_t> NcclSession::Ask(NcclQuestion::Op op, const NcclId& id) {
  ControlSource* control = ex_.control();
  if (control == nullptr) return Error(Err::kNotSupported, "NCCL unique ids need the Remora server's supervisor");
  NcclQuestion q;
  q.op = op;
  q.request = next_request_++;
  q.id.assign(id.begin(), id.end());
  RETURN_IF_ERROR(control->NcclAsk(q));
  Schedule();
  return q.request;
}

void NcclSession::OnControl(const ControlEvent& ev) {
  if (ev.kind == ControlEvent::Kind::kNcclLost) {
    for (auto& [id, c] : comms_) {
      if (c->phase == NcclComm::Phase::kFailed) continue;
      for (const auto& [server, number] : c->cliques)
        if (server == ev.clique_server && number == ev.clique_id) {
          Fail(*c, ncclRemoteError, fmt::format("a rank of the communicator is gone: {}", ev.reason));
          break;
        }
    }
    Schedule();
    return;
  }
  if (ev.kind != ControlEvent::Kind::kNcclAnswer) return;
  NcclId id{};
  bool full = ev.nccl_id.size() == id.size();
  if (full) std::memcpy(id.data(), ev.nccl_id.data(), id.size());
  if (auto it = registering_.find(ev.nccl_request); it != registering_.end()) {
    Registering reg = std::move(it->second);
    registering_.erase(it);
    if (ev.nccl_status != ncclSuccess || !full) {
      (void)ex_.PostReply(reg.tag, Status(Domain::kNccl, ev.nccl_status ? ev.nccl_status : uint32_t{ncclInternalError},
                                          "the Remora server did not register the unique id"));
      return;
    }
    resolved_[id] = Resolved{reg.real, ev.clique_server, ev.clique_id};
    (void)ex_.PostReply(reg.tag, Status::Ok(), [&](wire::Reply::Builder& r) {
      r.setApiResult(capnp::Data::Reader(id.data(), id.size()));
    });
    return;
  }
  if (auto it = asked_.find(ev.nccl_request); it != asked_.end()) {
    NcclId cap = it->second;
    asked_.erase(it);
    if (ev.nccl_status != ncclSuccess || !full) {
      refused_[cap] = ev.nccl_status ? static_cast<ncclResult_t>(ev.nccl_status) : ncclInvalidArgument;
    } else {
      resolved_[cap] = Resolved{id, ev.clique_server, ev.clique_id};
    }
    Schedule();
    return;
  }
  LOG_WARN("session {}: an NCCL answer to question {} nobody asked", ex_.config().session_id, ev.nccl_request);
}

ncclResult_t NcclSession::GetUniqueId(OpContext& x) {
  NcclId real{};
  ncclUniqueId made;
  ncclResult_t r = real_.ncclGetUniqueId(&made);
  if (r != ncclSuccess) return r;
  std::memcpy(real.data(), &made, real.size());
  auto request = Ask(NcclQuestion::Op::kRegister, real);
  if (!request.ok()) {
    LOG_WARN("ncclGetUniqueId: {}", request.status().message());
    return ncclSystemError;
  }
  registering_[*request] = Registering{x.tag(), real};
  x.AnswerLater();
  return ncclSuccess;
}

// ---- the session's end ---------------------------------------------------------------------------------

void NcclSession::Teardown() {
  for (auto& [id, c] : comms_) {
    if (c->real == nullptr) continue;
    (void)ex_.SetDevice(c->gpu);
    ncclResult_t r = real_.ncclCommAbort(c->real);
    if (r != ncclSuccess && r != ncclInProgress) LOG_WARN("ncclCommAbort at the session's end: {}", ncclGetErrorStringOf(r));
    by_bits_.erase(c->bits);
    c->bits = c->id | 1;
    by_bits_[c->bits] = c.get();
    c->real = nullptr;
    c->phase = NcclComm::Phase::kFailed;
    c->error = ncclSystemError;
    c->why = "the session ended";
    if (LibObject* o = ex_.session().lib_objects().Find(c->id)) o->bits = c->bits;
  }
  if (auto* emu = dynamic_cast<NcclEmulation*>(&real_)) emu->AbortAll();
  batches_.clear();
  dev_waits_.clear();
  registering_.clear();
  asked_.clear();
}

Status NcclSession::DestroyObject(HandleKind kind, uint64_t bits) {
  // Communicators were aborted by Teardown (registrations and windows went with them).
  if (kind == HandleKind::kNcclComm) {
    if (NcclComm* c = ByBits(reinterpret_cast<ncclComm_t>(static_cast<uintptr_t>(bits))); c != nullptr && c->real != nullptr)
      Fail(*c, ncclSystemError, "the session ended");
  }
  return Status::Ok();
}

std::unique_ptr<NcclSession, void (*)(NcclSession*)> MakeNcclSession(Executor& ex, void* real) {
  return {new NcclSession(ex, *static_cast<gen::nccl::Api*>(real)), [](NcclSession* s) { delete s; }};
}

void* NcclSessionApi(NcclSession* s) { return static_cast<gen::nccl::Api*>(s); }
void NcclTeardown(NcclSession* s) { s->Teardown(); }
void NcclControl(NcclSession* s, const ControlEvent& ev) { s->OnControl(ev); }

const char* ncclGetErrorStringOf(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: return "an unknown NCCL status";
  }
}

}  // namespace remora::worker
