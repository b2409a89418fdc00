// NCCL on the worker (protocol/api/nccl.api's worker_include): the size hooks the description's
// extents call, with the communicator as the session knows it (its LibObject), and the hooks of
// the generated dispatch. The session's NCCL itself is worker/libs/nccl_session.h.
#pragma once

#include <nccl.h>

#include <cstddef>
#include <cstdint>

#include "remora/base/status.h"
#include "remora/memmgr/handle_table.h"

namespace remora::worker {
class OpContext;
struct LibObject;
}  // namespace remora::worker

namespace remora::worker::gen::nccl {

// Bytes of `count` elements of `type` (times `ranks`), saturating; 0 for an unknown type.
uint64_t Bytes(ncclDataType_t type, size_t count);
uint64_t Bytes(ncclDataType_t type, size_t count, int ranks);
// The communicator's size (0 while it is not known) and `bytes` on its root rank only.
int Ranks(const LibObject* comm);
uint64_t AtRoot(const LibObject* comm, int root, uint64_t bytes);

// ncclGetUniqueId's worker hook (`worker=`): the real id made and registered with the
// supervisor; the call is answered with the capability once it is.
ncclResult_t NcclGetUniqueId(OpContext& x, ncclUniqueId* uniqueId);
// How the session's end releases an NCCL object (`wdestroy`).
Status NcclDestroyObject(void* api, HandleKind kind, uint64_t bits);

}  // namespace remora::worker::gen::nccl
