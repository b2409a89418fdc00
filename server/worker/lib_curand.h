// cuRAND on the worker: the hook protocol/api/curand.api names (`wafter=`). A generator made
// by curandCreateGenerator writes into device memory: bit 0 of its mode says so, which the
// generate calls' output check (scalarout) holds the client's encoding to.
// Used by the executor's single thread.
#pragma once

#include <curand.h>

#include "remora/base/status.h"

namespace remora::worker {
class OpContext;
struct LibObject;
}  // namespace remora::worker

namespace remora::worker::gen::curand {

Status DeviceGeneratorCreated(OpContext& x, LibObject* generator, curandRngType_t type);

}  // namespace remora::worker::gen::curand
