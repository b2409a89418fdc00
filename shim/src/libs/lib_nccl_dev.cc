// NCCL 2.28's device API and symmetric windows in the client (protocol/api/nccl.api, "the device
// API"): the hand-written stubs of its `hand` entries and the by-value functions (`custom`).
// Everything runs in the server's NCCL; the client sizes nothing itself. It copies what the
// server answers into the caller's structs: an out-pointer the server's NCCL aimed into its
// scratch out-handle comes back as an offset and is aimed at the caller's out-handle.
//
// Arguments on the wire (server/worker/libs/nccl_device.cc reads the same):
//   window register: u64 comm, u64 buff, u64 size, i32 flags; out: u64 NCCL's ncclWindow_t
//   window deregister: u64 comm, u64 window
//   requirement (LSA barrier / GIN barrier / LL all-to-all): [u64 comm (GIN)], [3 i32 team
//        (LSA, GIN)], i32 count, [i32 nSlots (LL)]; out: the out-handle's bytes (array),
//        u64 bufferSize, u64 bufferAlign, i32 ginSignalCount, i32 ginCounterCount, then i64
//        outBufferHandle, outGinSignalStart, outGinCounterStart: offsets into the out-handle,
//        -1 for NULL
//   devcomm create: u64 comm, the fixed fields (u8 lsaMultimem, i32 barrierCount,
//        lsaBarrierCount, railGinBarrierCount, lsaLLA2ABlockCount, lsaLLA2ASlotCount,
//        u8 ginForceEnable, i32 ginContextCount, ginSignalCount, ginCounterCount), u64 n, n
//        resources (u64 bufferSize, u64 bufferAlign, i32 ginSignalCount, i32 ginCounterCount,
//        u8 out-pointer bits: 1 buffer handle, 2 signal start, 4 counter start), u64 m, m
//        teams (3 i32 team, u8 multimem, u8 has outMultimemHandle); out: ncclDevComm's bytes
//        (array), then arrays of u32 buffer handles, signal starts, counter starts (one per
//        resource) and u64 multimem bases (one per team)
//   devcomm destroy: u64 comm, ncclDevComm's bytes (array)
#include <cstring>
#include <set>
#include <vector>

#include "lib_nccl.h"
#include "nccl_client.h"
#include "nccl_device_types.h"

namespace remora::gen::nccl {
namespace {

using shim::CallClass;
using shim::RemoteCall;

// The longest requirement list ncclDevCommCreate sends (NCCL's own are a handful of entries).
constexpr size_t kMaxRequirements = 4096;

Status Comm(RemoteCall& c, ncclComm_t comm) {
  if (comm == nullptr) return c.Fail(ncclInvalidArgument, "comm is NULL");
  CommMirror m;
  if (!FindComm(CommId(comm), &m)) return c.Fail(ncclInvalidArgument, "comm is not a communicator of this process");
  return c.Object(HandleKind::kNcclComm, CommId(comm), false);
}

void PutTeam(RemoteCall& c, const ncclTeam_t& t) {
  c.Put<int32_t>(t.nRanks);
  c.Put<int32_t>(t.rank);
  c.Put<int32_t>(t.stride);
}

// The reply of a requirement creator, written into the caller's out-handle `handle` (`size`
// bytes) and `req`, its out-pointers aimed into `handle`.
Status ReadRequirement(api::ArgReader& r, void* handle, size_t size, ncclDevResourceRequirements_t* req) {
  std::vector<std::byte> bytes;
  RETURN_IF_ERROR(r.GetArray(&bytes));
  ncclDevResourceRequirements_t got{};
  got.bufferSize = r.Get<uint64_t>();
  got.bufferAlign = r.Get<uint64_t>();
  got.ginSignalCount = r.Get<int32_t>();
  got.ginCounterCount = r.Get<int32_t>();
  int64_t off[3];
  for (int64_t& o : off) o = r.Get<int64_t>();
  RETURN_IF_ERROR(r.Finish());
  if (bytes.size() != size) return Status(Domain::kNccl, ncclInternalError, "the server's out-handle has another size");
  for (int i = 0; i < 3; i++)
    if (off[i] < -1 || (off[i] >= 0 && static_cast<uint64_t>(off[i]) + sizeof(uint32_t) > size))
      return Status(Domain::kNccl, ncclInternalError, "the server answered an out-pointer outside the out-handle");
  auto at = [&](int i) -> char* { return off[i] < 0 ? nullptr : static_cast<char*>(handle) + off[i]; };
  got.next = nullptr;
  got.outBufferHandle = reinterpret_cast<ncclDevResourceHandle_t*>(at(0));
  got.outGinSignalStart = reinterpret_cast<ncclGinSignal_t*>(at(1));
  got.outGinCounterStart = reinterpret_cast<ncclGinCounter_t*>(at(2));
  std::memcpy(handle, bytes.data(), size);
  *req = got;
  return Status::Ok();
}

// A list of the application's, walked with its length bounded and cycles refused.
template <typename T>
Status Walk(RemoteCall& c, T* head, const char* what, std::vector<const T*>* out) {
  std::set<const T*> seen;
  for (const T* p = head; p != nullptr; p = p->next) {
    if (!seen.insert(p).second)
      return c.Fail(ncclInvalidArgument, fmt::format("reqs->{} has a cycle", what).c_str());
    if (out->size() >= kMaxRequirements)
      return c.Fail(ncclInvalidArgument, fmt::format("reqs->{} is longer than {} entries", what, kMaxRequirements).c_str());
    out->push_back(p);
  }
  return Status::Ok();
}

// A by-value function's failure: NCCL's own failure value, and the reason for ncclGetLastError.
template <typename T>
T Lost(const Status& st, const char* call, T value) {
  SetLastError(fmt::format("{}: {}", call, st.message()));
  return value;
}

// The by-value team functions (which: 0 world, 1 lsa, 2 rail, 3 rank to world, 4 rank to lsa).
Status Team(const char* call, uint32_t which, ncclComm_t comm, const ncclTeam_t& team, int rank, int32_t out[3]) {
  RemoteCall c(shim::CallCtx{false, call}, kLibrary, k_remoraNcclTeam, CallClass::kSync, Domain::kNccl);
  RETURN_IF_ERROR(Comm(c, comm));
  c.Put<uint32_t>(which);
  PutTeam(c, team);
  c.Put<int32_t>(rank);
  return c.Invoke([&](api::ArgReader& r) {
    for (int i = 0; i < 3; i++) out[i] = r.Get<int32_t>();
    return r.Finish();
  });
}

ncclTeam_t TeamOf(const char* call, uint32_t which, ncclComm_t comm) {
  int32_t v[3] = {0, 0, 0};
  Status st = Team(call, which, comm, ncclTeam_t{}, 0, v);
  if (!st.ok()) return Lost(st, call, ncclTeam_t{});  // NCCL's own "junk" team on failure
  return ncclTeam_t{v[0], v[1], v[2]};
}

int RankOf(const char* call, uint32_t which, ncclComm_t comm, ncclTeam_t team, int rank) {
  int32_t v[3] = {0, 0, 0};
  Status st = Team(call, which, comm, team, rank, v);
  if (!st.ok()) return Lost(st, call, -1);  // as NCCL's ncclTeamRankToLsa on failure
  return v[0];
}

}  // namespace

// ---- windows ----------------------------------------------------------------------------------

Status ncclCommWindowRegister(const shim::CallCtx& cc, ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                              int winFlags) {
  RemoteCall c(cc, kLibrary, k_ncclCommWindowRegister, CallClass::kSync, Domain::kNccl);
  if (win == nullptr) return c.Fail(ncclInvalidArgument, "win is NULL");
  RETURN_IF_ERROR(Comm(c, comm));
  const auto addr = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(buff));
  if (addr != 0 && size != 0) {
    RETURN_IF_ERROR(c.DevPtr(addr, size));
  } else {
    c.Put<uint64_t>(addr);  // NCCL registers nothing (the worker checks nothing either)
  }
  c.Put<uint64_t>(size);
  c.Put<int32_t>(winFlags);
  uint64_t got = 0;
  RETURN_IF_ERROR(c.Invoke([&](api::ArgReader& r) {
    got = r.Get<uint64_t>();
    return r.Finish();
  }));
  if (got != 0) *win = reinterpret_cast<ncclWindow_t>(static_cast<uintptr_t>(got));
  return Status::Ok();
}

Status ncclCommWindowDeregister(const shim::CallCtx& cc, ncclComm_t comm, ncclWindow_t win) {
  RemoteCall c(cc, kLibrary, k_ncclCommWindowDeregister, CallClass::kSync, Domain::kNccl);
  RETURN_IF_ERROR(Comm(c, comm));
  c.Put<uint64_t>(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(win)));
  return c.Invoke();
}

// ---- resource requirements ----------------------------------------------------------------------

Status ncclLsaBarrierCreateRequirement(const shim::CallCtx& cc, ncclTeam_t team, int nBarriers,
                                       ncclLsaBarrierHandle_t* outHandle, ncclDevResourceRequirements_t* outReq) {
  RemoteCall c(cc, kLibrary, k_ncclLsaBarrierCreateRequirement, CallClass::kSync, Domain::kNccl);
  if (outHandle == nullptr || outReq == nullptr) return c.Fail(ncclInvalidArgument, "outHandle or outReq is NULL");
  PutTeam(c, team);
  c.Put<int32_t>(nBarriers);
  return c.Invoke([&](api::ArgReader& r) { return ReadRequirement(r, outHandle, sizeof(*outHandle), outReq); });
}

Status ncclGinBarrierCreateRequirement(const shim::CallCtx& cc, ncclComm_t comm, ncclTeam_t team, int nBarriers,
                                       ncclGinBarrierHandle_t* outHandle, ncclDevResourceRequirements_t* outReq) {
  RemoteCall c(cc, kLibrary, k_ncclGinBarrierCreateRequirement, CallClass::kSync, Domain::kNccl);
  if (outHandle == nullptr || outReq == nullptr) return c.Fail(ncclInvalidArgument, "outHandle or outReq is NULL");
  RETURN_IF_ERROR(Comm(c, comm));
  PutTeam(c, team);
  c.Put<int32_t>(nBarriers);
  return c.Invoke([&](api::ArgReader& r) { return ReadRequirement(r, outHandle, sizeof(*outHandle), outReq); });
}

Status ncclLLA2ACreateRequirement(const shim::CallCtx& cc, int nBlocks, int nSlots, ncclLLA2AHandle_t* outHandle,
                                  ncclDevResourceRequirements_t* outReq) {
  RemoteCall c(cc, kLibrary, k_ncclLLA2ACreateRequirement, CallClass::kSync, Domain::kNccl);
  if (outHandle == nullptr || outReq == nullptr) return c.Fail(ncclInvalidArgument, "outHandle or outReq is NULL");
  c.Put<int32_t>(nBlocks);
  c.Put<int32_t>(nSlots);
  return c.Invoke([&](api::ArgReader& r) { return ReadRequirement(r, outHandle, sizeof(*outHandle), outReq); });
}

// ---- device communicators -----------------------------------------------------------------------

Status ncclDevCommCreate(const shim::CallCtx& cc, ncclComm_t comm, const ncclDevCommRequirements_t* reqs,
                         ncclDevComm_t* outDevComm) {
  RemoteCall c(cc, kLibrary, k_ncclDevCommCreate, CallClass::kSync, Domain::kNccl);
  if (reqs == nullptr || outDevComm == nullptr) return c.Fail(ncclInvalidArgument, "reqs or outDevComm is NULL");
  RETURN_IF_ERROR(Comm(c, comm));
  std::vector<const ncclDevResourceRequirements_t*> res;
  std::vector<const ncclTeamRequirements_t*> teams;
  RETURN_IF_ERROR(Walk(c, reqs->resourceRequirementsList, "resourceRequirementsList", &res));
  RETURN_IF_ERROR(Walk(c, reqs->teamRequirementsList, "teamRequirementsList", &teams));
  c.Put<uint8_t>(reqs->lsaMultimem ? 1 : 0);
  for (int v : {reqs->barrierCount, reqs->lsaBarrierCount, reqs->railGinBarrierCount, reqs->lsaLLA2ABlockCount,
                reqs->lsaLLA2ASlotCount})
    c.Put<int32_t>(v);
  c.Put<uint8_t>(reqs->ginForceEnable ? 1 : 0);
  for (int v : {reqs->ginContextCount, reqs->ginSignalCount, reqs->ginCounterCount}) c.Put<int32_t>(v);
  c.Put<uint64_t>(res.size());
  for (const ncclDevResourceRequirements_t* r : res) {
    c.Put<uint64_t>(r->bufferSize);
    c.Put<uint64_t>(r->bufferAlign);
    c.Put<int32_t>(r->ginSignalCount);
    c.Put<int32_t>(r->ginCounterCount);
    c.Put<uint8_t>(static_cast<uint8_t>((r->outBufferHandle ? 1 : 0) | (r->outGinSignalStart ? 2 : 0) |
                                        (r->outGinCounterStart ? 4 : 0)));
  }
  c.Put<uint64_t>(teams.size());
  for (const ncclTeamRequirements_t* t : teams) {
    PutTeam(c, t->team);
    c.Put<uint8_t>(t->multimem ? 1 : 0);
    c.Put<uint8_t>(t->outMultimemHandle ? 1 : 0);
  }
  std::vector<std::byte> bytes;
  std::vector<uint32_t> handles, signals, counters;
  std::vector<uint64_t> bases;
  RETURN_IF_ERROR(c.Invoke([&](api::ArgReader& r) {
    RETURN_IF_ERROR(r.GetArray(&bytes));
    RETURN_IF_ERROR(r.GetArray(&handles));
    RETURN_IF_ERROR(r.GetArray(&signals));
    RETURN_IF_ERROR(r.GetArray(&counters));
    RETURN_IF_ERROR(r.GetArray(&bases));
    return r.Finish();
  }));
  if (bytes.size() != sizeof(ncclDevComm) || handles.size() != res.size() || signals.size() != res.size() ||
      counters.size() != res.size() || bases.size() != teams.size())
    return Status(Domain::kNccl, ncclInternalError, "the server's device communicator does not match this library's nccl.h");
  // Through the caller's own out-pointers, as NCCL writes them.
  for (size_t i = 0; i < res.size(); i++) {
    if (res[i]->outBufferHandle) *res[i]->outBufferHandle = handles[i];
    if (res[i]->outGinSignalStart) *res[i]->outGinSignalStart = signals[i];
    if (res[i]->outGinCounterStart) *res[i]->outGinCounterStart = counters[i];
  }
  for (size_t i = 0; i < teams.size(); i++)
    if (teams[i]->multimem && teams[i]->outMultimemHandle)
      teams[i]->outMultimemHandle->mcBasePtr = reinterpret_cast<void*>(static_cast<uintptr_t>(bases[i]));
  std::memcpy(static_cast<void*>(outDevComm), bytes.data(), sizeof(ncclDevComm));
  return Status::Ok();
}

Status ncclDevCommDestroy(const shim::CallCtx& cc, ncclComm_t comm, const ncclDevComm_t* devComm) {
  RemoteCall c(cc, kLibrary, k_ncclDevCommDestroy, CallClass::kSync, Domain::kNccl);
  if (devComm == nullptr) return c.Fail(ncclInvalidArgument, "devComm is NULL");
  RETURN_IF_ERROR(Comm(c, comm));
  c.PutArray(devComm, sizeof(ncclDevComm), 1);
  return c.Invoke();
}

}  // namespace remora::gen::nccl

// ---- the by-value functions (`custom`) ----------------------------------------------------------

using namespace remora;
using namespace remora::gen::nccl;

extern "C" ncclTeam_t ncclTeamWorld(ncclComm_t comm) { return TeamOf("ncclTeamWorld", 0, comm); }
extern "C" ncclTeam_t ncclTeamLsa(ncclComm_t comm) { return TeamOf("ncclTeamLsa", 1, comm); }
extern "C" ncclTeam_t ncclTeamRail(ncclComm_t comm) { return TeamOf("ncclTeamRail", 2, comm); }
extern "C" int ncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank) {
  return RankOf("ncclTeamRankToWorld", 3, comm, team, rank);
}
extern "C" int ncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank) {
  return RankOf("ncclTeamRankToLsa", 4, comm, team, rank);
}

extern "C" int ncclLLA2ACalcSlots(int maxElts, int maxEltSize) {
  const char* call = "ncclLLA2ACalcSlots";
  shim::RemoteCall c(shim::CallCtx{false, call}, kLibrary, k_remoraNcclLLA2ACalcSlots, shim::CallClass::kSync, Domain::kNccl);
  c.Put<int32_t>(maxElts);
  c.Put<int32_t>(maxEltSize);
  int32_t slots = -1;
  Status st = c.Invoke([&](api::ArgReader& r) {
    slots = r.Get<int32_t>();
    return r.Finish();
  });
  return st.ok() ? slots : Lost(st, call, -1);
}

extern "C" ncclTeam_t pncclTeamWorld(ncclComm_t comm) { return TeamOf("pncclTeamWorld", 0, comm); }
extern "C" ncclTeam_t pncclTeamLsa(ncclComm_t comm) { return TeamOf("pncclTeamLsa", 1, comm); }
extern "C" ncclTeam_t pncclTeamRail(ncclComm_t comm) { return TeamOf("pncclTeamRail", 2, comm); }
extern "C" int pncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank) {
  return RankOf("pncclTeamRankToWorld", 3, comm, team, rank);
}
extern "C" int pncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank) {
  return RankOf("pncclTeamRankToLsa", 4, comm, team, rank);
}
extern "C" int pncclLLA2ACalcSlots(int maxElts, int maxEltSize) { return ncclLLA2ACalcSlots(maxElts, maxEltSize); }
