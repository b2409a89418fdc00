// Enumerating a module's or a library's kernels (cuModuleGetFunctionCount,
// cuModuleEnumerateFunctions, cuLibraryGetKernelCount, cuLibraryEnumerateKernels; the
// runtime's cudaLibrary* twins are these). The worker's driver lists the loaded module's
// kernel names (one round trip); each is then resolved as cuModuleGetFunction or
// cuLibraryGetKernel would, so the handles are the ones those calls give.
#include <string>
#include <vector>

#include "cuda_client.h"
#include "driver/contexts.h"
#include "driver/driver.h"
#include "driver/objects.h"
#include "export.h"
#include "modules.h"
#include "process.h"
#include "runtime.h"

using namespace remora;
using namespace remora::shim;
using namespace remora::shim::driver;

namespace {

DriverObjects& Objects() { return Process::Get().driver_objects(); }

// The kernel names of the worker's module `module` (loaded on `device`).
Result<std::vector<std::string>> KernelNames(uint64_t module, int device, const char* call) {
  size_t capacity = 16 << 10;
  for (int attempt = 0; attempt < 2; attempt++) {
    std::vector<char> buf(capacity);
    size_t length = 0;
    ThreadState& t = Thread();
    int saved = t.device;
    t.device = device;
    Status st = gen::cuda::remoraModuleKernelNames(CallCtx{false, call}, module, buf.data(), capacity, &length);
    t.device = saved;
    RETURN_IF_ERROR(st);
    if (length > capacity) {  // listed in full when asked again with room for all
      capacity = length;
      continue;
    }
    std::vector<std::string> names;
    for (size_t at = 0; at < length;) {
      std::string name(buf.data() + at);
      at += name.size() + 1;
      names.push_back(std::move(name));
    }
    return names;
  }
  return Status(Domain::kCuda, CUDA_ERROR_UNKNOWN, "the module's kernel list kept growing");
}

Result<std::vector<std::string>> ModuleKernels(CUmodule mod, const char* call) {
  ASSIGN_OR_RETURN(ModuleRecord m, Objects().Module(mod));
  return KernelNames(m.handle, m.device, call);
}

// A library's kernels, as loaded on the current context's device.
Result<std::vector<std::string>> LibraryKernels(CUlibrary lib, const char* call) {
  ASSIGN_OR_RETURN(LibraryRecord * l, Objects().Library(lib));
  ASSIGN_OR_RETURN(int device, CurrentDevice());
  ASSIGN_OR_RETURN(uint64_t module, LoadImage(l->image, device));
  return KernelNames(module, device, call);
}

}  // namespace

REMORA_API CUresult cuModuleGetFunctionCount(unsigned int* count, CUmodule mod) {
  if (count == nullptr) return Invalid("cuModuleGetFunctionCount", "count is NULL");
  auto names = ModuleKernels(mod, "cuModuleGetFunctionCount");
  if (!names.ok()) return FromStatus(names.status(), "cuModuleGetFunctionCount");
  *count = static_cast<unsigned>(names->size());
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuModuleEnumerateFunctions(CUfunction* functions, unsigned int numFunctions, CUmodule mod) {
  if (functions == nullptr) return Invalid("cuModuleEnumerateFunctions", "functions is NULL");
  auto names = ModuleKernels(mod, "cuModuleEnumerateFunctions");
  if (!names.ok()) return FromStatus(names.status(), "cuModuleEnumerateFunctions");
  for (size_t i = 0; i < names->size() && i < numFunctions; i++)
    if (CUresult r = cuModuleGetFunction(&functions[i], mod, (*names)[i].c_str()); r != CUDA_SUCCESS) return r;
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuLibraryGetKernelCount(unsigned int* count, CUlibrary lib) {
  if (count == nullptr) return Invalid("cuLibraryGetKernelCount", "count is NULL");
  auto names = LibraryKernels(lib, "cuLibraryGetKernelCount");
  if (!names.ok()) return FromStatus(names.status(), "cuLibraryGetKernelCount");
  *count = static_cast<unsigned>(names->size());
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuLibraryEnumerateKernels(CUkernel* kernels, unsigned int numKernels, CUlibrary lib) {
  if (kernels == nullptr) return Invalid("cuLibraryEnumerateKernels", "kernels is NULL");
  auto names = LibraryKernels(lib, "cuLibraryEnumerateKernels");
  if (!names.ok()) return FromStatus(names.status(), "cuLibraryEnumerateKernels");
  for (size_t i = 0; i < names->size() && i < numKernels; i++)
    if (CUresult r = cuLibraryGetKernel(&kernels[i], lib, (*names)[i].c_str()); r != CUDA_SUCCESS) return r;
  return CUDA_SUCCESS;
}
