// cuRAND in the client: the mirror hooks protocol/api/curand.api names, and the generate
// calls of host generators in pieces. A generator made by curandCreateGenerator writes into
// device memory: bit 0 of its mirrored mode says so, and decides whether a generate call
// sends the output's device address or has the reply carry the numbers back into host memory.
// A reply holds at most what an shm ring takes (lib_curand.cc kPieceBytes, 512 KiB), so a host generator's larger request is asked for
// in pieces, each a call of the real library on the server: cuRAND's host generators continue
// one sequence across calls, so the pieces hold exactly what one call would have (checked
// against NVIDIA's libcurand for every generator type, ordering and distribution; a
// quasi-random generator of d dimensions writes each dimension's points together, so its
// pieces are whole points and are placed dimension by dimension). The generator's type
// (aux 0) and dimensions (aux 1) are mirrored for that. Thread-safe.
#pragma once

#include <curand.h>

namespace remora::gen::curand {

void MirrorDeviceGenerator(curandGenerator_t* generator, curandRngType_t type);
void MirrorHostGenerator(curandGenerator_t* generator, curandRngType_t type);
void MirrorDimensions(curandGenerator_t generator, unsigned int dimensions);

}  // namespace remora::gen::curand
