#include "driver/objects.h"

#include <algorithm>
#include <cstring>

namespace remora::shim::driver {

namespace {
Status InvalidHandle(const char* what) { return Status(Domain::kCuda, CUDA_ERROR_INVALID_HANDLE, what); }
}  // namespace

void DriverObjects::AddModule(const ModuleRecord& m) {
  std::lock_guard<std::mutex> lock(mu_);
  modules_[m.handle] = m;
}

Result<ModuleRecord> DriverObjects::Module(CUmodule m) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = modules_.find(reinterpret_cast<uint64_t>(m));
  if (it == modules_.end()) return InvalidHandle("not a module of this process");
  return it->second;
}

Result<ModuleRecord> DriverObjects::RemoveModule(CUmodule m) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = modules_.find(reinterpret_cast<uint64_t>(m));
  if (it == modules_.end()) return InvalidHandle("not a module of this process");
  ModuleRecord r = it->second;
  modules_.erase(it);
  std::erase_if(functions_, [&](const auto& f) { return f.second.module == r.handle; });
  return r;
}

void DriverObjects::AddModuleGlobal(CUmodule m, uint64_t ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = modules_.find(reinterpret_cast<uint64_t>(m));
  if (it != modules_.end()) it->second.globals.push_back(ptr);
}

void DriverObjects::ForgetFunctions(uint64_t module) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(functions_, [module](const auto& f) { return f.second.module == module; });
}

std::optional<std::pair<uint64_t, FunctionInfo>> DriverObjects::FindFunction(uint64_t module, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [h, f] : functions_)
    if (f.module == module && f.name == name) return std::make_pair(h, f);
  return std::nullopt;
}

void DriverObjects::AddFunction(uint64_t handle, const FunctionInfo& f) {
  std::lock_guard<std::mutex> lock(mu_);
  functions_[handle] = f;
}

const KernelInfo* DriverObjects::KeepKernel(std::unique_ptr<KernelInfo> k) {
  std::lock_guard<std::mutex> lock(mu_);
  kept_kernels_.push_back(std::move(k));
  return kept_kernels_.back().get();
}

Result<FunctionInfo> DriverObjects::Function(CUfunction f) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = functions_.find(reinterpret_cast<uint64_t>(f));
  if (it == functions_.end()) return InvalidHandle("not a function of this process");
  return it->second;
}

LibraryRecord* DriverObjects::AddLibrary(FatbinRecord* image) {
  auto l = std::make_unique<LibraryRecord>();
  l->image = image;
  LibraryRecord* p = l.get();
  std::lock_guard<std::mutex> lock(mu_);
  libraries_.push_back(std::move(l));
  return p;
}

Result<LibraryRecord*> DriverObjects::Library(CUlibrary l) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& r : libraries_)
    if (reinterpret_cast<CUlibrary>(r.get()) == l && !r->unloaded) return r.get();
  return InvalidHandle("not a library of this process");
}

void DriverObjects::AddLink(const void* state) {
  std::lock_guard<std::mutex> lock(mu_);
  links_.insert(state);
}

bool DriverObjects::IsLink(const void* state) {
  std::lock_guard<std::mutex> lock(mu_);
  return links_.count(state) > 0;
}

bool DriverObjects::RemoveLink(const void* state) {
  std::lock_guard<std::mutex> lock(mu_);
  return links_.erase(state) > 0;
}

LibraryRecord* DriverObjects::LibraryOf(const FunctionRecord* kernel) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& l : libraries_) {
    if (l->unloaded) continue;
    std::lock_guard<std::mutex> inner(l->mu);
    for (const auto& [name, k] : l->kernels)
      if (k == kernel) return l.get();
  }
  return nullptr;
}

size_t ImageSize(const void* image) {
  if (image == nullptr) return 0;
  const auto* b = static_cast<const unsigned char*>(image);
  uint32_t magic;
  std::memcpy(&magic, b, 4);
  if (magic == 0xBA55ED50u) {  // fat binary: 16-byte header, then its size
    uint16_t header;
    uint64_t fat;
    std::memcpy(&header, b + 6, 2);
    std::memcpy(&fat, b + 8, 8);
    return header + fat;
  }
  if (magic == 0x466243b1u) {  // the wrapper nvcc emits: points to the fat binary
    const void* data;
    std::memcpy(&data, b + 8, sizeof(data));
    return data == nullptr ? 0 : ImageSize(data);
  }
  if (b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F' && b[4] == 2) {  // ELF64 cubin
    uint64_t shoff, phoff;
    uint16_t shentsize, shnum, phentsize, phnum;
    std::memcpy(&phoff, b + 0x20, 8);
    std::memcpy(&shoff, b + 0x28, 8);
    std::memcpy(&phentsize, b + 0x36, 2);
    std::memcpy(&phnum, b + 0x38, 2);
    std::memcpy(&shentsize, b + 0x3a, 2);
    std::memcpy(&shnum, b + 0x3c, 2);
    uint64_t end = std::max<uint64_t>({64, shoff + uint64_t{shentsize} * shnum, phoff + uint64_t{phentsize} * phnum});
    for (uint16_t i = 0; i < shnum; i++) {
      const unsigned char* sh = b + shoff + uint64_t{shentsize} * i;
      uint32_t type;
      uint64_t off, size;
      std::memcpy(&type, sh + 4, 4);
      std::memcpy(&off, sh + 0x18, 8);
      std::memcpy(&size, sh + 0x20, 8);
      if (type != 8 /* SHT_NOBITS */) end = std::max(end, off + size);
    }
    return end;
  }
  return std::strlen(reinterpret_cast<const char*>(b)) + 1;  // PTX text
}

CUasyncCallbackHandle DriverObjects::AddAsyncCallback(int device, CUasyncCallback fn, void* user) {
  std::lock_guard<std::mutex> lock(mu_);
  async_callbacks_.push_back(AsyncCallback{device, fn, user});
  return reinterpret_cast<CUasyncCallbackHandle>(&async_callbacks_.back());
}

bool DriverObjects::RemoveAsyncCallback(int device, CUasyncCallbackHandle h) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = async_callbacks_.begin(); it != async_callbacks_.end(); ++it)
    if (reinterpret_cast<CUasyncCallbackHandle>(&*it) == h && it->device == device) {
      async_callbacks_.erase(it);
      return true;
    }
  return false;
}

}  // namespace remora::shim::driver
