#include "worker/backend/cuda/nvml.h"

#include <dlfcn.h>
#include <unistd.h>

#include <map>
#include <vector>

namespace remora::worker {
namespace {

// The few NVML declarations used (nvml.h is not part of the toolkit image); the ABI of
// these entry points is stable across drivers.
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
struct ProcessInfo {  // nvmlProcessInfo_v2_t / _v3_t
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
constexpr nvmlReturn_t kSuccess = 0;
constexpr nvmlReturn_t kInsufficientSize = 7;
constexpr unsigned long long kNotAvailable = ~0ull;

class DlNvml final : public NvmlProbe {
 public:
  using InitFn = nvmlReturn_t (*)();
  using ByBusFn = nvmlReturn_t (*)(const char*, nvmlDevice_t*);
  using ProcsFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, ProcessInfo*);

  DlNvml(void* lib, ByBusFn by_bus, ProcsFn procs) : lib_(lib), by_bus_(by_bus), procs_(procs) {}
  ~DlNvml() override {
    auto shutdown = reinterpret_cast<InitFn>(::dlsym(lib_, "nvmlShutdown"));
    if (shutdown != nullptr) shutdown();
  }

  Result<uint64_t> ProcessMemory(const std::string& pci_bus_id) override {
    auto it = devices_.find(pci_bus_id);
    if (it == devices_.end()) {
      nvmlDevice_t d = nullptr;
      nvmlReturn_t r = by_bus_(pci_bus_id.c_str(), &d);
      if (r != kSuccess) return Error(Err::kNotSupported, "NVML does not know the GPU at {} (error {})", pci_bus_id, r);
      it = devices_.emplace(pci_bus_id, d).first;
    }
    std::vector<ProcessInfo> procs(16);
    for (;;) {
      unsigned int n = static_cast<unsigned int>(procs.size());
      nvmlReturn_t r = procs_(it->second, &n, procs.data());
      if (r == kInsufficientSize) {
        procs.resize(n + 16);
        continue;
      }
      if (r != kSuccess) return Error(Err::kNotSupported, "NVML cannot list the GPU's processes (error {})", r);
      unsigned int self = static_cast<unsigned int>(::getpid());
      for (unsigned int i = 0; i < n; i++) {
        if (procs[i].pid != self) continue;
        if (procs[i].usedGpuMemory == kNotAvailable) return Error(Err::kNotSupported, "NVML reports no per-process memory here");
        return uint64_t{procs[i].usedGpuMemory};
      }
      // Not listed: no context yet, or NVML sees another PID namespace.
      return Error(Err::kNotSupported, "NVML does not list this process (pid {}) on the GPU", self);
    }
  }

 private:
  void* lib_;
  ByBusFn by_bus_;
  ProcsFn procs_;
  std::map<std::string, nvmlDevice_t> devices_;
};

}  // namespace

Result<std::unique_ptr<NvmlProbe>> NvmlProbe::Load() {
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return Error(Err::kNotSupported, "no NVML ({})", ::dlerror());
  auto init = reinterpret_cast<DlNvml::InitFn>(::dlsym(lib, "nvmlInit_v2"));
  auto by_bus = reinterpret_cast<DlNvml::ByBusFn>(::dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
  auto procs = reinterpret_cast<DlNvml::ProcsFn>(::dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v3"));
  if (procs == nullptr) procs = reinterpret_cast<DlNvml::ProcsFn>(::dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v2"));
  if (init == nullptr || by_bus == nullptr || procs == nullptr) {
    ::dlclose(lib);
    return Error(Err::kNotSupported, "NVML lacks the entry points Remora needs");
  }
  if (nvmlReturn_t r = init(); r != kSuccess) {
    ::dlclose(lib);
    return Error(Err::kNotSupported, "nvmlInit failed (error {})", r);
  }
  return std::unique_ptr<NvmlProbe>(new DlNvml(lib, by_bus, procs));
}

}  // namespace remora::worker
