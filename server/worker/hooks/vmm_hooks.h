// The worker's end of the virtual memory API (protocol/api/cuda.api, `worker=Vmm*`): each
// hook checks its arguments against the session's own reservations, physical allocations and
// mappings, charges or releases the tenant's quota, and calls the driver. Physical memory is
// charged at cuMemCreate and released once it is both released and unmapped, as the driver
// frees it. Executor thread only.
#pragma once

#include <cuda.h>

namespace remora::worker {

class OpContext;

CUresult VmmReserve(OpContext& x, CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                    unsigned long long flags);
CUresult VmmFree(OpContext& x, CUdeviceptr ptr, size_t size);
CUresult VmmCreate(OpContext& x, CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                   unsigned long long flags);
// cuMemExportToShareableHandle / cuMemImportFromShareableHandle (POSIX descriptors): the
// driver's descriptor is registered with the supervisor (IPC kind "physical"); the client
// gets and gives the capability. An import is charged to its exporter, whose charge stays
// until the last importer lets go.
CUresult VmmExport(OpContext& x, CUipcMemHandle* capability, CUmemGenericAllocationHandle handle);
CUresult VmmImport(OpContext& x, CUmemGenericAllocationHandle* handle, CUipcMemHandle capability);
CUresult VmmRelease(OpContext& x, CUmemGenericAllocationHandle handle);
CUresult VmmMap(OpContext& x, CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                unsigned long long flags);
CUresult VmmUnmap(OpContext& x, CUdeviceptr ptr, size_t size);
CUresult VmmSetAccess(OpContext& x, CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count);
CUresult VmmGetAccess(OpContext& x, unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr);
CUresult VmmProperties(OpContext& x, CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle);
CUresult VmmRetain(OpContext& x, CUmemGenericAllocationHandle* handle, void* addr);

}  // namespace remora::worker
