// The driver API's CUDA IPC: the runtime's implementation (shim/src/api_ipc.cc) in the
// current context, with the context's ownership of opened events kept as cuEventCreate's.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstring>

#include "driver/contexts.h"
#include "driver/driver.h"
#include "export.h"
#include "process.h"

using namespace remora;
using namespace remora::shim;
using namespace remora::shim::driver;

namespace {
Contexts& Ctxs() { return Process::Get().contexts(); }
uint64_t H(const void* p) { return reinterpret_cast<uint64_t>(p); }

CUresult OpenMem(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags, const char* call) {
  if (pdptr == nullptr) return Invalid(call, "pdptr is NULL");
  cudaIpcMemHandle_t h;
  std::memcpy(&h, &handle, sizeof(h));
  void* p = nullptr;
  CUresult r = InContext(call, [&] { return cudaIpcOpenMemHandle(&p, h, flags); });
  if (r == CUDA_SUCCESS) *pdptr = reinterpret_cast<CUdeviceptr>(p);
  return r;
}
}  // namespace

REMORA_API CUresult cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags) {
  return OpenMem(pdptr, handle, flags, "cuIpcOpenMemHandle");
}
REMORA_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags) {
  return OpenMem(pdptr, handle, flags, "cuIpcOpenMemHandle_v2");
}

REMORA_API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  return ViaRuntime([&] { return cudaIpcCloseMemHandle(reinterpret_cast<void*>(dptr)); });
}

// The exported event's records are fenced from now on (api_ipc.cc), as the runtime's.
REMORA_API CUresult cuIpcGetEventHandle(CUipcEventHandle* pHandle, CUevent event) {
  if (pHandle == nullptr) return Invalid("cuIpcGetEventHandle", "pHandle is NULL");
  cudaIpcEventHandle_t h;
  CUresult r = ViaRuntime([&] { return cudaIpcGetEventHandle(&h, reinterpret_cast<cudaEvent_t>(event)); });
  if (r == CUDA_SUCCESS) std::memcpy(pHandle, &h, sizeof(h));
  return r;
}

REMORA_API CUresult cuIpcOpenEventHandle(CUevent* phEvent, CUipcEventHandle handle) {
  if (phEvent == nullptr) return Invalid("cuIpcOpenEventHandle", "phEvent is NULL");
  cudaIpcEventHandle_t h;
  std::memcpy(&h, &handle, sizeof(h));
  cudaEvent_t e = nullptr;
  CUresult r = InContext("cuIpcOpenEventHandle", [&] { return cudaIpcOpenEventHandle(&e, h); });
  if (r != CUDA_SUCCESS) return r;
  *phEvent = reinterpret_cast<CUevent>(e);
  Ctxs().Own(H(e), &Owned::events);
  return CUDA_SUCCESS;
}
