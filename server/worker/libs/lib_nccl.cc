// NCCL's worker hooks and hand-written operations (protocol/api/nccl.api): each hands its call to
// the session's NcclSession (nccl_session.h), which the executor made when it bound the library.
#include "worker/libs/lib_nccl.h"

#include "nccl_api.h"
#include "nccl_wire.h"
#include "worker/calls/generated_call.h"
#include "worker/session/lib_objects.h"
#include "worker/libs/nccl_session.h"
#include "nccl_types.h"

namespace remora::worker::gen::nccl {
namespace {

int TypeSize(ncclDataType_t t) { return api::NcclTypeSize(t); }

NcclSession& Session(OpContext& x) { return *x.executor().nccl(); }

const NcclComm* CommOf(const LibObject* o) {
  const auto* ref = o != nullptr ? dynamic_cast<const NcclCommRef*>(o->extra.get()) : nullptr;
  return ref != nullptr ? ref->comm : nullptr;
}

}  // namespace

uint64_t Bytes(ncclDataType_t type, size_t count) { return Bytes(type, count, 1); }

uint64_t Bytes(ncclDataType_t type, size_t count, int ranks) {
  uint64_t out = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(TypeSize(type)), static_cast<uint64_t>(count), &out) ||
      __builtin_mul_overflow(out, static_cast<uint64_t>(ranks < 0 ? 0 : ranks), &out))
    return UINT64_MAX;
  return out;
}

int Ranks(const LibObject* comm) {
  const NcclComm* c = CommOf(comm);
  return c ? c->nranks : 0;
}

uint64_t AtRoot(const LibObject* comm, int root, uint64_t bytes) {
  const NcclComm* c = CommOf(comm);
  return c && c->rank == root ? bytes : 0;
}

ncclResult_t NcclGetUniqueId(OpContext& x, ncclUniqueId* uniqueId) {
  (void)uniqueId;  // the real id stays on the server: the answer is the capability, later
  return Session(x).GetUniqueId(x);
}

Status NcclDestroyObject(void* api, HandleKind kind, uint64_t bits) {
  return static_cast<NcclSession*>(static_cast<Api*>(api))->DestroyObject(kind, bits);
}

Status Op_ncclCommInitRank(OpContext& x) { return Session(x).Create(x, ::remora::gen::nccl::k_ncclCommInitRank); }
Status Op_ncclCommInitRankConfig(OpContext& x) { return Session(x).Create(x, ::remora::gen::nccl::k_ncclCommInitRankConfig); }
Status Op_ncclCommInitRankScalable(OpContext& x) { return Session(x).Create(x, ::remora::gen::nccl::k_ncclCommInitRankScalable); }
Status Op_ncclCommSplit(OpContext& x) { return Session(x).Create(x, ::remora::gen::nccl::k_ncclCommSplit); }
Status Op_ncclCommShrink(OpContext& x) { return Session(x).Create(x, ::remora::gen::nccl::k_ncclCommShrink); }
Status Op_ncclCommFinalize(OpContext& x) { return Session(x).Finalize(x); }
Status Op_ncclCommDestroy(OpContext& x) { return Session(x).Destroy(x); }
Status Op_ncclCommAbort(OpContext& x) { return Session(x).Abort(x); }
Status Op_ncclCommRevoke(OpContext& x) { return Session(x).Revoke(x); }
Status Op_ncclCommGetAsyncError(OpContext& x) { return Session(x).GetAsyncError(x); }
Status Op_ncclRedOpCreatePreMulSum(OpContext& x) { return Session(x).RedOpCreatePreMulSum(x); }
Status Op_remoraNcclGroup(OpContext& x) { return Session(x).Group(x, false); }
Status Op_remoraNcclGroupWait(OpContext& x) { return Session(x).Group(x, true); }
Status Op_ncclCommWindowRegister(OpContext& x) { return Session(x).WindowRegister(x); }
Status Op_ncclCommWindowDeregister(OpContext& x) { return Session(x).WindowDeregister(x); }
Status Op_ncclDevCommCreate(OpContext& x) { return Session(x).DevCommCreate(x); }
Status Op_ncclDevCommDestroy(OpContext& x) { return Session(x).DevCommDestroy(x); }
Status Op_ncclLsaBarrierCreateRequirement(OpContext& x) {
  return Session(x).Requirement(x, ::remora::gen::nccl::k_ncclLsaBarrierCreateRequirement);
}
Status Op_ncclGinBarrierCreateRequirement(OpContext& x) {
  return Session(x).Requirement(x, ::remora::gen::nccl::k_ncclGinBarrierCreateRequirement);
}
Status Op_ncclLLA2ACreateRequirement(OpContext& x) {
  return Session(x).Requirement(x, ::remora::gen::nccl::k_ncclLLA2ACreateRequirement);
}
Status Op_remoraNcclTeam(OpContext& x) { return Session(x).Team(x); }
Status Op_remoraNcclLLA2ACalcSlots(OpContext& x) { return Session(x).CalcSlots(x); }

}  // namespace remora::worker::gen::nccl
