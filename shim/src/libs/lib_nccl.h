// NCCL in the client (protocol/api/nccl.api): what the client mirrors of each communicator (its
// size, rank, device, whether the application asked for a blocking one, the reduction operators
// made for it), the thread's group (ncclGroupStart..End gathers the calls, sent as one message),
// the size hooks and argument checks the description names, and the hand-written stubs'
// shared pieces. Thread-safe: the mirror is behind one mutex; a group is its thread's own.
// See docs/ARCHITECTURE.md, "NCCL".
#pragma once

#include <nccl.h>

#include <cstdint>
#include <string>

#include "remote_call.h"

namespace remora::gen::nccl {

// ---- size hooks of the description (saturating: a huge count never wraps to a small extent) --
// Bytes of `count` elements of `type` (times `ranks`); 0 for a type NCCL does not have.
uint64_t Bytes(ncclDataType_t type, size_t count);
uint64_t Bytes(ncclDataType_t type, size_t count, int ranks);
// The communicator's size as mirrored (0 if it is not one of this process's).
int Ranks(ncclComm_t comm);
// `bytes` on the root rank, 0 elsewhere (a buffer NCCL does not use there).
uint64_t AtRoot(ncclComm_t comm, int root, uint64_t bytes);

// ---- argument checks (`check=NcclCheck`), overloaded by each call's parameters ---------------
// The communicator is this process's, the datatype and operator exist, the root or peer is a
// rank of it: otherwise ncclInvalidArgument before anything travels, as NCCL answers.
Status NcclCheck(shim::RemoteCall& c, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                 ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);  // AllReduce, ReduceScatter
Status NcclCheck(shim::RemoteCall& c, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                 int root, ncclComm_t comm, cudaStream_t stream);  // Broadcast, Gather, Scatter
Status NcclCheck(shim::RemoteCall& c, void* buff, size_t count, ncclDataType_t datatype, int rank, ncclComm_t comm,
                 cudaStream_t stream);  // Bcast, Recv
Status NcclCheck(shim::RemoteCall& c, const void* buff, size_t count, ncclDataType_t datatype, int peer,
                 ncclComm_t comm, cudaStream_t stream);  // Send
Status NcclCheck(shim::RemoteCall& c, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                 ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);  // Reduce
Status NcclCheck(shim::RemoteCall& c, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                 ncclComm_t comm, cudaStream_t stream);  // AllGather, AlltoAll

// ---- the communicators this process holds ----------------------------------------------------
struct CommMirror {
  int nranks = 0;       // 0 until known (a split's size is known once it is done)
  int rank = -1;
  int device = 0;       // the application's ordinal
  bool blocking = true; // what the application asked for (the worker's is always non-blocking)
  ncclResult_t failed = ncclSuccess;  // what ncclCommGetAsyncError last answered, if an error
};
// Registers a communicator the application now holds (its id minted by RemoteCall::NewObject).
void MirrorComm(uint64_t id, const CommMirror& m);
bool FindComm(uint64_t id, CommMirror* out);
void UpdateComm(uint64_t id, int nranks, int rank);
// ncclCommGetAsyncError answered `state`: an error (a lost rank's ncclRemoteError) makes every
// later collective of the communicator fail at the call, as NCCL's do.
void CommState(uint64_t id, ncclResult_t state);
void ForgetComm(uint64_t id);
// A reduction operator ncclRedOpCreatePreMulSum made for the communicator.
void AddRedOp(uint64_t comm, int op);
void RemoveRedOp(uint64_t comm, int op);
bool HasRedOp(uint64_t comm, int op);

// The id a communicator handle stands for.
inline uint64_t CommId(ncclComm_t comm) { return shim::HandleBits(HandleKind::kNcclComm, comm); }

// ---- groups ----------------------------------------------------------------------------------
// Inside ncclGroupStart..End on this thread: `c`'s arguments join the group instead of travelling
// (a hand-written stub's call; generated ordered calls join through ThreadCallBatch). `waits`:
// the group's end must wait for it (an init or split a blocking application waits for);
// `nonblocking`: it is a non-blocking communicator's (the end answers ncclInProgress).
bool InGroup();
void JoinGroup(const shim::RemoteCall& c, int device, uint32_t function, bool waits, bool nonblocking,
               uint64_t created);
// A call of the group failed in the client: the group's end answers it and sends nothing, as
// NCCL's does.
void FailGroup(ncclResult_t r);

// Makes a communicator on `device` (-1: the current device) from `nid` unique ids, or joins
// the thread's group with it (lib_nccl_comm.cc; `fn` is the init entry's wire number).
Status Init(const shim::CallCtx& cc, uint32_t fn, ncclComm_t* comm, int nranks, int rank, int nid,
            const ncclUniqueId* ids, const ncclConfig_t* config, int device);

// The message of the last failure of an NCCL call on this thread (ncclGetLastError).
void SetLastError(const std::string& what);

}  // namespace remora::gen::nccl

namespace remora::shim {
// FinishLib for NCCL (`finish` in the description): keeps the message for ncclGetLastError.
uint32_t NcclFinish(Domain caller, const LibCodes& codes, const Status& st, const char* call);
}  // namespace remora::shim
