// The virtual memory API's address ranges (PyTorch's expandable segments): the calls travel
// as generated (protocol/api/cuda.api; the worker checks them against the session's
// reservations and mappings and charges cuMemCreate to the tenant's quota); these wrappers
// keep the client's device table in step (the reserved ranges and what is mapped into them),
// so pointers into them are checked and described without a round trip.
#include "cuda_client.h"
#include "driver/driver.h"
#include "export.h"
#include "remote_call.h"
#include "runtime.h"

using namespace remora;
using namespace remora::shim;
using namespace remora::shim::driver;

namespace {
CUresult Done(const Status& st, const char* call) { return static_cast<CUresult>(FinishApi(Domain::kCuda, st, call)); }
}  // namespace

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
