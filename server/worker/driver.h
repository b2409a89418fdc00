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

#include "remora/base/status.h"
#include "remora/protocol/connection.h"

namespace remora::worker {

using DevPtr = uint64_t;
using DStream = void*;   // nullptr = the legacy default stream of the current device
using DEvent = void*;

inline constexpr int kNumDeviceAttributes = 160;  // >= cudaDevAttrMax

struct DeviceDescription {
  std::string name;
  uint8_t uuid[16] = {};
  uint64_t total_memory = 0;
  std::string pci_bus_id;
  std::vector<int32_t> attributes;  // index = cudaDeviceAttr / CUdevice_attribute
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

  virtual Result<int> DeviceCount() = 0;
  virtual Result<DeviceDescription> Describe(int device) = 0;
  // Makes `device` current, creating (retaining) its context on first use.
  virtual Status SetDevice(int device) = 0;
  // Bytes the current device's context itself occupies (reported, not charged).
  virtual uint64_t ContextOverhead() = 0;
  virtual Result<MemoryInfo> MemGetInfo() = 0;

  virtual Result<DevPtr> MemAlloc(size_t bytes) = 0;
  virtual Status MemFree(DevPtr ptr) = 0;
  virtual Status MemcpyHtoD(DevPtr dst, const void* src, size_t n, DStream s) = 0;  // async on s
  virtual Status MemcpyDtoH(void* dst, DevPtr src, size_t n, DStream s) = 0;        // async on s
  virtual Status MemcpyDtoD(DevPtr dst, DevPtr src, size_t n, DStream s) = 0;       // async on s
  virtual Status Memset8(DevPtr dst, uint8_t value, size_t n, DStream s) = 0;       // async on s

  // Pinned host memory (staging buffers) and registration of memory shared with a client.
  virtual Result<void*> HostAlloc(size_t bytes) = 0;
  virtual void HostFree(void* p) = 0;
  virtual Status HostRegister(void* p, size_t bytes) = 0;
  virtual void HostUnregister(void* p) = 0;

  virtual Result<DStream> StreamCreate(unsigned flags, int priority) = 0;
  virtual Status StreamDestroy(DStream s) = 0;
  // kSuccess when all work is done, kNotReady while some is pending, or the stream's error.
  virtual Status StreamQuery(DStream s) = 0;
  virtual Status StreamWaitEvent(DStream s, DEvent e, unsigned flags) = 0;

  virtual Result<DEvent> EventCreate(unsigned flags) = 0;
  virtual Status EventDestroy(DEvent e) = 0;
  virtual Status EventRecord(DEvent e, DStream s) = 0;
  virtual Status EventQuery(DEvent e) = 0;  // like StreamQuery
  virtual Result<float> EventElapsedMs(DEvent start, DEvent end) = 0;
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
  int gpus = 1;
  uint64_t memory_per_gpu = 16ull << 30;
};

std::unique_ptr<Driver> MakeHostDriver(const HostDriverOptions& options);
// Loads libcuda.so.1; a clear kInitializationError when no NVIDIA driver is installed.
Result<std::unique_ptr<Driver>> MakeCudaDriver();

}  // namespace remora::worker
