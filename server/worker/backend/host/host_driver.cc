// The host-emulated backend: device memory is host RAM behind fake device addresses,
// streams and events complete in stream order, kernels are not executed (except that a
// kernel named *remora_emulated_busy_us* takes gridDim.x microseconds: see Launch). It lets
// every path that needs no kernel execution (protocol, transports, quotas, isolation,
// faults, compute scheduling) run in CI with real processes. It never claims to be a GPU:
// its name and every log line say so.
//
// This file: construction, devices, memory, streams and events, and the stream-order helpers
// the other parts share (host_driver.h).
#include "worker/backend/host/host_driver.h"

namespace remora::worker::host {

std::vector<int32_t> EmulatedAttributes(int device) {
  std::vector<int32_t> a(kNumDeviceAttributes, 0);
  auto set = [&](CUdevice_attribute k, int32_t v) { a[static_cast<size_t>(k)] = v; };
  // Plausible Hopper-class limits, so programs that size launches from them behave.
  set(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024);
  set(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 1024);
  set(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 1024);
  set(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64);
  set(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 2147483647);
  set(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65535);
  set(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 65535);
  set(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 49152);
  set(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, 65536);
  set(CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32);
  set(CU_DEVICE_ATTRIBUTE_MAX_PITCH, 2147483647);
  set(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 65536);
  set(CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 1000000);
  set(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, 512);
  set(CU_DEVICE_ATTRIBUTE_GPU_OVERLAP, 1);
  set(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 4);
  set(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1);
  set(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 1);
  set(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 0x80 + device);
  set(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, 1000000);
  set(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, 256);
  set(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 4 << 20);
  set(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 2048);
  set(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 2);
  set(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1);
  set(CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, 32);
  set(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9);
  set(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0);
  set(CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, 1);
  set(CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED, 1);
  set(CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED, 1);
  set(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 233472);
  set(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, 65536);
  set(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 1);
  set(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 232448);
  set(CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, 1);
  set(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, 32);
  set(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, 1024);
  set(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1);
  set(CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, 1);
  // What a Hopper GPU's driver claims for the memory model and interop (an H200 with HMM):
  // the worker's view of "the driver"; what a remote client is offered is the worker's
  // RemotedAttributes (ops_device.cc), which these let CI check.
  set(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 1);
  set(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 1);
  set(CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, 1);
  set(CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, 1);
  set(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 1);
  set(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, 1);
  set(CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_FABRIC);
  set(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, 1);
  set(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, 1);
  set(CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED, 1);
  set(CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, 0);
  set(CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED, 1);
  set(CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1);
  set(CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED, 1);
  return a;
}

HostDriver::HostDriver(const HostDriverOptions& o)
    : options_(o), graphs_(*this), api_(MakeHostCudaApi(*this, *this, graphs_)) {
  for (int i = 0; i < o.gpus; i++) heaps_.emplace_back(DeviceBase(o.window, i), o.memory_per_gpu);
}

HostDriver::~HostDriver() {
  stopping_.store(true);  // waits for other processes' events give up
  AbandonStreamWaits();   // and waits for values
  scheduler_.reset();  // running work finishes first; queued work never runs
  for (void* m : ipc_event_maps_) ::munmap(m, sizeof(IpcEventState));
  for (auto* e : events_) delete static_cast<EmuEvent*>(e);
  for (auto* m : modules_) delete m;
  for (auto* p : pools_) delete p;
}

Result<DeviceDescription> HostDriver::Describe(int device) {
  if (device < 0 || device >= options_.gpus) return Error(Err::kInvalidDevice, "no emulated GPU {}", device);
  DeviceDescription d;
  d.name = fmt::format("Remora host-emulated GPU {} (not a GPU)", device);
  for (int i = 0; i < 16; i++) d.uuid[i] = static_cast<uint8_t>(0xe0 + i + device * 16);
  d.total_memory = options_.memory_per_gpu;
  // The PCI domain is the session's window: the emulated GPUs of two servers of one
  // application (several servers, a pool) are distinct devices to cudaDeviceGetByPCIBusId.
  d.pci_bus_id = fmt::format("{:04x}:{:02x}:00.0", options_.window, 0x80 + device);
  d.attributes = EmulatedAttributes(device);
  return d;
}

Status HostDriver::SetDevice(int device) {
  if (device < 0 || device >= options_.gpus) return Error(Err::kInvalidDevice, "no emulated GPU {}", device);
  current_ = device;
  return Status::Ok();
}

Result<uint64_t> HostDriver::ProcessMemory(int) {
  return Error(Err::kNotSupported, "an emulated GPU has no context to measure");
}

Result<MemoryInfo> HostDriver::MemGetInfo() {
  EmulatedHeap& h = heaps_[static_cast<size_t>(current_)];
  uint64_t in_use = std::min(h.capacity(), h.used() + RetiredOn(current_));
  return MemoryInfo{h.capacity() - in_use, h.capacity()};
}

namespace {
// A copy's record (CUpti_ActivityMemcpyKind `copy`; CUpti_ActivityMemoryKind of each side,
// 0 for host memory whose kind the worker does not know, 3 for device memory).
api::activity::Record CopyRecord(size_t bytes, uint8_t copy, uint8_t src, uint8_t dst) {
  api::activity::Record r;
  r.kind = api::activity::RecordKind::kMemcpy;
  r.bytes = bytes;
  r.copy_kind = copy;
  r.src_kind = src;
  r.dst_kind = dst;
  return r;
}
}  // namespace

Result<DevPtr> HostDriver::MemAlloc(size_t bytes) {
  if (CUresult r = graphs_.Unsafe(); r != CUDA_SUCCESS)
    return Status(Domain::kCuda, r, "cuMemAlloc is not permitted while a stream captures (the capture is invalidated)");
  return HeapAlloc(bytes);
}

Result<DevPtr> HostDriver::HeapAlloc(size_t bytes) {
  EmulatedHeap& h = heaps_[static_cast<size_t>(current_)];
  // Freed memory that queued work still holds is not available yet (its address range is):
  // without this a client that keeps a stream blocked while it allocates and frees would
  // grow its worker without bound.
  uint64_t held = RetiredOn(current_);
  if (held > 0 && AlignUp(std::max<uint64_t>(bytes, 1), kAlign) > h.capacity() - std::min(h.capacity(), h.used() + held))
    return Error(Err::kMemoryAllocation,
                 "emulated GPU is out of memory ({} requested, {} of {} in use, {} more freed but still held by "
                 "work queued before the free)",
                 FormatSize(bytes), FormatSize(h.used()), FormatSize(h.capacity()), FormatSize(held));
  return h.Alloc(bytes);
}

Status HostDriver::MemPlace(const std::vector<std::pair<DevPtr, uint64_t>>& allocations) {
  EmulatedHeap& h = heaps_[static_cast<size_t>(current_)];
  std::vector<DevPtr> done;
  for (const auto& [at, bytes] : allocations) {
    Result<DevPtr> p = h.AllocAt(at, bytes);
    if (!p.ok()) {
      for (DevPtr d : done)  // never used: nothing to retire
        if (auto b = h.Release(d); b.ok()) ::munmap(b->host, b->size);
      return p.status();
    }
    done.push_back(*p);
  }
  return Status::Ok();
}

Status HostDriver::MemFree(DevPtr p) {
  ASSIGN_OR_RETURN(EmulatedHeap * h, HeapOf(p));
  ASSIGN_OR_RETURN(Block b, h->Release(p));
  Retire(b, RetiredMemory::Release::kUnmap, DeviceOf(h));
  return Status::Ok();
}

Status HostDriver::MemcpyHtoD(DevPtr dst, const void* src, size_t n, DStream stream) {
  ASSIGN_OR_RETURN(std::byte * d, Translate(dst, n));
  return InOrder(stream, Recorded(api::activity::kMemcpys, CopyRecord(n, 1, 0, 3), stream, [=] { std::memcpy(d, src, n); }),
                 CU_GRAPH_NODE_TYPE_MEMCPY);
}

Status HostDriver::MemcpyDtoH(void* dst, DevPtr src, size_t n, DStream stream) {
  ASSIGN_OR_RETURN(std::byte * s, Translate(src, n));
  return InOrder(stream, Recorded(api::activity::kMemcpys, CopyRecord(n, 2, 3, 0), stream, [=] { std::memcpy(dst, s, n); }),
                 CU_GRAPH_NODE_TYPE_MEMCPY);
}

Status HostDriver::MemcpyDtoD(DevPtr dst, DevPtr src, size_t n, DStream stream) {
  ASSIGN_OR_RETURN(std::byte * d, Translate(dst, n));
  ASSIGN_OR_RETURN(std::byte * s, Translate(src, n));
  return InOrder(stream, Recorded(api::activity::kMemcpys, CopyRecord(n, 8, 3, 3), stream, [=] { std::memmove(d, s, n); }),
                 CU_GRAPH_NODE_TYPE_MEMCPY);
}

Status HostDriver::Memset8(DevPtr dst, uint8_t v, size_t n, DStream stream) {
  ASSIGN_OR_RETURN(std::byte * d, Translate(dst, n));
  api::activity::Record r;
  r.kind = api::activity::RecordKind::kMemset;
  r.bytes = n;
  r.value = v;
  r.dst_kind = 3;  // CUPTI_ACTIVITY_MEMORY_KIND_DEVICE
  return InOrder(stream, Recorded(api::activity::kMemsets, std::move(r), stream, [=] { std::memset(d, v, n); }),
                 CU_GRAPH_NODE_TYPE_MEMSET);
}

std::function<void()> HostDriver::Recorded(uint32_t kind, api::activity::Record r, DStream s, std::function<void()> task) {
  if (graphs_.Capturing(s)) return task;  // captured, not run: nothing to record
  uint32_t correlation = activity_.Correlate(kind);
  if (correlation == 0) return task;
  r.correlation = correlation;
  r.device = static_cast<uint32_t>(current_);
  r.stream = activity_.StreamId(s);
  SynthesizedActivity* a = &activity_;
  return [a, r = std::move(r), task = std::move(task)]() mutable {
    r.start = a->Now();
    task();
    r.end = a->Now();
    a->Add(std::move(r));
  };
}

Result<void*> HostDriver::HostAlloc(size_t bytes) {
  void* p = std::aligned_alloc(4096, AlignUp(std::max<size_t>(bytes, 1), 4096));
  if (p == nullptr) return Error(Err::kMemoryAllocation, "host allocation of {} failed", FormatSize(bytes));
  return p;
}

void HostDriver::HostFree(void* p) {
  if (p != nullptr) Retire(Block{static_cast<std::byte*>(p), 0}, RetiredMemory::Release::kFree);
}

Status HostDriver::HostRegister(void* p, size_t bytes) {
  if (CUresult r = graphs_.Unsafe(); r != CUDA_SUCCESS)
    return Status(Domain::kCuda, r, "cuMemHostRegister is not permitted while a stream captures (the capture is invalidated)");
  mapped_[reinterpret_cast<DevPtr>(p)] = Block{static_cast<std::byte*>(p), bytes};
  return Status::Ok();
}

Result<DevPtr> HostDriver::HostDevicePointer(void* p) {
  for (auto& [base, b] : mapped_)
    if (reinterpret_cast<std::byte*>(p) >= b.host && reinterpret_cast<std::byte*>(p) < b.host + b.size)
      return reinterpret_cast<DevPtr>(p);
  return Error(Err::kInvalidValue, "{} is not registered host memory", p);
}

Result<DStream> HostDriver::StreamCreate(unsigned flags, int) {
  auto s = std::make_shared<EmuStream>((flags & CU_STREAM_NON_BLOCKING) == 0, scheduler_.get());
  DStream h = s.get();
  streams_.emplace(h, std::move(s));
  stream_device_[h] = current_;
  return h;
}

Status HostDriver::StreamDestroy(DStream s) {
  auto it = streams_.find(s);
  if (it == streams_.end()) return Error(Err::kInvalidResourceHandle, "unknown emulated stream");
  graphs_.ForgetStream(s);
  // Work already queued still runs (the scheduler holds the stream); Retire must see it.
  if (!it->second->Idle()) draining_.push_back(std::move(it->second));
  streams_.erase(it);
  stream_device_.erase(s);
  return Status::Ok();
}

Status HostDriver::StreamQuery(DStream s) {
  if (graphs_.Capturing(s)) return Status(Domain::kCuda, graphs_.Violation(s), "the stream is capturing");
  if (s == nullptr) RETURN_IF_ERROR(graphs_.LegacyAllowed());
  ASSIGN_OR_RETURN(std::shared_ptr<EmuStream> st, Stream(s));
  return st->Idle() ? Status::Ok() : Status(Err::kNotReady, "");
}

Status HostDriver::StreamSynchronize(DStream s) {
  if (graphs_.Capturing(s)) return Status(Domain::kCuda, graphs_.Violation(s), "the stream is capturing");
  ASSIGN_OR_RETURN(std::shared_ptr<EmuStream> st, Stream(s));
  while (st->completed.load() < st->Issued()) std::this_thread::sleep_for(std::chrono::microseconds(50));
  return Status::Ok();
}

Status HostDriver::StreamWaitEvent(DStream s, DEvent e, unsigned) {
  if (!events_.count(e)) return Error(Err::kInvalidResourceHandle, "unknown emulated event");
  ASSIGN_OR_RETURN(bool joined, graphs_.CaptureWait(s, e));
  if (joined || graphs_.Capturing(s)) return Status::Ok();  // a capture records the dependency
  auto* ev = static_cast<EmuEvent*>(e);
  ASSIGN_OR_RETURN(std::shared_ptr<EmuStream> st, Stream(s));
  if (IpcEventState* sh = ev->shared; sh != nullptr && ev->stream == nullptr) {
    // Another process's event (opened by IPC): later work waits for its latest record.
    uint64_t target = sh->recorded.load();
    if (sh->completed.load() >= target) return Status::Ok();
    const std::atomic<bool>* stopping = &stopping_;
    st->Submit(st, DepsOf(s, st), [sh, target, stopping] {
      while (sh->completed.load() < target && !stopping->load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }, /*inline_ok=*/false);
    return Status::Ok();
  }
  if (ev->stream == nullptr || ev->stream == st) return Status::Ok();
  std::vector<EmuDep> deps = DepsOf(s, st);
  deps.push_back(EmuDep{ev->stream, ev->target});
  st->Submit(st, std::move(deps), [] {});  // a barrier: later work waits for the event
  return Status::Ok();
}

Result<DEvent> HostDriver::EventCreate(unsigned flags) {
  auto* e = new EmuEvent;
  e->flags = flags;
  events_.insert(e);
  return static_cast<DEvent>(e);
}

Status HostDriver::EventDestroy(DEvent e) {
  if (events_.erase(e) == 0) return Error(Err::kInvalidResourceHandle, "unknown emulated event");
  graphs_.ForgetEvent(e);
  // An interprocess event's state stays mapped until the end (queued records still write it).
  if (static_cast<EmuEvent*>(e)->shared_fd >= 0) ::close(static_cast<EmuEvent*>(e)->shared_fd);
  delete static_cast<EmuEvent*>(e);
  return Status::Ok();
}

Status HostDriver::EventRecord(DEvent e, DStream s) {
  if (graphs_.Capturing(s)) return graphs_.CaptureEventRecord(e, s);
  if (s == nullptr) RETURN_IF_ERROR(graphs_.LegacyAllowed());
  ASSIGN_OR_RETURN(std::shared_ptr<EmuStream> st, Stream(s));
  auto* ev = static_cast<EmuEvent*>(e);
  std::function<void()> reached = [] {};
  if (IpcEventState* sh = ev->shared) {
    // An interprocess event: the record is numbered; reaching it completes that number
    // (never going back when records of several processes complete out of order).
    uint64_t seq = sh->recorded.fetch_add(1) + 1;
    reached = [sh, seq] {
      uint64_t c = sh->completed.load();
      while (c < seq && !sh->completed.compare_exchange_weak(c, seq)) {
      }
    };
  }
  st->Submit(st, DepsOf(s, st), std::move(reached));  // on the legacy stream, after the blocking streams
  ev->recorded = true;
  ev->nanos = MonotonicNanos();
  ev->stream = st;
  ev->target = st->Issued();
  return Status::Ok();
}

Status HostDriver::EventQuery(DEvent e) {
  auto* ev = static_cast<EmuEvent*>(e);
  if (ev->shared) return ev->shared->completed.load() >= ev->shared->recorded.load() ? Status::Ok() : Status(Err::kNotReady, "");
  if (ev->stream && ev->stream->completed.load() < ev->target) return Status(Err::kNotReady, "");
  return Status::Ok();
}

Status HostDriver::EventSynchronize(DEvent e) {
  auto* ev = static_cast<EmuEvent*>(e);
  if (IpcEventState* sh = ev->shared) {
    uint64_t target = sh->recorded.load();
    while (sh->completed.load() < target && !stopping_.load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
    return Status::Ok();
  }
  while (ev->stream && ev->stream->completed.load() < ev->target) std::this_thread::sleep_for(std::chrono::microseconds(50));
  return Status::Ok();
}

Result<float> HostDriver::EventElapsedMs(DEvent a, DEvent b) {
  auto* x = static_cast<EmuEvent*>(a);
  auto* y = static_cast<EmuEvent*>(b);
  if ((x->flags | y->flags) & CU_EVENT_DISABLE_TIMING)
    return Error(Err::kInvalidResourceHandle, "event created with cudaEventDisableTiming");
  if (!x->recorded || !y->recorded) return Error(Err::kInvalidResourceHandle, "event was never recorded");
  return static_cast<float>(static_cast<double>(static_cast<int64_t>(y->nanos - x->nanos)) / 1e6);
}

Status HostDriver::LaunchHostFunc(DStream s, void (*fn)(void*), void* arg) {
  if (graphs_.Capturing(s)) {
    CUgraphNodeParams p{};
    p.host.fn = fn;
    p.host.userData = arg;
    return graphs_.CaptureWork(s, CU_GRAPH_NODE_TYPE_HOST, [fn, arg] { fn(arg); }, &p);
  }
  if (s == nullptr) RETURN_IF_ERROR(graphs_.LegacyAllowed());
  ASSIGN_OR_RETURN(std::shared_ptr<EmuStream> st, Stream(s));
  st->Submit(st, DepsOf(s, st), [fn, arg] { fn(arg); }, /*inline_ok=*/false);
  return Status::Ok();
}

Result<std::byte*> HostDriver::Translate(DevPtr p, uint64_t n) {
  if (auto it = mapped_.upper_bound(p); it != mapped_.begin()) {
    --it;
    if (p - it->first < it->second.size) {
      if (n > it->second.size - (p - it->first)) return Error(Err::kInvalidValue, "0x{:x}+{} runs past mapped host memory", p, n);
      return it->second.host + (p - it->first);
    }
  }
  ASSIGN_OR_RETURN(EmulatedHeap * h, HeapOf(p));
  return h->Translate(p, n);
}

Status HostDriver::Submit(DStream s, std::function<void()> task) {
  ASSIGN_OR_RETURN(std::shared_ptr<EmuStream> st, Stream(s));
  // Never inline: a graph may call host functions that wait for the client.
  st->Submit(st, DepsOf(s, st), std::move(task), /*inline_ok=*/false);
  return Status::Ok();
}

bool HostDriver::BlockingStream(DStream s) {
  auto it = streams_.find(s);
  return it != streams_.end() && it->second->blocking;
}

std::vector<EmuDep> HostDriver::DepsOf(DStream s, const std::shared_ptr<EmuStream>& st) {
  std::vector<EmuDep> deps;
  if (s == nullptr) {
    for (auto& [h, other] : streams_)
      if (other->blocking && stream_device_[h] == current_) deps.push_back(EmuDep{other, other->Issued()});
  } else if (st->blocking) {
    auto it = legacy_streams_.find(stream_device_[s]);
    if (it != legacy_streams_.end()) deps.push_back(EmuDep{it->second, it->second->Issued()});
  }
  return deps;
}

Result<std::byte*> HostDriver::Span(const CopySide& side, uint64_t width, uint64_t height, uint64_t depth) {
  uint64_t rows, extent;
  if ((height > 1 || depth > 1) && side.pitch < width) return Error(Err::kInvalidPitchValue, "pitch below width");
  if (__builtin_mul_overflow(depth - 1, side.height, &rows) || __builtin_add_overflow(rows, height - 1, &rows) ||
      __builtin_mul_overflow(rows, side.pitch, &extent) || __builtin_add_overflow(extent, width, &extent))
    return Error(Err::kInvalidValue, "2D/3D region too large");
  return Side(side, 0, extent);
}

Result<std::byte*> HostDriver::Side(const CopySide& side, uint64_t offset, uint64_t n) {
  if (side.host) return reinterpret_cast<std::byte*>(side.addr + offset);
  return Translate(side.addr + offset, n);
}

Result<EmulatedHeap*> HostDriver::HeapOf(DevPtr p) {
  for (auto& h : heaps_)
    if (h.Owns(p)) return &h;
  return Error(Err::kInvalidValue, "0x{:x} is not emulated device memory", p);
}

void HostDriver::Retire(Block b, RetiredMemory::Release how, int device) {
  std::vector<EmuDep> until;
  auto note = [&](const std::shared_ptr<EmuStream>& st) {
    uint64_t issued = st->Issued();
    if (st->completed.load() < issued) until.push_back(EmuDep{st, issued});
  };
  for (auto& [h, st] : streams_) note(st);
  for (auto& [d, st] : legacy_streams_) note(st);
  for (auto& st : draining_) note(st);
  if (until.empty()) {
    RetiredMemory now(b, how, {});  // released as it goes out of scope
  } else {
    retired_.emplace_back(b, how, std::move(until), device);
  }
  SweepRetired();
}

uint64_t HostDriver::RetiredOn(int device) {
  SweepRetired();
  uint64_t held = 0;
  for (const RetiredMemory& m : retired_) held += m.HeldOn(device);
  return held;
}

void HostDriver::SweepRetired() {
  std::erase_if(retired_, [](const RetiredMemory& m) { return m.Due(); });
  std::erase_if(draining_, [](const std::shared_ptr<EmuStream>& st) { return st->Idle(); });
}

Result<std::shared_ptr<EmuStream>> HostDriver::Stream(DStream s) {
  if (s == nullptr) {
    auto& legacy = legacy_streams_[current_];
    if (!legacy) legacy = std::make_shared<EmuStream>(true, scheduler_.get());
    return legacy;
  }
  auto it = streams_.find(s);
  if (it == streams_.end()) return Error(Err::kInvalidResourceHandle, "unknown emulated stream");
  return it->second;
}

Status HostDriver::InOrder(DStream s, std::function<void()> task, CUgraphNodeType type) {
  if (graphs_.Capturing(s)) return graphs_.CaptureWork(s, type, std::move(task));
  if (s == nullptr) RETURN_IF_ERROR(graphs_.LegacyAllowed());
  ASSIGN_OR_RETURN(std::shared_ptr<EmuStream> st, Stream(s));
  // A wait for a value blocks its stream, never the worker's loop (as on a GPU).
  st->Submit(st, DepsOf(s, st), std::move(task), /*inline_ok=*/type != CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
  return Status::Ok();
}

}  // namespace remora::worker::host

namespace remora::worker {

std::unique_ptr<Driver> MakeHostDriver(const HostDriverOptions& options) {
  return std::make_unique<host::HostDriver>(options);
}

}  // namespace remora::worker
