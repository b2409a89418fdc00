// NcclSession's windows and NCCL 2.28's device API (nccl_session.h; protocol/api/nccl.api, "the
// device API"). Every call runs in the server's NCCL; nothing of NCCL's layout is computed here.
// Arguments are laid out as shim/src/libs/lib_nccl_dev.cc writes them (its header says how).
//
// What the client gets back is checked before it leaves: a requirement creator's out-pointers
// must point into the scratch out-handle it was given (they travel as offsets), and the windows
// and device communicators NCCL made are kept per communicator, so that a deregistration or a
// destroy names one of them (a forged or foreign value is refused before NCCL sees it).
#include <algorithm>
#include <cstring>
#include <optional>

#include "nccl_wire.h"
#include "remora/base/log.h"
#include "worker/calls/generated_call.h"
#include "worker/libs/lib_nccl.h"
#include "worker/libs/nccl_session.h"

namespace remora::worker {
namespace {

constexpr uint64_t kMaxRequirements = 4096;  // as the client bounds them

Status Nccl(ncclResult_t r, const std::string& what) { return Status(Domain::kNccl, static_cast<uint32_t>(r), what); }

ncclTeam_t GetTeam(api::ArgReader& in) {
  ncclTeam_t t{};
  t.nRanks = in.Get<int32_t>();
  t.rank = in.Get<int32_t>();
  t.stride = in.Get<int32_t>();
  return t;
}

// The fields ncclDevCommDestroy reads, and those that tell device communicators apart: a
// devComm the client sends back is one the server made when these are equal.
bool SameDevComm(const ncclDevComm& a, const ncclDevComm& b) {
  return a.rank == b.rank && a.nRanks == b.nRanks && a.windowTable == b.windowTable && a.resourceWindow == b.resourceWindow &&
         a.ginSignalBase == b.ginSignalBase && a.ginSignalCount == b.ginSignalCount && a.ginCounterBase == b.ginCounterBase &&
         a.ginCounterCount == b.ginCounterCount && a.ginContextCount == b.ginContextCount;
}

void Send(Executor& ex, uint64_t tag, const Status& st, const api::ArgWriter& out) {
  if (!st.ok()) {
    (void)ex.PostReply(tag, st);
    return;
  }
  (void)ex.PostReply(tag, Status::Ok(), [&](wire::Reply::Builder& r) {
    r.setApiResult(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(out.bytes().data()), out.bytes().size()));
  });
}

}  // namespace

Status NcclSession::DeviceApi(const char* name) {
  if (real_.Lacks(name))
    return Nccl(ncclInvalidUsage, fmt::format("the server's NCCL has no {} (NCCL's device API needs NCCL {}.{}.{})", name,
                                              NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH));
  int version = 0;
  if (real_.ncclGetVersion(&version) != ncclSuccess || version != NCCL_VERSION_CODE)
    return Nccl(ncclInvalidUsage, fmt::format("{}: the server's NCCL is version {}, and Remora serves NCCL's device API for "
                                              "version {} only (its structs' layout changes between releases)",
                                              name, version, NCCL_VERSION_CODE));
  return Status::Ok();
}

Status NcclSession::Usable(const NcclComm& c, const char* call) const {
  if (c.phase == NcclComm::Phase::kFailed) return Nccl(c.error, c.why);
  if (c.phase != NcclComm::Phase::kReady)
    return Nccl(ncclInvalidUsage, fmt::format("{}: the communicator is not ready (poll ncclCommGetAsyncError until it answers "
                                              "ncclSuccess)", call));
  return Status::Ok();
}

Status NcclSession::Complete(OpContext& x, NcclComm& c, std::shared_ptr<void> scratch,
                             std::function<void(NcclComm&, api::ArgWriter&)> reply) {
  // Non-blocking (as the worker makes every communicator): NCCL finishes in the background,
  // writing into `scratch`; answered once ncclCommGetAsyncError says it is done. Even when
  // the call returned ncclSuccess: NCCL 2.28's ncclCommWindowRegister returns its own status,
  // not its group's ncclInProgress, while the group job that writes the window still runs
  // (answered at once, the client got a null window: measured on the H200, 2026-12-02).
  c.phase = NcclComm::Phase::kRegistering;
  dev_waits_.push_back(DevWait{x.tag(), c.id, std::move(scratch), std::move(reply)});
  x.AnswerLater();
  Schedule();
  return Status::Ok();
}

void NcclSession::PollDevWaits() {
  std::erase_if(dev_waits_, [&](DevWait& w) {
    NcclComm* c = ById(w.comm);
    if (c == nullptr) {
      (void)ex_.PostReply(w.tag, Nccl(ncclInvalidUsage, "the communicator was destroyed while NCCL registered"));
      return true;
    }
    if (c->phase == NcclComm::Phase::kFailed) {
      (void)ex_.PostReply(w.tag, Nccl(c->error, c->why));
      return true;
    }
    if (c->phase != NcclComm::Phase::kReady) return false;
    api::ArgWriter out;
    w.reply(*c, out);
    Send(ex_, w.tag, Status::Ok(), out);
    return true;
  });
}

// ---- windows ------------------------------------------------------------------------------------

Status NcclSession::WindowRegister(OpContext& x) {
  ASSIGN_OR_RETURN(NcclComm * c, Named(x));
  uint64_t addr = x.in().Get<uint64_t>();
  uint64_t size = x.in().Get<uint64_t>();
  int flags = x.in().Get<int32_t>();
  RETURN_IF_ERROR(x.EndArgs());
  uint64_t checked = 0;
  if (addr != 0 && size != 0) RETURN_IF_ERROR(x.DevPtr(addr, size, &checked));  // NCCL registers nothing else
  RETURN_IF_ERROR(Usable(*c, "ncclCommWindowRegister"));
  RETURN_IF_ERROR(ex_.SetDevice(c->gpu));
  auto win = std::make_shared<ncclWindow_t>(nullptr);
  ncclResult_t r = real_.ncclCommWindowRegister(c->real, reinterpret_cast<void*>(static_cast<uintptr_t>(checked)), size,
                                                win.get(), flags);
  if (r != ncclSuccess && r != ncclInProgress) return Nccl(r, fmt::format("ncclCommWindowRegister: {}", ncclGetErrorStringOf(r)));
  return Complete(x, *c, win, [win](NcclComm& comm, api::ArgWriter& out) {
    auto bits = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(*win));
    if (bits != 0) comm.windows.insert(bits);
    out.Put<uint64_t>(bits);
  });
}

Status NcclSession::WindowDeregister(OpContext& x) {
  ASSIGN_OR_RETURN(NcclComm * c, Named(x));
  uint64_t win = x.in().Get<uint64_t>();
  RETURN_IF_ERROR(x.EndArgs());
  if (win == 0) return Status::Ok();  // as NCCL: nothing to deregister
  if (!c->windows.count(win))
    return Nccl(ncclInvalidArgument, "ncclCommWindowDeregister: not a window this communicator registered");
  c->windows.erase(win);
  if (c->phase == NcclComm::Phase::kFailed) return Status::Ok();  // it went with its communicator
  RETURN_IF_ERROR(ex_.SetDevice(c->gpu));
  ncclResult_t r = real_.ncclCommWindowDeregister(c->real, reinterpret_cast<ncclWindow_t>(static_cast<uintptr_t>(win)));
  if (r != ncclSuccess) return Nccl(r, fmt::format("ncclCommWindowDeregister: {}", ncclGetErrorStringOf(r)));
  return Status::Ok();
}

// ---- by value -------------------------------------------------------------------------------------

Status NcclSession::Team(OpContext& x) {
  static const char* const kNames[] = {"ncclTeamWorld", "ncclTeamLsa", "ncclTeamRail", "ncclTeamRankToWorld",
                                       "ncclTeamRankToLsa"};
  ASSIGN_OR_RETURN(NcclComm * c, Named(x));
  uint32_t which = x.in().Get<uint32_t>();
  ncclTeam_t team = GetTeam(x.in());
  int rank = x.in().Get<int32_t>();
  RETURN_IF_ERROR(x.EndArgs());
  if (which > 4) return x.Malformed("an unknown team function");
  RETURN_IF_ERROR(DeviceApi(kNames[which]));
  RETURN_IF_ERROR(Usable(*c, kNames[which]));
  RETURN_IF_ERROR(ex_.SetDevice(c->gpu));
  int32_t v[3] = {0, 0, 0};
  if (which <= 2) {
    ncclTeam_t t = which == 0 ? real_.ncclTeamWorld(c->real) : which == 1 ? real_.ncclTeamLsa(c->real) : real_.ncclTeamRail(c->real);
    v[0] = t.nRanks;
    v[1] = t.rank;
    v[2] = t.stride;
  } else {
    v[0] = which == 3 ? real_.ncclTeamRankToWorld(c->real, team, rank) : real_.ncclTeamRankToLsa(c->real, team, rank);
  }
  for (int32_t i : v) x.out().Put<int32_t>(i);
  return Status::Ok();
}

Status NcclSession::CalcSlots(OpContext& x) {
  int max_elts = x.in().Get<int32_t>();
  int max_elt_size = x.in().Get<int32_t>();
  RETURN_IF_ERROR(x.EndArgs());
  RETURN_IF_ERROR(DeviceApi("ncclLLA2ACalcSlots"));
  x.out().Put<int32_t>(real_.ncclLLA2ACalcSlots(max_elts, max_elt_size));
  return Status::Ok();
}

// ---- resource requirements ----------------------------------------------------------------------

Status NcclSession::Requirement(OpContext& x, uint32_t fn) {
  namespace wire_nccl = ::remora::gen::nccl;
  NcclComm* c = nullptr;
  if (fn == wire_nccl::k_ncclGinBarrierCreateRequirement) {
    ASSIGN_OR_RETURN(c, Named(x));
  }
  ncclTeam_t team{};
  if (fn != wire_nccl::k_ncclLLA2ACreateRequirement) team = GetTeam(x.in());
  int a = x.in().Get<int32_t>();
  int b = fn == wire_nccl::k_ncclLLA2ACreateRequirement ? x.in().Get<int32_t>() : 0;
  RETURN_IF_ERROR(x.EndArgs());
  // The scratch out-handle: NCCL's out-pointers must land in it.
  union {
    ncclLsaBarrierHandle_t lsa;
    ncclGinBarrierHandle_t gin;
    ncclLLA2AHandle_t a2a;
  } handle;
  std::memset(&handle, 0, sizeof(handle));
  size_t size = 0;
  ncclDevResourceRequirements_t req;
  std::memset(&req, 0, sizeof(req));
  ncclResult_t r = ncclSuccess;
  const char* call = "";
  if (fn == wire_nccl::k_ncclLsaBarrierCreateRequirement) {
    call = "ncclLsaBarrierCreateRequirement";
    RETURN_IF_ERROR(DeviceApi(call));
    size = sizeof(handle.lsa);
    r = real_.ncclLsaBarrierCreateRequirement(team, a, &handle.lsa, &req);
  } else if (fn == wire_nccl::k_ncclGinBarrierCreateRequirement) {
    call = "ncclGinBarrierCreateRequirement";
    RETURN_IF_ERROR(DeviceApi(call));
    RETURN_IF_ERROR(Usable(*c, call));
    RETURN_IF_ERROR(ex_.SetDevice(c->gpu));
    size = sizeof(handle.gin);
    r = real_.ncclGinBarrierCreateRequirement(c->real, team, a, &handle.gin, &req);
  } else {
    call = "ncclLLA2ACreateRequirement";
    RETURN_IF_ERROR(DeviceApi(call));
    size = sizeof(handle.a2a);
    r = real_.ncclLLA2ACreateRequirement(a, b, &handle.a2a, &req);
  }
  if (r != ncclSuccess) return Nccl(r, fmt::format("{}: {}", call, ncclGetErrorStringOf(r)));
  const auto base = reinterpret_cast<uintptr_t>(&handle);
  int64_t off[3] = {-1, -1, -1};
  const void* ptrs[3] = {req.outBufferHandle, req.outGinSignalStart, req.outGinCounterStart};
  for (int i = 0; i < 3; i++) {
    auto p = reinterpret_cast<uintptr_t>(ptrs[i]);
    if (p == 0) continue;
    if (p < base || p - base + sizeof(uint32_t) > size)
      return Nccl(ncclInternalError, fmt::format("{}: the server's NCCL aimed an out-pointer outside the out-handle", call));
    off[i] = static_cast<int64_t>(p - base);
  }
  if (req.next != nullptr) return Nccl(ncclInternalError, fmt::format("{}: the server's NCCL chained the requirement", call));
  api::ArgWriter& out = x.out();
  out.PutArray(&handle, size, 1);
  out.Put<uint64_t>(req.bufferSize);
  out.Put<uint64_t>(req.bufferAlign);
  out.Put<int32_t>(req.ginSignalCount);
  out.Put<int32_t>(req.ginCounterCount);
  for (int64_t o : off) out.Put<int64_t>(o);
  return Status::Ok();
}

// ---- device communicators -------------------------------------------------------------------------

namespace {

// ncclDevCommCreate's arguments rebuilt on the server, the out-pointers aimed at these vectors;
// alive until NCCL finished (it writes them from its background thread).
struct DevCommScratch {
  ncclDevCommRequirements_t reqs{};
  std::vector<ncclDevResourceRequirements_t> res;
  std::vector<ncclTeamRequirements_t> teams;
  std::vector<uint32_t> handles, signals, counters;
  std::vector<ncclMultimemHandle_t> bases;
  ncclDevComm out{};
};

Status ReadDevCommRequirements(OpContext& x, DevCommScratch* s) {
  api::ArgReader& in = x.in();
  ncclDevCommRequirements_t& q = s->reqs;
  std::memset(&q, 0, sizeof(q));
  q.lsaMultimem = in.Get<uint8_t>() != 0;
  q.barrierCount = in.Get<int32_t>();
  q.lsaBarrierCount = in.Get<int32_t>();
  q.railGinBarrierCount = in.Get<int32_t>();
  q.lsaLLA2ABlockCount = in.Get<int32_t>();
  q.lsaLLA2ASlotCount = in.Get<int32_t>();
  q.ginForceEnable = in.Get<uint8_t>() != 0;
  q.ginContextCount = in.Get<int32_t>();
  q.ginSignalCount = in.Get<int32_t>();
  q.ginCounterCount = in.Get<int32_t>();
  uint64_t n = in.Get<uint64_t>();
  if (n > kMaxRequirements) return Nccl(ncclInvalidArgument, "resourceRequirementsList is longer than 4096 entries");
  s->res.assign(n, ncclDevResourceRequirements_t{});
  s->handles.assign(n, 0);
  s->signals.assign(n, 0);
  s->counters.assign(n, 0);
  for (uint64_t i = 0; i < n && in.ok(); i++) {
    ncclDevResourceRequirements_t& r = s->res[i];
    r.bufferSize = in.Get<uint64_t>();
    r.bufferAlign = in.Get<uint64_t>();
    r.ginSignalCount = in.Get<int32_t>();
    r.ginCounterCount = in.Get<int32_t>();
    uint8_t outs = in.Get<uint8_t>();
    r.outBufferHandle = (outs & 1) ? &s->handles[i] : nullptr;
    r.outGinSignalStart = (outs & 2) ? &s->signals[i] : nullptr;
    r.outGinCounterStart = (outs & 4) ? &s->counters[i] : nullptr;
    r.next = i + 1 < n ? &s->res[i + 1] : nullptr;
  }
  uint64_t m = in.Get<uint64_t>();
  if (m > kMaxRequirements) return Nccl(ncclInvalidArgument, "teamRequirementsList is longer than 4096 entries");
  s->teams.assign(m, ncclTeamRequirements_t{});
  s->bases.assign(m, ncclMultimemHandle_t{});
  for (uint64_t i = 0; i < m && in.ok(); i++) {
    ncclTeamRequirements_t& t = s->teams[i];
    t.team = GetTeam(in);
    t.multimem = in.Get<uint8_t>() != 0;
    t.outMultimemHandle = in.Get<uint8_t>() != 0 ? &s->bases[i] : nullptr;
    t.next = i + 1 < m ? &s->teams[i + 1] : nullptr;
  }
  q.resourceRequirementsList = n > 0 ? s->res.data() : nullptr;
  q.teamRequirementsList = m > 0 ? s->teams.data() : nullptr;
  return x.EndArgs();
}

}  // namespace

Status NcclSession::DevCommCreate(OpContext& x) {
  ASSIGN_OR_RETURN(NcclComm * c, Named(x));
  auto s = std::make_shared<DevCommScratch>();
  RETURN_IF_ERROR(ReadDevCommRequirements(x, s.get()));
  RETURN_IF_ERROR(DeviceApi("ncclDevCommCreate"));
  RETURN_IF_ERROR(Usable(*c, "ncclDevCommCreate"));
  RETURN_IF_ERROR(ex_.SetDevice(c->gpu));
  // The resource buffer NCCL allocates is charged to the communicator (returned when it ends).
  std::optional<uint64_t> before = Unaccounted(c->gpu);
  ncclResult_t r = real_.ncclDevCommCreate(c->real, &s->reqs, &s->out);
  if (r != ncclSuccess && r != ncclInProgress) return Nccl(r, fmt::format("ncclDevCommCreate: {}", ncclGetErrorStringOf(r)));
  return Complete(x, *c, s, [this, s, before](NcclComm& comm, api::ArgWriter& out) {
    if (before) Charge(comm, *before);
    comm.devcomms.push_back(std::make_unique<ncclDevComm>(s->out));
    out.PutArray(&s->out, sizeof(ncclDevComm), 1);
    out.PutArray(s->handles.data(), s->handles.size(), sizeof(uint32_t));
    out.PutArray(s->signals.data(), s->signals.size(), sizeof(uint32_t));
    out.PutArray(s->counters.data(), s->counters.size(), sizeof(uint32_t));
    out.Put<uint64_t>(s->bases.size());
    for (const ncclMultimemHandle_t& b : s->bases) out.Put<uint64_t>(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(b.mcBasePtr)));
  });
}

Status NcclSession::DevCommDestroy(OpContext& x) {
  ASSIGN_OR_RETURN(NcclComm * c, Named(x));
  std::vector<std::byte> bytes;
  RETURN_IF_ERROR(x.in().GetArray(&bytes));
  RETURN_IF_ERROR(x.EndArgs());
  if (bytes.size() != sizeof(ncclDevComm)) return x.Malformed("a device communicator of the wrong size");
  ncclDevComm sent;
  std::memcpy(static_cast<void*>(&sent), bytes.data(), sizeof(sent));
  auto it = std::find_if(c->devcomms.begin(), c->devcomms.end(), [&](const auto& d) { return SameDevComm(*d, sent); });
  if (it == c->devcomms.end())
    return Nccl(ncclInvalidArgument,
                "ncclDevCommDestroy: not a device communicator the server made for this communicator (destroyed already?)");
  std::unique_ptr<ncclDevComm> mine = std::move(*it);
  c->devcomms.erase(it);
  if (c->phase == NcclComm::Phase::kFailed) return Status::Ok();  // it went with its communicator
  RETURN_IF_ERROR(DeviceApi("ncclDevCommDestroy"));
  RETURN_IF_ERROR(ex_.SetDevice(c->gpu));
  // NCCL gets the server's own copy, never the client's bytes.
  ncclResult_t r = real_.ncclDevCommDestroy(c->real, mine.get());
  if (r != ncclSuccess) return Nccl(r, fmt::format("ncclDevCommDestroy: {}", ncclGetErrorStringOf(r)));
  return Status::Ok();
}

}  // namespace remora::worker
