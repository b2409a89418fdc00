// The real backend (cuda_driver.h): modules, linking, kernels and launches, occupancy.

#include <cstring>

#include "worker/backend/cuda/cuda_driver.h"

namespace remora::worker::cuda_backend {

Result<DModule> CudaDriver::ModuleLoad(const void* image, size_t) {
  CUmodule m = nullptr;
  RETURN_IF_ERROR(Check(api_.cuModuleLoadData(&m, image), "cuModuleLoadData"));
  return static_cast<DModule>(m);
}

Status CudaDriver::Link(const std::vector<LinkInput>& inputs, const std::vector<LinkOption>& options, LinkOutput* out) {
  // The caller's numeric options, then the logs and the wall time, which come back.
  constexpr size_t kLog = 64 * 1024;
  std::vector<char> info(kLog, '\0'), error(kLog, '\0');
  float walltime = 0;
  std::vector<CUjit_option> keys;
  std::vector<void*> values;
  for (const LinkOption& o : options) {
    keys.push_back(static_cast<CUjit_option>(o.option));
    values.push_back(reinterpret_cast<void*>(static_cast<uintptr_t>(o.value)));
  }
  auto add = [&](CUjit_option k, void* v) {
    keys.push_back(k);
    values.push_back(v);
  };
  add(CU_JIT_INFO_LOG_BUFFER, info.data());
  add(CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, reinterpret_cast<void*>(kLog - 1));
  add(CU_JIT_ERROR_LOG_BUFFER, error.data());
  add(CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, reinterpret_cast<void*>(kLog - 1));
  add(CU_JIT_WALL_TIME, &walltime);
  CUlinkState state = nullptr;
  RETURN_IF_ERROR(Check(api_.cuLinkCreate(static_cast<unsigned>(keys.size()), keys.data(), values.data(), &state), "cuLinkCreate"));
  Status st;
  for (const LinkInput& in : inputs) {
    std::vector<CUjit_option> ik;
    std::vector<void*> iv;
    for (const LinkOption& o : in.options) {
      ik.push_back(static_cast<CUjit_option>(o.option));
      iv.push_back(reinterpret_cast<void*>(static_cast<uintptr_t>(o.value)));
    }
    st = Check(api_.cuLinkAddData(state, static_cast<CUjitInputType>(in.type), const_cast<void*>(in.data), in.size,
                                  in.name.c_str(), static_cast<unsigned>(ik.size()), ik.data(), iv.data()),
               "cuLinkAddData");
    if (!st.ok()) break;
  }
  if (st.ok()) {
    void* cubin = nullptr;
    size_t size = 0;
    st = Check(api_.cuLinkComplete(state, &cubin, &size), "cuLinkComplete");
    // The image belongs to the link state: copy it before destroying that.
    if (st.ok()) out->image.assign(static_cast<const std::byte*>(cubin), static_cast<const std::byte*>(cubin) + size);
  }
  out->info_log = info.data();
  out->error_log = error.data();
  out->walltime_ms = walltime;
  (void)api_.cuLinkDestroy(state);
  return st;
}

Result<DFunction> CudaDriver::ModuleGetFunction(DModule m, const char* name) {
  CUfunction f = nullptr;
  RETURN_IF_ERROR(Check(api_.cuModuleGetFunction(&f, static_cast<CUmodule>(m), name), "cuModuleGetFunction"));
  return static_cast<DFunction>(f);
}

Result<std::vector<std::string>> CudaDriver::ModuleKernelNames(DModule m) {
  unsigned count = 0;
  RETURN_IF_ERROR(Check(api_.cuModuleGetFunctionCount(&count, static_cast<CUmodule>(m)), "cuModuleGetFunctionCount"));
  std::vector<CUfunction> fns(count);
  if (count > 0)
    RETURN_IF_ERROR(Check(api_.cuModuleEnumerateFunctions(fns.data(), count, static_cast<CUmodule>(m)), "cuModuleEnumerateFunctions"));
  std::vector<std::string> names;
  for (CUfunction f : fns) {
    const char* name = nullptr;
    RETURN_IF_ERROR(Check(api_.cuFuncGetName(&name, f), "cuFuncGetName"));
    names.emplace_back(name != nullptr ? name : "");
  }
  return names;
}

Result<std::pair<DevPtr, size_t>> CudaDriver::ModuleGetGlobal(DModule m, const char* name, size_t) {
  CUdeviceptr p = 0;
  size_t n = 0;
  RETURN_IF_ERROR(Check(api_.cuModuleGetGlobal(&p, &n, static_cast<CUmodule>(m), name), "cuModuleGetGlobal"));
  return std::make_pair(static_cast<DevPtr>(p), n);
}

bool CudaDriver::GlobalIsManaged(DModule, const char*, DevPtr p) {
  unsigned managed = 0;
  return api_.cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, static_cast<CUdeviceptr>(p)) == CUDA_SUCCESS &&
         managed != 0;
}

Result<std::vector<ParamInfo>> CudaDriver::FuncParams(DFunction f) {
  std::vector<ParamInfo> out;
  for (size_t i = 0;; i++) {
    size_t off = 0, size = 0;
    // The driver answers CUDA_ERROR_INVALID_VALUE past the last parameter.
    if (api_.cuFuncGetParamInfo(static_cast<CUfunction>(f), i, &off, &size) != CUDA_SUCCESS) break;
    out.push_back(ParamInfo{static_cast<uint32_t>(off), static_cast<uint32_t>(size)});
  }
  return out;
}

Result<int> CudaDriver::FuncGetAttribute(DFunction f, int attribute) {
  int v = 0;
  RETURN_IF_ERROR(Check(api_.cuFuncGetAttribute(&v, static_cast<CUfunction_attribute>(attribute), static_cast<CUfunction>(f)), "cuFuncGetAttribute"));
  return v;
}

CUlaunchConfig CudaDriver::ToDriver(const LaunchConfig& c, std::vector<CUlaunchAttribute>* attrs) {
  CUlaunchConfig lc = {};
  lc.gridDimX = c.grid[0];
  lc.gridDimY = c.grid[1];
  lc.gridDimZ = c.grid[2];
  lc.blockDimX = c.block[0];
  lc.blockDimY = c.block[1];
  lc.blockDimZ = c.block[2];
  lc.sharedMemBytes = c.shared_mem;
  lc.hStream = static_cast<CUstream>(c.stream);
  for (const LaunchAttr& a : c.attrs) {
    CUlaunchAttribute d = {};
    d.id = static_cast<CUlaunchAttributeID>(a.id);
    static_assert(sizeof(d.value) == sizeof(a.value));
    std::memcpy(&d.value, a.value, sizeof(a.value));
    attrs->push_back(d);
  }
  if (c.cooperative) {
    CUlaunchAttribute d = {};
    d.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    d.value.cooperative = 1;
    attrs->push_back(d);
  }
  lc.attrs = attrs->data();
  lc.numAttrs = static_cast<unsigned>(attrs->size());
  return lc;
}

Status CudaDriver::Launch(DFunction f, const LaunchConfig& c) {
  if (c.attrs.empty() && !c.cooperative)
    return Check(api_.cuLaunchKernel(static_cast<CUfunction>(f), c.grid[0], c.grid[1], c.grid[2], c.block[0],
                                     c.block[1], c.block[2], c.shared_mem, static_cast<CUstream>(c.stream), c.params,
                                     nullptr), "cuLaunchKernel");
  std::vector<CUlaunchAttribute> attrs;
  CUlaunchConfig lc = ToDriver(c, &attrs);
  return Check(api_.cuLaunchKernelEx(&lc, static_cast<CUfunction>(f), c.params, nullptr), "cuLaunchKernelEx");
}

}  // namespace remora::worker::cuda_backend
