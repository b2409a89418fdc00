// What the client knows of the driver API's code objects: modules (CUmodule is the worker's
// module handle), functions (CUfunction is the worker's function handle; their parameter
// layout and attributes, fetched once), and libraries (CUlibrary is a LibraryRecord of this
// process; its kernels are FunctionRecords of the Registry, so a CUkernel and the runtime's
// cudaKernel_t are the same thing and load lazily on each device they are used on).
// Thread-safe.
#pragma once

#include <cuda.h>

#include <atomic>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "registry.h"
#include "remora/base/status.h"

namespace remora::shim::driver {

struct ModuleRecord {
  uint64_t handle = 0;       // the worker's module handle (the CUmodule)
  int device = 0;
  FatbinRecord* image = nullptr;  // the image, copied (owned by the Registry)
  std::vector<uint64_t> globals;  // variables fetched (in the Runtime's device table)
  bool library = false;           // a library's module (cuLibraryGetModule): not unloadable
};

struct FunctionInfo {
  int device = 0;
  uint64_t module = 0;
  std::string name;
  const KernelInfo* kernel = nullptr;  // layout and attributes (never freed)
};

struct LibraryRecord {
  static constexpr uint64_t kMagic = 0x4249'4c41'524f'4d45ull;  // "EMORALIB"
  uint64_t magic = kMagic;
  FatbinRecord* image = nullptr;
  std::mutex mu;
  std::map<std::string, FunctionRecord*> kernels;
  std::map<std::string, VariableRecord*> globals;
  std::atomic<bool> unloaded{false};
};

class DriverObjects {
 public:
  void AddModule(const ModuleRecord& m);
  Result<ModuleRecord> Module(CUmodule m);
  Result<ModuleRecord> RemoveModule(CUmodule m);
  void AddModuleGlobal(CUmodule m, uint64_t ptr);
  // Forgets the functions of a module the worker unloaded.
  void ForgetFunctions(uint64_t module);
  // A function already resolved in `module` by `name`, if any.
  std::optional<std::pair<uint64_t, FunctionInfo>> FindFunction(uint64_t module, const std::string& name);

  // A function the worker resolved (by the driver API or by the runtime's kernel loading).
  void AddFunction(uint64_t handle, const FunctionInfo& f);
  // Takes a function's layout for the life of the process: never freed before, since a
  // stale CUfunction (its module unloaded) must stay safe to look at, and reachable, so that
  // what is kept is owned rather than leaked.
  const KernelInfo* KeepKernel(std::unique_ptr<KernelInfo> k);
  Result<FunctionInfo> Function(CUfunction f);

  LibraryRecord* AddLibrary(FatbinRecord* image);
  Result<LibraryRecord*> Library(CUlibrary l);
  // JIT link states (driver/linker.cc owns them; here only whether one is live).
  void AddLink(const void* state);
  bool IsLink(const void* state);
  bool RemoveLink(const void* state);

  // The live library a kernel (a FunctionRecord) came from, or nullptr.
  LibraryRecord* LibraryOf(const FunctionRecord* kernel);

  // Callbacks of cuDeviceRegisterAsyncNotification; a handle is its registration's address.
  CUasyncCallbackHandle AddAsyncCallback(int device, CUasyncCallback fn, void* user);
  // False if `h` is not a live registration of `device`.
  bool RemoveAsyncCallback(int device, CUasyncCallbackHandle h);

 private:
  std::mutex mu_;
  std::map<uint64_t, ModuleRecord> modules_;
  std::map<uint64_t, FunctionInfo> functions_;
  std::vector<std::unique_ptr<const KernelInfo>> kept_kernels_;
  std::vector<std::unique_ptr<LibraryRecord>> libraries_;
  struct AsyncCallback {
    int device;
    CUasyncCallback fn;
    void* user;
  };
  std::list<AsyncCallback> async_callbacks_;
  std::set<const void*> links_;  // never freed: a stale CUlibrary stays safe to look at
};

// The size of a module image (a fat binary, an ELF cubin, or NUL-terminated PTX), or 0 if it
// is none of them.
size_t ImageSize(const void* image);

// The function of a kernel (a CUkernel: the Registry's FunctionRecord) on the current
// context's device, loaded there if need be and known to the launch path from then on.
Result<FunctionInfo> FunctionOfKernel(CUkernel kernel);
// A CUfunction, or a CUkernel cast to one (as CUDA accepts; the static runtime passes those).
Result<FunctionInfo> FunctionOrKernel(CUfunction f);

}  // namespace remora::shim::driver
