// cuGetProcAddress and the runtime's cudaGetDriverEntryPoint[ByVersion]: the facade's own
// functions by name (PyTorch, Triton, NVRTC users and the static runtime resolve the driver
// this way, never by dlsym alone). The table is generated from protocol/api/cuda.api and
// cuda.h's name-to-version macros; a few functions whose newer version changed its
// arguments resolve by the version the caller asks for. (cuGetExportTable, the runtime's
// private tables: export_tables.cc.)
#include <cudaProfiler.h>

#include <algorithm>
#include <cstring>
#include <string_view>

#include "driver/driver.h"
#include "export.h"
#include "process.h"
#include "remora/base/log.h"
#include "remora/base/util.h"
#include "runtime.h"

using namespace remora;
using namespace remora::shim;
using namespace remora::shim::driver;

namespace {

struct Proc {
  const char* name;
  void* fn;
  void* per_thread;
};
const Proc kProcs[] = {
#include "cuda_procs.inc"
};

// Functions whose current version changed their arguments: callers asking for an older CUDA
// get the older function.
struct Versioned {
  const char* name;
  int below;  // versions before this one get `fn` (the first entry that applies, in order)
  void* fn;
  void* per_thread = nullptr;  // its per-thread-default-stream twin, if it has one
};
template <typename F>
void* Fn(F* f) {
  return reinterpret_cast<void*>(f);
}
const Versioned kOlder[] = {
    {"cuStreamBeginCapture", 10010, Fn(&::cuStreamBeginCapture), Fn(&::cuStreamBeginCapture_ptsz)},
    {"cuStreamGetCaptureInfo", 11030, Fn(&::cuStreamGetCaptureInfo), Fn(&::cuStreamGetCaptureInfo_ptsz)},
    {"cuStreamGetCaptureInfo", 12030, Fn(&::cuStreamGetCaptureInfo_v2), Fn(&::cuStreamGetCaptureInfo_v2_ptsz)},
    {"cuStreamUpdateCaptureDependencies", 12030, Fn(&::cuStreamUpdateCaptureDependencies),
     Fn(&::cuStreamUpdateCaptureDependencies_ptsz)},
    {"cuCtxCreate", 11040, Fn(&::cuCtxCreate_v2)},
    {"cuCtxCreate", 12050, Fn(&::cuCtxCreate_v3)},
    // The graph API before CUDA 12.0 (kernel node parameters without `kern`/`ctx`,
    // instantiation with an error node and a log) and 12.3 (edges without edge data).
    {"cuGraphAddKernelNode", 12000, Fn(&::cuGraphAddKernelNode)},
    {"cuGraphKernelNodeGetParams", 12000, Fn(&::cuGraphKernelNodeGetParams)},
    {"cuGraphKernelNodeSetParams", 12000, Fn(&::cuGraphKernelNodeSetParams)},
    {"cuGraphExecKernelNodeSetParams", 12000, Fn(&::cuGraphExecKernelNodeSetParams)},
    {"cuGraphInstantiate", 12000, Fn(&::cuGraphInstantiate_v2)},
    {"cuGraphExecUpdate", 12000, Fn(&::cuGraphExecUpdate)},
    {"cuGraphGetEdges", 12030, Fn(&::cuGraphGetEdges)},
    {"cuGraphNodeGetDependencies", 12030, Fn(&::cuGraphNodeGetDependencies)},
    {"cuGraphNodeGetDependentNodes", 12030, Fn(&::cuGraphNodeGetDependentNodes)},
    {"cuGraphAddDependencies", 12030, Fn(&::cuGraphAddDependencies)},
    {"cuGraphRemoveDependencies", 12030, Fn(&::cuGraphRemoveDependencies)},
    {"cuGraphAddNode", 12030, Fn(&::cuGraphAddNode)},
};

const Proc* Find(std::string_view name) {
  static const bool sorted = std::is_sorted(std::begin(kProcs), std::end(kProcs),
                                            [](const Proc& a, const Proc& b) { return std::strcmp(a.name, b.name) < 0; });
  if (sorted) {
    auto it = std::lower_bound(std::begin(kProcs), std::end(kProcs), name,
                               [](const Proc& p, std::string_view n) { return std::string_view(p.name) < n; });
    return it != std::end(kProcs) && name == it->name ? it : nullptr;
  }
  for (const Proc& p : kProcs)
    if (name == p.name) return &p;
  return nullptr;
}

// 0 when found; else the CUdriverProcAddressQueryResult of the failure.
int Resolve(const char* symbol, int version, cuuint64_t flags, void** fn) {
  *fn = nullptr;
  const Proc* p = symbol ? Find(symbol) : nullptr;
  if (p == nullptr || p->fn == nullptr) return CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  *fn = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && p->per_thread ? p->per_thread : p->fn;
  for (const Versioned& v : kOlder) {
    if (std::strcmp(v.name, symbol) == 0 && version < v.below) {
      *fn = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && v.per_thread ? v.per_thread : v.fn;
      break;
    }
  }
  return CU_GET_PROC_ADDRESS_SUCCESS;
}

}  // namespace

REMORA_API CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                        CUdriverProcAddressQueryResult* symbolStatus) {
  if (symbol == nullptr || pfn == nullptr) return Invalid("cuGetProcAddress", "NULL argument");
  if (flags & ~static_cast<cuuint64_t>(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
    return Invalid("cuGetProcAddress", "unknown flags");
  int r = Resolve(symbol, cudaVersion, flags, pfn);
  if (symbolStatus != nullptr) *symbolStatus = static_cast<CUdriverProcAddressQueryResult>(r);
  // As CUDA (and as NVIDIA's driver answered on the H200): a symbol that is not found is
  // CUDA_SUCCESS with *pfn NULL, the reason in *symbolStatus.
  if (r != CU_GET_PROC_ADDRESS_SUCCESS) LOG_DEBUG("cuGetProcAddress({}): not a driver function", symbol);
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, nullptr);
}

namespace {

cudaError_t EntryPoint(const char* symbol, void** fn, unsigned version, unsigned long long flags,
                       cudaDriverEntryPointQueryResult* status, bool per_thread, const char* call) {
  if (symbol == nullptr || fn == nullptr) return Finish(Error(Err::kInvalidValue, "NULL argument"), call);
  if (flags & ~static_cast<unsigned long long>(cudaEnableLegacyStream | cudaEnablePerThreadDefaultStream))
    return Finish(Error(Err::kInvalidValue, "unknown flags"), call);
  if (flags == cudaEnableDefault && per_thread) flags = cudaEnablePerThreadDefaultStream;
  int r = Resolve(symbol, static_cast<int>(version), flags, fn);
  if (status != nullptr)
    *status = r == CU_GET_PROC_ADDRESS_SUCCESS ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;  // as CUDA: a symbol that is not found is reported through the status
}

}  // namespace

// An undocumented export of NVIDIA's runtime with no public declaration: in CUDA 13.0's
// libcudart.so.13 it takes nothing it looks at and returns cudaSuccess (its whole body is
// `xor eax, eax; ret`), and so does this one. Whatever the caller passes is ignored, as there.
REMORA_API cudaError_t __cudaGetProcAddress(void) { return cudaSuccess; }

REMORA_API cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr, unsigned int cudaVersion,
                                                        unsigned long long flags, cudaDriverEntryPointQueryResult* driverStatus) {
  return EntryPoint(symbol, funcPtr, cudaVersion, flags, driverStatus, false, "cudaGetDriverEntryPointByVersion");
}
REMORA_API cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char* symbol, void** funcPtr, unsigned int cudaVersion,
                                                             unsigned long long flags,
                                                             cudaDriverEntryPointQueryResult* driverStatus) {
  return EntryPoint(symbol, funcPtr, cudaVersion, flags, driverStatus, true, "cudaGetDriverEntryPointByVersion");
}
REMORA_API cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr, unsigned long long flags,
                                               cudaDriverEntryPointQueryResult* driverStatus) {
  return EntryPoint(symbol, funcPtr, CUDART_VERSION, flags, driverStatus, false, "cudaGetDriverEntryPoint");
}
REMORA_API cudaError_t cudaGetDriverEntryPoint_ptsz(const char* symbol, void** funcPtr, unsigned long long flags,
                                                    cudaDriverEntryPointQueryResult* driverStatus) {
  return EntryPoint(symbol, funcPtr, CUDART_VERSION, flags, driverStatus, true, "cudaGetDriverEntryPoint");
}
