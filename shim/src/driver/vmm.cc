// The virtual memory API's address ranges (PyTorch's expandable segments): the calls travel
// as generated (protocol/api/cuda.api; the worker checks them against the session's
// reservations and mappings and charges cuMemCreate to the tenant's quota); these wrappers
// keep the client's device table in step (the reserved ranges and what is mapped into them),
// so pointers into them are checked and described without a round trip.
#include <cstdint>

#include "cuda_client.h"
#include "driver/driver.h"
#include "export.h"
#include "remote_call.h"
#include "runtime.h"
#include "shareable_handle.h"

using namespace remora;
using namespace remora::shim;
using namespace remora::shim::driver;

REMORA_API CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                        unsigned long long flags) {
  if (ptr == nullptr) return Invalid("cuMemAddressReserve", "ptr is NULL");
  Status st = gen::cuda::cuMemAddressReserve(CallCtx{false, "cuMemAddressReserve"}, ptr, size, alignment, addr, flags);
  if (st.ok()) Runtime::Get().AddDeviceAllocation(*ptr, size, Thread().device, AllocKind::kVirtual);
  return Done(st, "cuMemAddressReserve");
}

REMORA_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  Status st = gen::cuda::cuMemAddressFree(CallCtx{false, "cuMemAddressFree"}, ptr, size);
  if (st.ok()) (void)Runtime::Get().RemoveDeviceAllocation(ptr);
  return Done(st, "cuMemAddressFree");
}

REMORA_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                             unsigned long long flags) {
  Status st = gen::cuda::cuMemMap(CallCtx{false, "cuMemMap"}, ptr, size, offset, handle, flags);
  if (st.ok()) Runtime::Get().AddDeviceMapping(ptr, size);
  return Done(st, "cuMemMap");
}

REMORA_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  Status st = gen::cuda::cuMemUnmap(CallCtx{false, "cuMemUnmap"}, ptr, size);
  if (st.ok()) Runtime::Get().RemoveDeviceMapping(ptr, size);
  return Done(st, "cuMemUnmap");
}

// Shareable handles (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR): a descriptor holding the
// server's capability (shareable_handle.h); the worker registers the driver's own.
namespace {

CUresult UnsupportedHandleType(const char* call, CUmemAllocationHandleType type) {
  return Done(Status(Domain::kCuda, CUDA_ERROR_NOT_SUPPORTED,
                     fmt::format("handle type {} is not supported: Remora shares physical memory by POSIX file "
                                 "descriptor (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) between applications of "
                                 "one server", static_cast<int>(type))),
              call);
}

}  // namespace

REMORA_API CUresult cuMemExportToShareableHandle(void* shareableHandle, CUmemGenericAllocationHandle handle,
                                                 CUmemAllocationHandleType handleType, unsigned long long flags) {
  constexpr const char* kCall = "cuMemExportToShareableHandle";
  if (shareableHandle == nullptr) return Invalid(kCall, "shareableHandle is NULL");
  if (flags != 0) return Invalid(kCall, "flags must be 0");
  if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return UnsupportedHandleType(kCall, handleType);
  CUipcMemHandle capability;
  Status st = gen::cuda::remoraMemExportShareable(CallCtx{false, kCall}, &capability, handle);
  if (!st.ok()) return Done(st, kCall);
  auto fd = WriteShareableHandle(ShareableKind::kPhysical, capability);
  if (!fd.ok()) return Done(fd.status(), kCall);
  *static_cast<int*>(shareableHandle) = *fd;
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* osHandle,
                                                   CUmemAllocationHandleType shHandleType) {
  constexpr const char* kCall = "cuMemImportFromShareableHandle";
  if (handle == nullptr) return Invalid(kCall, "handle is NULL");
  if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return UnsupportedHandleType(kCall, shHandleType);
  // The descriptor is the pointer's value, as the driver takes it; it stays the caller's.
  auto capability = ReadShareableHandle(ShareableKind::kPhysical, static_cast<int>(reinterpret_cast<intptr_t>(osHandle)));
  if (!capability.ok()) return Done(capability.status(), kCall);
  return Done(gen::cuda::remoraMemImportShareable(CallCtx{false, kCall}, handle, *capability), kCall);
}
