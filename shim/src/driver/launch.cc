// The driver API's launches: a CUfunction (the worker's handle, bound to its module's
// device) launched on a stream of that device, its parameters given as kernelParams or as
// one packed buffer (`extra`). Checked and posted like the runtime's (launch.h): nothing is
// waited for.
#include <cstring>

#include "driver/contexts.h"
#include "driver/driver.h"
#include "driver/objects.h"
#include "export.h"
#include "launch.h"
#include "modules.h"
#include "process.h"
#include "runtime.h"

using namespace remora;
using namespace remora::shim;
using namespace remora::shim::driver;

namespace {

struct Packed {
  const void* data = nullptr;
  size_t size = 0;
};

// Decodes cuLaunchKernel's `extra`: CU_LAUNCH_PARAM_BUFFER_POINTER and _SIZE pairs, ended by
// CU_LAUNCH_PARAM_END.
Result<Packed> DecodeExtra(void** extra) {
  Packed p;
  bool have_size = false;
  for (size_t i = 0; i < 64; i += 2) {
    void* key = extra[i];
    if (key == CU_LAUNCH_PARAM_END) {
      if (p.data == nullptr || !have_size)
        return Status(Domain::kCuda, CUDA_ERROR_INVALID_VALUE, "extra lacks the parameter buffer or its size");
      return p;
    }
    void* value = extra[i + 1];
    if (key == CU_LAUNCH_PARAM_BUFFER_POINTER) {
      p.data = value;
    } else if (key == CU_LAUNCH_PARAM_BUFFER_SIZE) {
      if (value == nullptr) return Status(Domain::kCuda, CUDA_ERROR_INVALID_VALUE, "CU_LAUNCH_PARAM_BUFFER_SIZE is NULL");
      p.size = *static_cast<size_t*>(value);
      have_size = true;
    } else {
      return Status(Domain::kCuda, CUDA_ERROR_INVALID_VALUE, "unknown key in extra");
    }
  }
  return Status(Domain::kCuda, CUDA_ERROR_INVALID_VALUE, "extra is not terminated by CU_LAUNCH_PARAM_END");
}

CUresult DoLaunch(CUfunction func, Launch l, void** params, void** extra, const char* call) {
  auto f = Process::Get().driver_objects().Function(func);
  // As CUDA: a CUkernel cast to CUfunction launches on the current context's device.
  if (!f.ok() && FunctionFromHost(func) != nullptr) f = FunctionOfKernel(reinterpret_cast<CUkernel>(func));
  if (!f.ok()) return FromStatus(f.status(), call);
  if (params != nullptr && extra != nullptr) return Invalid(call, "both kernelParams and extra are given");
  Runtime& rt = Runtime::Get();
  if (auto c = rt.Session(); !c.ok()) return FromStatus(c.status(), call);
  // The default streams are the current context's; a created stream is its own device's.
  int device = 0;
  {
    RuntimeScope scope;
    Status st = rt.CheckStream(l.stream, &device);
    if (!st.ok()) return FromStatus(st, call);
  }
  if (device != f->device)
    return FromStatus(Status(Domain::kCuda, CUDA_ERROR_INVALID_HANDLE,
                             "the function belongs to another device's context than the stream"), call);
  const KernelInfo& k = *f->kernel;
  Packed packed;
  if (extra != nullptr) {
    auto p = DecodeExtra(extra);
    if (!p.ok()) return FromStatus(p.status(), call);
    packed = *p;
  } else if (params == nullptr && !k.params.empty()) {
    return Invalid(call, "the kernel takes parameters but kernelParams is NULL");
  }
  return FromStatus(PostLaunch(device, k, l, params, packed.data, packed.size), call);
}

Launch Grid(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned smem, CUstream s,
            bool per_thread, bool cooperative) {
  Launch l;
  l.grid = dim3(gx, gy, gz);
  l.block = dim3(bx, by, bz);
  l.shared_mem = smem;
  l.stream = reinterpret_cast<cudaStream_t>(s);
  l.per_thread = per_thread;
  l.cooperative = cooperative;
  return l;
}

CUresult LaunchEx(const CUlaunchConfig* c, CUfunction f, void** params, void** extra, bool per_thread) {
  if (c == nullptr) return Invalid("cuLaunchKernelEx", "config is NULL");
  if (c->numAttrs > 0 && c->attrs == nullptr) return Invalid("cuLaunchKernelEx", "attrs is NULL");
  Launch l = Grid(c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ, c->sharedMemBytes,
                  c->hStream, per_thread, false);
  // CUlaunchAttribute is cudaLaunchAttribute: the same ids and value layout.
  static_assert(sizeof(CUlaunchAttribute) == sizeof(cudaLaunchAttribute));
  l.attrs = reinterpret_cast<const cudaLaunchAttribute*>(c->attrs);
  l.num_attrs = c->numAttrs;
  for (unsigned i = 0; i < c->numAttrs; i++)
    if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && c->attrs[i].value.cooperative) l.cooperative = true;
  return DoLaunch(f, l, params, extra, "cuLaunchKernelEx");
}

}  // namespace

REMORA_API CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                   unsigned int by, unsigned int bz, unsigned int smem, CUstream s, void** params,
                                   void** extra) {
  return DoLaunch(f, Grid(gx, gy, gz, bx, by, bz, smem, s, false, false), params, extra, "cuLaunchKernel");
}
REMORA_API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                        unsigned int by, unsigned int bz, unsigned int smem, CUstream s, void** params,
                                        void** extra) {
  return DoLaunch(f, Grid(gx, gy, gz, bx, by, bz, smem, s, true, false), params, extra, "cuLaunchKernel");
}

REMORA_API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                              unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem,
                                              CUstream s, void** params) {
  return DoLaunch(f, Grid(gx, gy, gz, bx, by, bz, smem, s, false, true), params, nullptr, "cuLaunchCooperativeKernel");
}
REMORA_API CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                                   unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem,
                                                   CUstream s, void** params) {
  return DoLaunch(f, Grid(gx, gy, gz, bx, by, bz, smem, s, true, true), params, nullptr, "cuLaunchCooperativeKernel");
}

REMORA_API CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  return LaunchEx(config, f, params, extra, false);
}
REMORA_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  return LaunchEx(config, f, params, extra, true);
}
