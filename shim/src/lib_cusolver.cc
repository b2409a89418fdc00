// cuSOLVER entry points written by hand (protocol/api/cusolver.api: local) and the mirror hook
// (lib_cusolver.h).
#include "lib_cusolver.h"

#include "lib_objects.h"
#include "process.h"
#include "remote_call.h"

namespace remora::gen::cusolver {

void MirrorStream(cusolverDnHandle_t h, cudaStream_t s) {
  shim::Process::Get().lib_objects().SetAux(shim::HandleBits(HandleKind::kCusolverDnHandle, h), 0,
                                            static_cast<int64_t>(reinterpret_cast<uintptr_t>(s)));
}

}  // namespace remora::gen::cusolver

extern "C" cusolverStatus_t cusolverDnGetStream(cusolverDnHandle_t handle, cudaStream_t* stream) {
  auto v = remora::shim::Process::Get().lib_objects().Get(
      remora::shim::HandleBits(remora::HandleKind::kCusolverDnHandle, handle), remora::HandleKind::kCusolverDnHandle);
  if (!v.ok()) return CUSOLVER_STATUS_NOT_INITIALIZED;
  if (stream == nullptr) return CUSOLVER_STATUS_INVALID_VALUE;
  *stream = reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(v->aux[0]));
  return CUSOLVER_STATUS_SUCCESS;
}
