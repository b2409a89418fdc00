// The real backend (cuda_driver.h): allocations placed at given addresses (planned
// migration). cuMemAlloc's allocations share 2 MiB pages, so the allocations to place are
// grouped into extents of whole granules; each extent is one reserved range at its address
// with one physical allocation mapped into it, unmapped and released when its last
// allocation is freed.
#include "remora/base/log.h"
#include "remora/base/util.h"
#include "worker/backend/cuda/cuda_driver.h"
#include "worker/backend/placement.h"

namespace remora::worker::cuda_backend {

Result<uint64_t> CudaDriver::PlacementGranularity() {
  CUdevice dev = 0;
  RETURN_IF_ERROR(Check(api_.cuDeviceGet(&dev, current_), "cuDeviceGet"));
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  size_t granule = 0;
  RETURN_IF_ERROR(Check(table_.cuMemGetAllocationGranularity(&granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                        "cuMemGetAllocationGranularity"));
  return granule == 0 ? uint64_t{2} << 20 : uint64_t{granule};
}

Status CudaDriver::MemPlace(const std::vector<std::pair<DevPtr, uint64_t>>& allocations) {
  if (allocations.empty()) return Status::Ok();
  CUdevice dev = 0;
  RETURN_IF_ERROR(Check(api_.cuDeviceGet(&dev, current_), "cuDeviceGet"));
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  ASSIGN_OR_RETURN(uint64_t granule, PlacementGranularity());
  // Extents: [lo, hi) in whole granules, each covering one or more allocations (what the
  // migration charged: worker/backend/placement.h).
  std::vector<PlacementExtent> extents = PlacementExtents(allocations, granule);
  std::vector<DevPtr> made;
  auto undo = [&] {
    for (DevPtr lo : made) {
      Placed& p = placed_[lo];
      (void)table_.cuMemUnmap(lo, p.size);
      (void)table_.cuMemRelease(p.handle);
      (void)table_.cuMemAddressFree(lo, p.size);
      placed_.erase(lo);
    }
    for (const auto& [at, bytes] : allocations) placed_allocations_.erase(at);
  };
  for (const PlacementExtent& e : extents) {
    for (const auto& [lo, p] : placed_)
      if (lo < e.hi && e.lo < lo + p.size) {
        undo();
        return Error(Err::kMemoryAllocation, "0x{:x}+{} overlaps memory already placed here", e.lo, FormatSize(e.hi - e.lo));
      }
    uint64_t size = e.hi - e.lo;
    CUdeviceptr got = 0;
    CUresult r = table_.cuMemAddressReserve(&got, size, granule, e.lo, 0);
    if (r != CUDA_SUCCESS || got != e.lo) {
      if (r == CUDA_SUCCESS) (void)table_.cuMemAddressFree(got, size);
      undo();
      return Error(Err::kMemoryAllocation, "device addresses 0x{:x}+{} are not free on this server (the driver offered 0x{:x}, {})",
                   e.lo, FormatSize(size), static_cast<uint64_t>(got), static_cast<int>(r));
    }
    CUmemGenericAllocationHandle h = 0;
    r = table_.cuMemCreate(&h, size, &prop, 0);
    if (r == CUDA_SUCCESS) {
      r = table_.cuMemMap(e.lo, size, 0, h, 0);
      if (r != CUDA_SUCCESS) (void)table_.cuMemRelease(h);
    }
    if (r == CUDA_SUCCESS) {
      CUmemAccessDesc access = {};
      access.location = prop.location;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      r = table_.cuMemSetAccess(e.lo, size, &access, 1);
      if (r != CUDA_SUCCESS) {
        (void)table_.cuMemUnmap(e.lo, size);
        (void)table_.cuMemRelease(h);
      }
    }
    if (r != CUDA_SUCCESS) {
      (void)table_.cuMemAddressFree(e.lo, size);
      undo();
      return Check(r, "placing device memory (cuMemCreate/cuMemMap/cuMemSetAccess)");
    }
    placed_[e.lo] = Placed{size, h, static_cast<int>(e.members.size())};
    made.push_back(e.lo);
    for (const auto& [m, bytes] : e.members) placed_allocations_[m] = e.lo;
  }
  LOG_DEBUG("placed {} allocations in {} extents", allocations.size(), extents.size());
  return Status::Ok();
}

Status CudaDriver::MemFree(DevPtr ptr) {
  auto it = placed_allocations_.find(ptr);
  if (it == placed_allocations_.end()) return Check(api_.cuMemFree(static_cast<CUdeviceptr>(ptr)), "cuMemFree");
  DevPtr lo = it->second;
  placed_allocations_.erase(it);
  Placed& p = placed_[lo];
  if (--p.refs > 0) return Status::Ok();
  // The caller freed it once the work queued before the free ran (FreeOp), as for cuMemFree.
  Status st = Check(table_.cuMemUnmap(lo, p.size), "cuMemUnmap");
  if (st.ok()) st = Check(table_.cuMemRelease(p.handle), "cuMemRelease");
  if (st.ok()) st = Check(table_.cuMemAddressFree(lo, p.size), "cuMemAddressFree");
  placed_.erase(lo);
  return st;
}

}  // namespace remora::worker::cuda_backend
