#include "registry.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace remora::shim {
namespace {

constexpr uint32_t kWrapperMagic = 0x466243b1;
constexpr uint32_t kFatbinMagic = 0xBA55ED50;

struct Wrapper {  // __fatBinC_Wrapper_t
  int32_t magic;
  int32_t version;
  const uint64_t* data;
  void* filename_or_fatbins;
};

struct FatbinHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t header_size;
  uint64_t fat_size;  // bytes after the header
};

}  // namespace

bool DecodeFatbinWrapper(const void* wrapper, const void** data, size_t* size) {
  if (wrapper == nullptr) return false;
  Wrapper w;
  std::memcpy(&w, wrapper, sizeof(w));
  if (static_cast<uint32_t>(w.magic) != kWrapperMagic || w.data == nullptr) return false;
  FatbinHeader h;
  std::memcpy(&h, w.data, sizeof(h));
  if (h.magic != kFatbinMagic) return false;
  *data = w.data;
  *size = h.header_size + h.fat_size;
  return true;
}

FatbinRecord* Registry::AddFatbin(const void* wrapper) {
  auto* f = new FatbinRecord;
  f->wrapper = wrapper;
  DecodeFatbinWrapper(wrapper, &f->data, &f->size);
  std::lock_guard<std::mutex> lock(mu_);
  fatbins_.push_back(f);
  return f;
}

FatbinRecord* Registry::AddImage(const void* image, size_t size, bool fresh) {
  auto* f = new FatbinRecord;
  const auto* b = static_cast<const std::byte*>(image);
  f->owned.assign(b, b + size);
  f->data = f->owned.data();
  f->size = size;
  f->complete = true;
  f->fresh = fresh;
  std::lock_guard<std::mutex> lock(mu_);
  fatbins_.push_back(f);
  return f;
}

FunctionRecord* Registry::AddKernel(FatbinRecord* image, std::string name) {
  auto* r = new FunctionRecord;
  r->fatbin = image;
  r->host_fun = r;
  r->device_name = std::move(name);
  std::lock_guard<std::mutex> lock(mu_);
  functions_[r] = r;
  records_[r] = r;
  return r;
}

VariableRecord* Registry::AddGlobal(FatbinRecord* image, std::string name) {
  auto* r = new VariableRecord;
  r->fatbin = image;
  r->host_var = r;
  r->device_name = std::move(name);
  std::lock_guard<std::mutex> lock(mu_);
  variables_[r] = r;
  return r;
}

void Registry::RemoveFatbin(FatbinRecord* f) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find(fatbins_.begin(), fatbins_.end(), f);
  if (it == fatbins_.end()) return;
  fatbins_.erase(it);
  std::erase_if(kernels_, [&](const auto& k) { return k.second.first->fatbin == f; });
  for (auto i = functions_.begin(); i != functions_.end();) {
    if (i->second->fatbin == f) {
      for (auto& k : i->second->kernel) delete k.load();
      records_.erase(i->second);
      delete i->second;
      i = functions_.erase(i);
    } else {
      ++i;
    }
  }
  for (auto i = variables_.begin(); i != variables_.end();) {
    if (i->second->fatbin == f) {
      delete i->second;
      i = variables_.erase(i);
    } else {
      ++i;
    }
  }
  delete f;
}

void Registry::AddFunction(FatbinRecord* fatbin, const void* host_fun, std::string device_name, int thread_limit) {
  auto* r = new FunctionRecord;
  r->fatbin = fatbin;
  r->host_fun = host_fun;
  r->device_name = std::move(device_name);
  r->thread_limit = thread_limit;
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = functions_[host_fun];
  if (slot != nullptr) {
    records_.erase(slot);
    delete slot;
  }
  slot = r;
  records_[r] = r;
}

void Registry::ForgetSession() {
  new (&mu_) std::mutex();
  for (FatbinRecord* f : fatbins_) {
    new (&f->mu) std::mutex();
    f->module.fill(0);
  }
  for (auto& [_, fn] : functions_) {
    new (&fn->mu) std::mutex();
    for (auto& k : fn->kernel) k.store(nullptr);  // leaked: another thread of the parent may have held it
  }
  for (auto& [_, v] : variables_) {
    new (&v->mu) std::mutex();
    v->global.fill({0, 0});
  }
  kernels_.clear();
}

bool Registry::IsFunctionRecord(const void* p) {
  std::lock_guard<std::mutex> lock(mu_);
  return records_.count(p) > 0;
}

void Registry::AddVariable(FatbinRecord* fatbin, const void* host_var, std::string device_name, size_t size, bool constant,
                           bool managed) {
  auto* r = new VariableRecord;
  r->fatbin = fatbin;
  r->host_var = host_var;
  r->device_name = std::move(device_name);
  r->size = size;
  r->constant = constant;
  r->managed = managed;
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = variables_[host_var];
  delete slot;
  slot = r;
}

FunctionRecord* Registry::FindFunction(const void* host_fun) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = functions_.find(host_fun);
  return it == functions_.end() ? nullptr : it->second;
}

VariableRecord* Registry::FindVariable(const void* host_var) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = variables_.find(host_var);
  return it == variables_.end() ? nullptr : it->second;
}

size_t Registry::fatbin_count() {
  std::lock_guard<std::mutex> lock(mu_);
  return fatbins_.size();
}

const FatbinRecord* Registry::ImageOfModule(uint64_t handle) {
  std::vector<FatbinRecord*> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    all = fatbins_;
  }
  // A record another thread holds is loading a module now (and may wait for the caller):
  // skipped rather than waited for.
  for (FatbinRecord* f : all) {
    std::unique_lock<std::mutex> flock(f->mu, std::try_to_lock);
    if (!flock.owns_lock()) continue;
    for (uint64_t m : f->module)
      if (m == handle && f->data != nullptr && f->size > 0) return f;
  }
  return nullptr;
}

std::vector<VariableRecord*> Registry::ManagedVariables(FatbinRecord* f) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<VariableRecord*> out;
  for (auto& [_, v] : variables_)
    if (v->fatbin == f && v->managed) out.push_back(v);
  return out;
}

void Registry::RememberKernel(uint64_t handle, FunctionRecord* f, const KernelInfo* k) {
  std::lock_guard<std::mutex> lock(mu_);
  kernels_[handle] = {f, k};
}

std::pair<FunctionRecord*, const KernelInfo*> Registry::KernelByHandle(uint64_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = kernels_.find(handle);
  return it == kernels_.end() ? std::pair<FunctionRecord*, const KernelInfo*>{nullptr, nullptr} : it->second;
}

}  // namespace remora::shim
