// The driver API's code objects: modules (cuModuleLoad* read and copy the image on the
// client, which ships it through the server's content cache, like the runtime's fat
// binaries; each load is a module of its own) and libraries (context-independent: a kernel or
// variable loads on each device it is first used on). CUmodule is the worker's module handle;
// CUlibrary a LibraryRecord of this process; CUkernel the Registry's FunctionRecord (the
// runtime's cudaKernel_t).
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>

#include "driver/contexts.h"
#include "driver/driver.h"
#include "driver/objects.h"
#include "export.h"
#include "managed.h"
#include "modules.h"
#include "process.h"
#include "registry.h"
#include "runtime.h"

using namespace remora;
using namespace remora::shim;
using namespace remora::shim::driver;

namespace {

DriverObjects& Objects() { return Process::Get().driver_objects(); }

Status Cu(CUresult r, std::string message) { return Status(Domain::kCuda, r, std::move(message)); }

// The image an application handed over: a fat binary (or nvcc's wrapper of one), an ELF
// cubin, or PTX text.
Result<std::pair<const void*, size_t>> ImageOf(const void* image) {
  if (image == nullptr) return Cu(CUDA_ERROR_INVALID_VALUE, "image is NULL");
  const void* data = image;
  size_t size = 0;
  if (DecodeFatbinWrapper(image, &data, &size)) return std::make_pair(data, size);
  size = ImageSize(image);
  if (size == 0) return Cu(CUDA_ERROR_INVALID_IMAGE, "not a fat binary, an ELF cubin or PTX");
  return std::make_pair(image, size);
}

Result<std::vector<std::byte>> ReadFile(const char* path) {
  if (path == nullptr) return Cu(CUDA_ERROR_INVALID_VALUE, "fname is NULL");
  std::ifstream in(path, std::ios::binary);
  if (!in) return Cu(CUDA_ERROR_FILE_NOT_FOUND, std::string("cannot open ") + path);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(bytes.size() + 1);  // a NUL after PTX text
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

// Loads `image` as a module of its own on the current context's device.
CUresult Load(CUmodule* module, const void* image, const char* call) {
  if (module == nullptr) return Invalid(call, "module is NULL");
  auto d = CurrentDevice();
  if (!d.ok()) return FromStatus(d.status(), call);
  auto img = ImageOf(image);
  if (!img.ok()) return FromStatus(img.status(), call);
  FatbinRecord* fb = Registry::Get().AddImage(img->first, img->second, /*fresh=*/true);
  auto h = LoadImage(fb, *d);
  if (!h.ok()) {
    Registry::Get().RemoveFatbin(fb);
    return FromStatus(h.status(), call);
  }
  Objects().AddModule(ModuleRecord{*h, *d, fb, {}, false});
  Process::Get().contexts().Own(*h, &Owned::modules);
  *module = reinterpret_cast<CUmodule>(*h);
  return CUDA_SUCCESS;
}

// The JIT's log options of cuModuleLoadDataEx and cuLibraryLoadData: the module was built on
// the server, whose logs stay there; the application's buffers get empty strings.
void EmptyLogs(unsigned n, CUjit_option* options, void** values) {
  if (options == nullptr || values == nullptr) return;
  for (unsigned i = 0; i < n; i++) {
    if ((options[i] == CU_JIT_INFO_LOG_BUFFER || options[i] == CU_JIT_ERROR_LOG_BUFFER) && values[i] != nullptr)
      *static_cast<char*>(values[i]) = '\0';
    if (options[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES || options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
      values[i] = nullptr;  // bytes written: none
    if (options[i] == CU_JIT_WALL_TIME) std::memset(&values[i], 0, sizeof(float));
  }
}

}  // namespace

CUresult remora::shim::driver::LoadModule(CUmodule* module, const void* image, const char* call) {
  return Load(module, image, call);
}

// ---- modules ---------------------------------------------------------------------------------

REMORA_API CUresult cuModuleLoadData(CUmodule* module, const void* image) { return Load(module, image, "cuModuleLoadData"); }

REMORA_API CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int n, CUjit_option* options,
                                       void** values) {
  if (n > 0 && (options == nullptr || values == nullptr)) return Invalid("cuModuleLoadDataEx", "NULL options");
  CUresult r = Load(module, image, "cuModuleLoadDataEx");
  if (r == CUDA_SUCCESS) EmptyLogs(n, options, values);
  return r;
}

REMORA_API CUresult cuModuleLoadFatBinary(CUmodule* module, const void* fatCubin) {
  return Load(module, fatCubin, "cuModuleLoadFatBinary");
}

REMORA_API CUresult cuModuleLoad(CUmodule* module, const char* fname) {
  auto bytes = ReadFile(fname);
  if (!bytes.ok()) return FromStatus(bytes.status(), "cuModuleLoad");
  return Load(module, bytes->data(), "cuModuleLoad");
}

REMORA_API CUresult cuModuleUnload(CUmodule hmod) {
  auto m = Objects().Module(hmod);
  if (!m.ok()) return FromStatus(m.status(), "cuModuleUnload");
  if (m->library)
    return FromStatus(Cu(CUDA_ERROR_NOT_PERMITTED, "a library's module is unloaded with the library"), "cuModuleUnload");
  auto c = Runtime::Get().Session();
  if (!c.ok()) return FromStatus(c.status(), "cuModuleUnload");
  Status st = UnloadModule(m->handle);
  if (!st.ok()) return FromStatus(st, "cuModuleUnload");
  (void)Objects().RemoveModule(hmod);
  for (uint64_t g : m->globals) {
    (void)Runtime::Get().managed().RemoveVariables(*c, g);  // a managed variable's mapping here
    (void)Runtime::Get().RemoveDeviceAllocation(g);
  }
  Process::Get().contexts().Disown(m->handle, &Owned::modules);
  Registry::Get().RemoveFatbin(m->image);
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  if (hfunc == nullptr || name == nullptr) return Invalid("cuModuleGetFunction", "NULL argument");
  auto m = Objects().Module(hmod);
  if (!m.ok()) return FromStatus(m.status(), "cuModuleGetFunction");
  if (auto known = Objects().FindFunction(m->handle, name)) {
    *hfunc = reinterpret_cast<CUfunction>(known->first);
    return CUDA_SUCCESS;
  }
  auto c = Runtime::Get().Session();
  if (!c.ok()) return FromStatus(c.status(), "cuModuleGetFunction");
  auto info = FetchFunction(*c, m->device, m->handle, name);
  if (!info.ok()) {
    if (info.status().domain() == Domain::kCudart && info.status().raw() == cudaErrorInvalidDeviceFunction)
      return FromStatus(Cu(CUDA_ERROR_NOT_FOUND, std::string("no function ") + name + " in the module"), "cuModuleGetFunction");
    return FromStatus(info.status(), "cuModuleGetFunction");
  }
  const KernelInfo* k = Objects().KeepKernel(std::move(*info));  // kept: a stale CUfunction stays safe to look at
  Objects().AddFunction(k->handle, FunctionInfo{m->device, m->handle, name, k});
  *hfunc = reinterpret_cast<CUfunction>(k->handle);
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuModuleGetGlobal_v2(CUdeviceptr* dptr, size_t* bytes, CUmodule hmod, const char* name) {
  if (name == nullptr) return Invalid("cuModuleGetGlobal", "name is NULL");
  auto m = Objects().Module(hmod);
  if (!m.ok()) return FromStatus(m.status(), "cuModuleGetGlobal");
  auto c = Runtime::Get().Session();
  if (!c.ok()) return FromStatus(c.status(), "cuModuleGetGlobal");
  bool managed = false;
  auto g = FetchGlobal(*c, m->device, m->handle, name, 0, &managed);
  if (!g.ok()) {
    if (g.status().domain() == Domain::kCudart && g.status().raw() == cudaErrorInvalidSymbol)
      return FromStatus(Cu(CUDA_ERROR_NOT_FOUND, std::string("no variable ") + name + " in the module"), "cuModuleGetGlobal");
    return FromStatus(g.status(), "cuModuleGetGlobal");
  }
  // A managed variable (NVVM's .attribute(.managed), as NVIDIA's uvmlite loads): its address is
  // also mapped here, with managed memory's coherence, as the runtime's __managed__ variables.
  if (managed) {
    Status st = Runtime::Get().managed().AddVariable(*c, g->first, g->second, m->device);
    if (!st.ok()) return FromStatus(st, "cuModuleGetGlobal");
  }
  Objects().AddModuleGlobal(hmod, g->first);
  if (dptr != nullptr) *dptr = g->first;
  if (bytes != nullptr) *bytes = g->second;
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  if (mode == nullptr) return Invalid("cuModuleGetLoadingMode", "mode is NULL");
  // As the driver: lazy unless CUDA_MODULE_LOADING=EAGER (the worker loads functions on demand).
  const char* env = std::getenv("CUDA_MODULE_LOADING");
  *mode = env != nullptr && std::strcmp(env, "EAGER") == 0 ? CU_MODULE_EAGER_LOADING : CU_MODULE_LAZY_LOADING;
  return CUDA_SUCCESS;
}

// ---- libraries -------------------------------------------------------------------------------

REMORA_API CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option* jit_options, void** jit_values,
                                      unsigned int num_jit, CUlibraryOption* lib_options, void** lib_values,
                                      unsigned int num_lib) {
  if (library == nullptr) return Invalid("cuLibraryLoadData", "library is NULL");
  if ((num_jit > 0 && (jit_options == nullptr || jit_values == nullptr)) ||
      (num_lib > 0 && (lib_options == nullptr || lib_values == nullptr)))
    return Invalid("cuLibraryLoadData", "NULL options");
  for (unsigned i = 0; i < num_lib; i++)
    if (lib_options[i] == CU_LIBRARY_BINARY_IS_PRESERVED) continue;  // the image is copied anyway
    else if (lib_options[i] != CU_LIBRARY_HOST_UNIVERSAL_FUNCTION_AND_DATA_TABLE)
      return Invalid("cuLibraryLoadData", "unknown library option");
  auto c = Runtime::Get().Session();
  if (!c.ok()) return FromStatus(c.status(), "cuLibraryLoadData");
  auto img = ImageOf(code);
  if (!img.ok()) return FromStatus(img.status(), "cuLibraryLoadData");
  FatbinRecord* fb = Registry::Get().AddImage(img->first, img->second, /*fresh=*/true);
  EmptyLogs(num_jit, jit_options, jit_values);
  *library = reinterpret_cast<CUlibrary>(Objects().AddLibrary(fb));
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuLibraryLoadFromFile(CUlibrary* library, const char* fname, CUjit_option* jit_options,
                                          void** jit_values, unsigned int num_jit, CUlibraryOption* lib_options,
                                          void** lib_values, unsigned int num_lib) {
  auto bytes = ReadFile(fname);
  if (!bytes.ok()) return FromStatus(bytes.status(), "cuLibraryLoadFromFile");
  return cuLibraryLoadData(library, bytes->data(), jit_options, jit_values, num_jit, lib_options, lib_values, num_lib);
}

REMORA_API CUresult cuLibraryUnload(CUlibrary library) {
  auto l = Objects().Library(library);
  if (!l.ok()) return FromStatus(l.status(), "cuLibraryUnload");
  LibraryRecord* lib = *l;
  auto c = Runtime::Get().Session();
  if (!c.ok()) return FromStatus(c.status(), "cuLibraryUnload");
  if (lib->unloaded.exchange(true))
    return FromStatus(Cu(CUDA_ERROR_INVALID_HANDLE, "the library was unloaded"), "cuLibraryUnload");
  std::map<std::string, VariableRecord*> globals;
  {
    std::lock_guard<std::mutex> lock(lib->mu);
    globals.swap(lib->globals);
    lib->kernels.clear();
  }
  for (int d = 0; d < kMaxDevices; d++) {
    uint64_t module = lib->image->module[static_cast<size_t>(d)];
    if (module == 0) continue;
    (void)UnloadModule(module);
    (void)Objects().RemoveModule(reinterpret_cast<CUmodule>(module));
    Objects().ForgetFunctions(module);
  }
  for (auto& [name, v] : globals)
    for (auto& g : v->global)
      if (g.first != 0) (void)Runtime::Get().RemoveDeviceAllocation(g.first);
  Registry::Get().RemoveFatbin(lib->image);
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuLibraryGetKernel(CUkernel* kernel, CUlibrary library, const char* name) {
  if (kernel == nullptr || name == nullptr) return Invalid("cuLibraryGetKernel", "NULL argument");
  auto l = Objects().Library(library);
  if (!l.ok()) return FromStatus(l.status(), "cuLibraryGetKernel");
  LibraryRecord* lib = *l;
  {
    std::lock_guard<std::mutex> lock(lib->mu);
    auto it = lib->kernels.find(name);
    if (it != lib->kernels.end()) {
      *kernel = reinterpret_cast<CUkernel>(it->second);
      return CUDA_SUCCESS;
    }
  }
  // The kernel must exist: resolved on the current device (where it is about to be used).
  auto device = Runtime::Get().CurrentDevice();
  if (!device.ok()) return FromStatus(device.status(), "cuLibraryGetKernel");
  FunctionRecord* f = Registry::Get().AddKernel(lib->image, name);
  auto k = KernelOn(f, *device);
  if (!k.ok()) {
    // The record stays with the image (freed with it) but is never handed out.
    if (k.status().domain() == Domain::kCudart && k.status().raw() == cudaErrorInvalidDeviceFunction)
      return FromStatus(Cu(CUDA_ERROR_NOT_FOUND, std::string("no kernel ") + name + " in the library"), "cuLibraryGetKernel");
    return FromStatus(k.status(), "cuLibraryGetKernel");
  }
  std::lock_guard<std::mutex> lock(lib->mu);
  auto [it, fresh] = lib->kernels.emplace(name, f);
  *kernel = reinterpret_cast<CUkernel>(it->second);
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuLibraryGetModule(CUmodule* module, CUlibrary library) {
  if (module == nullptr) return Invalid("cuLibraryGetModule", "pMod is NULL");
  auto l = Objects().Library(library);
  if (!l.ok()) return FromStatus(l.status(), "cuLibraryGetModule");
  auto d = CurrentDevice();
  if (!d.ok()) return FromStatus(d.status(), "cuLibraryGetModule");
  auto h = LoadImage((*l)->image, *d);
  if (!h.ok()) return FromStatus(h.status(), "cuLibraryGetModule");
  if (!Objects().Module(reinterpret_cast<CUmodule>(*h)).ok())
    Objects().AddModule(ModuleRecord{*h, *d, (*l)->image, {}, true});
  *module = reinterpret_cast<CUmodule>(*h);
  return CUDA_SUCCESS;
}

namespace {

// A library's variable on `device` (resolved there on first use).
CUresult LibraryGlobal(CUdeviceptr* dptr, size_t* bytes, CUlibrary library, const char* name, int device, const char* call) {
  if (name == nullptr) return Invalid(call, "name is NULL");
  auto l = Objects().Library(library);
  if (!l.ok()) return FromStatus(l.status(), call);
  LibraryRecord* lib = *l;
  VariableRecord* v;
  {
    std::lock_guard<std::mutex> lock(lib->mu);
    auto it = lib->globals.find(name);
    v = it != lib->globals.end() ? it->second : (lib->globals[name] = Registry::Get().AddGlobal(lib->image, name));
  }
  auto g = GlobalOn(v, device);
  if (!g.ok()) {
    if (g.status().domain() == Domain::kCudart && g.status().raw() == cudaErrorInvalidSymbol)
      return FromStatus(Cu(CUDA_ERROR_NOT_FOUND, std::string("no variable ") + name + " in the library"), call);
    return FromStatus(g.status(), call);
  }
  if (dptr != nullptr) *dptr = g->first;
  if (bytes != nullptr) *bytes = g->second;
  return CUDA_SUCCESS;
}

}  // namespace

REMORA_API CUresult cuLibraryGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUlibrary library, const char* name) {
  auto d = CurrentDevice();
  if (!d.ok()) return FromStatus(d.status(), "cuLibraryGetGlobal");
  return LibraryGlobal(dptr, bytes, library, name, *d, "cuLibraryGetGlobal");
}

// As CUDA on a system without a device of CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS (every
// Remora device: the client's host code and the server's GPU share no address space): no
// symbol is a unified function.
REMORA_API CUresult cuLibraryGetUnifiedFunction(void** fptr, CUlibrary library, const char* symbol) {
  if (fptr == nullptr || symbol == nullptr) return Invalid("cuLibraryGetUnifiedFunction", "NULL argument");
  auto l = Objects().Library(library);
  if (!l.ok()) return FromStatus(l.status(), "cuLibraryGetUnifiedFunction");
  return FromStatus(Cu(CUDA_ERROR_NOT_FOUND, std::string("no unified function ") + symbol +
                                                 ": no Remora device shares function pointers with the host"),
                    "cuLibraryGetUnifiedFunction");
}

// A __managed__ variable: the library's global on the current device, whose address is also
// mapped in this process with the coherence of managed memory (managed.h), as the runtime's
// __managed__ variables are. The static runtime points the program's variable at it.
REMORA_API CUresult cuLibraryGetManaged(CUdeviceptr* dptr, size_t* bytes, CUlibrary library, const char* name) {
  // Managed memory needs no context (the static runtime asks before it makes one current): the
  // current context's device, else the thread's runtime device.
  Runtime& rt = Runtime::Get();
  auto d = CurrentDevice();
  if (!d.ok()) d = rt.CurrentDevice();
  if (!d.ok()) return FromStatus(d.status(), "cuLibraryGetManaged");
  CUdeviceptr p = 0;
  size_t n = 0;
  CUresult r = LibraryGlobal(&p, &n, library, name, *d, "cuLibraryGetManaged");
  if (r != CUDA_SUCCESS) return r;
  auto c = rt.Session();
  if (!c.ok()) return FromStatus(c.status(), "cuLibraryGetManaged");
  Status st = rt.managed().AddVariable(*c, p, n, *d);
  if (!st.ok()) return FromStatus(st, "cuLibraryGetManaged");
  if (dptr != nullptr) *dptr = p;
  if (bytes != nullptr) *bytes = n;
  return CUDA_SUCCESS;
}
