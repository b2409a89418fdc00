// Device memory: allocation (charged to the tenant's ledger before the driver call), free,
// copies in every direction and memset. Every pointer is checked against the session's own
// allocation table first: memory of another session is never touched.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>

#include <cuda.h>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "worker/ops/handlers.h"
#include "worker/ipc/pool_ipc_hooks.h"
#include "worker/ipc/ipc_state.h"
#include "worker/session/peer_log.h"

namespace remora::worker {
namespace {

// Allocations the application frees with cudaFree[Async] (the others go with a module, a
// graph, cudaFreeHost or cudaIpcCloseMemHandle).
bool Freeable(AllocKind k) { return k == AllocKind::kDevice || k == AllocKind::kDeviceAsync || k == AllocKind::kManaged; }


// cudaFree synchronises the device; the free happens once the work issued before it is done
// (`events`: one per stream that had work; for cudaFreeAsync of placed memory, its stream's).
// Tag 0: nothing answers, a failure waits for the next synchronising call.
class FreeOp final : public PendingOp {
 public:
  // `graph_memory`: a graph's allocation, whose address and charge stay the graph's.
  FreeOp(uint64_t tag, Allocation a, std::vector<std::pair<int, DEvent>> events, bool graph_memory = false)
      : tag_(tag), alloc_(a), events_(std::move(events)), graph_memory_(graph_memory) {}
  Result<bool> Poll(Executor& ex) override {
    while (!events_.empty()) {
      auto [gpu, e] = events_.back();
      Status st = ex.driver().EventQuery(e);
      if (st.code() == Err::kNotReady) return false;
      ex.ReleasePoolEvent(gpu, e);
      events_.pop_back();
    }
    if (!ex.MayWaitForDevice()) return false;  // the free waits for the device (executor.h)
    Status st = ex.SetDevice(alloc_.device);
    if (graph_memory_) {
      // Every stream reached this point: freed in the order of none in particular.
      if (st.ok()) st = ex.driver().FreeGraphMemory(alloc_.base, nullptr);
    } else {
      if (st.ok()) st = ex.driver().MemFree(alloc_.base);
      ex.ReleaseCharge(alloc_.device, alloc_.reserved);
    }
    RETURN_IF_ERROR(ReplyOrDefer(ex, tag_, st));
    return true;
  }
  void Abandon(Executor& ex) override {
    for (auto& [gpu, e] : events_) ex.ReleasePoolEvent(gpu, e);
    events_.clear();
    if (graph_memory_) return;  // the session's end releases the graph and its memory
    if (ex.SetDevice(alloc_.device).ok()) (void)ex.driver().MemFree(alloc_.base);
    ex.ReleaseCharge(alloc_.device, alloc_.reserved);
  }

 private:
  uint64_t tag_;
  Allocation alloc_;
  std::vector<std::pair<int, DEvent>> events_;
  bool graph_memory_;
};

// Unmaps a client region once every stream has passed the work issued before the request.
class UnregisterRegionOp final : public AfterQueuedWorkOp {
 public:
  UnregisterRegionOp(Executor& ex, uint64_t tag, uint64_t id) : AfterQueuedWorkOp(ex, -1), tag_(tag), id_(id) {}

 private:
  Status Then(Executor& ex) override {
    auto it = ex.session().host_regions().find(id_);
    if (it != ex.session().host_regions().end()) {
      if (it->second.device != 0) (void)ex.session().allocations().Erase(it->second.device);
      if (it->second.registered) ex.driver().HostUnregisterAndUnmap(it->second.base, it->second.size);
      else ::munmap(it->second.base, it->second.size);
      ex.resources().Release(Resource::kPinnedBytes, it->second.size);
      ex.session().host_regions().erase(it);
    }
    return ex.PostReply(tag_, Status::Ok());
  }

  uint64_t tag_, id_;
};

// The client's region, mapped here: registered with the driver once the streams' work queued
// before it is done (RegisterHostRegion says why), then answered with its device address.
// Owns the mapping and the pinned-bytes charge until then.
class RegisterRegionOp final : public AfterQueuedWorkOp {
 public:
  RegisterRegionOp(Executor& ex, uint64_t tag, uint64_t id, std::byte* p, uint64_t size, uint64_t addr)
      : AfterQueuedWorkOp(ex, -1), tag_(tag), id_(id), p_(p), size_(size), addr_(addr) {}

 private:
  Status Then(Executor& ex) override {
    if (ex.session().host_regions().count(id_)) {  // registered meanwhile under the same id
      Drop(ex);
      return ex.PostReply(tag_, Error(Err::kInvalidValue, "host region {} is already registered", id_));
    }
    Status reg = ex.driver().HostRegister(p_, size_);
    auto dev = reg.ok() ? ex.driver().HostDevicePointer(p_) : Result<DevPtr>(reg);
    if (dev.ok()) {
      Allocation al;
      al.base = *dev;
      al.size = size_;
      al.device = ex.config().gpus.empty() ? 0 : std::max(0, ex.config().gpus[0]);
      al.kind = AllocKind::kMappedHost;
      reg = ex.session().allocations().Insert(al);
    } else {
      reg = dev.status();
    }
    if (!reg.ok()) {
      if (dev.ok()) ex.driver().HostUnregister(p_);
      Drop(ex);
      return ex.PostReply(tag_, reg);
    }
    Executor::HostRegion r{p_, size_, false};
    r.registered = true;
    r.device = *dev;
    ex.session().host_regions()[id_] = r;
    p_ = nullptr;
    LOG_DEBUG("host region {} ({}) shared, pinned and mapped at 0x{:x}{}", id_, FormatSize(size_), *dev,
              *dev == addr_ ? " (the client's address)" : "");
    DevPtr device = *dev;
    return ex.PostReply(tag_, Status::Ok(), [&](wire::Reply::Builder& b) { b.setPointer(device); });
  }
  void Dropped(Executor& ex) override { Drop(ex); }

  void Drop(Executor& ex) {
    if (p_ == nullptr) return;
    ::munmap(p_, size_);
    ex.resources().Release(Resource::kPinnedBytes, size_);
    p_ = nullptr;
  }

  uint64_t tag_, id_;
  std::byte* p_;
  uint64_t size_, addr_;
};

}  // namespace

Status Handlers::RegisterHostRegion(Executor& ex, uint64_t tag, Req req) {
  auto a = req.getRegisterHostRegion();
  uint64_t id = a.getId(), size = a.getSize();
  // The descriptor was passed just before this frame: take it in any case, so the
  // descriptor channel stays in step with the requests.
  auto fd = ex.conn().TakeFd(2000);
  if (!fd.ok()) return ex.PostReply(tag, fd.status());
  if (id == 0 || ex.session().host_regions().count(id) || size == 0 || size > (1ull << 40))
    return ex.PostReply(tag, Error(Err::kInvalidValue, "bad host region {} of {} bytes", id, size));
  // Pinning locks the pages in this host's memory: counted against the session's limit.
  Status pinned = ex.resources().Acquire(Resource::kPinnedBytes, size);
  if (!pinned.ok()) return ex.PostReply(tag, pinned);
  struct Unpin {
    Executor& ex;
    uint64_t size;
    bool keep = false;
    ~Unpin() {
      if (!keep) ex.resources().Release(Resource::kPinnedBytes, size);
    }
  } unpin{ex, size};
  int seals = ::fcntl(fd->get(), F_GET_SEALS);
  struct stat st;
  if (seals < 0 || !(seals & F_SEAL_SHRINK) || ::fstat(fd->get(), &st) != 0 || static_cast<uint64_t>(st.st_size) < size)
    return ex.PostReply(tag, Error(Err::kInvalidValue, "host region {} is not a sealed memfd of {} bytes", id, size));
  // At the client's own address if it is free here: kernels then use the application's
  // pointers to its pinned memory as they are (unified addressing), not only the device
  // pointer cudaHostGetDevicePointer returns.
  void* p = MAP_FAILED;
  if (a.getAddr() != 0)
    p = ::mmap(reinterpret_cast<void*>(a.getAddr()), size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, fd->get(), 0);
  if (p != MAP_FAILED && reinterpret_cast<uint64_t>(p) != a.getAddr()) {  // an old kernel ignoring the flag
    ::munmap(p, size);
    p = MAP_FAILED;
  }
  if (p == MAP_FAILED) p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd->get(), 0);
  if (p == MAP_FAILED) return ex.PostReply(tag, ErrnoStatus(Err::kMemoryAllocation, "map the client's host region", errno));
  // Page-locking synchronises with the GPU in the driver (cuMemHostRegister waits for its
  // work), which would spin in the executor's thread while a stream waits for a host function
  // that only the executor can let go (the client's callbackDone): JAX allocates pinned memory
  // while its host callbacks are queued. So it is done once the work queued before it is.
  unpin.keep = true;  // the operation's now
  ex.AddPending(std::make_unique<RegisterRegionOp>(ex, tag, id, static_cast<std::byte*>(p), size, a.getAddr()));
  return Status::Ok();
}

Status Handlers::UnregisterHostRegion(Executor& ex, uint64_t tag, Req req) {
  uint64_t id = req.getUnregisterHostRegion();
  if (!ex.session().host_regions().count(id)) return ex.PostReply(tag, Error(Err::kInvalidValue, "host region {} is not registered", id));
  // cudaFreeHost synchronises: no DMA may still use the memory.
  ex.AddPending(std::make_unique<UnregisterRegionOp>(ex, tag, id));
  return Status::Ok();
}

Status Handlers::MemAlloc(Executor& ex, uint64_t tag, Req req) {
  uint64_t size = req.getMemAlloc().getSize();
  auto gpu = ex.GpuOf(req.getDevice());
  if (!gpu.ok()) return ex.PostReply(tag, gpu.status());
  ReconcilePools(ex, *gpu);
  if (size == 0) return ex.PostReply(tag, Status::Ok(), [](wire::Reply::Builder& r) { r.setPointer(0); });
  // Charge first: the ledger stays exact even when several workers allocate at once.
  if (ex.ledger() != nullptr) {
    Status q = ex.Charge(*gpu, size);
    if (!q.ok()) {
      LOG_PEER(PeerLog(), Info, "refused {} on GPU {}: {}", FormatSize(size), *gpu, q.message());
      return ex.PostReply(tag, q);
    }
  }
  Status st = ex.SetDevice(*gpu);
  Result<DevPtr> p = st.ok() ? ex.driver().MemAlloc(size) : Result<DevPtr>(st);
  if (!p.ok()) {
    ex.ReleaseCharge(*gpu, size);
    return ex.PostReply(tag, p.status());
  }
  Allocation a;
  a.base = *p;
  a.size = size;
  a.device = *gpu;
  a.kind = AllocKind::kDevice;
  a.reserved = size;
  st = ex.session().allocations().Insert(a);
  if (!st.ok()) {  // the driver handed out an address we already track: never expected
    (void)ex.driver().MemFree(*p);
    ex.ReleaseCharge(*gpu, size);
    return ex.PostReply(tag, st);
  }
  DevPtr ptr = *p;
  return ex.PostReply(tag, Status::Ok(), [&](wire::Reply::Builder& r) { r.setPointer(ptr); });
}

Status Handlers::MemFree(Executor& ex, uint64_t tag, Req req) {
  uint64_t ptr = req.getMemFree().getPtr();
  if (ptr == 0) return ex.PostReply(tag, Status::Ok());
  if (ClosePoolPointer(ex, ptr)) return ex.PostReply(tag, Status::Ok());  // opened from an imported pool
  auto found = ex.session().allocations().Find(ptr);
  if (found && found->kind == AllocKind::kGraphMemory &&
      (found->base == ptr || ex.session().graphs().MemoryHeld(ptr))) {
    found->base = ptr;  // one node's memory of an entry its graph's nodes share (graph_state.h)
    // A graph's memory (cudaFree synchronises first, as below): the address and the charge
    // stay the graph's (FreeAsync).
    std::vector<std::pair<int, DEvent>> events;
    for (const Executor::Stream& s : StreamsOf(ex, found->device)) {
      if (auto capturing = ex.Capturing(s); !capturing.ok() || *capturing) continue;
      if (auto e = ex.RecordPoolEvent(s); e.ok()) events.emplace_back(s.gpu, *e);
    }
    ex.AddPending(std::make_unique<FreeOp>(tag, *found, std::move(events), /*graph_memory=*/true));
    return Status::Ok();
  }
  if (found && found->base == ptr && !Freeable(found->kind))
    return ex.PostReply(tag, Error(Err::kInvalidValue, "0x{:x} is not an allocation cudaFree can free", ptr));
  auto a = ex.session().allocations().Erase(ptr);
  if (!a.ok()) return ex.PostReply(tag, a.status());
  if (ex.ipc().DeferFree(ex, *a)) return ex.PostReply(tag, Status::Ok());  // still open in another session
  std::vector<std::pair<int, DEvent>> events;
  for (const Executor::Stream& s : StreamsOf(ex, a->device)) {
    if (auto capturing = ex.Capturing(s); !capturing.ok() || *capturing) continue;  // nothing runs there
    if (auto e = ex.RecordPoolEvent(s); e.ok()) events.emplace_back(s.gpu, *e);
  }
  ex.AddPending(std::make_unique<FreeOp>(tag, *a, std::move(events)));
  return Status::Ok();
}

Status Handlers::Memset(Executor& ex, uint64_t tag, Req req) {
  auto a = req.getMemset();
  uint64_t size = a.getSize();
  auto range = ex.session().CheckRange(a.getDst(), size);
  if (!range.ok()) return ReplyOrDefer(ex, tag, range.status());
  auto stream = ex.ResolveStream(a.getStream(), req.getThread(), req.getDevice());
  if (!stream.ok()) return ReplyOrDefer(ex, tag, stream.status());
  Status st = ex.SetDevice(stream->gpu);
  if (st.ok() && size > 0) st = ex.driver().Memset8(a.getDst(), a.getValue(), size, stream->stream);
  if (!st.ok() || tag == 0) return ReplyOrDefer(ex, tag, st);
  return ReplyWhenDone(ex, tag, {*stream});
}

Status Handlers::Memset3D(Executor& ex, uint64_t tag, Req req) {
  auto a = req.getMemset3D();
  uint64_t w = a.getWidth(), h = a.getHeight(), d = a.getDepth(), pitch = a.getPitch(), rps = a.getRowsPerSlice();
  DevPtr dst = a.getDst();
  uint8_t value = static_cast<uint8_t>(a.getValue());
  bool empty = w == 0 || h == 0 || d == 0;
  if (!empty) {
    if ((h > 1 || d > 1) && pitch < w) return ReplyOrDefer(ex, tag, Error(Err::kInvalidPitchValue, "pitch {} < width {}", pitch, w));
    if (d > 1 && rps < h) return ReplyOrDefer(ex, tag, Error(Err::kInvalidValue, "slice of {} rows < height {}", rps, h));
    // Overflow-checked extent: ((d-1) * rps + h-1) * pitch + w must lie in one allocation.
    uint64_t rows, extent;
    if (__builtin_mul_overflow(d - 1, rps, &rows) || __builtin_add_overflow(rows, h - 1, &rows) ||
        __builtin_mul_overflow(rows, pitch, &extent) || __builtin_add_overflow(extent, w, &extent))
      return ReplyOrDefer(ex, tag, Error(Err::kInvalidValue, "3D memset of {}x{}x{} (pitch {}, {} rows per slice) "
                                                             "does not fit in memory", w, h, d, pitch, rps));
    auto range = ex.session().CheckRange(dst, extent);
    if (!range.ok()) return ReplyOrDefer(ex, tag, range.status());
  }
  auto stream = ex.ResolveStream(a.getStream(), req.getThread(), req.getDevice());
  if (!stream.ok()) return ReplyOrDefer(ex, tag, stream.status());
  Status st = ex.SetDevice(stream->gpu);
  if (st.ok() && !empty) {
    // As few driver calls as the shape allows; a genuinely 3D shape is one 2D memset per
    // slice, and their number is bounded.
    constexpr uint64_t kMaxSlices = 1 << 16;
    bool rows_adjacent = h == 1 || pitch == w;
    bool slices_adjacent = d == 1 || rps * pitch == h * w;  // no overflow: both fit in the extent
    if (rows_adjacent && slices_adjacent) {
      st = ex.driver().Memset8(dst, value, d * h * w, stream->stream);
    } else if (d == 1) {
      st = ex.driver().Memset2D8(dst, pitch, value, w, h, stream->stream);
    } else if (h == 1) {
      st = ex.driver().Memset2D8(dst, rps * pitch, value, w, d, stream->stream);  // one row per slice
    } else if (d > kMaxSlices) {
      st = Error(Err::kInvalidValue, "3D memset of {} slices (at most {})", d, kMaxSlices);
    } else {
      for (uint64_t z = 0; st.ok() && z < d; z++)
        st = ex.driver().Memset2D8(dst + z * rps * pitch, pitch, value, w, h, stream->stream);
    }
  }
  if (!st.ok() || tag == 0) return ReplyOrDefer(ex, tag, st);
  return ReplyWhenDone(ex, tag, {*stream});
}

Status Handlers::MallocAsync(Executor& ex, uint64_t tag, Req req) {
  auto a = req.getMallocAsync();
  uint64_t size = a.getSize();
  auto stream = ex.ResolveStream(a.getStream(), req.getThread(), req.getDevice());
  if (!stream.ok()) return ex.PostReply(tag, stream.status());
  DPool pool = nullptr;
  int gpu = stream->gpu;
  if (a.getPool() != 0) {
    auto p = ex.session().pools().Get(a.getPool());
    if (!p.ok()) return ex.PostReply(tag, p.status());
    // As the driver: an imported pool's allocations are the exporter's, opened one by one.
    if ((*p)->import_id != 0)
      return ex.PostReply(tag, Status(Domain::kCuda, CUDA_ERROR_INVALID_VALUE, "cannot allocate from an imported pool"));
    pool = (*p)->pool;
    gpu = (*p)->gpu;
  }
  if (size == 0) return ex.PostReply(tag, Status::Ok(), [](wire::Reply::Builder& r) { r.setPointer(0); });
  auto capturing = ex.Capturing(*stream);
  if (!capturing.ok()) return ex.PostReply(tag, capturing.status());
  if (*capturing) return CapturedMallocAsync(ex, tag, *stream, gpu, pool, size);
  ReconcilePools(ex, gpu);
  // Memory a pool kept from earlier frees is already charged: reuse that charge first.
  uint64_t& retained = ex.resources().pool_retained(gpu);
  uint64_t reused = std::min(retained, size);
  retained -= reused;
  Status st = ex.Charge(gpu, size - reused);
  if (!st.ok()) {
    retained += reused;
    return ex.PostReply(tag, st);
  }
  st = ex.SetDevice(stream->gpu);
  auto p = st.ok() ? ex.driver().MemAllocAsync(size, pool, stream->stream) : Result<DevPtr>(st);
  if (!p.ok()) {
    ex.ReleaseCharge(gpu, size - reused);
    retained += reused;
    return ex.PostReply(tag, p.status());
  }
  Allocation al;
  al.base = *p;
  al.size = size;
  al.device = gpu;
  al.kind = AllocKind::kDeviceAsync;
  al.reserved = size;
  al.cookie = a.getPool();  // the pool's session handle, for IPC (0: the device's own pool)
  if (al.cookie == 0) {
    // From the device's current pool, which may be one this session created (and can share).
    bool created = false;
    ex.session().pools().ForEach([&](uint64_t, Executor::Pool& p) { created |= p.created && p.import_id == 0; });
    auto current = created ? ex.driver().GetMemPool(gpu) : Result<DPool>(Error(Err::kInvalidValue, "none created"));
    if (current.ok())
      ex.session().pools().ForEach([&](uint64_t h, Executor::Pool& p) {
        if (p.created && p.pool == *current) al.cookie = h;
      });
  }
  (void)ex.session().allocations().Insert(al);
  DevPtr ptr = *p;
  return ex.PostReply(tag, Status::Ok(), [&](wire::Reply::Builder& r) { r.setPointer(ptr); });
}

Status Handlers::FreeAsync(Executor& ex, uint64_t tag, Req req) {
  auto a = req.getFreeAsync();
  if (ClosePoolPointer(ex, a.getPtr())) return ReplyOrDefer(ex, tag, Status::Ok());  // opened from an imported pool
  auto found = ex.session().allocations().Find(a.getPtr());
  if (found && found->kind == AllocKind::kGraphMemory && found->base != a.getPtr() &&
      ex.session().graphs().MemoryHeld(a.getPtr()))
    found->base = a.getPtr();  // one node's memory of an entry its graph's nodes share (graph_state.h)
  if (!found || found->base != a.getPtr() || !(Freeable(found->kind) || found->kind == AllocKind::kGraphMemory))
    return ReplyOrDefer(ex, tag, Error(Err::kInvalidValue, "0x{:x} is not an allocation of this session", a.getPtr()));
  auto stream = ex.ResolveStream(a.getStream(), req.getThread(), req.getDevice());
  if (!stream.ok()) return ReplyOrDefer(ex, tag, stream.status());
  auto capturing = ex.Capturing(*stream);
  if (!capturing.ok()) return ReplyOrDefer(ex, tag, capturing.status());
  if (*capturing) return CapturedFreeAsync(ex, tag, *stream, *found);
  if (found->kind == AllocKind::kGraphMemory) {
    // A graph's memory freed outside the graph, as CUDA allows: its address stays the
    // graph's (a later launch allocates it again), and so does its charge.
    Status st = ex.SetDevice(stream->gpu);
    if (st.ok()) st = ex.driver().FreeGraphMemory(a.getPtr(), stream->stream);
    return ReplyOrDefer(ex, tag, st);
  }
  if (found->placed) {
    // Placed by a migration, no pool's: freed (and its charge given back) once the stream
    // reaches this point, by the op; the call returns at once, as cudaFreeAsync does.
    if (auto capturing = ex.Capturing(*stream); !capturing.ok() || *capturing)
      return ReplyOrDefer(ex, tag, capturing.ok() ? Status(Domain::kCuda, CUDA_ERROR_NOT_SUPPORTED,
                                                           "memory a migration moved cannot be freed in a stream capture")
                                                  : capturing.status());
    auto e = ex.RecordPoolEvent(*stream);
    if (!e.ok()) return ReplyOrDefer(ex, tag, e.status());
    (void)ex.session().allocations().Erase(a.getPtr());
    ex.AddPending(std::make_unique<FreeOp>(0, *found, std::vector<std::pair<int, DEvent>>{{stream->gpu, *e}}));
    return ReplyOrDefer(ex, tag, Status::Ok());
  }
  (void)ex.session().allocations().Erase(a.getPtr());
  // Exported (a shared pool's) and still open elsewhere: kept, and charged, for its importers.
  if (ex.ipc().DeferFree(ex, *found)) return ReplyOrDefer(ex, tag, Status::Ok());
  Status st = ex.SetDevice(stream->gpu);
  if (st.ok()) st = ex.driver().MemFreeAsync(a.getPtr(), stream->stream);
  // The memory goes back to its pool, which may keep it (a release threshold): it stays
  // charged until the pools say they no longer hold it (ReconcilePools).
  if (st.ok()) ex.resources().pool_retained(found->device) += found->reserved;
  else ex.ReleaseCharge(found->device, found->reserved);
  return ReplyOrDefer(ex, tag, st);
}

}  // namespace remora::worker
