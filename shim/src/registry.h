// What the application's nvcc-generated code registered at load time: fat binaries,
// kernels and device variables, keyed by their host-side addresses. Recorded locally; a
// fat binary is shipped to the worker only when one of its kernels or variables is first
// used. Thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "process.h"

namespace remora::shim {

inline constexpr int kMaxDevices = 16;

struct FatbinRecord {
  const void* wrapper = nullptr;   // the __fatBinC_Wrapper_t the app passed
  const void* data = nullptr;      // the fat binary image (0xBA55ED50 header), or an image of
                                   // the driver API (cubin, PTX) in `owned`
  size_t size = 0;                 // image size in bytes, header included
  bool complete = false;           // __cudaRegisterFatBinaryEnd seen
  bool fresh = false;              // each load is a module of its own (the driver API's loads)
  std::vector<std::byte> owned;    // a copy of an image the application may free
  // Filled on first use (modules.cc): content hash and module handle per device.
  std::mutex mu;
  std::string hash;                // 16 bytes
  std::array<uint64_t, kMaxDevices> module{};
};

// What the worker told us about a kernel on one device. Immutable once published.
struct KernelInfo {
  uint64_t handle = 0;
  std::string name;                                   // device (mangled) name
  std::vector<std::pair<uint32_t, uint32_t>> params;  // offset, size
  uint32_t param_bytes = 0;
  std::vector<int32_t> attributes;                    // CUfunction_attribute values
};

struct FunctionRecord {
  FatbinRecord* fatbin = nullptr;
  const void* host_fun = nullptr;
  std::string device_name;
  int thread_limit = -1;
  // Per-device kernel info, published once (launches read it without a lock).
  std::array<std::atomic<const KernelInfo*>, kMaxDevices> kernel{};
  // Attributes the application set, re-applied when the kernel loads on another device.
  std::mutex mu;
  std::map<int, int> set_attributes;
  int cache_config = -1;
};

struct VariableRecord {
  FatbinRecord* fatbin = nullptr;
  const void* host_var = nullptr;
  std::string device_name;
  size_t size = 0;
  bool constant = false;
  bool managed = false;
  // Device address and size per device (0 until first used there).
  std::mutex mu;
  std::array<std::pair<uint64_t, uint64_t>, kMaxDevices> global{};
};

class Registry {
 public:
  static Registry& Get() { return Process::Get().registry(); }

  FatbinRecord* AddFatbin(const void* wrapper);
  // An image of the driver API (cuModuleLoadData, cuLibraryLoadData), copied.
  FatbinRecord* AddImage(const void* image, size_t size, bool fresh);
  // A kernel or a variable named in such an image (CUkernel / cuLibraryGetGlobal); the
  // kernel's record is a valid cudaKernel_t.
  FunctionRecord* AddKernel(FatbinRecord* image, std::string name);
  VariableRecord* AddGlobal(FatbinRecord* image, std::string name);
  void RemoveFatbin(FatbinRecord* f);
  void AddFunction(FatbinRecord* fatbin, const void* host_fun, std::string device_name, int thread_limit);
  void AddVariable(FatbinRecord* fatbin, const void* host_var, std::string device_name, size_t size, bool constant,
                   bool managed);
  // nullptr if unknown. Records live until their fat binary is unregistered.
  FunctionRecord* FindFunction(const void* host_fun);
  VariableRecord* FindVariable(const void* host_var);
  size_t fatbin_count();
  // The image loaded as module `handle` on some device (planned migration sends it to the
  // new server), or nullptr. The image lives as long as its record.
  const FatbinRecord* ImageOfModule(uint64_t handle);
  // Drops everything learned from the server (module handles, kernels, variable
  // addresses): a forked child starts a new session.
  void ForgetSession();
  // Whether `p` is one of the function records (a cudaKernel_t handed out earlier).
  bool IsFunctionRecord(const void* p);
  // The __managed__ variables a fat binary registered.
  std::vector<VariableRecord*> ManagedVariables(FatbinRecord* f);
  // Kernels by the session handle the worker gave them (graph kernel nodes name them so).
  void RememberKernel(uint64_t handle, FunctionRecord* f, const KernelInfo* k);
  std::pair<FunctionRecord*, const KernelInfo*> KernelByHandle(uint64_t handle);

 private:
  std::mutex mu_;
  std::vector<FatbinRecord*> fatbins_;
  std::unordered_map<const void*, FunctionRecord*> functions_;
  std::unordered_map<const void*, FunctionRecord*> records_;  // record address -> record
  std::unordered_map<const void*, VariableRecord*> variables_;
  std::unordered_map<uint64_t, std::pair<FunctionRecord*, const KernelInfo*>> kernels_;
};

// Parses the fat binary wrapper (magic 0x466243b1) into the image pointer and size.
bool DecodeFatbinWrapper(const void* wrapper, const void** data, size_t* size);

}  // namespace remora::shim
