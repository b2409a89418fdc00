// The host-emulated backend (host_driver.h): what the emulated libraries and the virtual
// memory API reach, 2D/3D copies and memsets, stream-ordered allocation and pools.

#include "worker/backend/host/host_driver.h"

namespace remora::worker::host {

Status HostDriver::InOrder(DStream s, std::function<void()> task) {
  return InOrder(s, std::move(task), CU_GRAPH_NODE_TYPE_KERNEL);
}

void HostDriver::NoteBlasHandle(const void* handle, bool live) {
  std::lock_guard<std::mutex> lock(blas_handles_mu_);
  if (live) blas_handles_.insert(handle);
  else blas_handles_.erase(handle);
}

bool HostDriver::IsBlasHandle(const void* handle) {
  std::lock_guard<std::mutex> lock(blas_handles_mu_);
  return blas_handles_.count(handle) != 0;
}

Status HostDriver::RunInOrder(DStream s, std::function<void()> task, CUgraphNodeType type) {
  return InOrder(s, std::move(task), type);
}

void HostDriver::AbandonStreamWaits() {
  wait_epoch_.fetch_add(1);
  while (active_waits_.load() > 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
}

Result<DevPtr> HostDriver::ReserveRange(int device, uint64_t bytes, uint64_t align) {
  if (device < 0 || device >= options_.gpus) return Error(Err::kInvalidDevice, "no emulated GPU {}", device);
  return heaps_[static_cast<size_t>(device)].ReserveRange(bytes, align);
}

Status HostDriver::FreeRange(DevPtr base, uint64_t bytes) {
  ASSIGN_OR_RETURN(EmulatedHeap * h, HeapOf(base));
  ASSIGN_OR_RETURN(Block b, h->FreeRange(base, bytes));
  Retire(b, RetiredMemory::Release::kUnmap);
  return Status::Ok();
}

Status HostDriver::MapRange(DevPtr at, uint64_t bytes, int fd, uint64_t offset) {
  ASSIGN_OR_RETURN(EmulatedHeap * h, HeapOf(at));
  return h->MapAlias(at, bytes, fd, offset);
}

Status HostDriver::UnmapRange(DevPtr at, uint64_t bytes) {
  ASSIGN_OR_RETURN(EmulatedHeap * h, HeapOf(at));
  return h->UnmapAlias(at, bytes);
}

Result<std::pair<DevPtr, size_t>> HostDriver::MemAllocPitch(size_t width, size_t height) {
  size_t pitch = AlignUp(std::max<size_t>(width, 1), 512), bytes;
  if (__builtin_mul_overflow(pitch, height, &bytes))
    return Error(Err::kMemoryAllocation, "pitched allocation of {} x {} does not fit in memory", width, height);
  ASSIGN_OR_RETURN(DevPtr p, MemAlloc(bytes));
  return std::make_pair(p, pitch);
}

Status HostDriver::Copy3D(const CopySide& dst, const CopySide& src, uint64_t width, uint64_t height, uint64_t depth,
              DStream stream) {
  if (width == 0 || height == 0 || depth == 0) return Status::Ok();
  // An array side is the emulated memory holding it (host_array.h).
  const CopySide dl = host::LinearSide(dst), sl = host::LinearSide(src);
  // Each side's whole strided extent is checked once (no per-row list: its length is the
  // caller's to choose); the rows are walked when the copy runs.
  ASSIGN_OR_RETURN(std::byte * d, Span(dl, width, height, depth));
  ASSIGN_OR_RETURN(std::byte * s, Span(sl, width, height, depth));
  uint64_t dp = dl.pitch, dh = dl.height, sp = sl.pitch, sh = sl.height;
  return InOrder(stream, [=] {
    for (uint64_t z = 0; z < depth; z++)
      for (uint64_t y = 0; y < height; y++) std::memmove(d + (z * dh + y) * dp, s + (z * sh + y) * sp, width);
  }, CU_GRAPH_NODE_TYPE_MEMCPY);
}

Status HostDriver::Memset2D8(DevPtr dst, size_t pitch, uint8_t value, size_t width, size_t height, DStream stream) {
  if (width == 0 || height == 0) return Status::Ok();
  ASSIGN_OR_RETURN(std::byte * d, Span(CopySide{false, dst, pitch, height}, width, height, 1));
  return InOrder(stream, [=] {
    for (size_t y = 0; y < height; y++) std::memset(d + y * pitch, value, width);
  }, CU_GRAPH_NODE_TYPE_MEMSET);
}

Result<DevPtr> HostDriver::MemAllocAsync(size_t bytes, DPool, DStream s) {
  ASSIGN_OR_RETURN(DevPtr p, HeapAlloc(bytes));
  if (!graphs_.Capturing(s)) return p;
  // Captured: the graph's allocation node (its address usable from now on, as the driver's).
  CUgraphNodeParams np{};
  np.alloc.dptr = static_cast<CUdeviceptr>(p);
  np.alloc.bytesize = bytes;
  if (Status st = graphs_.CaptureWork(s, CU_GRAPH_NODE_TYPE_MEM_ALLOC, [] {}, &np); !st.ok()) {
    (void)MemFree(p);
    return st;
  }
  return p;
}

Status HostDriver::MemFreeAsync(DevPtr p, DStream s) {
  // Captured: the graph's free node; the emulated memory stays (graphs keep theirs).
  if (graphs_.Capturing(s)) return graphs_.CaptureWork(s, CU_GRAPH_NODE_TYPE_MEM_FREE, [] {});
  return MemFree(p);
}

Result<DPool> HostDriver::DefaultMemPool(int device) {
  if (device < 0 || device >= options_.gpus) return Error(Err::kInvalidDevice, "no emulated GPU {}", device);
  auto& p = default_pools_[device];
  if (!p) p = std::make_unique<EmuPool>(EmuPool{device, {}});
  return static_cast<DPool>(p.get());
}

Result<DPool> HostDriver::GetMemPool(int device) {
  auto it = current_pools_.find(device);
  if (it != current_pools_.end()) return it->second;
  return DefaultMemPool(device);
}

Status HostDriver::SetMemPool(int device, DPool pool) {
  current_pools_[device] = pool;
  return Status::Ok();
}

Result<DPool> HostDriver::MemPoolCreate(int device, uint64_t, unsigned handle_types) {
  auto* p = new EmuPool{device, {}, handle_types, false};
  pools_.insert(p);
  return static_cast<DPool>(p);
}

Status HostDriver::MemPoolDestroy(DPool pool) {
  if (pools_.erase(static_cast<EmuPool*>(pool)) == 0) return Error(Err::kInvalidValue, "unknown emulated pool");
  delete static_cast<EmuPool*>(pool);
  return Status::Ok();
}

Status HostDriver::MemPoolSetAttribute(DPool pool, int a, uint64_t value) {
  static_cast<EmuPool*>(pool)->attrs[a] = value;
  return Status::Ok();
}

Result<uint64_t> HostDriver::MemPoolGetAttribute(DPool pool, int a) {
  auto& attrs = static_cast<EmuPool*>(pool)->attrs;
  auto it = attrs.find(a);
  return it == attrs.end() ? uint64_t{0} : it->second;
}

Result<IpcShare> HostDriver::MemPoolExport(DPool pool) {
  auto* p = static_cast<EmuPool*>(pool);
  if (pools_.count(p) == 0 || p->imported) return Error(Err::kInvalidValue, "not an exportable emulated pool");
  if ((p->handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0)
    return Error(Err::kInvalidValue, "the pool was not created shareable by POSIX descriptor");
  return IpcShare{};
}

Result<DPool> HostDriver::MemPoolImport(const IpcShare&) {
  auto* p = new EmuPool{current_, {}, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, true};
  pools_.insert(p);
  return static_cast<DPool>(p);
}

Result<DevPtr> HostDriver::MemPoolImportPointer(DPool pool, const IpcShare& share, uint64_t size) {
  auto* p = static_cast<EmuPool*>(pool);
  if (pools_.count(p) == 0 || !p->imported) return Error(Err::kInvalidValue, "not an imported emulated pool");
  return IpcOpenMemory(share, size);
}

Result<bool> HostDriver::CanAccessPeer(int device, int peer) {
  if (device < 0 || device >= options_.gpus || peer < 0 || peer >= options_.gpus)
    return Error(Err::kInvalidDevice, "no such emulated GPU");
  return device != peer;
}

Status HostDriver::EnablePeerAccess(int peer) {
  if (!peers_.insert({current_, peer}).second) return Error(Err::kPeerAccessAlreadyEnabled, "peer access already enabled");
  return Status::Ok();
}

Status HostDriver::DisablePeerAccess(int peer) {
  if (peers_.erase({current_, peer}) == 0) return Error(Err::kPeerAccessNotEnabled, "peer access was not enabled");
  return Status::Ok();
}

Result<uint64_t> HostDriver::GetLimit(int limit) {
  auto it = limits_.find(limit);
  if (it != limits_.end()) return it->second;
  switch (limit) {
    case CU_LIMIT_STACK_SIZE: return uint64_t{1024};
    case CU_LIMIT_PRINTF_FIFO_SIZE: return uint64_t{1} << 20;
    case CU_LIMIT_MALLOC_HEAP_SIZE: return uint64_t{8} << 20;
    case CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH: return uint64_t{2};
    case CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT: return uint64_t{2048};
    case CU_LIMIT_MAX_L2_FETCH_GRANULARITY: return uint64_t{32};
    case CU_LIMIT_PERSISTING_L2_CACHE_SIZE: return uint64_t{0};
    default: return Error(Err::kInvalidValue, "unknown limit {}", limit);
  }
}

Status HostDriver::SetLimit(int limit, uint64_t value) {
  RETURN_IF_ERROR(GetLimit(limit).status());
  limits_[limit] = value;
  return Status::Ok();
}

Status HostDriver::SetCaptureMode(int mode) {
  auto m = static_cast<CUstreamCaptureMode>(mode);
  CUresult r = graphs_.ExchangeMode(&m);
  return r == CUDA_SUCCESS ? Status::Ok() : Status(Domain::kCuda, r, "cuThreadExchangeStreamCaptureMode");
}

}  // namespace remora::worker::host
