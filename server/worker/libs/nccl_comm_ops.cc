// NcclSession's hand-written operations on existing communicators (nccl_session.h): finalize,
// destroy, abort, revoke, the asynchronous error and reduction operators. Their arguments are
// laid out as shim/src/libs/lib_nccl_comm.cc writes them.
#include <utility>

#include "remora/base/log.h"
#include "worker/calls/generated_call.h"
#include "worker/libs/lib_nccl.h"
#include "worker/libs/nccl_session.h"

namespace remora::worker {
namespace {

Status Nccl(ncclResult_t r, const std::string& what) { return Status(Domain::kNccl, static_cast<uint32_t>(r), what); }

}  // namespace

// ---- ending and querying -------------------------------------------------------------------------

Status NcclSession::Finalize(OpContext& x) {
  ASSIGN_OR_RETURN(NcclComm * c, Named(x));
  RETURN_IF_ERROR(x.EndArgs());
  if (c->phase == NcclComm::Phase::kFailed) return Nccl(c->error, c->why);
  if (c->phase != NcclComm::Phase::kReady) return Nccl(ncclInvalidUsage, "the communicator is not ready");
  RETURN_IF_ERROR(ex_.SetDevice(c->gpu));
  ncclResult_t r = real_.ncclCommFinalize(c->real);
  if (r != ncclSuccess && r != ncclInProgress) return Nccl(r, "ncclCommFinalize");
  if (r == ncclSuccess) c->finalized = true;
  return AnswerState(x, *c, r);
}

Status NcclSession::Revoke(OpContext& x) {
  ASSIGN_OR_RETURN(NcclComm * c, Named(x));
  int flags = x.in().Get<int32_t>();
  RETURN_IF_ERROR(x.EndArgs());
  if (c->phase == NcclComm::Phase::kFailed) return Nccl(c->error, c->why);
  RETURN_IF_ERROR(ex_.SetDevice(c->gpu));
  ncclResult_t r = real_.ncclCommRevoke(c->real, flags);
  if (r != ncclSuccess && r != ncclInProgress) return Nccl(r, "ncclCommRevoke");
  return AnswerState(x, *c, r);
}

Status NcclSession::AnswerState(OpContext& x, NcclComm& c, ncclResult_t r) {
  if (r == ncclInProgress) {
    c.phase = NcclComm::Phase::kFinalizing;
    Schedule();
  }
  auto b = std::make_unique<Batch>();
  b->tag = x.tag();
  b->reply = Batch::Reply::kState;
  b->ran = true;
  b->comms.push_back(c.id);
  b->wait_ready = c.app_blocking && r == ncclInProgress;
  x.AnswerLater();
  if (!b->wait_ready) {
    Answer(*b, Status::Ok());
    return Status::Ok();
  }
  batches_.push_back(std::move(b));
  return Status::Ok();
}

Status NcclSession::Destroy(OpContext& x) { return End(x, false); }

Status NcclSession::Abort(OpContext& x) { return End(x, true); }

Status NcclSession::End(OpContext& x, bool abort) {
  ASSIGN_OR_RETURN(NcclComm * c, Named(x));
  RETURN_IF_ERROR(x.EndArgs());
  if (c->real != nullptr) {
    RETURN_IF_ERROR(ex_.SetDevice(c->gpu));
    // Non-blocking: NCCL ends what is left in the background and frees the communicator.
    ncclResult_t r = abort ? real_.ncclCommAbort(c->real) : real_.ncclCommDestroy(c->real);
    if (r != ncclSuccess && r != ncclInProgress)
      LOG_WARN("{}: {}", abort ? "ncclCommAbort" : "ncclCommDestroy", ncclGetErrorStringOf(r));
    c->real = nullptr;
  }
  Leave(*c);
  Forget(c->id);
  return Status::Ok();
}

Status NcclSession::GetAsyncError(OpContext& x) {
  ASSIGN_OR_RETURN(NcclComm * c, Named(x));
  RETURN_IF_ERROR(x.EndArgs());
  int32_t state = ncclSuccess;
  if (c->phase == NcclComm::Phase::kFailed) {
    state = c->error;
  } else if (c->deferred != ncclSuccess) {
    state = std::exchange(c->deferred, ncclSuccess);
  } else if (c->phase != NcclComm::Phase::kReady) {
    state = ncclInProgress;
  } else {
    ncclResult_t st = ncclSuccess;
    ncclResult_t r = real_.ncclCommGetAsyncError(c->real, &st);
    state = r != ncclSuccess ? r : st;
    if (state != ncclSuccess && state != ncclInProgress)
      Fail(*c, static_cast<ncclResult_t>(state), fmt::format("NCCL reported {}", ncclGetErrorStringOf(static_cast<ncclResult_t>(state))));
  }
  x.out().Put(state);
  x.out().Put<int32_t>(c->nranks);
  x.out().Put<int32_t>(c->rank);
  return Status::Ok();
}

Status NcclSession::RedOpCreatePreMulSum(OpContext& x) {
  ASSIGN_OR_RETURN(NcclComm * c, Named(x));
  auto datatype = static_cast<ncclDataType_t>(x.in().Get<int32_t>());
  auto residence = static_cast<ncclScalarResidence_t>(x.in().Get<int32_t>());
  std::vector<std::byte> host;
  uint64_t addr = 0;
  if (residence == ncclScalarHostImmediate) RETURN_IF_ERROR(x.in().GetArray(&host));
  else addr = x.in().Get<uint64_t>();
  RETURN_IF_ERROR(x.EndArgs());
  uint64_t size = gen::nccl::Bytes(datatype, 1);
  if (size == 0) return Nccl(ncclInvalidArgument, "not an NCCL datatype");
  void* scalar = nullptr;
  if (residence == ncclScalarHostImmediate) {
    if (host.size() != size) return x.Malformed("a scalar of the wrong size");
    x.PadScalar(&host);
    scalar = host.data();
  } else if (residence == ncclScalarDevice) {
    uint64_t checked = 0;
    RETURN_IF_ERROR(x.DevPtr(addr, size, &checked));
    scalar = reinterpret_cast<void*>(static_cast<uintptr_t>(checked));
  } else {
    return Nccl(ncclInvalidArgument, "an unknown scalar residence");
  }
  if (c->phase == NcclComm::Phase::kFailed) return Nccl(c->error, c->why);
  RETURN_IF_ERROR(ex_.SetDevice(c->gpu));
  ncclRedOp_t op{};
  ncclResult_t r = real_.ncclRedOpCreatePreMulSum(&op, scalar, datatype, residence, c->real);
  if (r != ncclSuccess) return Nccl(r, "ncclRedOpCreatePreMulSum");
  x.out().Put<int32_t>(static_cast<int32_t>(op));
  return Status::Ok();
}

}  // namespace remora::worker
