// The hidden entry points nvcc's host stubs call: module registration at load time and the
// launch configuration stack. Registration is recorded locally (registry.h); nothing is
// sent until a kernel or variable is used.
#include <cuda_runtime_api.h>

#include <vector>

#include "export.h"
#include "registry.h"
#include "remora/base/log.h"
#include "runtime.h"
#include "thread_slot.h"

namespace remora::shim {

Status InitManagedVariables(FatbinRecord* fb);  // api_managed.cc

namespace {

struct CallConfig {
  dim3 grid, block;
  size_t shared_mem;
  void* stream;
};

std::vector<CallConfig>& ConfigStack() { return ThreadSlot<std::vector<CallConfig>>(); }

}  // namespace
}  // namespace remora::shim

using namespace remora;
using namespace remora::shim;

REMORA_API void** __cudaRegisterFatBinary(void* fatCubin) {
  FatbinRecord* f = Registry::Get().AddFatbin(fatCubin);
  if (f->data == nullptr) LOG_WARN("a fat binary with an unknown layout was registered; its kernels cannot be used");
  return reinterpret_cast<void**>(f);
}

REMORA_API void __cudaRegisterFatBinaryEnd(void** fatCubinHandle) {
  reinterpret_cast<FatbinRecord*>(fatCubinHandle)->complete = true;
}

REMORA_API void __cudaUnregisterFatBinary(void** fatCubinHandle) {
  Registry::Get().RemoveFatbin(reinterpret_cast<FatbinRecord*>(fatCubinHandle));
}

REMORA_API void __cudaRegisterFunction(void** fatCubinHandle, const char* hostFun, char* deviceFun, const char* deviceName,
                                       int thread_limit, uint3*, uint3*, dim3*, dim3*, int*) {
  Registry::Get().AddFunction(reinterpret_cast<FatbinRecord*>(fatCubinHandle), hostFun,
                              deviceName != nullptr ? deviceName : deviceFun, thread_limit);
}

REMORA_API void __cudaRegisterVar(void** fatCubinHandle, char* hostVar, char* deviceAddress, const char* deviceName,
                                  int, size_t size, int constant, int) {
  Registry::Get().AddVariable(reinterpret_cast<FatbinRecord*>(fatCubinHandle), hostVar,
                              deviceName != nullptr ? deviceName : deviceAddress, size, constant != 0, false);
}

REMORA_API void __cudaRegisterManagedVar(void** fatCubinHandle, void** hostVarPtrAddress, char* deviceAddress,
                                         const char* deviceName, int, size_t size, int constant, int) {
  Registry::Get().AddVariable(reinterpret_cast<FatbinRecord*>(fatCubinHandle), hostVarPtrAddress,
                              deviceName != nullptr ? deviceName : deviceAddress, size, constant != 0, true);
}

// Undocumented registration hooks: accepted and ignored (nvcc does not emit them for the
// programs Remora supports); their arguments are not interpreted.
REMORA_API void __cudaRegisterHostVar(void**, const char* deviceName, char*, size_t) {
  LOG_DEBUG("__cudaRegisterHostVar({}) ignored", deviceName ? deviceName : "?");
}
REMORA_API void __cudaRegisterUnifiedTable(void*) { LOG_DEBUG("__cudaRegisterUnifiedTable ignored"); }

REMORA_API char __cudaInitModule(void** fatCubinHandle) {
  // The module's __managed__ variables: their pointers set to memory this process can touch.
  Status st = InitManagedVariables(reinterpret_cast<FatbinRecord*>(fatCubinHandle));
  if (!st.ok()) LOG_ERROR("the managed variables of a module cannot be used: {}", st.ToString());
  return st.ok() ? 1 : 0;
}

REMORA_API unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem, struct CUstream_st* stream) {
  ConfigStack().push_back({gridDim, blockDim, sharedMem, stream});
  return 0;
}

REMORA_API cudaError_t __cudaPopCallConfiguration(dim3* gridDim, dim3* blockDim, size_t* sharedMem, void* stream) {
  auto& s = ConfigStack();
  if (s.empty()) return Finish(Error(Err::kInvalidConfiguration, "no launch configuration pushed"), "__cudaPopCallConfiguration");
  CallConfig c = s.back();
  s.pop_back();
  *gridDim = c.grid;
  *blockDim = c.block;
  *sharedMem = c.shared_mem;
  *static_cast<void**>(stream) = c.stream;
  return cudaSuccess;
}

REMORA_API cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* hostFun) {
  FunctionRecord* f = Registry::Get().FindFunction(hostFun);
  if (f == nullptr) return Finish(Error(Err::kInvalidDeviceFunction, "no kernel registered at {}", hostFun), "__cudaGetKernel");
  *kernel = reinterpret_cast<cudaKernel_t>(f);
  return cudaSuccess;
}

REMORA_API struct cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w, enum cudaChannelFormatKind f) {
  return cudaChannelFormatDesc{x, y, z, w, f};
}
