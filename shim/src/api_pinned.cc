// Pinned host memory: cudaMallocHost/cudaHostAlloc (shared with the worker where the transport
// shares memory; over tcp small allocations get sleeping device memory, managed.h), host
// registration, device pointers and flags of pinned memory. Any thread.
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "callbacks.h"
#include "device_core.h"
#include "export.h"
#include "memops.h"
#include "multi_server.h"
#include "pinned_core.h"
#include "remora/base/log.h"
#include "remora/base/util.h"
#include "runtime.h"
#include "wire_args.h"

namespace remora::shim {

namespace {

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

}  // namespace

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

namespace {

// Pinned allocations up to this size are device-visible over transports without shared
// memory (see AllocatePinned); one managed chunk.
constexpr size_t kDeviceVisiblePinnedMax = 64 << 10;

}  // namespace

Status AllocatePinned(size_t size, unsigned flags, const char* call, void** ptr) {
  if (ptr == nullptr) return Error(Err::kInvalidValue, "ptr is NULL");
  *ptr = nullptr;
  if (size == 0) return Status::Ok();
  ASSIGN_OR_RETURN(Client * c, Runtime::Get().Session());
  size_t bytes = AlignUp(size, 4096);
  void* p = nullptr;
  uint64_t region = ShareWithWorker(c, &p, bytes);
  if (region == 0 && ((flags & cudaHostAllocMapped) || bytes <= kDeviceVisiblePinnedMax)) {
    // Without shared memory (tcp) the device cannot read this process's memory: mapped pinned
    // memory is managed memory then, coherent at launches and synchronisations (managed.h).
    // So is small pinned memory of any flags: unified addressing promises kernels every
    // pinned allocation by its host address, and small ones are what programs hand kernels
    // (XLA's timer passes a 4-byte cuMemHostAlloc semaphore to its delay kernel); large ones
    // stay in this process, where copies stream from them (cudaHostGetDevicePointer says so).
    ASSIGN_OR_RETURN(void* m, AllocateManaged(size, call, /*pinned=*/!(flags & cudaHostAllocMapped)));
    Runtime::Get().AddHostAllocation(m, size, flags, 0);
    *ptr = m;
    return Status::Ok();
  }
  if (region == 0) {
    p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return Error(Err::kMemoryAllocation, "cannot allocate {} of host memory", FormatSize(size));
    // Transports with registered memory (RDMA) read and write it in place.
    if (c->capabilities().registered_memory) {
      Status st = c->RegisterHostMemory(p, bytes);
      if (!st.ok()) LOG_INFO("cannot register pinned memory with the transport: {}", st.ToString());
    }
  }
  Runtime::Get().AddHostAllocation(p, size, flags, region);
  *ptr = p;
  return Status::Ok();
}

Status FreePinned(void* ptr) {
  if (ptr == nullptr) return Status::Ok();
  auto found = Runtime::Get().FindHost(ptr);
  if (!found || found->base != U(ptr) || found->kind != AllocKind::kPinnedHost)
    return Error(Err::kInvalidValue, "{} was not allocated as pinned memory (cudaMallocHost, cudaHostAlloc, cuMemHostAlloc)", ptr);
  uint64_t region = RegionOf(*found);
  auto c = Runtime::Get().Session();
  if (c.ok() && Runtime::Get().managed().DeviceOf(U(ptr))) {  // device-visible (AllocatePinned)
    (void)Runtime::Get().RemoveHostAllocation(ptr);
    Status st;
    (void)FreeManaged(*c, ptr, &st, /*pinned=*/true);
    return AfterSync(*c, st);
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
    if (!st.ok() && st.code() != Err::kDevicesUnavailable) return st;
  } else if (c.ok() && (*c)->capabilities().registered_memory) {
    (void)(*c)->UnregisterHostMemory(ptr);
  }
  // Memory only this process has may still be written by work queued in stream order here
  // (memsets of it run as host functions, driver/memory.cc): freeing synchronises, as CUDA's does.
  if (region == 0) HostCallbacks::Get().WaitForRegistered();
  (void)Runtime::Get().RemoveHostAllocation(ptr);
  ::munmap(ptr, AlignUp(found->size, 4096));
  return Status::Ok();
}

Status RegisterHost(void* ptr, size_t size, unsigned flags) {
  if (ptr == nullptr || size == 0) return Error(Err::kInvalidValue, "NULL pointer or empty range");
  ASSIGN_OR_RETURN(Client * c, Runtime::Get().Session());
  if (Runtime::Get().FindHost(ptr) || Runtime::Get().FindHost(static_cast<char*>(ptr) + size - 1))
    return Error(Err::kHostMemoryAlreadyRegistered, "{} is already registered", ptr);
  // The best path for memory the application owns: RDMA registers it (one-sided transfers in
  // place); shm and tcp cannot share arbitrary pages with the worker, so copies are staged.
  if (c->capabilities().registered_memory) {
    RETURN_IF_ERROR(c->RegisterHostMemory(ptr, size));
    LOG_DEBUG("host registration of {} ({}): registered with the {} transport (zero-copy)", ptr, FormatSize(size),
              c->capabilities().transport);
  } else {
    LOG_DEBUG("host registration of {} ({}): the {} transport cannot map application memory; copies are staged", ptr,
              FormatSize(size), c->capabilities().transport);
  }
  Runtime::Get().AddHostAllocation(ptr, size, flags, 0, AllocKind::kRegisteredHost);
  return Status::Ok();
}

Status UnregisterHost(void* ptr) {
  auto found = Runtime::Get().FindHost(ptr);
  if (!found || found->base != U(ptr) || found->kind != AllocKind::kRegisteredHost)
    return Error(Err::kHostMemoryNotRegistered, "{} is not registered", ptr);
  auto c = Runtime::Get().Session();
  if (c.ok() && (*c)->capabilities().registered_memory) (void)(*c)->UnregisterHostMemory(ptr);
  (void)Runtime::Get().RemoveHostAllocation(ptr);
  return Status::Ok();
}

Status PinnedDevicePointer(void* host, unsigned flags, void** device) {
  if (device == nullptr || flags != 0) return Error(Err::kInvalidValue, "the out-pointer is NULL or flags not 0");
  Runtime& rt = Runtime::Get();
  RETURN_IF_ERROR(rt.Session().status());
  auto a = rt.FindHost(host);
  if (!a) return Error(Err::kInvalidValue, "{} is not pinned host memory of this process", host);
  if (rt.managed().DeviceOf(a->base)) {  // device-visible (AllocatePinned): one address for both
    // Asked for its device address, it is about to be handed to kernels: awake from now on.
    RETURN_IF_ERROR(WakePinned(&a->base, sizeof(a->base)));
    *device = host;
    return Status::Ok();
  }
  uint64_t region = RegionOf(*a);
  uint64_t d = region != 0 ? rt.RegionDevicePointer(region) : 0;
  if (d == 0)
    return Error(Err::kNotSupported,
                 "{} cannot be mapped for the remote GPU: memory of cudaHostRegister, or pinned memory over 64 KiB "
                 "over a transport without shared memory (over tcp, allocate it with cudaHostAlloc(cudaHostAllocMapped))",
                 host);
  *device = reinterpret_cast<void*>(d + (U(host) - a->base));
  return Status::Ok();
}

Status PinnedFlags(void* host, unsigned* flags) {
  if (flags == nullptr) return Error(Err::kInvalidValue, "flags is NULL");
  auto a = Runtime::Get().FindHost(host);
  if (!a) return Error(Err::kInvalidValue, "{} is not pinned host memory of this process", host);
  *flags = static_cast<unsigned>(a->cookie & 0xffffffffu);
  return Status::Ok();
}

}  // namespace remora::shim

using namespace remora;
using namespace remora::shim;

REMORA_API cudaError_t cudaMallocHost(void** ptr, size_t size) {
  return Finish(AllocatePinned(size, 0, "cudaMallocHost", ptr), "cudaMallocHost");
}

REMORA_API cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags) {
  return Finish(AllocatePinned(size, flags, "cudaHostAlloc", pHost), "cudaHostAlloc");
}

REMORA_API cudaError_t cudaFreeHost(void* ptr) { return Finish(FreePinned(ptr), "cudaFreeHost"); }

REMORA_API cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags) {
  return Finish(RegisterHost(ptr, size, flags), "cudaHostRegister");
}

REMORA_API cudaError_t cudaHostUnregister(void* ptr) { return Finish(UnregisterHost(ptr), "cudaHostUnregister"); }

REMORA_API cudaError_t cudaHostGetDevicePointer(void** pDevice, void* pHost, unsigned int flags) {
  return Finish(PinnedDevicePointer(pHost, flags, pDevice), "cudaHostGetDevicePointer");
}

REMORA_API cudaError_t cudaHostGetFlags(unsigned int* flags, void* host) {
  return Finish(PinnedFlags(host, flags), "cudaHostGetFlags");
}
