// Kernel launches (nvcc's __cudaLaunchKernel path and the public cudaLaunchKernel family).
// A launch is asynchronous: the parameters are packed at the offsets the worker's driver
// reported for the kernel and sent without waiting.
#include <cuda_runtime_api.h>

#include <cstring>

#include "export.h"
#include "launch.h"
#include "modules.h"
#include "runtime.h"
#include "wire_args.h"

namespace remora::shim {
namespace {

// Checks a launch as the runtime would before enqueuing it, so configuration errors are
// returned by the launch itself.
Status Validate(const Launch& l, const KernelInfo& k, const DeviceEntry& d) {
  auto attr = [&](cudaDeviceAttr a) { return static_cast<size_t>(a) < d.attributes.size() ? d.attributes[a] : 0; };
  // CUDA 13 answers these with cudaErrorInvalidValue (checked against the native runtime).
  if (l.grid.x == 0 || l.grid.y == 0 || l.grid.z == 0 || l.block.x == 0 || l.block.y == 0 || l.block.z == 0)
    return Error(Err::kInvalidValue, "a grid or block dimension is 0");
  if (l.block.x > static_cast<unsigned>(attr(cudaDevAttrMaxBlockDimX)) || l.block.y > static_cast<unsigned>(attr(cudaDevAttrMaxBlockDimY)) ||
      l.block.z > static_cast<unsigned>(attr(cudaDevAttrMaxBlockDimZ)) || l.grid.x > static_cast<unsigned>(attr(cudaDevAttrMaxGridDimX)) ||
      l.grid.y > static_cast<unsigned>(attr(cudaDevAttrMaxGridDimY)) || l.grid.z > static_cast<unsigned>(attr(cudaDevAttrMaxGridDimZ)))
    return Error(Err::kInvalidValue, "grid ({},{},{}) or block ({},{},{}) exceeds the device's limits", l.grid.x,
                 l.grid.y, l.grid.z, l.block.x, l.block.y, l.block.z);
  uint64_t threads = uint64_t{l.block.x} * l.block.y * l.block.z;
  if (threads > static_cast<uint64_t>(attr(cudaDevAttrMaxThreadsPerBlock)))
    return Error(Err::kInvalidValue, "{} threads per block exceed the device's {}", threads, attr(cudaDevAttrMaxThreadsPerBlock));
  if (!k.attributes.empty() && k.attributes[0] > 0 && threads > static_cast<uint64_t>(k.attributes[0]))
    return Error(Err::kLaunchOutOfResources, "{} threads per block exceed this kernel's {}", threads, k.attributes[0]);
  // Dynamic shared memory beyond the kernel's limit (raised with cudaFuncSetAttribute).
  constexpr size_t kMaxDynamicSmem = 8;  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
  if (k.attributes.size() > kMaxDynamicSmem && l.shared_mem > static_cast<size_t>(k.attributes[kMaxDynamicSmem]))
    return Error(Err::kInvalidValue, "{} bytes of dynamic shared memory exceed this kernel's {} (see cudaFuncAttributeMaxDynamicSharedMemorySize)",
                 l.shared_mem, k.attributes[kMaxDynamicSmem]);
  return Status::Ok();
}

cudaError_t DoLaunch(FunctionRecord* f, const Launch& l, void** args, const char* call) {
  Runtime& rt = Runtime::Get();
  // What CUDA 13 answers for a pointer that is not a kernel.
  if (f == nullptr) return Finish(Error(Err::kInvalidResourceHandle, "not a registered kernel"), call);
  auto c = rt.Session();
  if (!c.ok()) return Finish(c.status(), call);
  int device = 0;
  Status st = rt.CheckStream(l.stream, &device);
  if (!st.ok()) return Finish(st, call);
  auto k = KernelOn(f, device);
  if (!k.ok()) return Finish(k.status(), call);
  if (!(*k)->params.empty() && args == nullptr)
    return Finish(Error(Err::kInvalidValue, "kernel {} takes {} parameters but args is NULL", f->device_name, (*k)->params.size()), call);
  return Finish(PostLaunch(device, **k, l, args), call);
}

cudaError_t LaunchEx(const cudaLaunchConfig_t* config, const void* func, void** args, bool per_thread, const char* call) {
  if (config == nullptr) return Finish(Error(Err::kInvalidValue, "config is NULL"), call);
  Launch l;
  l.grid = config->gridDim;
  l.block = config->blockDim;
  l.shared_mem = config->dynamicSmemBytes;
  l.stream = config->stream;
  l.per_thread = per_thread;
  l.attrs = config->attrs;
  l.num_attrs = config->numAttrs;
  return DoLaunch(FunctionFromHost(func), l, args, call);
}

}  // namespace

Status PostLaunch(int device, const KernelInfo& info, const Launch& l, void** args, const void* packed, size_t packed_bytes) {
  Runtime& rt = Runtime::Get();
  ASSIGN_OR_RETURN(Client * c, rt.SessionFor(device));
  ASSIGN_OR_RETURN(auto dev, rt.Device(device));
  // A detached device has no limits to validate against: its calls fail as such.
  if (dev->lost) return Error(Err::kDevicesUnavailable, "device {}'s Remora server stopped answering", device);
  if (dev->detached) return Error(Err::kDevicesUnavailable, "device {} was detached", device);
  RETURN_IF_ERROR(Validate(l, info, *dev));
  if (packed != nullptr && packed_bytes < info.param_bytes)
    return Error(Err::kInvalidValue, "the parameter buffer holds {} bytes, the kernel takes {}", packed_bytes, info.param_bytes);
  // Like a kernel launch on a GPU: nothing to wait for, but a broken context fails at once.
  RETURN_IF_ERROR(c->sticky());
  // Pinned memory the kernel is handed by address becomes the device's (managed.h, AddPinned),
  // and managed memory the host wrote reaches the device before the kernel.
  if (rt.managed().any_asleep()) {
    if (packed != nullptr) {
      RETURN_IF_ERROR(WakePinned(packed, info.param_bytes));
    } else {
      for (size_t i = 0; i < info.params.size(); i++) RETURN_IF_ERROR(WakePinned(args[i], info.params[i].second));
    }
  }
  RETURN_IF_ERROR(rt.managed().BeforeDeviceWork());
  return c->Post(device, [&](wire::Request::Builder& r) {
    auto m = r.initLaunchKernel();
    m.setFunction(info.handle);
    auto g = m.initGrid();
    g.setX(l.grid.x);
    g.setY(l.grid.y);
    g.setZ(l.grid.z);
    auto b = m.initBlock();
    b.setX(l.block.x);
    b.setY(l.block.y);
    b.setZ(l.block.z);
    m.setSharedMem(static_cast<uint32_t>(l.shared_mem));
    auto s = m.initStream();
    s.setHandle(U(l.stream));
    s.setPerThread(l.per_thread);
    m.setCooperative(l.cooperative);
    auto p = m.initParams(info.param_bytes);
    if (packed != nullptr) {
      std::memcpy(p.begin(), packed, info.param_bytes);
    } else {
      for (size_t i = 0; i < info.params.size(); i++)
        std::memcpy(p.begin() + info.params[i].first, args[i], info.params[i].second);
    }
    if (l.num_attrs > 0) {
      auto attrs = m.initAttributes(l.num_attrs);
      for (unsigned i = 0; i < l.num_attrs; i++) {
        attrs[i].setId(static_cast<uint32_t>(l.attrs[i].id));
        attrs[i].setValue(capnp::Data::Reader(reinterpret_cast<const uint8_t*>(&l.attrs[i].val), sizeof(l.attrs[i].val)));
      }
    }
  });
}

}  // namespace remora::shim

using namespace remora;
using namespace remora::shim;

REMORA_API cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
                                          cudaStream_t stream) {
  Launch l{gridDim, blockDim, sharedMem, stream, false};
  return DoLaunch(reinterpret_cast<FunctionRecord*>(kernel), l, args, "__cudaLaunchKernel");
}
REMORA_API cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args,
                                               size_t sharedMem, cudaStream_t stream) {
  Launch l{gridDim, blockDim, sharedMem, stream, true};
  return DoLaunch(reinterpret_cast<FunctionRecord*>(kernel), l, args, "__cudaLaunchKernel");
}
REMORA_API cudaError_t cudaLaunchKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
                                        cudaStream_t stream) {
  Launch l{gridDim, blockDim, sharedMem, stream, false};
  return DoLaunch(FunctionFromHost(func), l, args, "cudaLaunchKernel");
}
REMORA_API cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
                                             cudaStream_t stream) {
  Launch l{gridDim, blockDim, sharedMem, stream, true};
  return DoLaunch(FunctionFromHost(func), l, args, "cudaLaunchKernel");
}
REMORA_API cudaError_t cudaLaunchCooperativeKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                                   size_t sharedMem, cudaStream_t stream) {
  Launch l{gridDim, blockDim, sharedMem, stream, false, true};
  return DoLaunch(FunctionFromHost(func), l, args, "cudaLaunchCooperativeKernel");
}
REMORA_API cudaError_t cudaLaunchCooperativeKernel_ptsz(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                                        size_t sharedMem, cudaStream_t stream) {
  Launch l{gridDim, blockDim, sharedMem, stream, true, true};
  return DoLaunch(FunctionFromHost(func), l, args, "cudaLaunchCooperativeKernel");
}
REMORA_API cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  return LaunchEx(config, func, args, false, "cudaLaunchKernelExC");
}
REMORA_API cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config, const void* func, void** args) {
  return LaunchEx(config, func, args, true, "cudaLaunchKernelExC");
}
