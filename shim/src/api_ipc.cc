// CUDA IPC (cudaIpc*): the calls travel as the driver API's entries (protocol/api/cuda.api
// @1200-@1204); the worker registers exports with the server's supervisor and has every open
// checked there (docs/ARCHITECTURE.md, "IPC between processes"). The handles are the server's
// 64-byte capabilities, passed between processes by the application as with CUDA. What this
// file adds is the client's own tables: memory opened here is a device allocation of this
// process (pointers into it are checked and classified locally), and an opened event one of
// its events.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "cuda_client.h"
#include "export.h"
#include "ipc_client.h"
#include "remote_call.h"
#include "runtime.h"
#include "wire_args.h"

namespace remora::shim {
namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(CUipcMemHandle) && sizeof(CUipcMemHandle) == 64);
static_assert(sizeof(cudaIpcEventHandle_t) == sizeof(CUipcEventHandle) && sizeof(CUipcEventHandle) == 64);

cudaError_t Done(const Status& st, const char* call) { return static_cast<cudaError_t>(FinishApi(Domain::kCudart, st, call)); }

// Opens of one handle share a mapping (the worker counts them too): the local allocation
// goes with the last close.
std::mutex g_mu;
std::map<uint64_t, int> g_opens;
std::set<uint64_t> g_ipc_events;  // exported or opened here: their records are fenced

void NoteIpcEvent(CUevent e) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_ipc_events.insert(U(e));
}

}  // namespace

bool IsIpcEvent(CUevent e) {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_ipc_events.count(U(e)) > 0;
}

void ForgetIpcEvent(CUevent e) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_ipc_events.erase(U(e));
}

}  // namespace remora::shim

using namespace remora;
using namespace remora::shim;

REMORA_API cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* devPtr) {
  constexpr const char* kCall = "cudaIpcGetMemHandle";
  if (handle == nullptr) return Finish(Error(Err::kInvalidValue, "handle is NULL"), kCall);
  CUipcMemHandle h{};
  Status st = gen::cuda::cuIpcGetMemHandle(CallCtx{false, kCall}, &h, U(devPtr));
  if (st.ok()) std::memcpy(handle, &h, sizeof(h));
  return Done(st, kCall);
}

namespace remora::shim {

Status OpenIpcMemory(CUipcMemHandle handle, unsigned int flags, const char* call, CUdeviceptr* p) {
  if (p == nullptr) return Error(Err::kInvalidValue, "the pointer's out-pointer is NULL");
  Runtime& rt = Runtime::Get();
  ASSIGN_OR_RETURN(int device, rt.CurrentDevice());
  CUdeviceptr ptr = 0;
  size_t size = 0;
  RETURN_IF_ERROR(gen::cuda::remoraIpcOpenMemHandle(CallCtx{false, call}, &ptr, &size, handle, flags));
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_opens[ptr]++ == 0) rt.AddDeviceAllocation(ptr, size, device, AllocKind::kIpcImported);
  }
  *p = ptr;
  return Status::Ok();
}

Status CloseIpcMemory(CUdeviceptr p, const char* call) {
  RETURN_IF_ERROR(gen::cuda::cuIpcCloseMemHandle(CallCtx{false, call}, p));
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_opens.find(p);
  if (it != g_opens.end() && --it->second == 0) {
    g_opens.erase(it);
    (void)Runtime::Get().RemoveDeviceAllocation(p);
  }
  return Status::Ok();
}

Status ExportIpcEvent(CUevent event, const char* call, CUipcEventHandle* handle) {
  if (handle == nullptr) return Error(Err::kInvalidValue, "handle is NULL");
  CUipcEventHandle h{};
  RETURN_IF_ERROR(gen::cuda::cuIpcGetEventHandle(CallCtx{false, call}, &h, event));
  *handle = h;
  NoteIpcEvent(event);
  return Status::Ok();
}

Status OpenIpcEvent(CUipcEventHandle handle, const char* call, CUevent* event) {
  if (event == nullptr) return Error(Err::kInvalidValue, "event is NULL");
  Runtime& rt = Runtime::Get();
  ASSIGN_OR_RETURN(int device, rt.CurrentDevice());
  CUevent e = nullptr;
  RETURN_IF_ERROR(gen::cuda::cuIpcOpenEventHandle(CallCtx{false, call}, &e, handle));
  rt.AddEvent(U(e), device);
  NoteIpcEvent(e);
  *event = e;
  return Status::Ok();
}

}  // namespace remora::shim

REMORA_API cudaError_t cudaIpcOpenMemHandle(void** devPtr, cudaIpcMemHandle_t handle, unsigned int flags) {
  constexpr const char* kCall = "cudaIpcOpenMemHandle";
  if (devPtr == nullptr) return Finish(Error(Err::kInvalidValue, "devPtr is NULL"), kCall);
  CUipcMemHandle h;
  std::memcpy(&h, &handle, sizeof(h));
  CUdeviceptr p = 0;
  Status st = OpenIpcMemory(h, flags, kCall, &p);
  if (st.ok()) *devPtr = reinterpret_cast<void*>(p);
  return Done(st, kCall);
}

REMORA_API cudaError_t cudaIpcCloseMemHandle(void* devPtr) {
  return Done(CloseIpcMemory(U(devPtr), "cudaIpcCloseMemHandle"), "cudaIpcCloseMemHandle");
}

REMORA_API cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t* handle, cudaEvent_t event) {
  constexpr const char* kCall = "cudaIpcGetEventHandle";
  if (handle == nullptr) return Finish(Error(Err::kInvalidValue, "handle is NULL"), kCall);
  CUipcEventHandle h{};
  Status st = ExportIpcEvent(reinterpret_cast<CUevent>(event), kCall, &h);
  if (st.ok()) std::memcpy(handle, &h, sizeof(h));
  return Done(st, kCall);
}

REMORA_API cudaError_t cudaIpcOpenEventHandle(cudaEvent_t* event, cudaIpcEventHandle_t handle) {
  constexpr const char* kCall = "cudaIpcOpenEventHandle";
  if (event == nullptr) return Finish(Error(Err::kInvalidValue, "event is NULL"), kCall);
  CUipcEventHandle h;
  std::memcpy(&h, &handle, sizeof(h));
  CUevent e = nullptr;
  Status st = OpenIpcEvent(h, kCall, &e);
  if (st.ok()) *event = reinterpret_cast<cudaEvent_t>(e);
  return Done(st, kCall);
}

namespace remora::gen::cuda {

void IpcRecordFence(CUevent event, CUstream) {
  {
    std::lock_guard<std::mutex> lock(shim::g_mu);
    if (!shim::g_ipc_events.count(shim::U(event))) return;
  }
  // Any answered call is answered after the posted record was applied (the worker takes a
  // session's requests in order); a query of the event itself is the cheapest.
  (void)cuEventQuery(shim::CallCtx{false, "cudaEventRecord"}, event);
}
void IpcRecordFenceFlags(CUevent event, CUstream stream, unsigned int) { IpcRecordFence(event, stream); }

}  // namespace remora::gen::cuda
