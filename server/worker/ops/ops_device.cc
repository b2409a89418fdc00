// Device enumeration, the tenant's view of memory, device-wide synchronisation and reset.
#include <cuda.h>

#include <algorithm>

#include "remora/base/log.h"
#include "worker/ops/handlers.h"

namespace remora::worker {

namespace {

// What a tenant sees of a GPU's memory: its limit, not the physical card.
struct MemoryView {
  uint64_t total;
  uint64_t free;
};

MemoryView ViewOf(Executor& ex, int gpu, uint64_t physical_total, uint64_t physical_free) {
  MemoryView v{physical_total, physical_free};
  if (ex.ledger() == nullptr) return v;
  uint32_t tenant = ex.ledger()->SessionTenant(ex.ledger_slot());
  TenantUsage u = ex.ledger()->Tenant(tenant, static_cast<uint32_t>(gpu));
  v.total = std::min(u.limit, physical_total);
  uint64_t room = v.total > u.used ? v.total - u.used : 0;
  v.free = std::min(room, physical_free);
  return v;
}

// What a remote client can do with a GPU, where it differs from a local one, so programs take
// the paths that work (NVIDIA's samples choose by these): managed memory is coherent at
// launches and synchronisations only (shim/src/managed.h), so the host must not touch it
// while kernels run, as on devices without concurrent managed access; the GPU cannot read the
// client's pageable memory, and its atomics never reach the client's memory; host memory is
// mapped for the device through shared pinned memory (shm) or emulated as managed memory
// (tcp); the device's and the host's function pointers are never the same
// (cuLibraryGetUnifiedFunction finds none). Not remoted, so not offered: memory on the
// server's host (VMM and pool locations of type HOST or HOST_NUMA, dma-buf), GPUDirect
// RDMA to the client's devices, fabric handles (shareable handles are POSIX descriptors only),
// external semaphores, multicast objects, graphics interop (CIG).
std::vector<int32_t> RemotedAttributes(std::vector<int32_t> a) {
  auto set = [&](CUdevice_attribute k, int32_t v) {
    if (static_cast<size_t>(k) < a.size()) a[static_cast<size_t>(k)] = v;
  };
  auto get = [&](CUdevice_attribute k) { return static_cast<size_t>(k) < a.size() ? a[static_cast<size_t>(k)] : 0; };
  set(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 1);
  set(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 0);
  set(CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, 0);
  set(CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES, 0);
  set(CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST, 0);
  set(CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED, 0);
  set(CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, 0);
  set(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1);
  set(CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS, 0);
  set(CU_DEVICE_ATTRIBUTE_ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED, 0);
  set(CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, -1);  // no host node of the client's is near the GPU
  set(CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0);
  set(CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED, 0);
  set(CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED, 0);
  set(CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED, 0);
  set(CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0);
  set(CU_DEVICE_ATTRIBUTE_HOST_ALLOC_DMA_BUF_SUPPORTED, 0);
  set(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, 0);
  set(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, 0);
  set(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS, 0);
  set(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING, 0);
  set(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, 0);
  set(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED, 0);
  set(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED, 0);
  set(CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, get(CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES) &
                                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  set(CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED, 0);
  set(CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, 0);
  set(CU_DEVICE_ATTRIBUTE_D3D12_CIG_SUPPORTED, 0);
  set(CU_DEVICE_ATTRIBUTE_VULKAN_CIG_SUPPORTED, 0);
  return a;
}

}  // namespace

Status Handlers::GetDevices(Executor& ex, uint64_t tag, Req) {
  const std::vector<int>& gpus = ex.config().gpus;
  std::vector<const DeviceDescription*> descs;
  std::vector<int> ids;
  for (int gpu : gpus) {
    // A detached GPU keeps its ordinal; describe it from the cache if possible.
    int id = gpu;
    if (id < 0) {
      descs.push_back(nullptr);
      ids.push_back(-1);
      continue;
    }
    auto d = ex.Description(id);
    if (!d.ok()) return ex.PostReply(tag, d.status());
    descs.push_back(*d);
    ids.push_back(id);
  }
  return ex.PostReply(tag, Status::Ok(), [&](wire::Reply::Builder& r) {
    auto list = r.initDevices(static_cast<unsigned>(gpus.size()));
    for (size_t i = 0; i < gpus.size(); i++) {
      auto d = list[static_cast<unsigned>(i)];
      d.setOrdinal(static_cast<int32_t>(i));
      d.setEmulated(ex.driver().emulated());
      if (descs[i] == nullptr) {
        d.setGpuId(UINT32_MAX);
        d.setName("(detached)");
        continue;
      }
      const DeviceDescription& desc = *descs[i];
      d.setGpuId(static_cast<uint32_t>(ids[i]));
      d.setName(desc.name);
      d.setUuid(capnp::Data::Reader(desc.uuid, 16));
      d.setPhysicalMemory(desc.total_memory);
      d.setTotalMemory(ViewOf(ex, ids[i], desc.total_memory, desc.total_memory).total);
      d.setPciBusId(desc.pci_bus_id);
      std::vector<int32_t> seen = RemotedAttributes(desc.attributes);
      auto attrs = d.initAttributes(static_cast<unsigned>(seen.size()));
      for (size_t a = 0; a < seen.size(); a++) attrs.set(static_cast<unsigned>(a), seen[a]);
    }
  });
}

Status Handlers::MemGetInfo(Executor& ex, uint64_t tag, Req req) {
  auto gpu = ex.GpuOf(req.getDevice());
  if (!gpu.ok()) return ex.PostReply(tag, gpu.status());
  Status st = ex.SetDevice(*gpu);
  if (!st.ok()) return ex.PostReply(tag, st);
  auto info = ex.driver().MemGetInfo();
  if (!info.ok()) return ex.PostReply(tag, info.status());
  MemoryView v = ViewOf(ex, *gpu, info->total, info->free);
  return ex.PostReply(tag, Status::Ok(), [&](wire::Reply::Builder& r) {
    auto m = r.initMemInfo();
    m.setFree(v.free);
    m.setTotal(v.total);
  });
}

Status Handlers::DeviceSynchronize(Executor& ex, uint64_t tag, Req req) {
  auto gpu = ex.GpuOf(req.getDevice());
  if (!gpu.ok()) return ex.PostReply(tag, gpu.status());
  return ReplyWhenDone(ex, tag, StreamsOf(ex, *gpu));
}

Status Handlers::DeviceReset(Executor& ex, uint64_t tag, Req req) {
  auto gpu = ex.GpuOf(req.getDevice());
  if (!gpu.ok()) return ex.PostReply(tag, gpu.status());
  Status st = ex.SetDevice(*gpu);
  if (!st.ok()) return ex.PostReply(tag, st);
  // Everything the session holds on this device goes away, as with cudaDeviceReset.
  for (uint64_t id : ex.session().streams().Ids()) {
    Executor::Stream* s = ex.session().streams().Find(id);
    if (s->gpu != *gpu) continue;
    (void)ex.driver().StreamDestroy(s->stream);
    ex.session().streams().Erase(id);
  }
  for (uint64_t id : ex.session().events().Ids()) {
    Executor::Event* e = ex.session().events().Find(id);
    if (e->gpu != *gpu) continue;
    (void)ex.driver().EventDestroy(e->event);
    ex.session().events().Erase(id);
  }
  for (auto it = ex.session().per_thread_streams().begin(); it != ex.session().per_thread_streams().end();) {
    if (it->first.second != *gpu) {
      ++it;
      continue;
    }
    (void)ex.driver().StreamDestroy(it->second);
    it = ex.session().per_thread_streams().erase(it);
  }
  for (const Allocation& a : ex.session().allocations().All()) {
    if (a.device != *gpu) continue;
    (void)ex.driver().MemFree(a.base);
    ex.ReleaseCharge(a.device, a.reserved);
    (void)ex.session().allocations().Erase(a.base);
  }
  return ex.PostReply(tag, Status::Ok());
}

}  // namespace remora::worker
