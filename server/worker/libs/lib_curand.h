// cuRAND on the worker: the hook protocol/api/curand.api names (`wafter=`). A generator made
// by curandCreateGenerator writes into device memory: bit 0 of its mode says so, which the
// generate calls' output check (scalarout) holds the client's encoding to.
// Used by the executor's single thread.
#pragma once

#include <curand.h>

#include <cstdint>

#include "remora/base/status.h"

namespace remora::worker {
class OpContext;
struct LibObject;
}  // namespace remora::worker

namespace remora::worker::gen::curand {

Status DeviceGeneratorCreated(OpContext& x, LibObject* generator, curandRngType_t type);

// `bytes` of table `which` (curand_hooks.h; `set` chooses the direction vectors) from `offset`:
// read from the pointer the library hands out.
Status TableBytes(OpContext& x, int which, int set, unsigned long long offset, unsigned long long bytes, void* out);
// A discrete Poisson distribution made by the library, registered under the client's id; its
// device address comes back (the application passes it to its kernels).
Status CreatePoisson(OpContext& x, double lambda, uint64_t id, unsigned long long* address);

}  // namespace remora::worker::gen::curand
