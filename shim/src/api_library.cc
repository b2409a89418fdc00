// The runtime's library-loading functions (cudaLibrary*): the driver facade's cuLibrary*
// (shim/src/driver/module.cc) with the runtime's types - a cudaLibrary_t is the facade's
// CUlibrary and a cudaKernel_t its CUkernel, as in CUDA. The result is recorded as the
// runtime's last error.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "export.h"
#include "remote_call.h"
#include "runtime.h"

using namespace remora;
using namespace remora::shim;

namespace {

cudaError_t DriverResult(CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) return cudaSuccess;
  return static_cast<cudaError_t>(FinishApi(Domain::kCudart, Status(Domain::kCuda, r, "the driver call failed"), call));
}

}  // namespace

REMORA_API cudaError_t cudaLibraryLoadData(cudaLibrary_t* library, const void* code, cudaJitOption* jitOptions,
                                           void** jitOptionsValues, unsigned int numJitOptions,
                                           cudaLibraryOption* libraryOptions, void** libraryOptionValues,
                                           unsigned int numLibraryOptions) {
  return DriverResult(cuLibraryLoadData(reinterpret_cast<CUlibrary*>(library), code, reinterpret_cast<CUjit_option*>(jitOptions),
                                  jitOptionsValues, numJitOptions, reinterpret_cast<CUlibraryOption*>(libraryOptions),
                                  libraryOptionValues, numLibraryOptions),
                "cudaLibraryLoadData");
}

REMORA_API cudaError_t cudaLibraryLoadFromFile(cudaLibrary_t* library, const char* fileName, cudaJitOption* jitOptions,
                                               void** jitOptionsValues, unsigned int numJitOptions,
                                               cudaLibraryOption* libraryOptions, void** libraryOptionValues,
                                               unsigned int numLibraryOptions) {
  return DriverResult(cuLibraryLoadFromFile(reinterpret_cast<CUlibrary*>(library), fileName,
                                      reinterpret_cast<CUjit_option*>(jitOptions), jitOptionsValues, numJitOptions,
                                      reinterpret_cast<CUlibraryOption*>(libraryOptions), libraryOptionValues,
                                      numLibraryOptions),
                "cudaLibraryLoadFromFile");
}

REMORA_API cudaError_t cudaLibraryUnload(cudaLibrary_t library) {
  return DriverResult(cuLibraryUnload(reinterpret_cast<CUlibrary>(library)), "cudaLibraryUnload");
}

REMORA_API cudaError_t cudaLibraryGetKernel(cudaKernel_t* pKernel, cudaLibrary_t library, const char* name) {
  return DriverResult(cuLibraryGetKernel(reinterpret_cast<CUkernel*>(pKernel), reinterpret_cast<CUlibrary>(library), name),
                "cudaLibraryGetKernel");
}

REMORA_API cudaError_t cudaLibraryGetManaged(void** dptr, size_t* bytes, cudaLibrary_t library, const char* name) {
  CUdeviceptr p = 0;
  cudaError_t e = DriverResult(cuLibraryGetManaged(&p, bytes, reinterpret_cast<CUlibrary>(library), name), "cudaLibraryGetManaged");
  if (e == cudaSuccess && dptr != nullptr) *dptr = reinterpret_cast<void*>(p);
  return e;
}

REMORA_API cudaError_t cudaLibraryGetGlobal(void** dptr, size_t* bytes, cudaLibrary_t library, const char* name) {
  CUdeviceptr p = 0;
  cudaError_t e = DriverResult(cuLibraryGetGlobal(&p, bytes, reinterpret_cast<CUlibrary>(library), name), "cudaLibraryGetGlobal");
  if (e == cudaSuccess && dptr != nullptr) *dptr = reinterpret_cast<void*>(p);
  return e;
}
