#include "worker/host_cuda_api.h"

#include <map>
#include <utility>

#include "cuda_api.h"
#include "cuda_hooks.h"

namespace remora::worker {
namespace {

// Status codes of the cudart domain are numerically the driver's for every code the host
// backend produces.
CUresult R(const Status& st) { return st.ok() ? CUDA_SUCCESS : static_cast<CUresult>(st.raw()); }

class HostCudaApi final : public gen::cuda::Api {
 public:
  explicit HostCudaApi(Driver& d) : d_(d) {}

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

  // ---- kernels, profiler ------------------------------------------------------------------------
  CUresult cuFuncSetSharedMemConfig(CUfunction, CUsharedconfig c) override {
    return c > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
  }
  CUresult cuProfilerStart() override { return CUDA_SUCCESS; }
  CUresult cuProfilerStop() override { return CUDA_SUCCESS; }

 private:
  static CUresult Pool(const Result<DPool>& r, CUmemoryPool* out) {
    if (!r.ok()) return R(r.status());
    *out = static_cast<CUmemoryPool>(*r);
    return CUDA_SUCCESS;
  }

  Driver& d_;
  CUfunc_cache cache_config_ = CU_FUNC_CACHE_PREFER_NONE;
  CUsharedconfig shared_config_ = CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE;
  std::map<CUstream, unsigned long long> stream_ids_;
  unsigned long long next_stream_id_ = 1;
  std::map<std::pair<CUstream, CUstreamAttrID>, CUstreamAttrValue> stream_attrs_;
  std::map<std::pair<CUmemoryPool, int>, CUmemAccess_flags> pool_access_;
};

}  // namespace

std::unique_ptr<gen::cuda::Api> MakeHostCudaApi(Driver& driver) { return std::make_unique<HostCudaApi>(driver); }

}  // namespace remora::worker
