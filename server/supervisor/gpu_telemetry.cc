#include "supervisor/gpu_telemetry.h"

#include <dlfcn.h>

#include <map>

namespace remora::server {
namespace {

// The few NVML declarations used (nvml.h is not part of the toolkit image); the ABI of these
// entry points is stable across drivers.
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
struct NvmlUtilization {  // nvmlUtilization_t
  unsigned int gpu;       // percent of the last sample period a kernel ran
  unsigned int memory;
};
struct NvmlMemory {  // nvmlMemory_t
  unsigned long long total, free, used;
};
constexpr nvmlReturn_t kSuccess = 0;

class DlNvml final : public GpuTelemetry {
 public:
  using InitFn = nvmlReturn_t (*)();
  using ByBusFn = nvmlReturn_t (*)(const char*, nvmlDevice_t*);
  using UtilFn = nvmlReturn_t (*)(nvmlDevice_t, NvmlUtilization*);
  using MemFn = nvmlReturn_t (*)(nvmlDevice_t, NvmlMemory*);

  DlNvml(void* lib, ByBusFn by_bus, UtilFn util, MemFn mem) : lib_(lib), by_bus_(by_bus), util_(util), mem_(mem) {}
  ~DlNvml() override {
    auto shutdown = reinterpret_cast<InitFn>(::dlsym(lib_, "nvmlShutdown"));
    if (shutdown != nullptr) shutdown();
    ::dlclose(lib_);
  }

  std::vector<GpuSample> Sample(const std::vector<std::string>& pci_bus_ids) override {
    std::vector<GpuSample> out;
    for (const std::string& bus : pci_bus_ids) {
      GpuSample s;
      s.pci_bus_id = bus;
      auto it = devices_.find(bus);
      if (it == devices_.end()) {
        nvmlDevice_t d = nullptr;
        if (by_bus_(bus.c_str(), &d) != kSuccess) d = nullptr;
        it = devices_.emplace(bus, d).first;
      }
      if (it->second != nullptr) {
        NvmlUtilization u{};
        if (util_(it->second, &u) == kSuccess && u.gpu <= 100) s.utilization = u.gpu / 100.0;
        NvmlMemory m{};
        if (mem_(it->second, &m) == kSuccess) s.memory_used = m.used;
      }
      out.push_back(std::move(s));
    }
    return out;
  }

 private:
  void* lib_;
  ByBusFn by_bus_;
  UtilFn util_;
  MemFn mem_;
  std::map<std::string, nvmlDevice_t> devices_;
};

}  // namespace

Result<std::unique_ptr<GpuTelemetry>> GpuTelemetry::LoadNvml() {
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return Error(Err::kNotSupported, "no NVML ({})", ::dlerror());
  auto init = reinterpret_cast<DlNvml::InitFn>(::dlsym(lib, "nvmlInit_v2"));
  auto by_bus = reinterpret_cast<DlNvml::ByBusFn>(::dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
  auto util = reinterpret_cast<DlNvml::UtilFn>(::dlsym(lib, "nvmlDeviceGetUtilizationRates"));
  auto mem = reinterpret_cast<DlNvml::MemFn>(::dlsym(lib, "nvmlDeviceGetMemoryInfo"));
  if (init == nullptr || by_bus == nullptr || util == nullptr || mem == nullptr) {
    ::dlclose(lib);
    return Error(Err::kNotSupported, "NVML lacks the entry points Remora needs");
  }
  if (nvmlReturn_t r = init(); r != kSuccess) {
    ::dlclose(lib);
    return Error(Err::kNotSupported, "nvmlInit failed (error {})", r);
  }
  return std::unique_ptr<GpuTelemetry>(new DlNvml(lib, by_bus, util, mem));
}

}  // namespace remora::server
