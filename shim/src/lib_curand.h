// cuRAND in the client: the mirror hook protocol/api/curand.api names. A generator made by
// curandCreateGenerator writes into device memory: bit 0 of its mirrored mode says so, and
// decides whether a generate call sends the output's device address or has the reply carry
// the numbers back into host memory. Thread-safe.
#pragma once

#include <curand.h>

namespace remora::gen::curand {

void MirrorDeviceGenerator(curandGenerator_t* generator, curandRngType_t type);

}  // namespace remora::gen::curand
