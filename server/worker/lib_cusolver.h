// cuSOLVER on the worker: the hooks protocol/api/cusolver.api names. getrf takes a workspace
// it does not size: it is checked with what getrf_bufferSize answers for the same arguments.
// The 64-bit API's host workspaces are the worker's, never the application's addresses.
// Used by the executor's single thread.
#pragma once

#include <cusolverDn.h>

#include <cstdint>

#include "remora/base/status.h"

namespace remora::worker {
class OpContext;
struct LibObject;
}  // namespace remora::worker

namespace remora::worker::gen::cusolver {

// Bytes of getrf's workspace for these arguments (0 if the library refuses them: the call
// then fails in the library after the pointer's start was checked).
uint64_t GetrfWorkS(OpContext& x, cusolverDnHandle_t handle, int m, int n, float* a, int lda);
uint64_t GetrfWorkD(OpContext& x, cusolverDnHandle_t handle, int m, int n, double* a, int lda);

// cusolverDnXgetrf / cusolverDnXpotrf with the application's host workspace replaced by the
// handle's own (kept with the handle, grown as needed, at most kMaxHostWorkspace).
inline constexpr size_t kMaxHostWorkspace = 256u << 20;
Status XGetrf(OpContext& x, LibObject* handle, LibObject* params, int64_t m, int64_t n, cudaDataType type_a, void* a, int64_t lda,
              int64_t* ipiv, cudaDataType compute, void* work, size_t work_bytes, void* host_work, size_t host_bytes, int* info);
Status XPotrf(OpContext& x, LibObject* handle, LibObject* params, cublasFillMode_t uplo, int64_t n, cudaDataType type_a, void* a,
              int64_t lda, cudaDataType compute, void* work, size_t work_bytes, void* host_work, size_t host_bytes, int* info);

}  // namespace remora::worker::gen::cusolver
