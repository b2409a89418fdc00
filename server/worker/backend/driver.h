// Driver: the GPU as the worker sees it - the subset of the CUDA driver API Remora uses,
// behind an interface so the executor runs unchanged on a real GPU ("cuda", the driver
// loaded at run time) and in CI ("host-emulated": device memory in host RAM, kernels not
// executed). Handles are opaque pointers owned by the driver.
//
// Threading: a Driver is used by the executor's single thread. Calls act on the current
// device set by SetDevice (a primary context per device, retained for the session).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "remora/base/fd.h"
#include "remora/base/status.h"
#include "remora/protocol/connection.h"

namespace remora::worker {

namespace gen::cuda {
class Api;  // the driver API functions generated calls run (protocol/api/cuda.api)
}

using DevPtr = uint64_t;
using DStream = void*;   // nullptr = the legacy default stream of the current device
using DEvent = void*;
using DModule = void*;
using DFunction = void*;
using DPool = void*;

inline constexpr int kNumFunctionAttributes = 16;  // >= CU_FUNC_ATTRIBUTE_MAX

class Activity;  // activity.h

struct ParamInfo {
  uint32_t offset = 0;
  uint32_t size = 0;
};

// One side of a strided copy: `height` rows per slice, `pitch` bytes apart.
struct CopySide {
  bool host = false;     // addr is a host pointer (pinned staging), else device memory
  uint64_t addr = 0;
  uint64_t pitch = 0;
  uint64_t height = 0;
  // A CUDA array (the driver's CUarray) instead of memory: the copy starts at byte x of row
  // y of slice z of it (addr, pitch and height unused).
  void* array = nullptr;
  uint64_t x = 0, y = 0, z = 0;
};

struct LaunchAttr {
  uint32_t id = 0;             // CUlaunchAttributeID (= cudaLaunchAttributeID)
  uint8_t value[64] = {};      // CUlaunchAttributeValue bytes, handles already translated
};

// The JIT linker's inputs and result (cuLinkCreate/AddData/Complete).
struct LinkOption {
  uint32_t option = 0;         // CUjit_option whose value is a number
  uint64_t value = 0;
};
struct LinkInput {
  uint32_t type = 0;           // CUjitInputType
  std::string name;
  const void* data = nullptr;  // borrowed for the call
  size_t size = 0;
  std::vector<LinkOption> options;
};
struct LinkOutput {
  std::vector<std::byte> image;
  std::string info_log, error_log;
  float walltime_ms = 0;
};

struct LaunchConfig {
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
  uint32_t shared_mem = 0;
  DStream stream = nullptr;
  void** params = nullptr;     // one pointer per parameter
  bool cooperative = false;
  std::vector<LaunchAttr> attrs;
};

inline constexpr int kNumDeviceAttributes = 160;  // >= cudaDevAttrMax

struct DeviceDescription {
  std::string name;
  uint8_t uuid[16] = {};
  uint64_t total_memory = 0;
  std::string pci_bus_id;
  std::vector<int32_t> attributes;  // index = cudaDeviceAttr / CUdevice_attribute
};

// What another process needs to open exported memory or an event (CUDA IPC): the driver's
// 64-byte handle (cuda backend) and/or a descriptor of the memory or the event's state (the
// host-emulated backend's memfd).
struct IpcShare {
  std::vector<uint8_t> handle;
  Fd fd;
};

struct MemoryInfo {
  uint64_t free = 0;
  uint64_t total = 0;
};

class Driver {
 public:
  virtual ~Driver() = default;

  // "cuda" or "host-emulated".
  virtual const char* name() const = 0;
  virtual bool emulated() const = 0;
  // CUDA_VERSION-style version of the driver (13000 for 13.0).
  virtual int DriverVersion() = 0;
  // The kernel-mode driver's version as NVIDIA's NVML reports it ("580.159.04"); empty when
  // there is none (the host-emulated backend) or it cannot be read.
  virtual std::string KernelDriverVersion() { return {}; }

  virtual Result<int> DeviceCount() = 0;
  virtual Result<DeviceDescription> Describe(int device) = 0;
  // Makes `device` current, creating (retaining) its context on first use.
  virtual Status SetDevice(int device) = 0;
  // Bytes this process holds on `device` - its context, allocations, pools and modules - where
  // the backend can tell (kNotSupported otherwise). The executor reports what exceeds the
  // session's charged allocations as context overhead (shown, not charged).
  virtual Result<uint64_t> ProcessMemory(int device) = 0;
  virtual Result<MemoryInfo> MemGetInfo() = 0;

  virtual Result<DevPtr> MemAlloc(size_t bytes) = 0;
  virtual Status MemFree(DevPtr ptr) = 0;
  // Planned migration: allocations on the current device at exactly the addresses they had
  // on another server ({address, bytes}, sorted by address, not overlapping), each freed by
  // MemFree later; kMemoryAllocation (and nothing allocated) where a range is not free here.
  virtual Status MemPlace(const std::vector<std::pair<DevPtr, uint64_t>>& allocations) = 0;
  // The granule MemPlace maps on the current device (worker/backend/placement.h: a placement holds
  // whole granules, and is charged so).
  virtual Result<uint64_t> PlacementGranularity() = 0;
  virtual Status MemcpyHtoD(DevPtr dst, const void* src, size_t n, DStream s) = 0;  // async on s
  virtual Status MemcpyDtoH(void* dst, DevPtr src, size_t n, DStream s) = 0;        // async on s
  virtual Status MemcpyDtoD(DevPtr dst, DevPtr src, size_t n, DStream s) = 0;       // async on s
  virtual Status Memset8(DevPtr dst, uint8_t value, size_t n, DStream s) = 0;       // async on s

  // Pinned host memory (staging buffers) and registration of memory shared with a client.
  virtual Result<void*> HostAlloc(size_t bytes) = 0;
  virtual void HostFree(void* p) = 0;
  // Registers host memory for DMA and maps it for the device (kernels may read and write it).
  virtual Status HostRegister(void* p, size_t bytes) = 0;
  virtual void HostUnregister(void* p) = 0;
  // Unregisters a host region the caller mapped and registered (`bytes` from `p`) and unmaps
  // it: from here on the mapping is the driver's. Work already queued that reads or writes the
  // region must not fault the worker: the host backend keeps the mapping until the streams
  // that had work queued have run that far; on a GPU the caller has waited for that work (an
  // unregistration), or the session is ending and its process exits.
  virtual void HostUnregisterAndUnmap(void* p, size_t bytes) = 0;
  // The device's address of registered host memory `p`.
  virtual Result<DevPtr> HostDevicePointer(void* p) = 0;

  virtual Result<DStream> StreamCreate(unsigned flags, int priority) = 0;
  virtual Status StreamDestroy(DStream s) = 0;
  // kSuccess when all work is done, kNotReady while some is pending, or the stream's error.
  virtual Status StreamQuery(DStream s) = 0;
  virtual Status StreamWaitEvent(DStream s, DEvent e, unsigned flags) = 0;
  // Blocks until the stream's work is done. The executor calls it only for work it knows
  // to be short (a small copy on an idle stream).
  virtual Status StreamSynchronize(DStream s) = 0;
  // Whether work issued to the stream is being captured into a graph (not run): the compute
  // scheduler then records nothing on it. A backend that cannot capture says no.
  virtual Result<bool> StreamCapturing(DStream s) {
    (void)s;
    return false;
  }

  // Runs fn(arg) on a driver thread when the stream reaches this point; later work on the
  // stream waits until fn returns (cuLaunchHostFunc).
  virtual Status LaunchHostFunc(DStream s, void (*fn)(void*), void* arg) = 0;

  virtual Result<DEvent> EventCreate(unsigned flags) = 0;
  virtual Status EventDestroy(DEvent e) = 0;
  virtual Status EventRecord(DEvent e, DStream s) = 0;
  virtual Status EventQuery(DEvent e) = 0;  // like StreamQuery
  // Waits for `e` (blocking). Called by the executor only on an event a query found complete:
  // the synchronisation the driver needs to see before pools give memory back.
  virtual Status EventSynchronize(DEvent e) = 0;
  virtual Result<float> EventElapsedMs(DEvent start, DEvent end) = 0;

  // ---- modules and kernels (current device) -------------------------------------------
  virtual Result<DModule> ModuleLoad(const void* image, size_t size) = 0;
  virtual Status ModuleUnload(DModule m) = 0;
  // Links `inputs` for the current device into `out->image`. On failure `out->error_log`
  // says why, when the linker said.
  virtual Status Link(const std::vector<LinkInput>& inputs, const std::vector<LinkOption>& options, LinkOutput* out) = 0;
  virtual Result<DFunction> ModuleGetFunction(DModule m, const char* name) = 0;
  // `size_hint`: the size the application registered (used where the driver cannot tell).
  virtual Result<std::pair<DevPtr, size_t>> ModuleGetGlobal(DModule m, const char* name, size_t size_hint) = 0;
  // Whether the variable `name` of `m`, at `p`, is managed memory (a __managed__ variable, or
  // PTX's .attribute(.managed)): the application's pointer to it is then also a host pointer.
  virtual bool GlobalIsManaged(DModule m, const char* name, DevPtr p) = 0;
  // The names of the module's kernels (entry functions), in the driver's order.
  virtual Result<std::vector<std::string>> ModuleKernelNames(DModule m) = 0;
  virtual Result<std::vector<ParamInfo>> FuncParams(DFunction f) = 0;
  virtual Result<int> FuncGetAttribute(DFunction f, int attribute) = 0;
  virtual Status Launch(DFunction f, const LaunchConfig& config) = 0;

  // ---- more memory ---------------------------------------------------------------------
  virtual Result<std::pair<DevPtr, size_t>> MemAllocPitch(size_t width, size_t height) = 0;
  virtual Status Copy3D(const CopySide& dst, const CopySide& src, uint64_t width, uint64_t height, uint64_t depth,
                        DStream s) = 0;  // async on s
  virtual Status Memset2D8(DevPtr dst, size_t pitch, uint8_t value, size_t width, size_t height, DStream s) = 0;
  virtual Result<DevPtr> MemAllocAsync(size_t bytes, DPool pool, DStream s) = 0;  // pool null: current
  virtual Status MemFreeAsync(DevPtr p, DStream s) = 0;
  // Frees, in the order of `s`, memory a graph's allocation node handed out (the graph may
  // allocate it again at its next launch, at the same address).
  virtual Status FreeGraphMemory(DevPtr p, DStream s) { return MemFreeAsync(p, s); }
  virtual Result<DPool> DefaultMemPool(int device) = 0;
  virtual Result<DPool> GetMemPool(int device) = 0;
  virtual Status SetMemPool(int device, DPool pool) = 0;
  virtual Result<DPool> MemPoolCreate(int device, uint64_t max_size, unsigned handle_types) = 0;
  virtual Status MemPoolDestroy(DPool pool) = 0;
  virtual Status MemPoolSetAttribute(DPool pool, int attribute, uint64_t value) = 0;
  virtual Result<uint64_t> MemPoolGetAttribute(DPool pool, int attribute) = 0;
  virtual Status MemPoolTrimTo(DPool pool, size_t keep) = 0;
  virtual Status MemcpyPeer(DevPtr dst, int dst_device, DevPtr src, int src_device, size_t n, DStream s) = 0;
  virtual Result<bool> CanAccessPeer(int device, int peer) = 0;
  virtual Status EnablePeerAccess(int peer) = 0;   // from the current device
  virtual Status DisablePeerAccess(int peer) = 0;
  virtual Result<uint64_t> GetLimit(int limit) = 0;
  virtual Status SetLimit(int limit, uint64_t value) = 0;
  virtual Result<std::pair<int, int>> StreamPriorityRange() = 0;  // {least, greatest}

  // ---- CUDA IPC between sessions: sibling worker processes on one GPU (ipc/ipc_hooks.cc) --------
  // Shares the allocation at `base` (all `size` bytes of it) with other processes.
  virtual Result<IpcShare> IpcExportMemory(DevPtr base, uint64_t size) = 0;
  // Maps another worker's export on the current device; its address here.
  virtual Result<DevPtr> IpcOpenMemory(const IpcShare& share, uint64_t size) = 0;
  virtual Status IpcCloseMemory(DevPtr p) = 0;
  // An event created with CU_EVENT_INTERPROCESS (and timing disabled), shared.
  virtual Result<IpcShare> IpcExportEvent(DEvent e) = 0;
  // Another worker's event, usable here like one of this process (destroyed with EventDestroy).
  virtual Result<DEvent> IpcOpenEvent(const IpcShare& share) = 0;
  // Memory pools created shareable by POSIX descriptor: the pool's descriptor; another
  // worker's pool imported on the current device (no allocation from it; destroyed with
  // MemPoolDestroy); an allocation of an exported pool shared; one opened from an imported
  // pool (freed with MemFree, which gives it back to its exporter).
  virtual Result<IpcShare> MemPoolExport(DPool pool) = 0;
  virtual Result<DPool> MemPoolImport(const IpcShare& share) = 0;
  virtual Result<IpcShare> MemPoolExportPointer(DevPtr p, uint64_t size) = 0;
  virtual Result<DevPtr> MemPoolImportPointer(DPool pool, const IpcShare& share, uint64_t size) = 0;

  // The current device's context (CUcontext), for driver functions that name one; nullptr
  // where the backend has none.
  virtual void* CurrentContext() { return nullptr; }
  // The session is ending: streams waiting for a value (cuStreamWaitValue) that will never
  // come give up, and this returns once none still reads memory. Called before the session's
  // memory is freed. The GPU's own waits need nothing here (the context goes with the worker).
  virtual void AbandonStreamWaits() {}
  // The calling thread's stream-capture mode in the driver (cuThreadExchangeStreamCaptureMode).
  virtual Status SetCaptureMode(int mode) = 0;

  // ---- every other driver function a client may call ------------------------------------
  // The generated table of the driver API (protocol/api/cuda.api): the real driver's
  // functions, or the host backend's emulation of some of them (the rest answer
  // CUDA_ERROR_NOT_SUPPORTED). Handles it receives are this Driver's (DStream = CUstream...).
  virtual gen::cuda::Api& cuda() = 0;

  // The implementation of a math library's generated table (gen::<lib>::Api, by its
  // remora::Domain): the real library, loaded on first use (cuda backend), or the host
  // backend's emulation of part of it. kNotSupported if this backend cannot serve it. Owned
  // by the driver; its handles are this driver's (streams are DStreams, memory is DevPtrs).
  virtual Result<void*> Library(Domain library) = 0;

  // The session's GPU activity (CUPTI's activity API; activity.h): NVIDIA's CUPTI (cuda
  // backend, loaded on first use) or the records the host backend synthesizes. kNotSupported
  // where this backend has none. Owned by the driver.
  virtual Result<Activity*> activity() = 0;
};

// Pinned staging memory for transports, from the driver's host allocator.
class DriverStaging final : public StagingAllocator {
 public:
  explicit DriverStaging(Driver& d) : d_(d) {}
  Result<std::byte*> Allocate(size_t bytes) override {
    ASSIGN_OR_RETURN(void* p, d_.HostAlloc(bytes));
    return static_cast<std::byte*>(p);
  }
  void Free(std::byte* p, size_t) override { d_.HostFree(p); }

 private:
  Driver& d_;
};

struct HostDriverOptions {
  int gpus = 1;  // at most 16
  uint64_t memory_per_gpu = 16ull << 30;
  // The session's window (Hello.window): its device addresses lie in it (host_emulation.h).
  uint8_t window = 0;
};

std::unique_ptr<Driver> MakeHostDriver(const HostDriverOptions& options);
// Loads libcuda.so.1; a clear kInitializationError when no NVIDIA driver is installed.
Result<std::unique_ptr<Driver>> MakeCudaDriver();

}  // namespace remora::worker
