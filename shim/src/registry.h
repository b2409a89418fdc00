// What the application's nvcc-generated code registered at load time: fat binaries,
// kernels and device variables, keyed by their host-side addresses. Recorded locally; a
// fat binary is shipped to the worker only when one of its kernels or variables is first
// used. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace remora::shim {

struct FatbinRecord {
  const void* wrapper = nullptr;   // the __fatBinC_Wrapper_t the app passed
  const void* data = nullptr;      // the fat binary image (0xBA55ED50 header)
  size_t size = 0;                 // image size in bytes, header included
  bool complete = false;           // __cudaRegisterFatBinaryEnd seen
};

struct FunctionRecord {
  FatbinRecord* fatbin = nullptr;
  const void* host_fun = nullptr;
  std::string device_name;
  int thread_limit = -1;
};

struct VariableRecord {
  FatbinRecord* fatbin = nullptr;
  const void* host_var = nullptr;
  std::string device_name;
  size_t size = 0;
  bool constant = false;
  bool managed = false;
};

class Registry {
 public:
  static Registry& Get();

  FatbinRecord* AddFatbin(const void* wrapper);
  void RemoveFatbin(FatbinRecord* f);
  void AddFunction(FunctionRecord r);
  void AddVariable(VariableRecord r);
  // nullptr if unknown.
  const FunctionRecord* FindFunction(const void* host_fun);
  const VariableRecord* FindVariable(const void* host_var);
  size_t fatbin_count();

 private:
  std::mutex mu_;
  std::vector<FatbinRecord*> fatbins_;
  std::unordered_map<const void*, FunctionRecord*> functions_;
  std::unordered_map<const void*, VariableRecord*> variables_;
};

// Parses the fat binary wrapper (magic 0x466243b1) into the image pointer and size.
bool DecodeFatbinWrapper(const void* wrapper, const void** data, size_t* size);

}  // namespace remora::shim
