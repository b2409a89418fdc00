// NCCL's communicator calls in the client: the hand-written stubs of protocol/api/nccl.api's
// `hand` entries, and ncclCommInitAll. Each mints the new communicator's id (so a call in a
// group can join the group's message), sends the call, and mirrors the communicator.
//
// Arguments on the wire (server/worker/libs/lib_nccl.cc reads the same):
//   init (ncclCommInitRank, ...Config, ...Scalable): u64 id, i32 device, i32 nranks, i32 rank,
//        array of unique ids (128 bytes each), config
//   split: u64 parent, i32 color, i32 key, u64 id (0: NCCL_SPLIT_NOCOLOR), config
//   shrink: u64 parent, array of i32 excluded ranks, u64 id, config, i32 flags
//   finalize, destroy, abort, get async error: u64 communicator; revoke: u64, i32 flags
//   config: u8 present, then 12 i32 (blocking, cgaClusterSize, minCTAs, maxCTAs, splitShare,
//        trafficClass, collnetEnable, CTAPolicy, shrinkShare, nvlsCTAs, nChannelsPerNetPeer,
//        nvlinkCentricSched), netName and commName (u8 present, string)
//   reply of init/split/shrink/get async error: i32 state (ncclSuccess or ncclInProgress),
//        i32 nranks, i32 rank (-1: not known yet); of finalize and revoke: i32 state
#include <cstddef>
#include <cstring>
#include <vector>

#include "lib_nccl.h"
#include "nccl_client.h"
#include "runtime.h"

namespace remora::gen::nccl {
namespace {

using shim::CallClass;
using shim::RemoteCall;

constexpr unsigned kConfigMagic = 0xcafebeef;

// The application's configuration as it sent it (fields its nccl.h had: config->size).
Status EncodeConfig(RemoteCall& c, const ncclConfig_t* config, bool* blocking) {
  *blocking = true;
  if (config == nullptr) {
    c.Put<uint8_t>(0);
    return Status::Ok();
  }
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  size_t size = 0;
  std::memcpy(&size, &config->size, sizeof(size));
  unsigned magic = 0;
  std::memcpy(&magic, &config->magic, sizeof(magic));
  if (magic != kConfigMagic || size < offsetof(ncclConfig_t, blocking) + sizeof(int))
    return c.Fail(ncclInvalidArgument, "config was not initialised with NCCL_CONFIG_INITIALIZER");
  std::memcpy(&cfg, config, std::min(size, sizeof(cfg)));
  c.Put<uint8_t>(1);
  for (int v : {cfg.blocking, cfg.cgaClusterSize, cfg.minCTAs, cfg.maxCTAs, cfg.splitShare, cfg.trafficClass,
                cfg.collnetEnable, cfg.CTAPolicy, cfg.shrinkShare, cfg.nvlsCTAs, cfg.nChannelsPerNetPeer,
                cfg.nvlinkCentricSched})
    c.Put<int32_t>(v);
  for (const char* s : {cfg.netName, cfg.commName}) {
    c.Put<uint8_t>(s != nullptr);
    if (s != nullptr) {
      if (std::strlen(s) > 256) return c.Fail(ncclInvalidArgument, "a name in config is longer than 256 bytes");
      c.PutString(s);
    }
  }
  *blocking = cfg.blocking != 0;  // NCCL_CONFIG_UNDEF_INT: blocking, NCCL's default
  return Status::Ok();
}

Status ReadState(api::ArgReader& r, ncclResult_t* state, int* nranks, int* rank) {
  *state = static_cast<ncclResult_t>(r.Get<int32_t>());
  *nranks = r.Get<int32_t>();
  *rank = r.Get<int32_t>();
  return r.Finish();
}

// Sends a call that makes communicator `id` (or joins it to the thread's group), mirrors it,
// and answers the state: ncclInProgress for a non-blocking application until it is ready.
Status Create(RemoteCall& c, uint32_t fn, ncclComm_t* out, uint64_t id, CommMirror m, bool blocking) {
  m.blocking = blocking;
  if (InGroup()) {
    JoinGroup(c, m.device, fn, blocking, !blocking, id);
    c.AdoptObject(id, HandleKind::kNcclComm);
    MirrorComm(id, m);
    *out = shim::HandleFromBits<ncclComm_t>(HandleKind::kNcclComm, id);
    return Status::Ok();
  }
  ncclResult_t state = ncclSuccess;
  int nranks = m.nranks, rank = m.rank;
  RETURN_IF_ERROR(c.Invoke([&](api::ArgReader& r) { return ReadState(r, &state, &nranks, &rank); }));
  c.AdoptObject(id, HandleKind::kNcclComm);
  if (nranks > 0) {
    m.nranks = nranks;
    m.rank = rank;
  }
  MirrorComm(id, m);
  *out = shim::HandleFromBits<ncclComm_t>(HandleKind::kNcclComm, id);
  if (state == ncclInProgress) return Status(Domain::kNccl, ncclInProgress, "in progress");
  return Status::Ok();
}

}  // namespace

// (Not file-local: ncclCommInitAll below makes its communicators with it.)
Status Init(const shim::CallCtx& cc, uint32_t fn, ncclComm_t* comm, int nranks, int rank, int nid,
            const ncclUniqueId* ids, const ncclConfig_t* config, int device) {
  RemoteCall c(cc, kLibrary, fn, CallClass::kSync, Domain::kNccl);
  if (comm == nullptr) return c.Fail(ncclInvalidArgument, "comm is NULL");
  if (nranks < 1) return c.Fail(ncclInvalidArgument, "nranks is less than 1");
  if (rank < 0 || rank >= nranks) return c.Fail(ncclInvalidArgument, "rank is not in [0, nranks)");
  if (nid < 1 || nid > nranks || ids == nullptr) return c.Fail(ncclInvalidArgument, "the unique ids are missing");
  if (device < 0) {
    ASSIGN_OR_RETURN(device, shim::Runtime::Get().CurrentDevice());
  }
  const uint64_t id = c.NewObject(HandleKind::kNcclComm);
  RETURN_IF_ERROR(c.Device(device));
  c.Put<int32_t>(nranks);
  c.Put<int32_t>(rank);
  c.PutArray(ids, static_cast<uint64_t>(nid), sizeof(ncclUniqueId));
  bool blocking = true;
  RETURN_IF_ERROR(EncodeConfig(c, config, &blocking));
  return Create(c, fn, comm, id, CommMirror{nranks, rank, device, blocking}, blocking);
}

namespace {

// A call naming an existing communicator; its mirror in `m`.
Status Named(RemoteCall& c, ncclComm_t comm, CommMirror* m) {
  if (comm == nullptr) return c.Fail(ncclInvalidArgument, "comm is NULL");
  if (!FindComm(CommId(comm), m)) return c.Fail(ncclInvalidArgument, "comm is not a communicator of this process");
  return c.Object(HandleKind::kNcclComm, CommId(comm), false);
}

Status StateOnly(RemoteCall& c) {
  ncclResult_t state = ncclSuccess;
  RETURN_IF_ERROR(c.Invoke([&](api::ArgReader& r) {
    state = static_cast<ncclResult_t>(r.Get<int32_t>());
    return r.Finish();
  }));
  return state == ncclInProgress ? Status(Domain::kNccl, ncclInProgress, "in progress") : Status::Ok();
}

}  // namespace

Status ncclCommInitRank(const shim::CallCtx& cc, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return Init(cc, k_ncclCommInitRank, comm, nranks, rank, 1, &commId, nullptr, -1);
}

Status ncclCommInitRankConfig(const shim::CallCtx& cc, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                              ncclConfig_t* config) {
  return Init(cc, k_ncclCommInitRankConfig, comm, nranks, rank, 1, &commId, config, -1);
}

Status ncclCommInitRankScalable(const shim::CallCtx& cc, ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                ncclUniqueId* commIds, ncclConfig_t* config) {
  return Init(cc, k_ncclCommInitRankScalable, newcomm, nranks, myrank, nId, commIds, config, -1);
}

Status ncclCommSplit(const shim::CallCtx& cc, ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  RemoteCall c(cc, kLibrary, k_ncclCommSplit, CallClass::kSync, Domain::kNccl);
  if (newcomm == nullptr) return c.Fail(ncclInvalidArgument, "newcomm is NULL");
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR) return c.Fail(ncclInvalidArgument, "color is negative");
  CommMirror parent;
  RETURN_IF_ERROR(Named(c, comm, &parent));
  c.Put<int32_t>(color);
  c.Put<int32_t>(key);
  // A rank that leaves gets no communicator (NCCL answers NULL): it still takes part.
  const uint64_t id = color == NCCL_SPLIT_NOCOLOR ? 0 : c.NewObject(HandleKind::kNcclComm);
  if (id == 0) c.Put<uint64_t>(0);
  bool blocking = parent.blocking;
  if (config != nullptr) {
    RETURN_IF_ERROR(EncodeConfig(c, config, &blocking));
  } else {
    c.Put<uint8_t>(0);  // the parent's configuration, as NCCL inherits it
  }
  if (id == 0) {
    *newcomm = nullptr;
    if (InGroup()) {
      JoinGroup(c, parent.device, k_ncclCommSplit, blocking, !blocking, 0);
      return Status::Ok();
    }
    return StateOnly(c);
  }
  return Create(c, k_ncclCommSplit, newcomm, id, CommMirror{0, -1, parent.device, blocking}, blocking);
}

Status ncclCommShrink(const shim::CallCtx& cc, ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                      ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  RemoteCall c(cc, kLibrary, k_ncclCommShrink, CallClass::kSync, Domain::kNccl);
  if (newcomm == nullptr) return c.Fail(ncclInvalidArgument, "newcomm is NULL");
  if (excludeRanksCount < 0 || (excludeRanksCount > 0 && excludeRanksList == nullptr))
    return c.Fail(ncclInvalidArgument, "excludeRanksList is NULL or its count is negative");
  CommMirror parent;
  RETURN_IF_ERROR(Named(c, comm, &parent));
  c.PutArray(excludeRanksList, static_cast<uint64_t>(excludeRanksCount), sizeof(int));
  const uint64_t id = c.NewObject(HandleKind::kNcclComm);
  bool blocking = parent.blocking;
  if (config != nullptr) {
    RETURN_IF_ERROR(EncodeConfig(c, config, &blocking));
  } else {
    c.Put<uint8_t>(0);
  }
  c.Put<int32_t>(shrinkFlags);
  return Create(c, k_ncclCommShrink, newcomm, id, CommMirror{0, -1, parent.device, blocking}, blocking);
}

Status ncclCommFinalize(const shim::CallCtx& cc, ncclComm_t comm) {
  RemoteCall c(cc, kLibrary, k_ncclCommFinalize, CallClass::kSync, Domain::kNccl);
  CommMirror m;
  RETURN_IF_ERROR(Named(c, comm, &m));
  return StateOnly(c);
}

Status ncclCommDestroy(const shim::CallCtx& cc, ncclComm_t comm) {
  RemoteCall c(cc, kLibrary, k_ncclCommDestroy, CallClass::kSync, Domain::kNccl);
  if (comm == nullptr) return Status::Ok();  // as NCCL: nothing to destroy
  CommMirror m;
  RETURN_IF_ERROR(Named(c, comm, &m));
  Status st = c.Invoke();
  // Gone either way: a communicator whose destroy failed is not usable (NCCL frees it too).
  ForgetComm(CommId(comm));
  return st;
}

Status ncclCommAbort(const shim::CallCtx& cc, ncclComm_t comm) {
  RemoteCall c(cc, kLibrary, k_ncclCommAbort, CallClass::kSync, Domain::kNccl);
  if (comm == nullptr) return Status::Ok();
  CommMirror m;
  RETURN_IF_ERROR(Named(c, comm, &m));
  Status st = c.Invoke();
  ForgetComm(CommId(comm));
  // A lost server: its communicators are gone with it, which is what an abort asks.
  if (!st.ok() && st.code() == Err::kDevicesUnavailable) return Status::Ok();
  return st;
}

Status ncclCommRevoke(const shim::CallCtx& cc, ncclComm_t comm, int revokeFlags) {
  RemoteCall c(cc, kLibrary, k_ncclCommRevoke, CallClass::kSync, Domain::kNccl);
  if (revokeFlags != NCCL_REVOKE_DEFAULT) return c.Fail(ncclInvalidArgument, "revokeFlags must be NCCL_REVOKE_DEFAULT");
  CommMirror m;
  RETURN_IF_ERROR(Named(c, comm, &m));
  c.Put<int32_t>(revokeFlags);
  return StateOnly(c);
}

Status ncclCommGetAsyncError(const shim::CallCtx& cc, ncclComm_t comm, ncclResult_t* asyncError) {
  RemoteCall c(cc, kLibrary, k_ncclCommGetAsyncError, CallClass::kSync, Domain::kNccl);
  if (asyncError == nullptr) return c.Fail(ncclInvalidArgument, "asyncError is NULL");
  CommMirror m;
  RETURN_IF_ERROR(Named(c, comm, &m));
  ncclResult_t state = ncclSuccess;
  int nranks = 0, rank = -1;
  RETURN_IF_ERROR(c.Invoke([&](api::ArgReader& r) { return ReadState(r, &state, &nranks, &rank); }));
  if (nranks > 0 && m.nranks <= 0) UpdateComm(CommId(comm), nranks, rank);
  CommState(CommId(comm), state);
  *asyncError = state;
  return Status::Ok();
}

// In: u64 communicator, datatype, residence, then the scalar: its bytes (host, read now) or its
// device address (read by each collective). Out: i32 the operator.
Status ncclRedOpCreatePreMulSum(const shim::CallCtx& cc, ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                ncclScalarResidence_t residence, ncclComm_t comm) {
  RemoteCall c(cc, kLibrary, k_ncclRedOpCreatePreMulSum, CallClass::kSync, Domain::kNccl);
  if (op == nullptr || scalar == nullptr) return c.Fail(ncclInvalidArgument, "op or scalar is NULL");
  uint64_t size = Bytes(datatype, 1);
  if (size == 0) return c.Fail(ncclInvalidArgument, "datatype is not an NCCL datatype");
  CommMirror m;
  RETURN_IF_ERROR(Named(c, comm, &m));
  c.Put<int32_t>(datatype);
  c.Put<int32_t>(residence);
  if (residence == ncclScalarHostImmediate) {
    c.PutArray(scalar, size, 1);
  } else if (residence == ncclScalarDevice) {
    RETURN_IF_ERROR(c.DevPtr(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(scalar)), size));
  } else {
    return c.Fail(ncclInvalidArgument, "residence is neither ncclScalarDevice nor ncclScalarHostImmediate");
  }
  int32_t made = 0;
  RETURN_IF_ERROR(c.Invoke([&](api::ArgReader& r) {
    made = r.Get<int32_t>();
    return r.Finish();
  }));
  AddRedOp(CommId(comm), made);
  *op = static_cast<ncclRedOp_t>(made);
  return Status::Ok();
}

}  // namespace remora::gen::nccl

using namespace remora;

// As NCCL does it: a unique id (from the first device's server), then a group of one
// ncclCommInitRank per device; the group is one message per server.
extern "C" ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  const char* call = "ncclCommInitAll";
  constexpr shim::LibCodes kCodes{ncclSuccess, ncclInvalidArgument, ncclSystemError, ncclInvalidUsage, ncclSystemError,
                                  ncclInternalError};
  auto fail = [&](ncclResult_t r, const char* what) {
    return static_cast<ncclResult_t>(shim::NcclFinish(Domain::kNccl, kCodes, Status(Domain::kNccl, r, what), call));
  };
  if (comm == nullptr || ndev < 1) return fail(ncclInvalidArgument, "ncclCommInitAll: comm is NULL or ndev < 1");
  std::vector<int> devs(static_cast<size_t>(ndev));
  for (int i = 0; i < ndev; i++) devs[static_cast<size_t>(i)] = devlist != nullptr ? devlist[i] : i;
  for (int i = 0; i < ndev; i++)
    for (int j = 0; j < i; j++)
      if (devs[static_cast<size_t>(i)] == devs[static_cast<size_t>(j)]) return fail(ncclInvalidUsage, "ncclCommInitAll: a device is listed twice");
  for (int d : devs) {
    auto dev = shim::Runtime::Get().Device(d);
    if (!dev.ok()) return fail(ncclInvalidArgument, "ncclCommInitAll: a device of devlist does not exist");
  }
  // The id from the first device's server (its capability joins the others from there).
  int saved = 0;
  auto current = shim::Runtime::Get().CurrentDevice();
  if (current.ok()) saved = *current;
  ncclUniqueId id;
  if (cudaSetDevice(devs[0]) != cudaSuccess) return fail(ncclInvalidArgument, "ncclCommInitAll: cannot use the first device");
  ncclResult_t r = ncclGetUniqueId(&id);
  (void)cudaSetDevice(saved);
  if (r != ncclSuccess) return r;
  r = ncclGroupStart();
  if (r != ncclSuccess) return r;
  for (int i = 0; i < ndev; i++) {
    Status st = gen::nccl::Init(shim::CallCtx{false, call}, gen::nccl::k_ncclCommInitRank, &comm[i], ndev, i, 1, &id,
                                nullptr, devs[static_cast<size_t>(i)]);
    if (!st.ok()) {
      (void)shim::NcclFinish(Domain::kNccl, kCodes, st, call);
      break;
    }
  }
  return ncclGroupEnd();
}

extern "C" ncclResult_t pncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  return ncclCommInitAll(comm, ndev, devlist);
}
