// The driver API's CUDA IPC: the calls the runtime shares (ipc_client.h) in the current
// context, with the context's ownership of opened events kept as cuEventCreate's.
#include <cuda.h>

#include "driver/contexts.h"
#include "driver/driver.h"
#include "export.h"
#include "ipc_client.h"
#include "process.h"

using namespace remora;
using namespace remora::shim;
using namespace remora::shim::driver;

namespace {
Contexts& Ctxs() { return Process::Get().contexts(); }
uint64_t H(const void* p) { return reinterpret_cast<uint64_t>(p); }

CUresult OpenMem(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags, const char* call) {
  if (pdptr == nullptr) return Invalid(call, "pdptr is NULL");
  return CallInContext(call, [&] { return OpenIpcMemory(handle, flags, call, pdptr); });
}
}  // namespace

REMORA_API CUresult cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags) {
  return OpenMem(pdptr, handle, flags, "cuIpcOpenMemHandle");
}
REMORA_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags) {
  return OpenMem(pdptr, handle, flags, "cuIpcOpenMemHandle_v2");
}

REMORA_API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  return Done(CloseIpcMemory(dptr, "cuIpcCloseMemHandle"), "cuIpcCloseMemHandle");
}

// The exported event's records are fenced from now on (api_ipc.cc).
REMORA_API CUresult cuIpcGetEventHandle(CUipcEventHandle* pHandle, CUevent event) {
  if (pHandle == nullptr) return Invalid("cuIpcGetEventHandle", "pHandle is NULL");
  return Done(ExportIpcEvent(event, "cuIpcGetEventHandle", pHandle), "cuIpcGetEventHandle");
}

REMORA_API CUresult cuIpcOpenEventHandle(CUevent* phEvent, CUipcEventHandle handle) {
  if (phEvent == nullptr) return Invalid("cuIpcOpenEventHandle", "phEvent is NULL");
  CUresult r = CallInContext("cuIpcOpenEventHandle", [&] { return OpenIpcEvent(handle, "cuIpcOpenEventHandle", phEvent); });
  if (r != CUDA_SUCCESS) return r;
  Ctxs().Own(H(*phEvent), &Owned::events);
  return CUDA_SUCCESS;
}
