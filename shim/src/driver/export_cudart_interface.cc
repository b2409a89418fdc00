// CUDART_INTERFACE (6bd5fb6c-5bf4-e74a-8987-d93912fd9df9): the driver's services the static
// runtime needs beyond the public API: modules from the fat binaries it registered, and the
// device's primary context. Asked for during the runtime's initialisation (mandatory: without
// it every runtime call fails with cudaErrorInsufficientDriver / initialisation errors).
#include "driver/contexts.h"
#include "driver/driver.h"
#include "driver/export_tables.h"
#include "process.h"
#include "remora/base/log.h"
#include "runtime.h"

using namespace remora;
using namespace remora::shim;
using namespace remora::shim::driver;

namespace remora::shim::driver::exports {
namespace {

// Slot 1: (CUmodule* module, const void* fatbin_wrapper) -> CUresult. A module from nvcc's
// fat-binary wrapper (__fatBinC_Wrapper_t), on the current context.
CUresult ModuleFromWrapper(CUmodule* module, const void* wrapper) {
  LOG_DEBUG("CUDART_INTERFACE[1](module={}, wrapper={})", fmt::ptr(module), wrapper);
  return LoadModule(module, wrapper, "CUDART_INTERFACE module");
}

// Slot 2: (CUcontext* pctx, CUdevice dev) -> CUresult. The device's primary context,
// without a retain (the runtime retains it through cuDevicePrimaryCtxRetain itself).
CUresult PrimaryContext(CUcontext* pctx, CUdevice dev) {
  LOG_DEBUG("CUDART_INTERFACE[2](pctx={}, dev={})", fmt::ptr(pctx), dev);
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto d = Runtime::Get().Device(dev);
  if (!d.ok()) return FromStatus(d.status(), "CUDART_INTERFACE primary context");
  *pctx = reinterpret_cast<CUcontext>(Process::Get().contexts().Primary(dev));
  return CUDA_SUCCESS;
}

// Slot 6: (CUmodule* module, const void* fatbin_wrapper, void* a3, void* a4, unsigned a5)
// -> CUresult. As slot 1, with arguments the runtime passes as NULL, NULL, 0 for programs
// of one translation unit's kernels.
CUresult ModuleFromWrapperEx(CUmodule* module, const void* wrapper, void* a3, void* a4, unsigned a5) {
  LOG_DEBUG("CUDART_INTERFACE[6](module={}, wrapper={}, {}, {}, {})", fmt::ptr(module), wrapper, a3, a4, a5);
  return LoadModule(module, wrapper, "CUDART_INTERFACE module");
}

// Slot 7: (uintptr_t) -> void. Called once at initialisation; nothing to do.
void Notify(uintptr_t a) { LOG_DEBUG("CUDART_INTERFACE[7]({:#x})", a); }

// Slot 8: (const void* fatbin, CUmodule* module, void* a3, void* a4, unsigned a5) -> CUresult.
// As slot 6, the fat binary itself first.
CUresult ModuleFromFatbin(const void* fatbin, CUmodule* module, void* a3, void* a4, unsigned a5) {
  LOG_DEBUG("CUDART_INTERFACE[8](fatbin={}, module={}, {}, {}, {})", fatbin, fmt::ptr(module), a3, a4, a5);
  return LoadModule(module, fatbin, "CUDART_INTERFACE module");
}

// Slot 12: () -> CUresult. The driver loads its JIT compilers; the worker's driver does that
// on the server.
CUresult LoadCompilers() {
  LOG_DEBUG("CUDART_INTERFACE[12]()");
  return CUDA_SUCCESS;
}

constexpr size_t kSlots = 13;
const void* const kSlotsArray[kSlots] = {
    SizeSlot(kSlots),
    Fn(&ModuleFromWrapper),
    Fn(&PrimaryContext),
    Fn(&Unserved<kCudartInterface, 3>),
    Fn(&Unserved<kCudartInterface, 4>),
    Fn(&Unserved<kCudartInterface, 5>),
    Fn(&ModuleFromWrapperEx),
    Fn(&Notify),
    Fn(&ModuleFromFatbin),
    Fn(&Unserved<kCudartInterface, 9>),
    Fn(&Unserved<kCudartInterface, 10>),
    Fn(&Unserved<kCudartInterface, 11>),
    Fn(&LoadCompilers),
};

}  // namespace

const Table kCudartInterface = {"CUDART_INTERFACE", MakeId("6bd5fb6c5bf4e74a8987d93912fd9df9"), kSlotsArray, kSlots};

}  // namespace remora::shim::driver::exports
