// Memory: device allocation, pinned host allocation, copies in every direction, memset and
// pointer attributes. Pointers are checked against this process's own tables first, so a
// bad argument fails at once, as with CUDA; the worker checks them again authoritatively.
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "callbacks.h"
#include "export.h"
#include "memops.h"
#include "multi_server.h"
#include "remora/base/log.h"
#include "remora/base/util.h"
#include "runtime.h"
#include "wire_args.h"

namespace remora::shim {


cudaError_t Memset(void* dst, int value, size_t n, cudaStream_t stream, bool per_thread, const char* call) {
  Runtime& rt = Runtime::Get();
  auto c = rt.Session();
  if (!c.ok()) return Finish(c.status(), call);
  int device = 0;
  Status st = rt.CheckStream(stream, &device);
  if (st.ok() && n > 0) st = rt.CheckDeviceRange(U(dst), n);
  if (st.ok()) st = rt.managed().BeforeDeviceWork();
  if (!st.ok()) return Finish(st, call);
  if (n == 0) return cudaSuccess;
  // Several servers: on the default stream, memory of another server than the current
  // device's is set on its own device's stream.
  if (auto a = rt.server_count() > 1 ? rt.FindDevice(U(dst)) : std::nullopt) {
    if (IsDefaultStream(stream) && !rt.SameServer(device, a->device))
      device = a->device;
  }
  // Asynchronous with respect to the host (for device memory), as in CUDA.
  st = (*c)->Post(device, [&](wire::Request::Builder& r) {
    auto m = r.initMemset();
    m.setDst(U(dst));
    m.setValue(static_cast<uint8_t>(value));
    m.setSize(n);
    SetStream(m.initStream(), stream, per_thread);
    m.setAsync(true);
  });
  return Finish(st, call);
}

Side Classify(const void* p) { return Runtime::Get().FindDevice(U(p)) ? Side::kDevice : Side::kHost; }

namespace {

// Pinned allocations shared with the worker keep their region id in the upper half of the
// table's cookie (the lower half holds the cudaHostAlloc flags).
uint64_t RegionOf(const Allocation& a) { return a.cookie >> 32; }

// Whether [p, p+n) lies in one shared pinned region (`a` is FindHost(p)); its id and the
// offset if so.
bool InSharedRegion(const std::optional<Allocation>& a, const void* p, size_t n, uint64_t* region, uint64_t* offset) {
  if (!a || RegionOf(*a) == 0 || U(p) + n > a->base + a->size) return false;
  *region = RegionOf(*a);
  *offset = U(p) - a->base;
  return true;
}

uint64_t ShareWithWorker(Client* c, void** p, size_t bytes);

// Device-to-pageable copies up to this size go through the client's shared bounce buffer.
constexpr size_t kSmallDtoH = 64 << 10;

// The client's shared bounce buffer, created on first use; false if the transport cannot
// share memory. The caller holds b.mu.
bool BounceReady(Client* cl, Client::SharedBounce& b) {
  // Sharing it registers host memory with the driver, which CUDA refuses (and which
  // invalidates the capture) while a stream captures: the copy takes the other path then,
  // and the buffer is made at the first small copy after the capture.
  if (!b.tried && cl->captures_active() > 0) return false;
  if (!b.tried) {
    b.tried = true;
    b.region = ShareWithWorker(cl, &b.base, kSmallDtoH);
    if (b.region != 0) b.size = kSmallDtoH;
    else b.base = nullptr;
  }
  return b.base != nullptr;
}

}  // namespace

cudaError_t Memcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream, bool per_thread,
                   bool async, const char* call) {
  Runtime& rt = Runtime::Get();
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
    return Finish(Error(Err::kInvalidMemcpyDirection, "invalid cudaMemcpyKind {}", static_cast<int>(kind)), call);
  auto c = rt.Session();
  if (!c.ok()) return Finish(c.status(), call);
  int device = 0;
  Status st = rt.CheckStream(stream, &device);
  if (!st.ok()) return Finish(st, call);
  if (n == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return Finish(Error(Err::kInvalidValue, "NULL pointer"), call);

  // An explicit kind is trusted for the host side (a remote device address may equal a
  // local host address); cudaMemcpyDefault infers both sides from this process's tables.
  Side from = Classify(src), to = Classify(dst);
  switch (kind) {
    case cudaMemcpyHostToDevice:
      from = Side::kHost;
      to = Side::kDevice;
      break;
    case cudaMemcpyDeviceToHost:
      from = Side::kDevice;
      to = Side::kHost;
      break;
    case cudaMemcpyDeviceToDevice:
      from = to = Side::kDevice;
      break;
    case cudaMemcpyHostToHost:
      from = to = Side::kHost;
      break;
    default:
      break;
  }
  // Managed memory is device memory whatever the kind says: its host copy is the shim's to
  // keep coherent (managed.h), never read or written by a transfer.
  ManagedMemory& managed = rt.managed();
  if (!managed.empty()) {
    if (managed.Contains(U(src))) from = Side::kDevice;
    if (managed.Contains(U(dst))) to = Side::kDevice;
  }
  // A device side must lie in the session's device memory. Failing that, pinned memory of
  // this process is a device address too (unified addressing: natively a device-to-device
  // copy takes it, and XLA copies so): that side is host. Looked up only when the check fails.
  auto device_side = [&](const void* p, Side* side) {
    Status checked = rt.CheckDeviceRange(U(p), n);
    if (checked.ok() || kind == cudaMemcpyDefault) return checked;
    auto a = rt.FindHost(p);
    if (!a || U(p) + n > a->base + a->size) return checked;
    *side = Side::kHost;
    return Status::Ok();
  };
  if (from == Side::kDevice) st = device_side(src, &from);
  if (st.ok() && to == Side::kDevice) st = device_side(dst, &to);
  if (st.ok() && (from == Side::kDevice || to == Side::kDevice)) st = managed.BeforeDeviceWork();
  if (!st.ok()) return Finish(st, call);
  Client* cl = *c;
  if (rt.server_count() > 1) {
    // Several servers: the copy goes to the server of the device memory it names; between
    // two servers' devices it is staged through this process (multi_server.h).
    int src_dev = -1, dst_dev = -1;
    if (auto a = from == Side::kDevice ? rt.FindDevice(U(src)) : std::nullopt) src_dev = a->device;
    if (auto a = to == Side::kDevice ? rt.FindDevice(U(dst)) : std::nullopt) dst_dev = a->device;
    if (src_dev >= 0 && dst_dev >= 0 && !rt.SameServer(src_dev, dst_dev)) {
      st = CrossServerCopy(U(dst), dst_dev, U(src), src_dev, n, stream, per_thread);
      return async ? Finish(st, call) : FinishSync(cl, st, call);
    }
    int target = dst_dev >= 0 ? dst_dev : src_dev >= 0 ? src_dev : device;
    if (IsDefaultStream(stream)) {
      if (!rt.SameServer(device, target)) device = target;  // else the current device's stream
    } else if (!rt.SameServer(device, target))
      return Finish(Error(Err::kInvalidValue, "a stream of device {} cannot copy memory of device {}: they are on two "
                          "Remora servers", device, target), call);
    cl = cl->LinkFor(device);
  }
  // Pinned memory shared with a worker is the first server's (HostAlloc).
  const bool regions = cl == *c;

  if (from == Side::kHost && to == Side::kHost) {
    // Between pinned buffers an asynchronous copy is stream work, as the GPU's DMA is (a copy
    // into one may be queued before it): it runs in this process when the stream gets there.
    if (async && (rt.FindHost(src) || rt.FindHost(dst))) {
      return EnqueueHostWork(stream, [dst, src, n] { std::memmove(dst, src, n); }, per_thread, call);
    }
    std::memmove(dst, src, n);
    return cudaSuccess;
  }
  if (from == Side::kHost) {
    auto host = rt.FindHost(src);
    uint64_t region = 0, offset = 0;
    if (regions && InSharedRegion(host, src, n, &region, &offset)) {
      // Zero copy: the worker DMAs from the pinned buffer itself, in stream order, as CUDA
      // does (the application must not change it before the copy completes).
      auto build = [&](wire::Request::Builder& r) {
        auto m = r.initMemcpyHtoD();
        m.setDst(U(dst));
        m.setSize(n);
        SetStream(m.initStream(), stream, per_thread);
        m.setAsync(async);
        m.setHostRegion(region);
        m.setHostOffset(offset);
      };
      if (async) return Finish(cl->Post(device, build), call);
      return FinishSync(cl, cl->Call(device, build, [](wire::Reply::Reader&) { return Status::Ok(); }), call);
    }
    // The source is shipped before this returns: the application may reuse it at once. From
    // pageable memory CUDA returns once the data is staged, before the DMA: so do we (the
    // copy runs in stream order; a failure surfaces at the next synchronising call).
    // Into managed memory a synchronous copy completes before it returns: the host may read
    // the destination next, and its copy is invalidated only by a call that waited.
    bool pageable = !host && (async || managed.empty() || !managed.Contains(U(dst)));
    // The bytes are read now, not when the stream gets there. That is CUDA's behaviour for
    // an asynchronous copy from pageable memory; otherwise a host function queued before the
    // copy may still write the source: let those run first.
    if (!(async && pageable)) HostCallbacks::Get().WaitForRegistered();
    // An asynchronous copy into this pinned memory queued before may not have landed yet.
    if (host) cl->AwaitLandingsInto(src, n);
    auto build = [&](wire::Request::Builder& r) {
      auto m = r.initMemcpyHtoD();
      m.setDst(U(dst));
      m.setSize(n);
      SetStream(m.initStream(), stream, per_thread);
      m.setAsync(async || pageable);
      m.setClientAddr(U(src));  // a capture binds it (the bytes are read again at each launch)
    };
    if (async || pageable) {
      if (Status sticky = cl->sticky(); !sticky.ok()) return Finish(sticky, call);
      return Finish(cl->Post(device, build, AsBytes(src, n)), call);
    }
    st = cl->Call(device, build, [](wire::Reply::Reader&) { return Status::Ok(); }, AsBytes(src, n));
    return FinishSync(cl, st, call);
  }
  if (to == Side::kHost) {
    // A DMA straight into memory shared with the worker, posted or answered once done.
    // `captured`: the copy went into a graph (nothing was copied now).
    bool captured = false;
    // A copy the caller waited for drained its stream: a synchronisation of the stream next,
    // with nothing sent in between, is answered here (PyTorch's .item(): a copy, then
    // cudaStreamSynchronize). `seq`: read just before the copy is sent (Client::StreamIdle).
    uint64_t seq = 0;
    auto drained = [&](const Status& copied) {
      if (copied.ok() && !captured) cl->NoteStreamDrained(StreamKeyOf(stream, per_thread, device), seq);
      return copied;
    };
    auto into_region = [&](uint64_t region, uint64_t offset, bool post, bool bounce = false) {
      auto build = [&](wire::Request::Builder& r) {
        auto m = r.initMemcpyDtoH();
        m.setSrc(U(src));
        m.setSize(n);
        SetStream(m.initStream(), stream, per_thread);
        m.setHostRegion(region);
        m.setHostOffset(offset);
        m.setAsync(post);
        m.setClientAddr(U(dst));
        m.setViaBounce(bounce);
      };
      if (post) return cl->Post(device, build);
      seq = cl->work_sequence();
      return drained(cl->Call(device, build, [&](wire::Reply::Reader& r) {
        captured = r.isValue() && r.getValue() == kCapturedCopy;
        return Status::Ok();
      }));
    };
    auto pinned = rt.FindHost(dst);
    uint64_t region = 0, offset = 0;
    if (regions && InSharedRegion(pinned, dst, n, &region, &offset)) {
      // Zero copy into the pinned buffer; asynchronous really is asynchronous.
      st = into_region(region, offset, async);
      return async ? Finish(st, call) : FinishSync(cl, st, call);
    }
    if (n <= kSmallDtoH && !pinned) {
      // Into pageable memory: DMA into the client's shared bounce buffer and copy out, which
      // is cheaper than carrying the bytes in the reply. One copy at a time uses it; a
      // concurrent one (or a transport that cannot share memory) takes the path below.
      Client::SharedBounce& b = cl->shared_bounce();
      std::unique_lock<std::mutex> lock(b.mu, std::try_to_lock);
      if (lock.owns_lock() && BounceReady(cl, b)) {
        st = into_region(b.region, 0, false, true);
        if (st.ok() && !captured) std::memcpy(dst, b.base, n);
        return async ? Finish(st, call) : FinishSync(cl, st, call);
      }
    }
    auto build = [&](wire::Request::Builder& r) {
      auto m = r.initMemcpyDtoH();
      m.setSrc(U(src));
      m.setSize(n);
      SetStream(m.initStream(), stream, per_thread);
      m.setClientAddr(U(dst));
    };
    // Into pinned memory an asynchronous copy really is asynchronous: the data lands when
    // the stream reaches it, and its reply drains the stream (a synchronisation next waits for
    // that reply instead of a round trip of its own). Into pageable memory CUDA returns only
    // once it is there.
    if (async && pinned && U(dst) + n <= pinned->base + pinned->size) {
      const StreamKey key = StreamKeyOf(stream, per_thread, device);
      return Finish(cl->PostExpectingBulk(device, build, AsWritableBytes(dst, n), &key), call);
    }
    seq = cl->work_sequence();
    st = drained(cl->Call(device, build, [](wire::Reply::Reader&) { return Status::Ok(); }, {}, AsWritableBytes(dst, n)));
    return async ? Finish(st, call) : FinishSync(cl, st, call);
  }
  // Device to device: asynchronous with respect to the host in both forms.
  st = cl->Post(device, [&](wire::Request::Builder& r) {
    auto m = r.initMemcpyDtoD();
    m.setDst(U(dst));
    m.setSrc(U(src));
    m.setSize(n);
    SetStream(m.initStream(), stream, per_thread);
    m.setAsync(true);
  });
  return Finish(st, call);
}

namespace {

// Pinned memory the worker can reach: a sealed memfd mapped here and there, registered with
// the driver on the worker's side. Returns the region id, or 0 if the transport cannot share
// memory (the caller then uses plain memory and the copies are staged).
// Where pinned memory shared with the worker is mapped: a range both processes are likely to
// have free, so the worker can map it at the same address and kernels can use the
// application's own pointers to it (unified addressing). Any address works if it is taken.
void* MapShared(int fd, size_t bytes) {
  static std::atomic<uint64_t> next{0x6b0000000000ull};
  for (int attempt = 0; attempt < 16; attempt++) {
    uint64_t want = next.fetch_add(AlignUp(bytes, 2 << 20) + (2 << 20));
    void* m = ::mmap(reinterpret_cast<void*>(want), bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
    if (m == reinterpret_cast<void*>(want)) return m;
    if (m != MAP_FAILED) ::munmap(m, bytes);
  }
  return ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
}

uint64_t ShareWithWorker(Client* c, void** p, size_t bytes) {
  if (!c->capabilities().shared_memory || !c->capabilities().passes_fds) return 0;
  Fd fd(static_cast<int>(::syscall(SYS_memfd_create, "remora-pinned", MFD_CLOEXEC | MFD_ALLOW_SEALING)));
  if (!fd || ::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0 ||
      ::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return 0;
  void* m = MapShared(fd.get(), bytes);
  if (m == MAP_FAILED) return 0;
  uint64_t id = Process::Get().NextRegionId();
  uint64_t device = 0;
  // On `c` itself (the region is that server's; several servers: see Memcpy), in the
  // calling thread's device if `c` serves it.
  const int here = c->LinkFor(Thread().device) == c ? Runtime::Get().LocalOrdinal(Thread().device) : 0;
  Status st = c->CallWithFdLocal(here, fd.get(), [&](wire::Request::Builder& r) {
    auto h = r.initRegisterHostRegion();
    h.setId(id);
    h.setSize(bytes);
    h.setAddr(U(m));
  }, [&](wire::Reply::Reader& r) {
    device = r.isPointer() ? r.getPointer() : 0;
    return Status::Ok();
  });
  if (!st.ok()) {
    LOG_INFO("pinned memory cannot be shared with the worker ({}): its copies will be staged", st.ToString());
    ::munmap(m, bytes);
    return 0;
  }
  // The device's address of it, for cudaHostGetDevicePointer (and, when it differs from ours,
  // a device range of this process: copies and kernels may name it).
  Runtime::Get().SetRegionDevicePointer(id, device);
  if (device != 0 && device != U(m)) Runtime::Get().AddDeviceAllocation(device, bytes, Thread().device, AllocKind::kMappedHost);
  *p = m;
  return id;
}

// Pinned allocations up to this size are device-visible over transports without shared
// memory (see HostAlloc); one managed chunk.
constexpr size_t kDeviceVisiblePinnedMax = 64 << 10;

cudaError_t HostAlloc(void** ptr, size_t size, unsigned flags, const char* call) {
  if (ptr == nullptr) return Finish(Error(Err::kInvalidValue, "ptr is NULL"), call);
  *ptr = nullptr;
  if (size == 0) return cudaSuccess;
  auto c = Runtime::Get().Session();
  if (!c.ok()) return Finish(c.status(), call);
  size_t bytes = AlignUp(size, 4096);
  void* p = nullptr;
  uint64_t region = ShareWithWorker(*c, &p, bytes);
  if (region == 0 && ((flags & cudaHostAllocMapped) || bytes <= kDeviceVisiblePinnedMax)) {
    // Without shared memory (tcp) the device cannot read this process's memory: mapped pinned
    // memory is managed memory then, coherent at launches and synchronisations (managed.h).
    // So is small pinned memory of any flags: unified addressing promises kernels every
    // pinned allocation by its host address, and small ones are what programs hand kernels
    // (XLA's timer passes a 4-byte cuMemHostAlloc semaphore to its delay kernel); large ones
    // stay in this process, where copies stream from them (cudaHostGetDevicePointer says so).
    auto m = AllocateManaged(size, call, /*pinned=*/!(flags & cudaHostAllocMapped));
    if (!m.ok()) return Finish(m.status(), call);
    Runtime::Get().AddHostAllocation(*m, size, flags, 0);
    *ptr = *m;
    return cudaSuccess;
  }
  if (region == 0) {
    p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return Finish(Error(Err::kMemoryAllocation, "cannot allocate {} of host memory", FormatSize(size)), call);
    // Transports with registered memory (RDMA) read and write it in place.
    if ((*c)->capabilities().registered_memory) {
      Status st = (*c)->RegisterHostMemory(p, bytes);
      if (!st.ok()) LOG_INFO("cannot register pinned memory with the transport: {}", st.ToString());
    }
  }
  Runtime::Get().AddHostAllocation(p, size, flags, region);
  *ptr = p;
  return cudaSuccess;
}

}  // namespace
}  // namespace remora::shim

using namespace remora;
using namespace remora::shim;

REMORA_API cudaError_t cudaMalloc(void** devPtr, size_t size) {
  if (devPtr == nullptr) return Finish(Error(Err::kInvalidValue, "devPtr is NULL"), "cudaMalloc");
  Runtime& rt = Runtime::Get();
  auto dev = rt.CurrentDevice();
  if (!dev.ok()) return Finish(dev.status(), "cudaMalloc");
  *devPtr = nullptr;
  if (size == 0) return cudaSuccess;
  uint64_t ptr = 0;
  Client* c = *rt.Session();
  Status st = c->Call(*dev, [&](wire::Request::Builder& r) { r.initMemAlloc().setSize(size); },
                      [&](wire::Reply::Reader& r) -> Status {
                        ptr = r.getPointer();
                        return Status::Ok();
                      });
  if (!st.ok()) return Finish(st, "cudaMalloc");
  if (rt.server_count() > 1 && (rt.FindDevice(ptr) || rt.FindDevice(ptr + size - 1))) {
    // Two servers handed out overlapping addresses (a GPU server's own allocator; the host
    // backend places each server's in its window): refused rather than confused.
    (void)c->Call(*dev, [&](wire::Request::Builder& r) { r.initMemFree().setPtr(ptr); },
                  [](wire::Reply::Reader&) { return Status::Ok(); });
    return Finish(Error(Err::kMemoryAllocation, "device {}'s server allocated 0x{:x}, which another Remora server's "
                        "memory already occupies in this application", *dev, ptr), "cudaMalloc");
  }
  rt.AddDeviceAllocation(ptr, size, *dev);
  *devPtr = reinterpret_cast<void*>(ptr);
  return cudaSuccess;
}

REMORA_API cudaError_t cudaFree(void* devPtr) {
  Runtime& rt = Runtime::Get();
  auto c = rt.Session();
  if (!c.ok()) return Finish(c.status(), "cudaFree");
  if (devPtr == nullptr) return cudaSuccess;
  if (rt.FindHost(devPtr))  // device-visible pinned memory is device memory too (HostAlloc)
    return Finish(Error(Err::kInvalidValue, "{} is pinned host memory: free it with cudaFreeHost", devPtr), "cudaFree");
  if (Status st; FreeManaged(*c, devPtr, &st)) return FinishSync(*c, st, "cudaFree");
  auto a = rt.FindDevice(U(devPtr));
  // Inside a graph's memory the worker tells a node's address from an interior one: the
  // nodes of one graph may share an entry (runtime.cc, AddDeviceAllocation).
  if (!a || (a->base != U(devPtr) && a->kind != AllocKind::kGraphMemory) || a->kind == AllocKind::kModule)
    return Finish(Error(Err::kInvalidValue, "{} is not a device allocation of this process", devPtr), "cudaFree");
  if (a->kind == AllocKind::kIpcImported)
    return Finish(Error(Err::kInvalidValue, "{} was opened by IPC: close it with cudaIpcCloseMemHandle", devPtr), "cudaFree");
  Status st = (*c)->Call(a->device, [&](wire::Request::Builder& r) { r.initMemFree().setPtr(U(devPtr)); },
                         [](wire::Reply::Reader&) { return Status::Ok(); });
  // A graph's memory keeps its address (the graph allocates it again at its next launch).
  if ((st.ok() || st.code() == Err::kInvalidValue) && a->kind != AllocKind::kGraphMemory)
    (void)rt.RemoveDeviceAllocation(U(devPtr));
  return FinishSync(*c, st, "cudaFree");
}

REMORA_API cudaError_t cudaMallocHost(void** ptr, size_t size) { return HostAlloc(ptr, size, 0, "cudaMallocHost"); }

REMORA_API cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags) {
  return HostAlloc(pHost, size, flags, "cudaHostAlloc");
}

REMORA_API cudaError_t cudaFreeHost(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  auto found = Runtime::Get().FindHost(ptr);
  if (!found || found->base != U(ptr) || found->kind != AllocKind::kPinnedHost)
    return Finish(Error(Err::kInvalidValue, "{} was not allocated with cudaMallocHost/cudaHostAlloc", ptr), "cudaFreeHost");
  uint64_t region = RegionOf(*found);
  auto c = Runtime::Get().Session();
  if (c.ok() && Runtime::Get().managed().DeviceOf(U(ptr))) {  // device-visible (HostAlloc)
    (void)Runtime::Get().RemoveHostAllocation(ptr);
    Status st;
    (void)FreeManaged(*c, ptr, &st, /*pinned=*/true);
    return FinishSync(*c, st, "cudaFreeHost");
  }
  if (region != 0) {
    uint64_t device = Runtime::Get().RegionDevicePointer(region);
    if (device != 0 && device != U(ptr)) (void)Runtime::Get().RemoveDeviceAllocation(device);
    Runtime::Get().SetRegionDevicePointer(region, 0);
  }
  if (region != 0 && c.ok()) {
    // The worker stops using the memory (after pending DMA) before it goes away here.
    Status st = (*c)->CallLocal(0, [&](wire::Request::Builder& r) { r.setUnregisterHostRegion(region); },
                                [](wire::Reply::Reader&) { return Status::Ok(); });
    if (!st.ok() && st.code() != Err::kDevicesUnavailable) return Finish(st, "cudaFreeHost");
  } else if (c.ok() && (*c)->capabilities().registered_memory) {
    (void)(*c)->UnregisterHostMemory(ptr);
  }
  // Memory only this process has may still be written by work queued in stream order here
  // (memsets of it run as host functions, driver/memory.cc): freeing synchronises, as CUDA's does.
  if (region == 0) HostCallbacks::Get().WaitForRegistered();
  (void)Runtime::Get().RemoveHostAllocation(ptr);
  ::munmap(ptr, AlignUp(found->size, 4096));
  return cudaSuccess;
}

REMORA_API cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags) {
  if (ptr == nullptr || size == 0) return Finish(Error(Err::kInvalidValue, "NULL pointer or empty range"), "cudaHostRegister");
  auto c = Runtime::Get().Session();
  if (!c.ok()) return Finish(c.status(), "cudaHostRegister");
  if (Runtime::Get().FindHost(ptr) || Runtime::Get().FindHost(static_cast<char*>(ptr) + size - 1))
    return Finish(Error(Err::kHostMemoryAlreadyRegistered, "{} is already registered", ptr), "cudaHostRegister");
  // The best path for memory the application owns: RDMA registers it (one-sided transfers in
  // place); shm and tcp cannot share arbitrary pages with the worker, so copies are staged.
  if ((*c)->capabilities().registered_memory) {
    Status st = (*c)->RegisterHostMemory(ptr, size);
    if (!st.ok()) return Finish(st, "cudaHostRegister");
    LOG_DEBUG("cudaHostRegister({}, {}): registered with the {} transport (zero-copy)", ptr, FormatSize(size),
              (*c)->capabilities().transport);
  } else {
    LOG_DEBUG("cudaHostRegister({}, {}): the {} transport cannot map application memory; copies are staged",
              ptr, FormatSize(size), (*c)->capabilities().transport);
  }
  Runtime::Get().AddHostAllocation(ptr, size, flags, 0, AllocKind::kRegisteredHost);
  return cudaSuccess;
}

REMORA_API cudaError_t cudaHostUnregister(void* ptr) {
  auto found = Runtime::Get().FindHost(ptr);
  if (!found || found->base != U(ptr) || found->kind != AllocKind::kRegisteredHost)
    return Finish(Error(Err::kHostMemoryNotRegistered, "{} is not registered", ptr), "cudaHostUnregister");
  auto c = Runtime::Get().Session();
  if (c.ok() && (*c)->capabilities().registered_memory) (void)(*c)->UnregisterHostMemory(ptr);
  (void)Runtime::Get().RemoveHostAllocation(ptr);
  return cudaSuccess;
}

REMORA_API cudaError_t cudaHostGetDevicePointer(void** pDevice, void* pHost, unsigned int flags) {
  if (pDevice == nullptr || flags != 0) return Finish(Error(Err::kInvalidValue, "pDevice is NULL or flags not 0"), "cudaHostGetDevicePointer");
  Runtime& rt = Runtime::Get();
  auto c = rt.Session();
  if (!c.ok()) return Finish(c.status(), "cudaHostGetDevicePointer");
  auto a = rt.FindHost(pHost);
  if (!a) return Finish(Error(Err::kInvalidValue, "{} is not pinned host memory of this process", pHost), "cudaHostGetDevicePointer");
  if (rt.managed().DeviceOf(a->base)) {  // device-visible (HostAlloc): one address for both
    // Asked for its device address, it is about to be handed to kernels: awake from now on.
    if (Status st = WakePinned(&a->base, sizeof(a->base)); !st.ok()) return Finish(st, "cudaHostGetDevicePointer");
    *pDevice = pHost;
    return cudaSuccess;
  }
  uint64_t region = RegionOf(*a);
  uint64_t device = region != 0 ? rt.RegionDevicePointer(region) : 0;
  if (device == 0)
    return Finish(Error(Err::kNotSupported,
                        "{} cannot be mapped for the remote GPU: memory of cudaHostRegister, or pinned memory over 64 KiB "
                        "over a transport without shared memory (over tcp, allocate it with cudaHostAlloc(cudaHostAllocMapped))",
                        pHost),
                  "cudaHostGetDevicePointer");
  *pDevice = reinterpret_cast<void*>(device + (U(pHost) - a->base));
  return cudaSuccess;
}

REMORA_API cudaError_t cudaHostGetFlags(unsigned int* flags, void* host) {
  if (flags == nullptr) return Finish(Error(Err::kInvalidValue, "flags is NULL"), "cudaHostGetFlags");
  auto a = Runtime::Get().FindHost(host);
  if (!a) return Finish(Error(Err::kInvalidValue, "{} is not pinned host memory of this process", host), "cudaHostGetFlags");
  *flags = static_cast<unsigned>(a->cookie & 0xffffffffu);
  return cudaSuccess;
}

// cudaMemset is asynchronous with respect to the host for device memory and fully synchronous
// for pinned host memory and managed memory (CUDA's API synchronisation behaviour).
static cudaError_t SynchronousMemset(void* devPtr, int value, size_t count, bool per_thread) {
  cudaError_t r = Memset(devPtr, value, count, nullptr, per_thread, "cudaMemset");
  Runtime& rt = Runtime::Get();
  if (r != cudaSuccess || count == 0 || (!rt.managed().Contains(U(devPtr)) && !rt.FindHost(devPtr))) return r;
  return cudaStreamSynchronize(per_thread ? cudaStreamPerThread : nullptr);
}
REMORA_API cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  return SynchronousMemset(devPtr, value, count, false);
}
REMORA_API cudaError_t cudaMemset_ptds(void* devPtr, int value, size_t count) {
  return SynchronousMemset(devPtr, value, count, true);
}
REMORA_API cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  return Memset(devPtr, value, count, stream, false, "cudaMemsetAsync");
}
REMORA_API cudaError_t cudaMemsetAsync_ptsz(void* devPtr, int value, size_t count, cudaStream_t stream) {
  return Memset(devPtr, value, count, stream, true, "cudaMemsetAsync");
}

REMORA_API cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return Memcpy(dst, src, count, kind, nullptr, false, false, "cudaMemcpy");
}
REMORA_API cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return Memcpy(dst, src, count, kind, nullptr, true, false, "cudaMemcpy");
}
REMORA_API cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  return Memcpy(dst, src, count, kind, stream, false, true, "cudaMemcpyAsync");
}
REMORA_API cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                                            cudaStream_t stream) {
  return Memcpy(dst, src, count, kind, stream, true, true, "cudaMemcpyAsync");
}

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
