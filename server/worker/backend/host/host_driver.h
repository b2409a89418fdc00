// The host-emulated backend's Driver (host_driver.cc says what it is), declared for the files
// that implement it: host_driver.cc (devices, memory, streams, events, stream-order helpers),
// host_driver_memory.cc (2D/3D copies, pools, the virtual memory API's ranges, the emulated
// libraries' view), host_driver_modules.cc (modules, kernels, launches) and
// host_driver_ipc.cc (CUDA IPC). Private to server/worker; only MakeHostDriver (driver.h) is
// public. Thread-safety: the executor's thread calls it; the stream threads run queued work.
#pragma once

#include <cuda.h>  // enum values of device attributes only; nothing is linked
#include <sys/mman.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cuda_api.h"
#include "remora/base/log.h"
#include "remora/base/util.h"
#include "worker/backend/activity.h"
#include "worker/backend/driver.h"
#include "worker/backend/host/host_array.h"
#include "worker/backend/host/host_cuda_api.h"
#include "worker/backend/host/host_device.h"
#include "worker/backend/host/host_emulation.h"
#include "worker/backend/host/host_graph.h"

namespace remora::worker::host {

constexpr int kStreamThreads = 8;  // per session, however many streams it creates

// The device attributes an emulated GPU reports (plausible Hopper-class limits).
std::vector<int32_t> EmulatedAttributes(int device);

class HostDriver final : public Driver, public EmulatedDevice, public HostMemory, private EmuGraphHost {
 public:
  explicit HostDriver(const HostDriverOptions& o);
  ~HostDriver() override;

  const char* name() const override { return "host-emulated"; }
  bool emulated() const override { return true; }
  int DriverVersion() override { return CUDA_VERSION; }

  Result<int> DeviceCount() override { return options_.gpus; }

  Result<DeviceDescription> Describe(int device) override;

  Status SetDevice(int device) override;
  Result<uint64_t> ProcessMemory(int) override;

  Result<MemoryInfo> MemGetInfo() override;

  Result<DevPtr> MemAlloc(size_t bytes) override;
  // Not a wait for the streams (the executor's free op waits for the session's own; at a
  // session's end nothing may wait for a kernel that never ends): work queued before the free
  // still finds the memory mapped (Retire).
  Status MemFree(DevPtr p) override;
  Status MemPlace(const std::vector<std::pair<DevPtr, uint64_t>>& allocations) override;
  // The emulated GPU's granule (cuMemGetAllocationGranularity's, 2 MiB): a placement is
  // charged as the cuda backend holds it, though this heap holds only the allocations.
  Result<uint64_t> PlacementGranularity() override { return uint64_t{2} << 20; }

  // Copies and memsets validate their ranges now and move bytes in stream order.
  Status MemcpyHtoD(DevPtr dst, const void* src, size_t n, DStream stream) override;
  Status MemcpyDtoH(void* dst, DevPtr src, size_t n, DStream stream) override;
  Status MemcpyDtoD(DevPtr dst, DevPtr src, size_t n, DStream stream) override;
  Status Memset8(DevPtr dst, uint8_t v, size_t n, DStream stream) override;

  Result<void*> HostAlloc(size_t bytes) override;
  // Copies queued from it still find it (Retire).
  void HostFree(void* p) override;
  // Registered host memory is emulated device memory at the same address.
  Status HostRegister(void* p, size_t bytes) override;
  void HostUnregister(void* p) override { mapped_.erase(reinterpret_cast<DevPtr>(p)); }
  // Queued work still finds the region (Retire).
  void HostUnregisterAndUnmap(void* p, size_t bytes) override {
    HostUnregister(p);
    Retire(Block{static_cast<std::byte*>(p), bytes}, RetiredMemory::Release::kUnmap);
  }
  Result<DevPtr> HostDevicePointer(void* p) override;

  Result<DStream> StreamCreate(unsigned flags, int) override;
  Status StreamDestroy(DStream s) override;
  Status StreamQuery(DStream s) override;
  Status StreamSynchronize(DStream s) override;
  Status StreamWaitEvent(DStream s, DEvent e, unsigned) override;

  Result<DEvent> EventCreate(unsigned flags) override;
  Status EventDestroy(DEvent e) override;
  Status EventRecord(DEvent e, DStream s) override;
  Status EventQuery(DEvent e) override;
  Status EventSynchronize(DEvent e) override;
  Result<float> EventElapsedMs(DEvent a, DEvent b) override;

  Status LaunchHostFunc(DStream s, void (*fn)(void*), void* arg) override;

  // ---- modules and kernels: loaded and looked up, never executed ----
  Result<DModule> ModuleLoad(const void* image, size_t size) override;
  Status ModuleUnload(DModule m) override;
  // No code is generated: the "linked" image is an ELF header followed by the inputs, which
  // this backend's ModuleLoad accepts like any ELF cubin.
  Status Link(const std::vector<LinkInput>& inputs, const std::vector<LinkOption>&, LinkOutput* out) override;
  Result<DFunction> ModuleGetFunction(DModule, const char* name) override;
  Result<std::vector<std::string>> ModuleKernelNames(DModule m) override;
  Result<std::pair<DevPtr, size_t>> ModuleGetGlobal(DModule m, const char* name, size_t size_hint) override;
  // From the image's PTX (.attribute(.managed)); an ELF cubin's variables are not known managed.
  bool GlobalIsManaged(DModule m, const char* name, DevPtr p) override;
  // Without a driver the parameter layout is unknown: launches carry no parameters (they are
  // not executed anyway).
  Result<std::vector<ParamInfo>> FuncParams(DFunction) override { return std::vector<ParamInfo>(); }
  Result<int> FuncGetAttribute(DFunction f, int a) override;
  Status Launch(DFunction f, const LaunchConfig& c) override;
  gen::cuda::Api& cuda() override { return *api_; }
  Result<void*> Library(Domain library) override;
  Result<Activity*> activity() override { return &activity_; }

  // ---- EmulatedDevice: for the emulated libraries (Translate is EmuGraphHost's, below) ----
  // A library call on a capturing stream is captured as a kernel node, as on a GPU.
  Status InOrder(DStream s, std::function<void()> task) override;
  Status InOrderBlocking(DStream s, std::function<void()> task) override {
    return InOrder(s, std::move(task), CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);  // (never inline)
  }
  Status Synchronize(DStream s) override { return StreamSynchronize(s); }
  Result<DevPtr> Alloc(size_t bytes) override { return MemAlloc(bytes); }
  Status Free(DevPtr p) override { return MemFree(p); }
  void NoteBlasHandle(const void* handle, bool live) override;
  bool IsBlasHandle(const void* handle) override;

  // ---- HostMemory (the virtual memory API's emulation) ----
  int CurrentDevice() const override { return current_; }
  Result<std::byte*> HostAddress(DevPtr p, uint64_t n) override { return Translate(p, n); }
  Status RunInOrder(DStream s, std::function<void()> task, CUgraphNodeType type) override;
  std::atomic<uint64_t>& wait_epoch() override { return wait_epoch_; }
  std::atomic<int>& active_waits() override { return active_waits_; }
  void AbandonStreamWaits() override;
  Result<DevPtr> ReserveRange(int device, uint64_t bytes, uint64_t align) override;
  Status FreeRange(DevPtr base, uint64_t bytes) override;
  Status MapRange(DevPtr at, uint64_t bytes, int fd, uint64_t offset) override;
  Status UnmapRange(DevPtr at, uint64_t bytes) override;

  // ---- more memory ----
  Result<std::pair<DevPtr, size_t>> MemAllocPitch(size_t width, size_t height) override;
  Status Copy3D(const CopySide& dst, const CopySide& src, uint64_t width, uint64_t height, uint64_t depth,
                DStream stream) override;
  Status Memset2D8(DevPtr dst, size_t pitch, uint8_t value, size_t width, size_t height, DStream stream) override;
  // Stream-ordered: allowed in a capture (the graph's allocation node).
  Result<DevPtr> MemAllocAsync(size_t bytes, DPool, DStream s) override;
  Status MemFreeAsync(DevPtr p, DStream s) override;
  // The emulated graph memory stays with its graph (the emulator allocates it once, when
  // the node is made, and keeps it as long as the graph).
  Status FreeGraphMemory(DevPtr, DStream) override { return Status::Ok(); }
  Result<DPool> DefaultMemPool(int device) override;
  Result<DPool> GetMemPool(int device) override;
  Status SetMemPool(int device, DPool pool) override;
  Result<DPool> MemPoolCreate(int device, uint64_t, unsigned handle_types) override;
  Status MemPoolDestroy(DPool pool) override;
  Status MemPoolSetAttribute(DPool pool, int a, uint64_t value) override;
  Result<uint64_t> MemPoolGetAttribute(DPool pool, int a) override;
  Status MemPoolTrimTo(DPool, size_t) override { return Status::Ok(); }
  // A pool's descriptor has nothing to carry here (every emulated allocation is shared on its
  // own, below); as the driver, only a pool created shareable may be exported.
  Result<IpcShare> MemPoolExport(DPool pool) override;
  Result<DPool> MemPoolImport(const IpcShare&) override;
  Result<IpcShare> MemPoolExportPointer(DevPtr p, uint64_t size) override { return IpcExportMemory(p, size); }
  Result<DevPtr> MemPoolImportPointer(DPool pool, const IpcShare& share, uint64_t size) override;
  Status MemcpyPeer(DevPtr dst, int, DevPtr src, int, size_t n, DStream s) override { return MemcpyDtoD(dst, src, n, s); }
  Result<bool> CanAccessPeer(int device, int peer) override;
  Status EnablePeerAccess(int peer) override;
  Status DisablePeerAccess(int peer) override;
  Result<uint64_t> GetLimit(int limit) override;
  Status SetLimit(int limit, uint64_t value) override;
  Result<std::pair<int, int>> StreamPriorityRange() override { return std::make_pair(0, -5); }
  Status SetCaptureMode(int mode) override;

  // ---- CUDA IPC: memory files shared with sibling workers (their descriptors pass through the
  // supervisor); see EmulatedHeap::Share and IpcEventState.
  Result<IpcShare> IpcExportMemory(DevPtr base, uint64_t) override;
  Result<DevPtr> IpcOpenMemory(const IpcShare& share, uint64_t size) override;
  Status IpcCloseMemory(DevPtr p) override;
  Result<IpcShare> IpcExportEvent(DEvent e) override;
  Result<DEvent> IpcOpenEvent(const IpcShare& share) override;


 private:
  std::mutex blas_handles_mu_;
  std::set<const void*> blas_handles_;  // NoteBlasHandle
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> wait_epoch_{0};
  std::atomic<int> active_waits_{0};
  std::vector<void*> ipc_event_maps_;   // IpcEventState mappings (unmapped at the end)

  // An allocation from the current device's heap (MemAlloc without its capture check).
  Result<DevPtr> HeapAlloc(size_t bytes);
  // Maps an interprocess event's state (kept mapped until the end: queued records write it).
  Result<IpcEventState*> MapEventState(int fd);
  // Waits until every stream of this process has run what was issued to it.
  void WaitAllStreams();

  // Freed memory (device memory's host mapping, or a host buffer) outlives the work every
  // stream had queued at the free: such work holds its host address (a session's end lets
  // queued work run while it frees everything - found by fuzz target `request`: a queued memset
  // wrote unmapped memory and killed the worker; a queued copy read a freed bounce buffer). On
  // a GPU that work would find memory the driver has not reused yet, or fault; here it touches
  // memory no allocation owns any more.
  // `device`: the emulated GPU whose memory `b` was (it stays counted there), or -1.
  void Retire(Block b, RetiredMemory::Release how, int device = -1);
  void SweepRetired();
  // Bytes of `device`'s freed memory still held for queued work (after a sweep).
  uint64_t RetiredOn(int device);

  // The emulated stream behind a handle; nullptr is the current device's legacy stream.
  Result<std::shared_ptr<EmuStream>> Stream(DStream s);
  Status InOrder(DStream s, std::function<void()> task, CUgraphNodeType type);
  // `task` stamped with an activity record `r` of `kind` (activity_wire.h's Kinds) when the
  // client collects it: its times are when the stream runs it.
  std::function<void()> Recorded(uint32_t kind, api::activity::Record r, DStream s, std::function<void()> task);

  // ---- EmuGraphHost: what emulated graphs use ----
  Result<std::byte*> Translate(DevPtr p, uint64_t n) override;
  Status Submit(DStream s, std::function<void()> task) override;
  Status RecordEvent(DEvent e, DStream s) override { return EventRecord(e, s); }
  Status WaitEvent(DStream s, DEvent e) override { return StreamWaitEvent(s, e, 0); }
  Result<DevPtr> Allocate(size_t bytes) override { return MemAlloc(bytes); }
  bool BlockingStream(DStream s) override;
  // The legacy stream waits for the device's blocking streams; they wait for it.
  std::vector<EmuDep> DepsOf(DStream s, const std::shared_ptr<EmuStream>& st);
  // Host address of `n` bytes at `offset` into one side of a copy.
  // The host address of a strided region's first byte, after checking that all of it,
  // ((depth-1) * side.height + height-1) * side.pitch + width bytes, is one region.
  Result<std::byte*> Span(const CopySide& side, uint64_t width, uint64_t height, uint64_t depth);
  Result<std::byte*> Side(const CopySide& side, uint64_t offset, uint64_t n);
  Result<EmulatedHeap*> HeapOf(DevPtr p);
  int DeviceOf(const EmulatedHeap* h) const { return static_cast<int>(h - heaps_.data()); }

  HostDriverOptions options_;
  HostGraphs graphs_;                    // before api_, which refers to it
  std::unique_ptr<gen::cuda::Api> api_;  // only stores references to this driver and graphs_
  std::map<Domain, std::shared_ptr<void>> libraries_;  // emulated math libraries, by first use
  SynthesizedActivity activity_;  // what the emulation did, while a client collects it
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

}  // namespace remora::worker::host
