#include "worker/backend/host/host_cuda_api.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <type_traits>
#include <vector>
#include <map>
#include <memory>
#include <utility>

#include "cuda_api.h"
#include "cuda_hooks.h"
#include "worker/backend/host/host_array.h"
#include "worker/backend/host/host_graph_api.h"
#include "worker/backend/host/host_emulation.h"

namespace remora::worker {
namespace {

// Status codes of the cudart domain are numerically the driver's for every code the host
// backend produces.
CUresult R(const Status& st) { return st.ok() ? CUDA_SUCCESS : static_cast<CUresult>(st.raw()); }

// The emulated device's shared memory per block with the opt-in (an H100's and H200's).
constexpr int kSharedMemPerBlockOptin = 232448;

class HostCudaApi final : public HostArrayApi {
 public:
  HostCudaApi(Driver& d, host::HostMemory& m, HostGraphs& g) : HostArrayApi(d, g), d_(d), mem_(m) {}

  // ---- context settings, kept here -------------------------------------------------------
  CUresult cuCtxGetCacheConfig(CUfunc_cache* c) override { return *c = cache_config_, CUDA_SUCCESS; }
  CUresult cuCtxSetCacheConfig(CUfunc_cache c) override {
    if (c > CU_FUNC_CACHE_PREFER_EQUAL) return CUDA_ERROR_INVALID_VALUE;
    cache_config_ = c;
    return CUDA_SUCCESS;
  }
  CUresult cuCtxGetSharedMemConfig(CUsharedconfig* c) override { return *c = shared_config_, CUDA_SUCCESS; }
  CUresult cuCtxSetSharedMemConfig(CUsharedconfig c) override {
    if (c > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE) return CUDA_ERROR_INVALID_VALUE;
    shared_config_ = c;
    return CUDA_SUCCESS;
  }
  CUresult cuCtxResetPersistingL2Cache() override { return CUDA_SUCCESS; }
  CUresult cuFlushGPUDirectRDMAWrites(CUflushGPUDirectRDMAWritesTarget t, CUflushGPUDirectRDMAWritesScope s) override {
    if (t != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX) return CUDA_ERROR_INVALID_VALUE;
    if (s != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER && s != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_ALL_DEVICES)
      return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
  }
  CUresult cuCtxGetLimit(size_t* v, CUlimit l) override {
    auto r = d_.GetLimit(static_cast<int>(l));
    if (!r.ok()) return R(r.status());
    *v = static_cast<size_t>(*r);
    return CUDA_SUCCESS;
  }
  CUresult cuCtxSetLimit(CUlimit l, size_t v) override { return R(d_.SetLimit(static_cast<int>(l), v)); }
  CUresult cuCtxGetStreamPriorityRange(int* least, int* greatest) override {
    auto r = d_.StreamPriorityRange();
    if (!r.ok()) return R(r.status());
    if (least) *least = r->first;
    if (greatest) *greatest = r->second;
    return CUDA_SUCCESS;
  }

  // ---- kernels (an emulated function is an EmuFunction) ----------------------------------
  // What a GPU lets an application set: the dynamic shared memory limit (within the emulated
  // device's 227 KiB), the carveout and the cluster requirements; the rest is read-only.
  CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int value) override {
    switch (a) {
      case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        if (value < 0 || value > kSharedMemPerBlockOptin) return CUDA_ERROR_INVALID_VALUE;
        break;
      case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
      case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
      case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
      case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
      case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        break;
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    reinterpret_cast<host::EmuFunction*>(f)->attrs[a] = value;
    return CUDA_SUCCESS;
  }
  CUresult cuFuncSetCacheConfig(CUfunction, CUfunc_cache c) override {
    return c > CU_FUNC_CACHE_PREFER_EQUAL ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
  }
  // A fixed model of an SM: 2,048 threads and at most 32 blocks resident, 227 KiB of shared
  // memory; clusters of up to 8 blocks (CUDA's portable limit), 4 of them at once.
  CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* n, CUfunction, int block, size_t, unsigned) override {
    if (block <= 0 || block > 1024) return CUDA_ERROR_INVALID_VALUE;
    *n = std::min(32, 2048 / block);
    return CUDA_SUCCESS;
  }
  CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t* n, CUfunction, int blocks, int) override {
    if (blocks <= 0) return CUDA_ERROR_INVALID_VALUE;
    *n = static_cast<size_t>(kSharedMemPerBlockOptin) / static_cast<size_t>(blocks);
    return CUDA_SUCCESS;
  }
  CUresult cuOccupancyMaxActiveClusters(int* n, CUfunction, const CUlaunchConfig*) override { return *n = 4, CUDA_SUCCESS; }
  CUresult cuOccupancyMaxPotentialClusterSize(int* n, CUfunction, const CUlaunchConfig*) override {
    return *n = 8, CUDA_SUCCESS;
  }

  // ---- devices -----------------------------------------------------------------------------
  CUresult cuDeviceCanAccessPeer(int* can, CUdevice dev, CUdevice peer) override {
    auto r = d_.CanAccessPeer(dev, peer);
    if (!r.ok()) return R(r.status());
    *can = *r ? 1 : 0;
    return CUDA_SUCCESS;
  }
  CUresult cuDeviceGetP2PAttribute(int* value, CUdevice_P2PAttribute a, CUdevice src, CUdevice dst) override {
    if (src == dst) return CUDA_ERROR_INVALID_DEVICE;
    auto can = d_.CanAccessPeer(src, dst);
    if (!can.ok()) return R(can.status());
    switch (a) {
      case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED:
      case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED:
        *value = *can ? 1 : 0;
        return CUDA_SUCCESS;
      case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK:
      case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED:
        *value = 0;
        return CUDA_SUCCESS;
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
  }
  // No atomics are emulated: every operation is reported unsupported.
  CUresult cuDeviceGetHostAtomicCapabilities(unsigned int* caps, const CUatomicOperation*, unsigned int count, CUdevice) override {
    for (unsigned i = 0; i < count; i++) caps[i] = 0;
    return CUDA_SUCCESS;
  }
  CUresult cuDeviceGetP2PAtomicCapabilities(unsigned int* caps, const CUatomicOperation*, unsigned int count, CUdevice src,
                                            CUdevice dst) override {
    if (src == dst) return CUDA_ERROR_INVALID_DEVICE;
    for (unsigned i = 0; i < count; i++) caps[i] = 0;
    return CUDA_SUCCESS;
  }
  CUresult cuDeviceGetTexture1DLinearMaxWidth(size_t* width, CUarray_format, unsigned channels, CUdevice) override {
    if (channels != 1 && channels != 2 && channels != 4) return CUDA_ERROR_INVALID_VALUE;
    *width = size_t{1} << 27;  // the limit CUDA documents for compute capability 9.0
    return CUDA_SUCCESS;
  }

  // ---- streams -----------------------------------------------------------------------------
  CUresult cuStreamQuery(CUstream s) override { return R(d_.StreamQuery(s)); }
  CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) override { return R(d_.StreamWaitEvent(s, e, flags)); }
  CUresult cuStreamGetId(CUstream s, unsigned long long* id) override {
    auto [it, added] = stream_ids_.emplace(s, next_stream_id_);
    if (added) next_stream_id_++;
    *id = it->second;
    return CUDA_SUCCESS;
  }
  CUresult cuStreamGetAttribute(CUstream s, CUstreamAttrID a, CUstreamAttrValue* v) override {
    auto it = stream_attrs_.find({s, a});
    *v = it != stream_attrs_.end() ? it->second : CUstreamAttrValue{};
    return CUDA_SUCCESS;
  }
  CUresult cuStreamSetAttribute(CUstream s, CUstreamAttrID a, const CUstreamAttrValue* v) override {
    if (v == nullptr) return CUDA_ERROR_INVALID_VALUE;
    stream_attrs_[{s, a}] = *v;
    return CUDA_SUCCESS;
  }
  CUresult cuStreamCopyAttributes(CUstream dst, CUstream src) override {
    for (auto it = stream_attrs_.begin(); it != stream_attrs_.end(); ++it)
      if (it->first.first == src) stream_attrs_[{dst, it->first.second}] = it->second;
    return CUDA_SUCCESS;
  }
  // The host backend has no managed memory, and this call takes only managed memory.
  CUresult cuStreamAttachMemAsync(CUstream, CUdeviceptr, size_t, unsigned int) override { return CUDA_ERROR_INVALID_VALUE; }

  // ---- events -------------------------------------------------------------------------------
  CUresult cuEventRecord(CUevent e, CUstream s) override { return R(d_.EventRecord(e, s)); }
  CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned int flags) override {
    if (flags & ~CU_EVENT_RECORD_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
    return R(d_.EventRecord(e, s));
  }
  CUresult cuEventQuery(CUevent e) override { return R(d_.EventQuery(e)); }
  CUresult cuEventElapsedTime_v2(float* ms, CUevent a, CUevent b) override {
    auto r = d_.EventElapsedMs(a, b);
    if (!r.ok()) return R(r.status());
    *ms = *r;
    return CUDA_SUCCESS;
  }

  // ---- memory pools --------------------------------------------------------------------------
  CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* p, CUdevice dev) override { return Pool(d_.DefaultMemPool(dev), p); }
  CUresult cuDeviceGetMemPool(CUmemoryPool* p, CUdevice dev) override { return Pool(d_.GetMemPool(dev), p); }
  CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool p) override { return R(d_.SetMemPool(dev, p)); }
  CUresult cuMemGetDefaultMemPool(CUmemoryPool* p, CUmemLocation* loc, CUmemAllocationType type) override {
    if (type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
    return Pool(d_.DefaultMemPool(loc->id), p);
  }
  CUresult cuMemGetMemPool(CUmemoryPool* p, CUmemLocation* loc, CUmemAllocationType type) override {
    if (type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
    return Pool(d_.GetMemPool(loc->id), p);
  }
  CUresult cuMemSetMemPool(CUmemLocation* loc, CUmemAllocationType type, CUmemoryPool p) override {
    if (type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
    return R(d_.SetMemPool(loc->id, p));
  }
  CUresult cuMemPoolSetAttribute(CUmemoryPool p, CUmemPool_attribute a, void* v) override {
    uint64_t value = api::cuda::PoolAttributeSize(a) == sizeof(int) ? static_cast<uint64_t>(*static_cast<int*>(v))
                                                                  : *static_cast<uint64_t*>(v);
    return R(d_.MemPoolSetAttribute(p, static_cast<int>(a), value));
  }
  CUresult cuMemPoolGetAttribute(CUmemoryPool p, CUmemPool_attribute a, void* v) override {
    auto r = d_.MemPoolGetAttribute(p, static_cast<int>(a));
    if (!r.ok()) return R(r.status());
    if (api::cuda::PoolAttributeSize(a) == sizeof(int))
      *static_cast<int*>(v) = static_cast<int>(*r);
    else
      *static_cast<uint64_t*>(v) = *r;
    return CUDA_SUCCESS;
  }
  CUresult cuMemPoolTrimTo(CUmemoryPool p, size_t keep) override { return R(d_.MemPoolTrimTo(p, keep)); }
  CUresult cuMemPoolSetAccess(CUmemoryPool p, const CUmemAccessDesc* map, size_t count) override {
    for (size_t i = 0; i < count; i++) {
      if (map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        return CUDA_ERROR_INVALID_VALUE;
      pool_access_[{p, map[i].location.id}] = map[i].flags;
    }
    return CUDA_SUCCESS;
  }
  CUresult cuMemPoolGetAccess(CUmemAccess_flags* flags, CUmemoryPool p, CUmemLocation* loc) override {
    auto it = pool_access_.find({p, loc->id});
    if (it != pool_access_.end()) {
      *flags = it->second;
      return CUDA_SUCCESS;
    }
    // A pool's own device has read-write access; others none until granted.
    auto own = d_.DefaultMemPool(loc->id);
    *flags = own.ok() && *own == p ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE;
    if (!own.ok() || *own != p) {
      auto cur = d_.GetMemPool(loc->id);
      if (cur.ok() && *cur == p) *flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
    return CUDA_SUCCESS;
  }

  // ---- the virtual memory API: ranges of the emulated heap, host memory mapped into them --------
  CUresult cuMemGetAllocationGranularity(size_t* g, const CUmemAllocationProp*, CUmemAllocationGranularity_flags) override {
    *g = kGranularity;
    return CUDA_SUCCESS;
  }
  CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t align, CUdeviceptr, unsigned long long) override {
    if (size == 0 || size % kGranularity != 0) return CUDA_ERROR_INVALID_VALUE;
    auto r = mem_.ReserveRange(mem_.CurrentDevice(), size, std::max<size_t>(align, kGranularity));
    if (!r.ok()) return R(r.status());
    *ptr = *r;
    return CUDA_SUCCESS;
  }
  CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) override { return R(mem_.FreeRange(ptr, size)); }
  CUresult cuMemCreate(CUmemGenericAllocationHandle* h, size_t size, const CUmemAllocationProp* prop, unsigned long long) override {
    if (size == 0 || size % kGranularity != 0 || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
    // A memory file: each mapping of it shows the same bytes, as with physical memory.
    int fd = ::memfd_create("remora-emulated-physical", MFD_CLOEXEC);
    if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
      ::close(fd);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    auto phys = std::make_unique<Physical>();
    phys->fd = fd;
    phys->size = size;
    phys->prop = *prop;
    *h = reinterpret_cast<CUmemGenericAllocationHandle>(phys.get());
    physical_.emplace(*h, std::move(phys));
    return CUDA_SUCCESS;
  }
  // Shareable handles: the memory file itself, as POSIX descriptors of the driver's are.
  CUresult cuMemExportToShareableHandle(void* out, CUmemGenericAllocationHandle h, CUmemAllocationHandleType type,
                                        unsigned long long flags) override {
    auto it = physical_.find(h);
    if (it == physical_.end() || it->second->released || out == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
    // As the driver: only memory created to be shared that way.
    if ((it->second->prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0)
      return CUDA_ERROR_INVALID_VALUE;
    int fd = ::fcntl(it->second->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    *static_cast<int*>(out) = fd;
    return CUDA_SUCCESS;
  }
  CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* h, void* os_handle,
                                          CUmemAllocationHandleType type) override {
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
    int from = static_cast<int>(reinterpret_cast<intptr_t>(os_handle));
    struct stat st;
    if (::fstat(from, &st) != 0 || st.st_size <= 0 || static_cast<size_t>(st.st_size) % kGranularity != 0)
      return CUDA_ERROR_INVALID_VALUE;
    int fd = ::fcntl(from, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    auto phys = std::make_unique<Physical>();
    phys->fd = fd;
    phys->size = static_cast<size_t>(st.st_size);
    phys->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    phys->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    phys->prop.location.id = mem_.CurrentDevice();
    phys->prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    *h = reinterpret_cast<CUmemGenericAllocationHandle>(phys.get());
    physical_.emplace(*h, std::move(phys));
    return CUDA_SUCCESS;
  }
  CUresult cuMemRelease(CUmemGenericAllocationHandle h) override {
    auto it = physical_.find(h);
    if (it == physical_.end() || it->second->released) return CUDA_ERROR_INVALID_VALUE;
    if (--it->second->refs > 0) return CUDA_SUCCESS;
    it->second->released = true;
    Collect(it);
    return CUDA_SUCCESS;
  }
  CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long) override {
    auto it = physical_.find(h);
    if (it == physical_.end() || it->second->released || offset > it->second->size || size > it->second->size - offset)
      return CUDA_ERROR_INVALID_VALUE;
    CUresult r = R(mem_.MapRange(ptr, size, it->second->fd, offset));
    if (r != CUDA_SUCCESS) return r;
    it->second->maps++;
    mappings_[ptr] = {size, h};
    return CUDA_SUCCESS;
  }
  CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) override {
    auto m = mappings_.find(ptr);
    if (m == mappings_.end() || m->second.first != size) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = R(mem_.UnmapRange(ptr, size));
    if (r != CUDA_SUCCESS) return r;
    auto it = physical_.find(m->second.second);
    mappings_.erase(m);
    if (it != physical_.end()) {
      it->second->maps--;
      Collect(it);
    }
    return CUDA_SUCCESS;
  }
  CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) override {
    for (size_t i = 0; i < count; i++)
      if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
          desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) access_[{ptr, size}] = desc[i].flags;
    return CUDA_SUCCESS;
  }
  CUresult cuMemGetAccess(unsigned long long* flags, const CUmemLocation*, CUdeviceptr ptr) override {
    *flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    for (auto& [range, f] : access_)
      if (ptr >= range.first && ptr < range.first + range.second) *flags = f;
    return CUDA_SUCCESS;
  }
  CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop, CUmemGenericAllocationHandle h) override {
    auto it = physical_.find(h);
    if (it == physical_.end()) return CUDA_ERROR_INVALID_VALUE;
    *prop = it->second->prop;
    return CUDA_SUCCESS;
  }
  CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* h, void* addr) override {
    auto p = reinterpret_cast<CUdeviceptr>(addr);
    for (auto& [base, m] : mappings_) {
      if (p >= base && p < base + m.first) {
        auto it = physical_.find(m.second);
        if (it == physical_.end() || it->second->released) break;
        it->second->refs++;
        *h = m.second;
        return CUDA_SUCCESS;
      }
    }
    return CUDA_ERROR_INVALID_VALUE;
  }

  // ---- kernels, profiler ------------------------------------------------------------------------
  CUresult cuFuncSetSharedMemConfig(CUfunction, CUsharedconfig c) override {
    return c > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
  }
  // ---- memsets and stream memory operations, in stream order -------------------------------
  CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) override { return Fill(d, 0, &v, 1, n, 1, s); }
  CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s) override { return Fill(d, 0, &v, 2, n, 1, s); }
  CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s) override { return Fill(d, 0, &v, 4, n, 1, s); }
  CUresult cuMemsetD2D8Async(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h, CUstream s) override {
    return Fill(d, pitch, &v, 1, w, h, s);
  }
  CUresult cuMemsetD2D16Async(CUdeviceptr d, size_t pitch, unsigned short v, size_t w, size_t h, CUstream s) override {
    return Fill(d, pitch, &v, 2, w, h, s);
  }
  CUresult cuMemsetD2D32Async(CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h, CUstream s) override {
    return Fill(d, pitch, &v, 4, w, h, s);
  }
  CUresult cuStreamWriteValue32_v2(CUstream s, CUdeviceptr addr, cuuint32_t v, unsigned int) override {
    return Fill(addr, 0, &v, 4, 1, 1, s);
  }
  CUresult cuStreamWriteValue64_v2(CUstream s, CUdeviceptr addr, cuuint64_t v, unsigned int) override {
    return Fill(addr, 0, &v, 8, 1, 1, s);
  }
  CUresult cuStreamWaitValue32_v2(CUstream s, CUdeviceptr addr, cuuint32_t v, unsigned int flags) override {
    return Wait<cuuint32_t>(s, addr, v, flags);
  }
  CUresult cuStreamWaitValue64_v2(CUstream s, CUdeviceptr addr, cuuint64_t v, unsigned int flags) override {
    return Wait<cuuint64_t>(s, addr, v, flags);
  }

  // ---- tensor maps: an emulated descriptor (the address, then the arguments' bytes) ----------
  CUresult cuTensorMapEncodeTiled(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* address,
                                  const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                  const cuuint32_t* element_strides, CUtensorMapInterleave interleave,
                                  CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) override {
    if (rank == 0 || rank > 5 || (reinterpret_cast<uintptr_t>(address) & 15) != 0) return CUDA_ERROR_INVALID_VALUE;
    std::memset(map, 0, sizeof(*map));
    auto* w = reinterpret_cast<uint64_t*>(map->opaque);
    w[0] = reinterpret_cast<uint64_t>(address);
    w[1] = (uint64_t{rank} << 32) | static_cast<uint64_t>(type);
    w[2] = (uint64_t(interleave) << 48) | (uint64_t(swizzle) << 32) | (uint64_t(l2) << 16) | uint64_t(oob);
    for (cuuint32_t i = 0; i < rank; i++) {
      w[3 + i] = dims[i];
      if (i + 1 < rank) w[8 + i] = strides[i];
      w[12 + i / 2] |= uint64_t{box[i]} << (i % 2 ? 48 : 16) | uint64_t{element_strides[i]} << (i % 2 ? 32 : 0);
    }
    return CUDA_SUCCESS;
  }
  CUresult cuTensorMapReplaceAddress(CUtensorMap* map, void* address) override {
    if ((reinterpret_cast<uintptr_t>(address) & 15) != 0) return CUDA_ERROR_INVALID_VALUE;
    reinterpret_cast<uint64_t*>(map->opaque)[0] = reinterpret_cast<uint64_t>(address);
    return CUDA_SUCCESS;
  }

  CUresult cuProfilerStart() override { return CUDA_SUCCESS; }
  CUresult cuProfilerStop() override { return CUDA_SUCCESS; }

 private:
  // Writes `height` rows of `width` elements of `size` bytes (`value`) at `d`, `pitch` apart.
  CUresult Fill(CUdeviceptr d, size_t pitch, const void* value, size_t size, size_t width, size_t height, CUstream s) {
    uint64_t v = 0;
    std::memcpy(&v, value, size);
    std::vector<std::byte*> rows;
    for (size_t y = 0; y < height; y++) {
      auto row = mem_.HostAddress(d + y * pitch, width * size);
      if (!row.ok()) return CUDA_ERROR_INVALID_VALUE;
      rows.push_back(*row);
    }
    return R(mem_.RunInOrder(s, [rows = std::move(rows), v, size, width] {
      for (std::byte* row : rows)
        for (size_t i = 0; i < width; i++) std::memcpy(row + i * size, &v, size);
    }, CU_GRAPH_NODE_TYPE_MEMSET));
  }
  // Blocks the stream until the value at `addr` satisfies `flags` against `v`.
  template <typename T>
  CUresult Wait(CUstream s, CUdeviceptr addr, T v, unsigned flags) {
    auto p = mem_.HostAddress(addr, sizeof(T));
    if (!p.ok()) return CUDA_ERROR_INVALID_VALUE;
    unsigned op = flags & 0x3;
    if (op > CU_STREAM_WAIT_VALUE_NOR) return CUDA_ERROR_INVALID_VALUE;
    auto* at = reinterpret_cast<volatile T*>(*p);
    // The wait protocol of host_emulation.h: the memory may be freed once the session ends.
    return R(mem_.RunInOrder(s, [at, v, op, &mem = mem_, epoch = mem_.wait_epoch().load()] {
      mem.active_waits().fetch_add(1);
      struct Leave {
        std::atomic<int>& n;
        ~Leave() { n.fetch_sub(1); }
      } leave{mem.active_waits()};
      while (mem.wait_epoch().load() == epoch) {
        T x = *at;
        bool done = op == CU_STREAM_WAIT_VALUE_GEQ   ? static_cast<std::make_signed_t<T>>(x - v) >= 0
                    : op == CU_STREAM_WAIT_VALUE_EQ  ? x == v
                    : op == CU_STREAM_WAIT_VALUE_AND ? (x & v) != 0
                                                     : ~(x | v) != 0;
        if (done) return;
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP));
  }
  static CUresult Pool(const Result<DPool>& r, CUmemoryPool* out) {
    if (!r.ok()) return R(r.status());
    *out = static_cast<CUmemoryPool>(*r);
    return CUDA_SUCCESS;
  }

  // Memory of cuMemCreate: freed once released and no longer mapped.
  struct Physical {
    int fd = -1;  // a memfd of `size` bytes
    size_t size = 0;
    CUmemAllocationProp prop{};
    int refs = 1;
    int maps = 0;
    bool released = false;
  };
  static constexpr size_t kGranularity = 2 << 20;
  void Collect(std::map<CUmemGenericAllocationHandle, std::unique_ptr<Physical>>::iterator it) {
    if (!it->second->released || it->second->maps > 0) return;
    ::close(it->second->fd);
    physical_.erase(it);
  }

  Driver& d_;
  host::HostMemory& mem_;
  std::map<CUmemGenericAllocationHandle, std::unique_ptr<Physical>> physical_;
  std::map<CUdeviceptr, std::pair<size_t, CUmemGenericAllocationHandle>> mappings_;
  std::map<std::pair<CUdeviceptr, size_t>, unsigned long long> access_;
  CUfunc_cache cache_config_ = CU_FUNC_CACHE_PREFER_NONE;
  CUsharedconfig shared_config_ = CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE;
  std::map<CUstream, unsigned long long> stream_ids_;
  unsigned long long next_stream_id_ = 1;
  std::map<std::pair<CUstream, CUstreamAttrID>, CUstreamAttrValue> stream_attrs_;
  std::map<std::pair<CUmemoryPool, int>, CUmemAccess_flags> pool_access_;
};

}  // namespace

std::unique_ptr<gen::cuda::Api> MakeHostCudaApi(Driver& driver, host::HostMemory& memory, HostGraphs& graphs) {
  return std::make_unique<HostCudaApi>(driver, memory, graphs);
}

}  // namespace remora::worker
