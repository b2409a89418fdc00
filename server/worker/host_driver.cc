// The host-emulated backend: device memory is host RAM behind fake device addresses,
// streams and events complete in stream order, kernels are not executed (except that a
// kernel named *remora_emulated_busy_us* takes gridDim.x microseconds: see Launch). It lets
// every path that needs no kernel execution (protocol, transports, quotas, isolation,
// faults, compute scheduling) run in CI with real processes. It never claims to be a GPU:
// its name and every log line say so.
#include <cuda.h>  // enum values of device attributes only; nothing is linked
#include <sys/mman.h>

#include <cstring>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "cuda_api.h"
#include "worker/driver.h"
#include "worker/host_emulation.h"
#include "worker/host_array.h"
#include "worker/host_cuda_api.h"
#include "worker/host_graph.h"
#include "worker/host_device.h"

namespace remora::worker {
namespace {

using namespace host;

constexpr int kStreamThreads = 8;  // per session, however many streams it creates

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
  return a;
}

class HostDriver final : public Driver, public EmulatedDevice, public HostMemory, private EmuGraphHost {
 public:
  explicit HostDriver(const HostDriverOptions& o)
      : options_(o), graphs_(*this), api_(MakeHostCudaApi(*this, *this, graphs_)) {
    for (int i = 0; i < o.gpus; i++) heaps_.emplace_back(kDeviceBase + uint64_t(i) * kDeviceStride, o.memory_per_gpu);
  }

  const char* name() const override { return "host-emulated"; }
  bool emulated() const override { return true; }
  int DriverVersion() override { return CUDA_VERSION; }

  Result<int> DeviceCount() override { return options_.gpus; }

  Result<DeviceDescription> Describe(int device) override {
    if (device < 0 || device >= options_.gpus) return Error(Err::kInvalidDevice, "no emulated GPU {}", device);
    DeviceDescription d;
    d.name = fmt::format("Remora host-emulated GPU {} (not a GPU)", device);
    for (int i = 0; i < 16; i++) d.uuid[i] = static_cast<uint8_t>(0xe0 + i + device * 16);
    d.total_memory = options_.memory_per_gpu;
    d.pci_bus_id = fmt::format("0000:{:02x}:00.0", 0x80 + device);
    d.attributes = EmulatedAttributes(device);
    return d;
  }

  Status SetDevice(int device) override {
    if (device < 0 || device >= options_.gpus) return Error(Err::kInvalidDevice, "no emulated GPU {}", device);
    current_ = device;
    return Status::Ok();
  }
  Result<uint64_t> ProcessMemory(int) override {
    return Error(Err::kNotSupported, "an emulated GPU has no context to measure");
  }

  Result<MemoryInfo> MemGetInfo() override {
    EmulatedHeap& h = heaps_[static_cast<size_t>(current_)];
    return MemoryInfo{h.capacity() - h.used(), h.capacity()};
  }

  Result<DevPtr> MemAlloc(size_t bytes) override {
    SweepRetired();
    return heaps_[static_cast<size_t>(current_)].Alloc(bytes);
  }
  // Not a wait for the streams (the executor's free op waits for the session's own; at a
  // session's end nothing may wait for a kernel that never ends): work queued before the free
  // still finds the memory mapped (Retire).
  Status MemFree(DevPtr p) override {
    ASSIGN_OR_RETURN(EmulatedHeap * h, HeapOf(p));
    ASSIGN_OR_RETURN(Block b, h->Release(p));
    Retire(b, RetiredMemory::Release::kUnmap);
    return Status::Ok();
  }

  // Copies and memsets validate their ranges now and move bytes in stream order.
  Status MemcpyHtoD(DevPtr dst, const void* src, size_t n, DStream stream) override {
    ASSIGN_OR_RETURN(std::byte * d, Translate(dst, n));
    return InOrder(stream, [=] { std::memcpy(d, src, n); }, CU_GRAPH_NODE_TYPE_MEMCPY);
  }
  Status MemcpyDtoH(void* dst, DevPtr src, size_t n, DStream stream) override {
    ASSIGN_OR_RETURN(std::byte * s, Translate(src, n));
    return InOrder(stream, [=] { std::memcpy(dst, s, n); }, CU_GRAPH_NODE_TYPE_MEMCPY);
  }
  Status MemcpyDtoD(DevPtr dst, DevPtr src, size_t n, DStream stream) override {
    ASSIGN_OR_RETURN(std::byte * d, Translate(dst, n));
    ASSIGN_OR_RETURN(std::byte * s, Translate(src, n));
    return InOrder(stream, [=] { std::memmove(d, s, n); }, CU_GRAPH_NODE_TYPE_MEMCPY);
  }
  Status Memset8(DevPtr dst, uint8_t v, size_t n, DStream stream) override {
    ASSIGN_OR_RETURN(std::byte * d, Translate(dst, n));
    return InOrder(stream, [=] { std::memset(d, v, n); }, CU_GRAPH_NODE_TYPE_MEMSET);
  }

  Result<void*> HostAlloc(size_t bytes) override {
    void* p = std::aligned_alloc(4096, AlignUp(std::max<size_t>(bytes, 1), 4096));
    if (p == nullptr) return Error(Err::kMemoryAllocation, "host allocation of {} failed", FormatSize(bytes));
    return p;
  }
  // Copies queued from it still find it (Retire).
  void HostFree(void* p) override {
    if (p != nullptr) Retire(Block{static_cast<std::byte*>(p), 0}, RetiredMemory::Release::kFree);
  }
  // Registered host memory is emulated device memory at the same address.
  Status HostRegister(void* p, size_t bytes) override {
    mapped_[reinterpret_cast<DevPtr>(p)] = Block{static_cast<std::byte*>(p), bytes};
    return Status::Ok();
  }
  void HostUnregister(void* p) override { mapped_.erase(reinterpret_cast<DevPtr>(p)); }
  Result<DevPtr> HostDevicePointer(void* p) override {
    for (auto& [base, b] : mapped_)
      if (reinterpret_cast<std::byte*>(p) >= b.host && reinterpret_cast<std::byte*>(p) < b.host + b.size)
        return reinterpret_cast<DevPtr>(p);
    return Error(Err::kInvalidValue, "{} is not registered host memory", p);
  }

  Result<DStream> StreamCreate(unsigned flags, int) override {
    auto s = std::make_shared<EmuStream>((flags & CU_STREAM_NON_BLOCKING) == 0, scheduler_.get());
    DStream h = s.get();
    streams_.emplace(h, std::move(s));
    stream_device_[h] = current_;
    return h;
  }
  Status StreamDestroy(DStream s) override {
    auto it = streams_.find(s);
    if (it == streams_.end()) return Error(Err::kInvalidResourceHandle, "unknown emulated stream");
    graphs_.ForgetStream(s);
    // Work already queued still runs (the scheduler holds the stream); Retire must see it.
    if (!it->second->Idle()) draining_.push_back(std::move(it->second));
    streams_.erase(it);
    stream_device_.erase(s);
    return Status::Ok();
  }
  Status StreamQuery(DStream s) override {
    if (graphs_.Capturing(s)) return Status(Domain::kCuda, graphs_.Violation(s), "the stream is capturing");
    if (s == nullptr) RETURN_IF_ERROR(graphs_.LegacyAllowed());
    ASSIGN_OR_RETURN(std::shared_ptr<EmuStream> st, Stream(s));
    return st->Idle() ? Status::Ok() : Status(Err::kNotReady, "");
  }
  Status StreamSynchronize(DStream s) override {
    if (graphs_.Capturing(s)) return Status(Domain::kCuda, graphs_.Violation(s), "the stream is capturing");
    ASSIGN_OR_RETURN(std::shared_ptr<EmuStream> st, Stream(s));
    while (st->completed.load() < st->Issued()) std::this_thread::sleep_for(std::chrono::microseconds(50));
    return Status::Ok();
  }
  Status StreamWaitEvent(DStream s, DEvent e, unsigned) override {
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

  Result<DEvent> EventCreate(unsigned flags) override {
    auto* e = new EmuEvent;
    e->flags = flags;
    events_.insert(e);
    return static_cast<DEvent>(e);
  }
  Status EventDestroy(DEvent e) override {
    if (events_.erase(e) == 0) return Error(Err::kInvalidResourceHandle, "unknown emulated event");
    graphs_.ForgetEvent(e);
    // An interprocess event's state stays mapped until the end (queued records still write it).
    if (static_cast<EmuEvent*>(e)->shared_fd >= 0) ::close(static_cast<EmuEvent*>(e)->shared_fd);
    delete static_cast<EmuEvent*>(e);
    return Status::Ok();
  }
  Status EventRecord(DEvent e, DStream s) override {
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
  Status EventQuery(DEvent e) override {
    auto* ev = static_cast<EmuEvent*>(e);
    if (ev->shared) return ev->shared->completed.load() >= ev->shared->recorded.load() ? Status::Ok() : Status(Err::kNotReady, "");
    if (ev->stream && ev->stream->completed.load() < ev->target) return Status(Err::kNotReady, "");
    return Status::Ok();
  }
  Status EventSynchronize(DEvent e) override {
    auto* ev = static_cast<EmuEvent*>(e);
    if (IpcEventState* sh = ev->shared) {
      uint64_t target = sh->recorded.load();
      while (sh->completed.load() < target && !stopping_.load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
      return Status::Ok();
    }
    while (ev->stream && ev->stream->completed.load() < ev->target) std::this_thread::sleep_for(std::chrono::microseconds(50));
    return Status::Ok();
  }
  Result<float> EventElapsedMs(DEvent a, DEvent b) override {
    auto* x = static_cast<EmuEvent*>(a);
    auto* y = static_cast<EmuEvent*>(b);
    if ((x->flags | y->flags) & CU_EVENT_DISABLE_TIMING)
      return Error(Err::kInvalidResourceHandle, "event created with cudaEventDisableTiming");
    if (!x->recorded || !y->recorded) return Error(Err::kInvalidResourceHandle, "event was never recorded");
    return static_cast<float>(static_cast<double>(static_cast<int64_t>(y->nanos - x->nanos)) / 1e6);
  }

  Status LaunchHostFunc(DStream s, void (*fn)(void*), void* arg) override {
    if (graphs_.Capturing(s)) return graphs_.CaptureWork(s, CU_GRAPH_NODE_TYPE_HOST, [fn, arg] { fn(arg); });
    if (s == nullptr) RETURN_IF_ERROR(graphs_.LegacyAllowed());
    ASSIGN_OR_RETURN(std::shared_ptr<EmuStream> st, Stream(s));
    st->Submit(st, DepsOf(s, st), [fn, arg] { fn(arg); }, /*inline_ok=*/false);
    return Status::Ok();
  }

  // ---- modules and kernels: loaded and looked up, never executed ----
  Result<DModule> ModuleLoad(const void* image, size_t size) override {
    uint32_t magic = 0;
    if (size >= 4) std::memcpy(&magic, image, 4);
    if (!IsEmulatedImage(image, size, magic))
      return Error(Err::kInvalidKernelImage, "not a fat binary, an ELF cubin or PTX (magic 0x{:08x})", magic);
    auto* m = new EmuModule;
    m->symbols = ReadImageSymbols(image, size);
    modules_.insert(m);
    return static_cast<DModule>(m);
  }
  Status ModuleUnload(DModule m) override {
    auto* mod = static_cast<EmuModule*>(m);
    if (modules_.erase(mod) == 0) return Error(Err::kInvalidResourceHandle, "unknown emulated module");
    for (auto& [name, g] : mod->globals) (void)MemFree(g.first);
    delete mod;
    return Status::Ok();
  }
  // No code is generated: the "linked" image is an ELF header followed by the inputs, which
  // this backend's ModuleLoad accepts like any ELF cubin.
  Status Link(const std::vector<LinkInput>& inputs, const std::vector<LinkOption>&, LinkOutput* out) override {
    if (inputs.empty()) return Error(Err::kInvalidValue, "cuLinkComplete: nothing to link");
    std::vector<std::byte> image(64);
    const unsigned char ident[] = {0x7f, 'E', 'L', 'F', 2, 1, 1};
    std::memcpy(image.data(), ident, sizeof(ident));
    uint16_t ehsize = 64;
    std::memcpy(image.data() + 0x34, &ehsize, 2);
    for (const LinkInput& in : inputs) {
      const auto* b = static_cast<const std::byte*>(in.data);
      image.insert(image.end(), b, b + in.size);
    }
    uint64_t end = image.size();  // the ELF's size as the client computes it: e_shoff
    std::memcpy(image.data() + 0x28, &end, 8);
    out->image = std::move(image);
    out->info_log = fmt::format("host-emulated link of {} input(s); no code generated", inputs.size());
    return Status::Ok();
  }
  Result<DFunction> ModuleGetFunction(DModule, const char* name) override {
    auto* f = new EmuFunction;
    f->name = name;
    f->attrs[CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK] = 1024;
    f->attrs[CU_FUNC_ATTRIBUTE_PTX_VERSION] = 90;
    f->attrs[CU_FUNC_ATTRIBUTE_BINARY_VERSION] = 90;
    f->attrs[CU_FUNC_ATTRIBUTE_NUM_REGS] = 32;
    f->attrs[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES] = 49152;
    f->attrs[CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT] = -1;
    functions_.emplace_back(f);
    return static_cast<DFunction>(f);
  }
  Result<std::vector<std::string>> ModuleKernelNames(DModule m) override {
    return static_cast<EmuModule*>(m)->symbols.kernels;
  }
  Result<std::pair<DevPtr, size_t>> ModuleGetGlobal(DModule m, const char* name, size_t size_hint) override {
    auto* mod = static_cast<EmuModule*>(m);
    auto it = mod->globals.find(name);
    if (it != mod->globals.end()) return it->second;
    // Only the name known (cuModuleGetGlobal): the size the image's symbol table gives.
    if (size_hint == 0) {
      auto v = mod->symbols.variables.find(name);
      if (v == mod->symbols.variables.end() || v->second == 0)
        return Error(Err::kInvalidSymbol, "emulated module has no global '{}' of known size", name);
      size_hint = v->second;
    }
    ASSIGN_OR_RETURN(DevPtr p, MemAlloc(size_hint));
    ASSIGN_OR_RETURN(std::byte * host, Translate(p, size_hint));
    std::memset(host, 0, size_hint);
    mod->globals.emplace(name, std::make_pair(p, size_hint));
    return std::make_pair(p, size_hint);
  }
  // Without a driver the parameter layout is unknown: launches carry no parameters (they are
  // not executed anyway).
  Result<std::vector<ParamInfo>> FuncParams(DFunction) override { return std::vector<ParamInfo>(); }
  Result<int> FuncGetAttribute(DFunction f, int a) override {
    if (a < 0 || a >= kNumFunctionAttributes) return Error(Err::kInvalidValue, "bad function attribute {}", a);
    return static_cast<EmuFunction*>(f)->attrs[a];
  }
  Status FuncSetAttribute(DFunction f, int a, int value) override {
    if (a != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES && a != CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT &&
        a != CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH && a != CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT &&
        a != CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH && a != CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED &&
        a != CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE)
      return Error(Err::kInvalidValue, "function attribute {} cannot be set", a);
    if (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES && (value < 0 || value > 232448))
      return Error(Err::kInvalidValue, "dynamic shared memory of {} bytes exceeds the device's limit", value);
    static_cast<EmuFunction*>(f)->attrs[a] = value;
    return Status::Ok();
  }
  Status FuncSetCacheConfig(DFunction, int) override { return Status::Ok(); }
  Status Launch(DFunction f, const LaunchConfig& c) override {
    uint64_t threads = uint64_t{c.block[0]} * c.block[1] * c.block[2];
    if (threads == 0 || threads > 1024 || c.grid[0] == 0 || c.grid[1] == 0 || c.grid[2] == 0)
      return Error(Err::kInvalidConfiguration, "invalid launch configuration");
    const std::string& name = static_cast<EmuFunction*>(f)->name;
    if (graphs_.Capturing(c.stream)) return graphs_.CaptureWork(c.stream, CU_GRAPH_NODE_TYPE_KERNEL, [] {});
    if (c.stream == nullptr) RETURN_IF_ERROR(graphs_.LegacyAllowed());
    if (name.find(kBusyKernel) != std::string::npos) {
      // A kernel that takes time: gridDim.x microseconds, in stream order, on the stream's
      // thread (the executor never waits for it), so that scheduling can be tested here.
      ASSIGN_OR_RETURN(std::shared_ptr<EmuStream> st, Stream(c.stream));
      auto us = std::chrono::microseconds(c.grid[0]);
      st->Submit(st, DepsOf(c.stream, st), [us] { std::this_thread::sleep_for(us); }, /*inline_ok=*/false);
      return Status::Ok();
    }
    LOG_TRACE("host-emulated: kernel {} not executed", name);
    return Status::Ok();
  }
  Result<int> OccupancyMaxActiveBlocks(DFunction, int block_size, size_t, unsigned) override {
    if (block_size <= 0 || block_size > 1024) return Error(Err::kInvalidValue, "bad block size {}", block_size);
    return std::min(32, 2048 / block_size);
  }
  Result<size_t> OccupancyAvailableDynamicSmem(DFunction, int num_blocks, int) override {
    if (num_blocks <= 0) return Error(Err::kInvalidValue, "bad block count");
    return size_t{232448} / static_cast<size_t>(num_blocks);
  }
  Result<int> OccupancyMaxActiveClusters(DFunction, const LaunchConfig&) override { return 4; }
  gen::cuda::Api& cuda() override { return *api_; }
  Result<void*> Library(Domain library) override {
    auto it = libraries_.find(library);
    if (it == libraries_.end()) {
      std::shared_ptr<void> lib = MakeHostLibrary(library, *this);
      if (!lib) return Error(Err::kNotSupported, "the host-emulated backend does not emulate {}", DomainName(library));
      it = libraries_.emplace(library, std::move(lib)).first;
    }
    return it->second.get();
  }

  // ---- EmulatedDevice: for the emulated libraries (Translate is EmuGraphHost's, below) ----
  // A library call on a capturing stream is captured as a kernel node, as on a GPU.
  Status InOrder(DStream s, std::function<void()> task) override {
    return InOrder(s, std::move(task), CU_GRAPH_NODE_TYPE_KERNEL);
  }
  Status Synchronize(DStream s) override { return StreamSynchronize(s); }
  Result<DevPtr> Alloc(size_t bytes) override { return MemAlloc(bytes); }
  Status Free(DevPtr p) override { return MemFree(p); }
  void NoteBlasHandle(const void* handle, bool live) override {
    std::lock_guard<std::mutex> lock(blas_handles_mu_);
    if (live) blas_handles_.insert(handle);
    else blas_handles_.erase(handle);
  }
  bool IsBlasHandle(const void* handle) override {
    std::lock_guard<std::mutex> lock(blas_handles_mu_);
    return blas_handles_.count(handle) != 0;
  }

  // ---- HostMemory (the virtual memory API's emulation) ----
  int CurrentDevice() const override { return current_; }
  Result<std::byte*> HostAddress(DevPtr p, uint64_t n) override { return Translate(p, n); }
  Status RunInOrder(DStream s, std::function<void()> task, CUgraphNodeType type) override {
    return InOrder(s, std::move(task), type);
  }
  std::atomic<uint64_t>& wait_epoch() override { return wait_epoch_; }
  std::atomic<int>& active_waits() override { return active_waits_; }
  void AbandonStreamWaits() override {
    wait_epoch_.fetch_add(1);
    while (active_waits_.load() > 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  Result<DevPtr> ReserveRange(int device, uint64_t bytes, uint64_t align) override {
    if (device < 0 || device >= options_.gpus) return Error(Err::kInvalidDevice, "no emulated GPU {}", device);
    return heaps_[static_cast<size_t>(device)].ReserveRange(bytes, align);
  }
  Status FreeRange(DevPtr base, uint64_t bytes) override {
    ASSIGN_OR_RETURN(EmulatedHeap * h, HeapOf(base));
    ASSIGN_OR_RETURN(Block b, h->FreeRange(base, bytes));
    Retire(b, RetiredMemory::Release::kUnmap);
    return Status::Ok();
  }
  Status MapRange(DevPtr at, uint64_t bytes, int fd, uint64_t offset) override {
    ASSIGN_OR_RETURN(EmulatedHeap * h, HeapOf(at));
    return h->MapAlias(at, bytes, fd, offset);
  }
  Status UnmapRange(DevPtr at, uint64_t bytes) override {
    ASSIGN_OR_RETURN(EmulatedHeap * h, HeapOf(at));
    return h->UnmapAlias(at, bytes);
  }

  // The portable cluster size limit of CUDA (8), as a GPU without the non-portable opt-in answers.
  Result<int> OccupancyMaxPotentialClusterSize(DFunction, const LaunchConfig&) override { return 8; }

  // ---- more memory ----
  Result<std::pair<DevPtr, size_t>> MemAllocPitch(size_t width, size_t height) override {
    size_t pitch = AlignUp(std::max<size_t>(width, 1), 512), bytes;
    if (__builtin_mul_overflow(pitch, height, &bytes))
      return Error(Err::kMemoryAllocation, "pitched allocation of {} x {} does not fit in memory", width, height);
    ASSIGN_OR_RETURN(DevPtr p, MemAlloc(bytes));
    return std::make_pair(p, pitch);
  }
  Status Copy3D(const CopySide& dst, const CopySide& src, uint64_t width, uint64_t height, uint64_t depth,
                DStream stream) override {
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
  Status Memset2D8(DevPtr dst, size_t pitch, uint8_t value, size_t width, size_t height, DStream stream) override {
    if (width == 0 || height == 0) return Status::Ok();
    ASSIGN_OR_RETURN(std::byte * d, Span(CopySide{false, dst, pitch, height}, width, height, 1));
    return InOrder(stream, [=] {
      for (size_t y = 0; y < height; y++) std::memset(d + y * pitch, value, width);
    }, CU_GRAPH_NODE_TYPE_MEMSET);
  }
  Result<DevPtr> MemAllocAsync(size_t bytes, DPool, DStream) override { return MemAlloc(bytes); }
  Status MemFreeAsync(DevPtr p, DStream s) override {
    // Captured: the graph's free node; the emulated memory stays (graphs keep theirs).
    if (graphs_.Capturing(s)) return graphs_.CaptureWork(s, CU_GRAPH_NODE_TYPE_MEM_FREE, [] {});
    return MemFree(p);
  }
  Result<DPool> DefaultMemPool(int device) override {
    if (device < 0 || device >= options_.gpus) return Error(Err::kInvalidDevice, "no emulated GPU {}", device);
    auto& p = default_pools_[device];
    if (!p) p = std::make_unique<EmuPool>(EmuPool{device, {}});
    return static_cast<DPool>(p.get());
  }
  Result<DPool> GetMemPool(int device) override {
    auto it = current_pools_.find(device);
    if (it != current_pools_.end()) return it->second;
    return DefaultMemPool(device);
  }
  Status SetMemPool(int device, DPool pool) override {
    current_pools_[device] = pool;
    return Status::Ok();
  }
  Result<DPool> MemPoolCreate(int device, uint64_t, unsigned handle_types) override {
    auto* p = new EmuPool{device, {}, handle_types, false};
    pools_.insert(p);
    return static_cast<DPool>(p);
  }
  Status MemPoolDestroy(DPool pool) override {
    if (pools_.erase(static_cast<EmuPool*>(pool)) == 0) return Error(Err::kInvalidValue, "unknown emulated pool");
    delete static_cast<EmuPool*>(pool);
    return Status::Ok();
  }
  Status MemPoolSetAttribute(DPool pool, int a, uint64_t value) override {
    static_cast<EmuPool*>(pool)->attrs[a] = value;
    return Status::Ok();
  }
  Result<uint64_t> MemPoolGetAttribute(DPool pool, int a) override {
    auto& attrs = static_cast<EmuPool*>(pool)->attrs;
    auto it = attrs.find(a);
    return it == attrs.end() ? uint64_t{0} : it->second;
  }
  Status MemPoolTrimTo(DPool, size_t) override { return Status::Ok(); }
  // A pool's descriptor has nothing to carry here (every emulated allocation is shared on its
  // own, below); as the driver, only a pool created shareable may be exported.
  Result<IpcShare> MemPoolExport(DPool pool) override {
    auto* p = static_cast<EmuPool*>(pool);
    if (pools_.count(p) == 0 || p->imported) return Error(Err::kInvalidValue, "not an exportable emulated pool");
    if ((p->handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0)
      return Error(Err::kInvalidValue, "the pool was not created shareable by POSIX descriptor");
    return IpcShare{};
  }
  Result<DPool> MemPoolImport(const IpcShare&) override {
    auto* p = new EmuPool{current_, {}, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, true};
    pools_.insert(p);
    return static_cast<DPool>(p);
  }
  Result<IpcShare> MemPoolExportPointer(DevPtr p, uint64_t size) override { return IpcExportMemory(p, size); }
  Result<DevPtr> MemPoolImportPointer(DPool pool, const IpcShare& share, uint64_t size) override {
    auto* p = static_cast<EmuPool*>(pool);
    if (pools_.count(p) == 0 || !p->imported) return Error(Err::kInvalidValue, "not an imported emulated pool");
    return IpcOpenMemory(share, size);
  }
  Status MemcpyPeer(DevPtr dst, int, DevPtr src, int, size_t n, DStream s) override { return MemcpyDtoD(dst, src, n, s); }
  Result<bool> CanAccessPeer(int device, int peer) override {
    if (device < 0 || device >= options_.gpus || peer < 0 || peer >= options_.gpus)
      return Error(Err::kInvalidDevice, "no such emulated GPU");
    return device != peer;
  }
  Status EnablePeerAccess(int peer) override {
    if (!peers_.insert({current_, peer}).second) return Error(Err::kPeerAccessAlreadyEnabled, "peer access already enabled");
    return Status::Ok();
  }
  Status DisablePeerAccess(int peer) override {
    if (peers_.erase({current_, peer}) == 0) return Error(Err::kPeerAccessNotEnabled, "peer access was not enabled");
    return Status::Ok();
  }
  Result<uint64_t> GetLimit(int limit) override {
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
  Status SetLimit(int limit, uint64_t value) override {
    RETURN_IF_ERROR(GetLimit(limit).status());
    limits_[limit] = value;
    return Status::Ok();
  }
  Result<std::pair<int, int>> StreamPriorityRange() override { return std::make_pair(0, -5); }
  Status SetCaptureMode(int mode) override {
    auto m = static_cast<CUstreamCaptureMode>(mode);
    CUresult r = graphs_.ExchangeMode(&m);
    return r == CUDA_SUCCESS ? Status::Ok() : Status(Domain::kCuda, r, "cuThreadExchangeStreamCaptureMode");
  }

  // ---- CUDA IPC: memory files shared with sibling workers (their descriptors pass through the
  // supervisor); see EmulatedHeap::Share and IpcEventState.
  Result<IpcShare> IpcExportMemory(DevPtr base, uint64_t) override {
    ASSIGN_OR_RETURN(EmulatedHeap * h, HeapOf(base));
    WaitAllStreams();  // the memory is copied into its file: nothing may write it meanwhile
    ASSIGN_OR_RETURN(int fd, h->Share(base));
    IpcShare share;
    share.fd = Fd(fd);
    return share;
  }
  Result<DevPtr> IpcOpenMemory(const IpcShare& share, uint64_t size) override {
    if (!share.fd) return Error(Err::kInvalidResourceHandle, "no emulated memory to open");
    return heaps_[static_cast<size_t>(current_)].MapShared(share.fd.get(), size);
  }
  Status IpcCloseMemory(DevPtr p) override {
    ASSIGN_OR_RETURN(EmulatedHeap * h, HeapOf(p));
    ASSIGN_OR_RETURN(Block b, h->Release(p));
    Retire(b, RetiredMemory::Release::kUnmap);
    return Status::Ok();
  }
  Result<IpcShare> IpcExportEvent(DEvent e) override {
    if (!events_.count(e)) return Error(Err::kInvalidResourceHandle, "unknown emulated event");
    auto* ev = static_cast<EmuEvent*>(e);
    if (ev->shared == nullptr) {
      Fd fd(::memfd_create("remora-emulated-ipc-event", MFD_CLOEXEC));
      if (!fd || ::ftruncate(fd.get(), sizeof(IpcEventState)) != 0)
        return ErrnoStatus(Err::kMemoryAllocation, "emulated IPC event", errno);
      ASSIGN_OR_RETURN(IpcEventState * sh, MapEventState(fd.get()));
      new (sh) IpcEventState();
      if (ev->stream && ev->stream->completed.load() < ev->target) {
        // Recorded and not reached yet: the shared state takes that record over.
        sh->recorded.store(1);
        ev->stream->Submit(ev->stream, {}, [sh] { sh->completed.store(std::max<uint64_t>(sh->completed.load(), 1)); });
      }
      ev->shared = sh;
      ev->shared_fd = fd.release();
    }
    IpcShare share;
    share.fd = Fd(::fcntl(ev->shared_fd, F_DUPFD_CLOEXEC, 0));
    if (!share.fd) return ErrnoStatus(Err::kMemoryAllocation, "dup", errno);
    return share;
  }
  Result<DEvent> IpcOpenEvent(const IpcShare& share) override {
    if (!share.fd) return Error(Err::kInvalidResourceHandle, "no emulated event to open");
    ASSIGN_OR_RETURN(IpcEventState * sh, MapEventState(share.fd.get()));
    auto* e = new EmuEvent;
    e->flags = CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING;
    e->shared = sh;
    e->shared_fd = ::fcntl(share.fd.get(), F_DUPFD_CLOEXEC, 0);
    events_.insert(e);
    return static_cast<DEvent>(e);
  }

  ~HostDriver() override {
    stopping_.store(true);  // waits for other processes' events give up
    AbandonStreamWaits();   // and waits for values
    scheduler_.reset();  // running work finishes first; queued work never runs
    for (void* m : ipc_event_maps_) ::munmap(m, sizeof(IpcEventState));
    for (auto* e : events_) delete static_cast<EmuEvent*>(e);
    for (auto* m : modules_) delete m;
    for (auto* p : pools_) delete p;
  }

 private:
  std::mutex blas_handles_mu_;
  std::set<const void*> blas_handles_;  // NoteBlasHandle
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> wait_epoch_{0};
  std::atomic<int> active_waits_{0};
  std::vector<void*> ipc_event_maps_;   // IpcEventState mappings (unmapped at the end)

  Result<IpcEventState*> MapEventState(int fd) {
    struct stat st;
    if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < sizeof(IpcEventState))
      return Error(Err::kInvalidResourceHandle, "not an emulated IPC event");
    void* m = ::mmap(nullptr, sizeof(IpcEventState), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) return ErrnoStatus(Err::kMemoryAllocation, "map an emulated IPC event", errno);
    ipc_event_maps_.push_back(m);
    return static_cast<IpcEventState*>(m);
  }
  // Waits until every stream of this process has run what was issued to it.
  void WaitAllStreams() {
    for (auto& [h, st] : streams_)
      while (st->completed.load() < st->Issued()) std::this_thread::sleep_for(std::chrono::microseconds(50));
    for (auto& [d, st] : legacy_streams_)
      while (st->completed.load() < st->Issued()) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }

  // Freed memory (device memory's host mapping, or a host buffer) outlives the work every
  // stream had queued at the free: such work holds its host address (a session's end lets
  // queued work run while it frees everything - found by fuzz target `request`: a queued memset
  // wrote unmapped memory and killed the worker; a queued copy read a freed bounce buffer). On
  // a GPU that work would find memory the driver has not reused yet, or fault; here it touches
  // memory no allocation owns any more.
  void Retire(Block b, RetiredMemory::Release how) {
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
      retired_.emplace_back(b, how, std::move(until));
    }
    SweepRetired();
  }
  void SweepRetired() {
    std::erase_if(retired_, [](const RetiredMemory& m) { return m.Due(); });
    std::erase_if(draining_, [](const std::shared_ptr<EmuStream>& st) { return st->Idle(); });
  }

  // The emulated stream behind a handle; nullptr is the current device's legacy stream.
  Result<std::shared_ptr<EmuStream>> Stream(DStream s) {
    if (s == nullptr) {
      auto& legacy = legacy_streams_[current_];
      if (!legacy) legacy = std::make_shared<EmuStream>(true, scheduler_.get());
      return legacy;
    }
    auto it = streams_.find(s);
    if (it == streams_.end()) return Error(Err::kInvalidResourceHandle, "unknown emulated stream");
    return it->second;
  }
  Status InOrder(DStream s, std::function<void()> task, CUgraphNodeType type) {
    if (graphs_.Capturing(s)) return graphs_.CaptureWork(s, type, std::move(task));
    if (s == nullptr) RETURN_IF_ERROR(graphs_.LegacyAllowed());
    ASSIGN_OR_RETURN(std::shared_ptr<EmuStream> st, Stream(s));
    // A wait for a value blocks its stream, never the worker's loop (as on a GPU).
    st->Submit(st, DepsOf(s, st), std::move(task), /*inline_ok=*/type != CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
    return Status::Ok();
  }

  // ---- EmuGraphHost: what emulated graphs use ----
  Result<std::byte*> Translate(DevPtr p, uint64_t n) override {
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
  Status Submit(DStream s, std::function<void()> task) override {
    ASSIGN_OR_RETURN(std::shared_ptr<EmuStream> st, Stream(s));
    // Never inline: a graph may call host functions that wait for the client.
    st->Submit(st, DepsOf(s, st), std::move(task), /*inline_ok=*/false);
    return Status::Ok();
  }
  Status RecordEvent(DEvent e, DStream s) override { return EventRecord(e, s); }
  Status WaitEvent(DStream s, DEvent e) override { return StreamWaitEvent(s, e, 0); }
  Result<DevPtr> Allocate(size_t bytes) override { return MemAlloc(bytes); }
  bool BlockingStream(DStream s) override {
    auto it = streams_.find(s);
    return it != streams_.end() && it->second->blocking;
  }
  // The legacy stream waits for the device's blocking streams; they wait for it.
  std::vector<EmuDep> DepsOf(DStream s, const std::shared_ptr<EmuStream>& st) {
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
  // Host address of `n` bytes at `offset` into one side of a copy.
  // The host address of a strided region's first byte, after checking that all of it,
  // ((depth-1) * side.height + height-1) * side.pitch + width bytes, is one region.
  Result<std::byte*> Span(const CopySide& side, uint64_t width, uint64_t height, uint64_t depth) {
    uint64_t rows, extent;
    if ((height > 1 || depth > 1) && side.pitch < width) return Error(Err::kInvalidPitchValue, "pitch below width");
    if (__builtin_mul_overflow(depth - 1, side.height, &rows) || __builtin_add_overflow(rows, height - 1, &rows) ||
        __builtin_mul_overflow(rows, side.pitch, &extent) || __builtin_add_overflow(extent, width, &extent))
      return Error(Err::kInvalidValue, "2D/3D region too large");
    return Side(side, 0, extent);
  }
  Result<std::byte*> Side(const CopySide& side, uint64_t offset, uint64_t n) {
    if (side.host) return reinterpret_cast<std::byte*>(side.addr + offset);
    return Translate(side.addr + offset, n);
  }
  Result<EmulatedHeap*> HeapOf(DevPtr p) {
    for (auto& h : heaps_)
      if (h.Owns(p)) return &h;
    return Error(Err::kInvalidValue, "0x{:x} is not emulated device memory", p);
  }


  HostDriverOptions options_;
  HostGraphs graphs_;                    // before api_, which refers to it
  std::unique_ptr<gen::cuda::Api> api_;  // only stores references to this driver and graphs_
  std::map<Domain, std::shared_ptr<void>> libraries_;  // emulated math libraries, by first use
  std::vector<EmulatedHeap> heaps_;
  int current_ = 0;
  std::unordered_map<void*, std::shared_ptr<EmuStream>> streams_;
  std::map<int, std::shared_ptr<EmuStream>> legacy_streams_;
  std::unordered_map<void*, int> stream_device_;
  std::unordered_set<void*> events_;
  std::unordered_set<EmuModule*> modules_;
  std::vector<std::unique_ptr<EmuFunction>> functions_;
  std::map<int, std::unique_ptr<EmuPool>> default_pools_;
  std::map<int, DPool> current_pools_;
  std::unordered_set<EmuPool*> pools_;
  std::set<std::pair<int, int>> peers_;
  std::map<DevPtr, Block> mapped_;  // registered host memory the device may use
  std::map<int, uint64_t> limits_;
  std::vector<RetiredMemory> retired_;                 // released once due (Retire), or at the end
  std::vector<std::shared_ptr<EmuStream>> draining_;  // destroyed with work still queued
  // Runs the streams' work on a fixed set of threads (declared last: stopped first).
  std::unique_ptr<EmuScheduler> scheduler_ = std::make_unique<EmuScheduler>(kStreamThreads);
};

}  // namespace

std::unique_ptr<Driver> MakeHostDriver(const HostDriverOptions& options) {
  return std::make_unique<HostDriver>(options);
}

}  // namespace remora::worker
