#include "modules.h"

#include <cuda.h>
#include <sodium.h>

#include <map>
#include <mutex>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "cuda_client.h"
#include "driver/objects.h"
#include "remote_call.h"

namespace remora::shim {
namespace {

// The worker's function handle as the generated calls take it.
CUfunction AsFunction(uint64_t handle) { return reinterpret_cast<CUfunction>(handle); }

Status NeedsDevice(int device) {
  if (device < 0 || device >= kMaxDevices) return Error(Err::kInvalidDevice, "device {} is beyond Remora's limit", device);
  return Status::Ok();
}

// Loads the fat binary on `device` (caller holds fatbin->mu).
Result<uint64_t> ModuleOn(FatbinRecord* fb, int device) {
  if (fb->module[static_cast<size_t>(device)] != 0) return fb->module[static_cast<size_t>(device)];
  if (fb->data == nullptr || fb->size == 0)
    return Error(Err::kInvalidKernelImage, "the fat binary of this kernel has a layout Remora does not know");
  if (fb->hash.empty()) {
    // The name the server checks the image against (BLAKE2b-256, as it computes it).
    unsigned char h[crypto_generichash_BYTES];
    crypto_generichash(h, sizeof(h), static_cast<const unsigned char*>(fb->data), fb->size, nullptr, 0);
    fb->hash.assign(reinterpret_cast<const char*>(h), sizeof(h));
  }
  ASSIGN_OR_RETURN(Client * client, Runtime::Get().Session());
  uint64_t handle = 0;
  bool need_image = false;
  auto build = [&](bool with_image) {
    return [fb, with_image](wire::Request::Builder& r) {
      auto m = r.initModuleLoad();
      m.setHash(capnp::Data::Reader(reinterpret_cast<const uint8_t*>(fb->hash.data()), fb->hash.size()));
      m.setSize(fb->size);
      m.setHasImage(with_image);
      m.setFresh(fb->fresh);
    };
  };
  auto on_reply = [&](wire::Reply::Reader& r) -> Status {
    if (!r.isModule()) return Error(Err::kUnknown, "malformed module reply");
    handle = r.getModule().getHandle();
    need_image = r.getModule().getNeedImage();
    return Status::Ok();
  };
  RETURN_IF_ERROR(client->Call(device, build(false), on_reply));
  if (need_image) {
    LOG_DEBUG("shipping a {} fat binary to the server", FormatSize(fb->size));
    RETURN_IF_ERROR(client->Call(device, build(true), on_reply, AsBytes(fb->data, fb->size)));
  }
  if (handle == 0) return Error(Err::kInvalidKernelImage, "the server did not load the fat binary");
  fb->module[static_cast<size_t>(device)] = handle;
  return handle;
}

}  // namespace

Result<std::unique_ptr<KernelInfo>> FetchFunction(Client* client, int device, uint64_t module, const std::string& name) {
  auto info = std::make_unique<KernelInfo>();
  info->name = name;
  RETURN_IF_ERROR(client->Call(device, [&](wire::Request::Builder& r) {
    auto g = r.initGetFunction();
    g.setModule(module);
    g.setName(name);
  }, [&](wire::Reply::Reader& r) -> Status {
    if (!r.isFunction()) return Error(Err::kUnknown, "malformed function reply");
    auto fi = r.getFunction();
    info->handle = fi.getHandle();
    for (auto p : fi.getParams()) {
      info->params.emplace_back(p.getOffset(), p.getSize());
      info->param_bytes = std::max(info->param_bytes, p.getOffset() + p.getSize());
    }
    for (int32_t a : fi.getAttributes()) info->attributes.push_back(a);
    return Status::Ok();
  }));
  return info;
}

Result<std::pair<uint64_t, uint64_t>> FetchGlobal(Client* client, int device, uint64_t module, const std::string& name,
                                                  size_t size_hint, bool* managed) {
  std::pair<uint64_t, uint64_t> g;
  RETURN_IF_ERROR(client->Call(device, [&](wire::Request::Builder& r) {
    auto q = r.initGetGlobal();
    q.setModule(module);
    q.setName(name);
    q.setSize(size_hint);
  }, [&](wire::Reply::Reader& r) -> Status {
    if (!r.isGlobal()) return Error(Err::kUnknown, "malformed global reply");
    g = {r.getGlobal().getPtr(), r.getGlobal().getSize()};
    if (managed != nullptr) *managed = r.getGlobal().getManaged();
    return Status::Ok();
  }));
  Runtime::Get().AddDeviceAllocation(g.first, g.second, device, AllocKind::kModule);
  return g;
}

Status SetFunctionAttribute(KernelInfo* k, int attr, int value) {
  // Setting an attribute to the value the kernel has is a no-op for CUDA (and the value was
  // accepted before): answered here. PyTorch sets a kernel's dynamic shared memory before
  // each of its launches, a round trip each otherwise (issue 45's decode census).
  // Only the two settable attributes whose value reads back as set (the dynamic shared memory
  // limit and the carveout); the driver refuses to set a read-only one, whatever its value.
  const bool settable = attr == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES ||
                        attr == CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT;
  if (settable && static_cast<size_t>(attr) < k->attributes.size() && k->attributes[static_cast<size_t>(attr)] == value)
    return Status::Ok();
  Status st = gen::cuda::cuFuncSetAttribute(CallCtx{false, "cuFuncSetAttribute"}, AsFunction(k->handle),
                                            static_cast<CUfunction_attribute>(attr), value);
  ForgetOccupancy();  // after the change: an answer computed before it is not kept
  RETURN_IF_ERROR(st);
  // The launch checks read the cached attributes: keep them in step.
  if (attr >= 0 && static_cast<size_t>(attr) < k->attributes.size()) k->attributes[static_cast<size_t>(attr)] = value;
  return Status::Ok();
}

Status FunctionAttributes(uint64_t handle, int* values, unsigned count) {
  return gen::cuda::remoraFuncGetAttributes(CallCtx{false, "cudaFuncGetAttributes"}, AsFunction(handle), values, count);
}

Status SetFunctionCacheConfig(uint64_t handle, int config) {
  Status st = gen::cuda::cuFuncSetCacheConfig(CallCtx{false, "cuFuncSetCacheConfig"}, AsFunction(handle),
                                              static_cast<CUfunc_cache>(config));
  ForgetOccupancy();
  return st;
}

namespace {

// The occupancy answers the worker gave, kept until something they depend on changes (a
// kernel's attribute or cache preference, the context's cache or shared-memory configuration,
// a module unloaded, the session moved): PyTorch asks the same questions on every step, and
// each would be a round trip. Answers to launch-configuration queries (clusters) are not kept.
struct OccupancyKey {
  int device;
  uint64_t handle;
  int kind;
  int block_size;
  uint64_t smem;
  unsigned flags;
  int num_blocks;
  auto operator<=>(const OccupancyKey&) const = default;
};
constexpr size_t kOccupancyMemoMax = 4096;  // beyond it the memo starts again
std::mutex g_occupancy_mu;
std::map<OccupancyKey, int64_t> g_occupancy;  // guarded by g_occupancy_mu
uint64_t g_occupancy_epoch = 0;               // guarded by g_occupancy_mu; moves when it is cleared

}  // namespace

void ForgetOccupancy() {
  std::lock_guard<std::mutex> lock(g_occupancy_mu);
  g_occupancy.clear();
  g_occupancy_epoch++;
}

Result<int64_t> FunctionOccupancy(int device, uint64_t handle, OccupancyKind kind, int block_size, size_t smem,
                                  unsigned flags, int num_blocks, const cudaLaunchConfig_t* config) {
  const OccupancyKey key{device, handle, static_cast<int>(kind), block_size, smem, flags, num_blocks};
  uint64_t epoch = 0;
  if (config == nullptr) {
    std::lock_guard<std::mutex> lock(g_occupancy_mu);
    if (auto it = g_occupancy.find(key); it != g_occupancy.end()) return it->second;
    epoch = g_occupancy_epoch;
  }
  const CallCtx cc{false, "cudaOccupancy"};
  const CUfunction f = AsFunction(handle);
  int64_t value = 0;
  switch (kind) {
    case OccupancyKind::kMaxActiveBlocks: {
      int n = 0;
      RETURN_IF_ERROR(gen::cuda::cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(cc, &n, f, block_size, smem, flags));
      value = n;
      break;
    }
    case OccupancyKind::kAvailableDynamicSmem: {
      size_t n = 0;
      RETURN_IF_ERROR(gen::cuda::cuOccupancyAvailableDynamicSMemPerBlock(cc, &n, f, num_blocks, block_size));
      value = static_cast<int64_t>(n);
      break;
    }
    case OccupancyKind::kMaxActiveClusters:
    case OccupancyKind::kMaxPotentialClusterSize: {
      if (config == nullptr) return Error(Err::kInvalidValue, "a cluster occupancy query without a launch configuration");
      // cudaLaunchAttribute and CUlaunchAttribute share layout and ids.
      const auto* attrs = reinterpret_cast<const CUlaunchAttribute*>(config->attrs);
      int n = 0;
      RETURN_IF_ERROR(gen::cuda::remoraOccupancyClusters(
          cc, &n, f, kind == OccupancyKind::kMaxPotentialClusterSize ? 1 : 0, config->gridDim.x, config->gridDim.y,
          config->gridDim.z, config->blockDim.x, config->blockDim.y, config->blockDim.z,
          static_cast<unsigned>(config->dynamicSmemBytes), attrs, config->numAttrs));
      value = n;
      break;
    }
  }
  if (config == nullptr) {
    std::lock_guard<std::mutex> lock(g_occupancy_mu);
    if (epoch == g_occupancy_epoch) {  // no configuration changed while the question was out
      if (g_occupancy.size() >= kOccupancyMemoMax) g_occupancy.clear();
      g_occupancy.emplace(key, value);
    }
  }
  return value;
}

Status UnloadModule(uint64_t module) {
  Status st = gen::cuda::cuModuleUnload(CallCtx{false, "cuModuleUnload"}, reinterpret_cast<CUmodule>(module));
  ForgetOccupancy();  // its functions' handles may be reused
  return st;
}

Result<uint64_t> LoadImage(FatbinRecord* fb, int device) {
  RETURN_IF_ERROR(NeedsDevice(device));
  std::lock_guard<std::mutex> lock(fb->mu);
  return ModuleOn(fb, device);
}

FunctionRecord* FunctionFromHost(const void* func) {
  // A cudaKernel_t from __cudaGetKernel is the record itself; anything else is a host stub.
  if (FunctionRecord* f = Registry::Get().FindFunction(func)) return f;
  return Registry::Get().IsFunctionRecord(func) ? const_cast<FunctionRecord*>(static_cast<const FunctionRecord*>(func)) : nullptr;
}

Result<const KernelInfo*> KernelOn(FunctionRecord* f, int device) {
  RETURN_IF_ERROR(NeedsDevice(device));
  if (const KernelInfo* k = f->kernel[static_cast<size_t>(device)].load(std::memory_order_acquire)) return k;
  std::lock_guard<std::mutex> lock(f->fatbin->mu);
  if (const KernelInfo* k = f->kernel[static_cast<size_t>(device)].load(std::memory_order_acquire)) return k;
  ASSIGN_OR_RETURN(uint64_t module, ModuleOn(f->fatbin, device));
  ASSIGN_OR_RETURN(Client * client, Runtime::Get().Session());
  ASSIGN_OR_RETURN(std::unique_ptr<KernelInfo> info, FetchFunction(client, device, module, f->device_name));
  // Attributes the application set before this device used the kernel.
  std::map<int, int> attrs;
  int cache_config;
  {
    std::lock_guard<std::mutex> l2(f->mu);
    attrs = f->set_attributes;
    cache_config = f->cache_config;
  }
  for (const auto& [attr, value] : attrs) {
    RETURN_IF_ERROR(gen::cuda::cuFuncSetAttribute(CallCtx{false, "cudaFuncSetAttribute"}, AsFunction(info->handle),
                                                  static_cast<CUfunction_attribute>(attr), value));
    if (static_cast<size_t>(attr) < info->attributes.size()) info->attributes[static_cast<size_t>(attr)] = value;
  }
  if (cache_config >= 0) {
    RETURN_IF_ERROR(gen::cuda::cuFuncSetCacheConfig(CallCtx{false, "cudaFuncSetCacheConfig"}, AsFunction(info->handle),
                                                    static_cast<CUfunc_cache>(cache_config)));
  }
  const KernelInfo* k = info.release();
  f->kernel[static_cast<size_t>(device)].store(k, std::memory_order_release);
  Registry::Get().RememberKernel(k->handle, f, k);
  Process::Get().driver_objects().AddFunction(k->handle, driver::FunctionInfo{device, module, f->device_name, k});
  return k;
}

Result<std::pair<uint64_t, uint64_t>> GlobalOn(VariableRecord* v, int device) {
  RETURN_IF_ERROR(NeedsDevice(device));
  {
    std::lock_guard<std::mutex> lock(v->mu);
    if (v->global[static_cast<size_t>(device)].first != 0) return v->global[static_cast<size_t>(device)];
  }
  uint64_t module;
  {
    std::lock_guard<std::mutex> lock(v->fatbin->mu);
    ASSIGN_OR_RETURN(module, ModuleOn(v->fatbin, device));
  }
  ASSIGN_OR_RETURN(Client * client, Runtime::Get().Session());
  ASSIGN_OR_RETURN(auto g, FetchGlobal(client, device, module, v->device_name, v->size));
  std::lock_guard<std::mutex> lock(v->mu);
  v->global[static_cast<size_t>(device)] = g;
  return g;
}

}  // namespace remora::shim
