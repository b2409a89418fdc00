// cuBLAS on the worker: the hooks protocol/api/cublas.api names (`wafter=`), run after the
// library accepted the call. A handle gets a workspace of its own, charged to the tenant, so
// cuBLAS never allocates an uncounted one (it would on the first GEMM of a stream); the
// handle's stream and pointer mode are mirrored for the checks of later calls.
// Used by the executor's single thread.
#pragma once

#include <cublas.h>  // (NVIDIA's cublas_api.h through it: "cublas_api.h" is the generated table)

#include "remora/base/status.h"

namespace remora::worker {
class OpContext;
struct LibObject;
}  // namespace remora::worker

namespace remora::worker::gen::cublas {

// Bytes of the workspace each handle gets: cuBLAS's own default size on pre-Hopper GPUs;
// an application that wants more sets its own (cublasSetWorkspace_v2, as PyTorch does).
inline constexpr uint64_t kWorkspaceBytes = 4ull << 20;

Status CublasCreated(OpContext& x, LibObject* handle);
// cublasSetStream resets cuBLAS to its default workspace pool: the handle's own is set again.
Status CublasStreamSet(OpContext& x, LibObject* handle, cudaStream_t stream);
Status CublasPointerModeSet(OpContext& x, LibObject* handle, cublasPointerMode_t mode);

}  // namespace remora::worker::gen::cublas
