// cuSOLVER in the client: the mirror hook protocol/api/cusolver.api names, which keeps a dense
// handle's stream (LibObjectView::aux[0]) for cusolverDnGetStream. Thread-safe.
#pragma once

#include <cusolverDn.h>

namespace remora::gen::cusolver {

void MirrorStream(cusolverDnHandle_t handle, cudaStream_t stream);

}  // namespace remora::gen::cusolver
