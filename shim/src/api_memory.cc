// Device memory: cudaMalloc, cudaFree and pointer attributes. Pointers are checked against this
// process's own tables first, so a bad argument fails at once, as with CUDA; the worker checks
// them again authoritatively. Copies: api_memcpy.cc; pinned host memory: api_pinned.cc.
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "callbacks.h"
#include "device_core.h"
#include "export.h"
#include "memops.h"
#include "memory_core.h"
#include "multi_server.h"
#include "remora/base/log.h"
#include "remora/base/util.h"
#include "runtime.h"
#include "wire_args.h"

namespace remora::shim {

Status AllocateDevice(size_t size, void** ptr) {
  if (ptr == nullptr) return Error(Err::kInvalidValue, "the pointer's out-pointer is NULL");
  Runtime& rt = Runtime::Get();
  ASSIGN_OR_RETURN(int dev, rt.CurrentDevice());
  *ptr = nullptr;
  if (size == 0) return Status::Ok();
  uint64_t p = 0;
  Client* c = *rt.Session();
  RETURN_IF_ERROR(c->Call(dev, [&](wire::Request::Builder& r) { r.initMemAlloc().setSize(size); },
                          [&](wire::Reply::Reader& r) -> Status {
                            p = r.getPointer();
                            return Status::Ok();
                          }));
  if (rt.server_count() > 1 && (rt.FindDevice(p) || rt.FindDevice(p + size - 1))) {
    // Two servers handed out overlapping addresses (a GPU server's own allocator; the host
    // backend places each server's in its window): refused rather than confused.
    (void)c->Call(dev, [&](wire::Request::Builder& r) { r.initMemFree().setPtr(p); },
                  [](wire::Reply::Reader&) { return Status::Ok(); });
    return Error(Err::kMemoryAllocation, "device {}'s server allocated 0x{:x}, which another Remora server's "
                 "memory already occupies in this application", dev, p);
  }
  rt.AddDeviceAllocation(p, size, dev);
  *ptr = reinterpret_cast<void*>(p);
  return Status::Ok();
}

Status FreeDevice(void* ptr) {
  Runtime& rt = Runtime::Get();
  ASSIGN_OR_RETURN(Client * c, rt.Session());
  if (ptr == nullptr) return Status::Ok();
  if (rt.FindHost(ptr))  // device-visible pinned memory is device memory too (AllocatePinned)
    return Error(Err::kInvalidValue, "{} is pinned host memory: free it as such (cudaFreeHost, cuMemFreeHost)", ptr);
  if (Status st; FreeManaged(c, ptr, &st)) return AfterSync(c, st);
  auto a = rt.FindDevice(U(ptr));
  // Inside a graph's memory the worker tells a node's address from an interior one: the
  // nodes of one graph may share an entry (runtime.cc, AddDeviceAllocation).
  if (!a || (a->base != U(ptr) && a->kind != AllocKind::kGraphMemory) || a->kind == AllocKind::kModule)
    return Error(Err::kInvalidValue, "{} is not a device allocation of this process", ptr);
  if (a->kind == AllocKind::kIpcImported)
    return Error(Err::kInvalidValue, "{} was opened by IPC: close it with cudaIpcCloseMemHandle", ptr);
  Status st = c->Call(a->device, [&](wire::Request::Builder& r) { r.initMemFree().setPtr(U(ptr)); },
                      [](wire::Reply::Reader&) { return Status::Ok(); });
  // A graph's memory keeps its address (the graph allocates it again at its next launch).
  if ((st.ok() || st.code() == Err::kInvalidValue) && a->kind != AllocKind::kGraphMemory)
    (void)rt.RemoveDeviceAllocation(U(ptr));
  return AfterSync(c, st);
}

}  // namespace remora::shim

using namespace remora;
using namespace remora::shim;

REMORA_API cudaError_t cudaMalloc(void** devPtr, size_t size) {
  if (devPtr == nullptr) return Finish(Error(Err::kInvalidValue, "devPtr is NULL"), "cudaMalloc");
  return Finish(AllocateDevice(size, devPtr), "cudaMalloc");
}

REMORA_API cudaError_t cudaFree(void* devPtr) { return Finish(FreeDevice(devPtr), "cudaFree"); }


REMORA_API cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  if (attributes == nullptr) return Finish(Error(Err::kInvalidValue, "attributes is NULL"), "cudaPointerGetAttributes");
  Runtime& rt = Runtime::Get();
  auto c = rt.Session();
  if (!c.ok()) return Finish(c.status(), "cudaPointerGetAttributes");
  std::memset(attributes, 0, sizeof(*attributes));
  // Pinned memory first: over tcp small pinned memory is also a managed allocation (HostAlloc).
  auto h = rt.FindHost(ptr);
  auto d = h ? std::nullopt : rt.FindDevice(U(ptr));
  // Managed: allocated so, or a module's managed variable (__managed__) mapped here.
  if (d && (d->kind == AllocKind::kManaged || (d->kind == AllocKind::kModule && rt.managed().Contains(U(ptr))))) {
    attributes->type = cudaMemoryTypeManaged;
    attributes->device = d->device;
    attributes->devicePointer = const_cast<void*>(ptr);
    attributes->hostPointer = const_cast<void*>(ptr);
  } else if (d) {
    attributes->type = cudaMemoryTypeDevice;
    attributes->device = d->device;
    attributes->devicePointer = const_cast<void*>(ptr);
  } else if (h) {
    attributes->type = cudaMemoryTypeHost;
    attributes->device = Thread().device;
    attributes->hostPointer = const_cast<void*>(ptr);
    attributes->devicePointer = const_cast<void*>(ptr);
  } else {
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = -2;
    attributes->hostPointer = const_cast<void*>(ptr);
  }
  return cudaSuccess;
}
