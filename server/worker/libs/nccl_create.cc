// NcclSession's hand-written operations that create communicators (init, split, shrink, alone
// or in a group) and run groups of collectives (nccl_session.h); nccl_comm_ops.cc has the others.
// Their arguments are laid out as shim/src/libs/lib_nccl_comm.cc writes them.
#include <cstring>

#include "remora/base/log.h"
#include "nccl_wire.h"
#include "worker/calls/generated_call.h"
#include "worker/libs/lib_nccl.h"
#include "worker/libs/nccl_session.h"

namespace remora::worker {
namespace gen::nccl {
const OpTable& Ops();
}  // namespace gen::nccl

namespace wire_nccl = ::remora::gen::nccl;  // the wire numbers (nccl_wire.h)

namespace {

constexpr size_t kMaxCommunicators = 1024;  // per session: each holds GPU memory and threads
constexpr uint64_t kMaxGroupCalls = 65536;
constexpr size_t kMaxName = 256;

Status Nccl(ncclResult_t r, const std::string& what) { return Status(Domain::kNccl, static_cast<uint32_t>(r), what); }

bool IsCreate(uint32_t f) {
  return f == wire_nccl::k_ncclCommInitRank || f == wire_nccl::k_ncclCommInitRankConfig || f == wire_nccl::k_ncclCommInitRankScalable ||
         f == wire_nccl::k_ncclCommSplit || f == wire_nccl::k_ncclCommShrink;
}

}  // namespace

ncclConfig_t NcclSession::Config::Make() const {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  if (present) {
    c.cgaClusterSize = v[1];
    c.minCTAs = v[2];
    c.maxCTAs = v[3];
    c.splitShare = v[4];
    c.trafficClass = v[5];
    c.collnetEnable = v[6];
    c.CTAPolicy = v[7];
    c.shrinkShare = v[8];
    c.nvlsCTAs = v[9];
    c.nChannelsPerNetPeer = v[10];
    c.nvlinkCentricSched = v[11];
    c.netName = has_net ? net.c_str() : nullptr;
    c.commName = has_name ? name.c_str() : nullptr;
  }
  c.blocking = 0;  // the worker's loop never waits for another rank
  return c;
}

Result<NcclComm*> NcclSession::Named(OpContext& x) {
  ncclComm_t h = nullptr;
  LibObject* o = nullptr;
  RETURN_IF_ERROR(x.Object(HandleKind::kNcclComm, false, &h, &o));
  NcclComm* c = ByBits(h);
  if (c == nullptr) return Error(Err::kInvalidValue, "0x{:x} is not an NCCL communicator of this session", o ? o->id : 0);
  return c;
}

Status NcclSession::ParseCreate(OpContext& x, uint32_t fn, CreateCall* c) {
  api::ArgReader& in = x.in();
  c->function = fn;
  auto config = [&](Config* cfg) -> Status {
    cfg->present = in.Get<uint8_t>() != 0;
    if (!cfg->present) return Status::Ok();
    for (int32_t& v : cfg->v) v = in.Get<int32_t>();
    for (auto [has, text] : {std::pair{&cfg->has_net, &cfg->net}, std::pair{&cfg->has_name, &cfg->name}}) {
      *has = in.Get<uint8_t>() != 0;
      if (*has) {
        RETURN_IF_ERROR(in.GetString(text));
        if (text->size() > kMaxName || text->find('\0') != std::string::npos) return x.Malformed("a name in the NCCL configuration");
      }
    }
    return Status::Ok();
  };
  if (fn == wire_nccl::k_ncclCommSplit || fn == wire_nccl::k_ncclCommShrink) {
    ASSIGN_OR_RETURN(NcclComm * parent, Named(x));
    c->parent = parent->id;
    c->gpu = parent->gpu;
    if (fn == wire_nccl::k_ncclCommSplit) {
      c->color = in.Get<int32_t>();
      c->key = in.Get<int32_t>();
      c->id = in.Get<uint64_t>();
    } else {
      RETURN_IF_ERROR(in.GetArray(&c->exclude));
      c->id = in.Get<uint64_t>();
    }
    RETURN_IF_ERROR(config(&c->config));
    if (fn == wire_nccl::k_ncclCommShrink) c->flags = in.Get<int32_t>();
    RETURN_IF_ERROR(x.EndArgs());
    c->app_blocking = c->config.present ? c->config.AppBlocking() : parent->app_blocking;
    if (c->id != 0) RETURN_IF_ERROR(x.CheckNewObject(HandleKind::kNcclComm, c->id));
    else if (fn == wire_nccl::k_ncclCommShrink || c->color != NCCL_SPLIT_NOCOLOR) return x.Malformed("a communicator without an id");
    return Status::Ok();
  }
  c->id = in.Get<uint64_t>();
  RETURN_IF_ERROR(x.Device(&c->gpu));
  c->nranks = in.Get<int32_t>();
  c->rank = in.Get<int32_t>();
  RETURN_IF_ERROR(in.GetArray(&c->ids));  // 128 bytes each
  RETURN_IF_ERROR(config(&c->config));
  RETURN_IF_ERROR(x.EndArgs());
  RETURN_IF_ERROR(x.CheckNewObject(HandleKind::kNcclComm, c->id));
  if (c->ids.empty()) return x.Malformed("no unique id");
  if (c->nranks < 1 || c->rank < 0 || c->rank >= c->nranks || c->ids.size() > static_cast<size_t>(c->nranks))
    return Nccl(ncclInvalidArgument, "nranks, rank or the number of unique ids is out of range");
  c->app_blocking = c->config.AppBlocking();
  return Status::Ok();
}

// ---- creating ------------------------------------------------------------------------------------

Status NcclSession::Create(OpContext& x, uint32_t fn) {
  auto b = std::make_unique<Batch>();
  b->creates.emplace_back();
  RETURN_IF_ERROR(ParseCreate(x, fn, &b->creates[0]));
  b->tag = x.tag();
  b->reply = Batch::Reply::kStateRanks;
  b->wait_ready = b->creates[0].app_blocking && b->creates[0].id != 0;
  x.AnswerLater();
  return Submit(x, std::move(b));
}

Status NcclSession::Group(OpContext& x, bool wait) {
  uint64_t n = x.in().Get<uint64_t>();
  if (n > kMaxGroupCalls) return x.Malformed("a group of too many calls");
  std::vector<std::pair<uint32_t, std::vector<std::byte>>> calls;
  for (uint64_t i = 0; i < n && x.in().ok(); i++) {
    uint32_t fn = x.in().Get<uint32_t>();
    std::vector<std::byte> args;
    RETURN_IF_ERROR(x.in().GetArray(&args));
    calls.emplace_back(fn, std::move(args));
  }
  RETURN_IF_ERROR(x.EndArgs());
  const OpTable& table = gen::nccl::Ops();
  size_t creates = 0;
  for (const auto& [fn, args] : calls) {
    if (IsCreate(fn)) {
      creates++;
      continue;
    }
    const OpEntry* op = table.Find(fn);
    if (op == nullptr || op->cls != CallClass::kOrdered || fn == wire_nccl::k_remoraNcclGroup)
      return x.Malformed("a call that cannot be part of an NCCL group");
  }
  if (creates > 0 && creates != calls.size())
    return Nccl(ncclInvalidUsage, "a group holds both communicator creation and collectives (NCCL does not allow it)");
  if (creates > 0) {
    auto b = std::make_unique<Batch>();
    b->group = true;
    b->creates.resize(calls.size());
    for (size_t i = 0; i < calls.size(); i++) {
      OpContext sub(ex_, x.request(), api::ArgReader(calls[i].second.data(), calls[i].second.size()), NcclSessionApi(this),
                    Domain::kNccl);
      RETURN_IF_ERROR(ParseCreate(sub, calls[i].first, &b->creates[i]));
      b->wait_ready |= wait && b->creates[i].app_blocking && b->creates[i].id != 0;
    }
    if (wait) {
      b->tag = x.tag();
      x.AnswerLater();
    }
    return Submit(x, std::move(b));
  }
  // Collectives and point-to-point calls: between the real ncclGroupStart and ncclGroupEnd.
  in_group_ = true;
  touched_.clear();
  Status first;
  ncclResult_t r = real_.ncclGroupStart();
  if (r != ncclSuccess) first = Nccl(r, "ncclGroupStart");
  for (size_t i = 0; i < calls.size() && first.ok(); i++) {
    OpContext sub(ex_, x.request(), api::ArgReader(calls[i].second.data(), calls[i].second.size()), NcclSessionApi(this),
                  Domain::kNccl);
    const OpEntry* op = table.Find(calls[i].first);
    Status st = op->run(sub);
    if (op->launches && st.ok()) ex_.NoteGpuWork(sub.launch_stream());
    sub.Settle(st.ok());
    if (!st.ok()) first = st;
  }
  r = real_.ncclGroupEnd();
  in_group_ = false;
  if (r != ncclSuccess && r != ncclInProgress && first.ok()) first = Nccl(r, "ncclGroupEnd");
  for (NcclComm* c : touched_) {
    if (c->phase == NcclComm::Phase::kFailed) continue;
    if (!first.ok() && !wait) {
      c->deferred = first.domain() == Domain::kNccl ? static_cast<ncclResult_t>(first.raw()) : ncclInvalidArgument;
    } else if (r == ncclInProgress) {
      c->phase = NcclComm::Phase::kBusy;
    } else if (c->measure_launch) {
      c->measure_launch = false;
      Charge(*c, c->launch_before);
    }
  }
  if (r == ncclInProgress) Schedule();
  touched_.clear();
  if (!first.ok()) LOG_WARN("session {}: an NCCL group failed: {}", ex_.config().session_id, first.ToString());
  // A posted group's failure is its communicators' (ncclCommGetAsyncError reports it).
  return wait ? first : Status::Ok();
}

Status NcclSession::Submit(OpContext&, std::unique_ptr<Batch> b) {
  for (const CreateCall& c : b->creates)
    for (const NcclId& id : c.ids) {
      if (resolved_.count(id) || refused_.count(id)) continue;
      bool asked = false;
      for (const auto& [request, cap] : asked_) asked |= cap == id;
      if (asked) continue;
      ASSIGN_OR_RETURN(uint64_t request, Ask(NcclQuestion::Op::kResolve, id));
      asked_[request] = id;
    }
  batches_.push_back(std::move(b));
  Schedule();
  return PollBatches();
}

Status NcclSession::PollBatches() {
  for (auto& bp : batches_) {
    Batch& b = *bp;
    if (!b.ran) {
      bool waiting = false;
      ncclResult_t refused = ncclSuccess;
      for (const CreateCall& c : b.creates)
        for (const NcclId& id : c.ids) {
          if (auto it = refused_.find(id); it != refused_.end()) refused = it->second;
          else if (!resolved_.count(id)) waiting = true;
        }
      if (refused != ncclSuccess) {
        Answer(b, Nccl(refused, "the unique id is not valid here: it was made for another tenant, its session ended, "
                                "or its server cannot be reached from this one"));
        b.done = true;
        continue;
      }
      if (waiting) continue;
      Run(b);
      if (b.done) continue;
    }
    if (!b.wait_ready) continue;
    const NcclComm* failed = nullptr;
    bool ready = true;
    for (uint64_t id : b.comms) {
      const NcclComm* c = ById(id);
      if (c == nullptr || c->phase == NcclComm::Phase::kFailed) failed = c;
      else if (c->phase != NcclComm::Phase::kReady) ready = false;
      if (c == nullptr) break;
    }
    if (failed != nullptr || (ready && !b.comms.empty() && ById(b.comms[0]) == nullptr)) {
      Status st = failed ? Nccl(failed->error, failed->why) : Nccl(ncclInternalError, "the communicator is gone");
      if (b.reply == Batch::Reply::kStateRanks || b.group)
        for (uint64_t id : b.comms) Forget(id);  // a blocking create that failed made nothing
      Answer(b, st);
      b.done = true;
    } else if (ready) {
      Answer(b, Status::Ok());
      b.done = true;
    }
  }
  std::erase_if(batches_, [](const std::unique_ptr<Batch>& b) { return b->done; });
  return Status::Ok();
}

void NcclSession::Run(Batch& b) {
  Status first;
  b.ran = true;
  if (b.group) {
    ncclResult_t r = real_.ncclGroupStart();
    if (r != ncclSuccess) first = Nccl(r, "ncclGroupStart");
  }
  for (CreateCall& c : b.creates) {
    if (!first.ok()) break;
    Status st = StartCreate(b, c);
    if (!st.ok()) first = st;
  }
  if (b.group) {
    ncclResult_t r = real_.ncclGroupEnd();
    if (r != ncclSuccess && r != ncclInProgress && first.ok()) first = Nccl(r, "ncclGroupEnd");
  }
  if (!first.ok()) {
    for (uint64_t id : b.comms) {
      if (NcclComm* c = ById(id)) Fail(*c, first.domain() == Domain::kNccl ? static_cast<ncclResult_t>(first.raw()) : ncclInternalError, first.message());
      if (b.tag != 0) Forget(id);  // the client forgets it too; a posted one stays, failed, for its queries
    }
    Answer(b, first);
    b.done = true;
    return;
  }
  Schedule();
  if (!b.wait_ready) {
    Answer(b, Status::Ok());
    b.done = true;
  }
}

Status NcclSession::StartCreate(Batch& b, CreateCall& cc) {
  if (comms_.size() >= kMaxCommunicators)
    return Nccl(ncclInvalidUsage, fmt::format("the session holds {} NCCL communicators, the most it may", kMaxCommunicators));
  RETURN_IF_ERROR(ex_.SetDevice(cc.gpu));
  ncclConfig_t cfg = cc.config.Make();
  std::optional<uint64_t> before = Unaccounted(cc.gpu);
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclSuccess;
  std::vector<std::pair<uint64_t, uint64_t>> cliques;
  int nranks = cc.nranks, rank = cc.rank;
  if (cc.function == wire_nccl::k_ncclCommSplit || cc.function == wire_nccl::k_ncclCommShrink) {
    NcclComm* parent = ById(cc.parent);
    if (parent == nullptr || parent->phase == NcclComm::Phase::kFailed)
      return Nccl(parent ? parent->error : ncclInvalidArgument, parent ? parent->why : "the parent communicator is gone");
    cliques = parent->cliques;
    nranks = 0;
    rank = -1;
    // Without a configuration NCCL gives the child the parent's (non-blocking here).
    if (cc.function == wire_nccl::k_ncclCommSplit)
      r = real_.ncclCommSplit(parent->real, cc.color, cc.key, &comm, cc.config.present ? &cfg : nullptr);
    else
      r = real_.ncclCommShrink(parent->real, cc.exclude.data(), static_cast<int>(cc.exclude.size()), &comm,
                               cc.config.present ? &cfg : nullptr, cc.flags);
  } else {
    std::vector<ncclUniqueId> ids(cc.ids.size());
    for (size_t i = 0; i < cc.ids.size(); i++) {
      const Resolved& res = resolved_.at(cc.ids[i]);
      std::memcpy(&ids[i], res.real.data(), sizeof(ncclUniqueId));
      cliques.emplace_back(res.clique_server, res.clique_id);
    }
    if (ids.size() == 1) r = real_.ncclCommInitRankConfig(&comm, cc.nranks, ids[0], cc.rank, &cfg);
    else r = real_.ncclCommInitRankScalable(&comm, cc.nranks, cc.rank, static_cast<int>(ids.size()), ids.data(), &cfg);
  }
  if (r != ncclSuccess && r != ncclInProgress) {
    if (comm != nullptr) (void)real_.ncclCommAbort(comm);
    return Nccl(r, fmt::format("creating the communicator: {}", ncclGetErrorStringOf(r)));
  }
  if (cc.id == 0) return Status::Ok();  // NCCL_SPLIT_NOCOLOR: this rank took part, nothing made
  if (comm == nullptr) return Nccl(ncclInternalError, "NCCL made no communicator");
  auto c = std::make_unique<NcclComm>();
  c->id = cc.id;
  c->real = comm;
  c->bits = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(comm));
  c->gpu = cc.gpu;
  c->nranks = nranks;
  c->rank = rank;
  c->app_blocking = cc.app_blocking;
  c->phase = NcclComm::Phase::kStarting;
  c->cliques = std::move(cliques);
  if (before) {
    c->unaccounted_before = *before;
    c->measured_start = true;
  }
  LibObject* o = ex_.session().lib_objects().Add(cc.id, HandleKind::kNcclComm, Domain::kNccl, c->bits, cc.gpu);
  o->Extra<NcclCommRef>().comm = Adopt(std::move(c));
  b.comms.push_back(cc.id);
  return Status::Ok();
}

void NcclSession::Answer(Batch& b, const Status& st) {
  if (b.tag == 0) {
    if (!st.ok()) LOG_WARN("session {}: posted NCCL work failed: {}", ex_.config().session_id, st.ToString());
    return;
  }
  if (!st.ok()) {
    (void)ex_.PostReply(b.tag, st);
    return;
  }
  if (b.reply == Batch::Reply::kPlain) {
    (void)ex_.PostReply(b.tag, Status::Ok());
    return;
  }
  const NcclComm* c = b.comms.empty() ? nullptr : ById(b.comms[0]);
  int32_t state = ncclSuccess, nranks = 0, rank = -1;
  if (c != nullptr) {
    if (c->phase == NcclComm::Phase::kFailed) state = c->error;
    else if (c->phase != NcclComm::Phase::kReady) state = ncclInProgress;
    nranks = c->nranks;
    rank = c->rank;
  }
  api::ArgWriter out;
  out.Put(state);
  if (b.reply == Batch::Reply::kStateRanks) {
    out.Put(nranks);
    out.Put(rank);
  }
  (void)ex_.PostReply(b.tag, Status::Ok(), [&](wire::Reply::Builder& r) {
    r.setApiResult(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(out.bytes().data()), out.bytes().size()));
  });
}

}  // namespace remora::worker
