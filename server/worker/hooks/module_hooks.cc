#include "worker/hooks/module_hooks.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "worker/calls/generated_call.h"
#include "worker/session/executor.h"

namespace remora::worker {

CUresult ModuleKernelNames(OpContext& x, unsigned long long module, char* names, size_t capacity, size_t* length) {
  Executor& ex = x.executor();
  auto m = ex.session().modules().Get(module);
  if (!m.ok()) return CUDA_ERROR_INVALID_HANDLE;
  if (!ex.SetDevice((*m)->gpu).ok()) return CUDA_ERROR_INVALID_CONTEXT;
  auto list = ex.driver().ModuleKernelNames((*m)->module);
  if (!list.ok()) return static_cast<CUresult>(list.status().raw());
  std::string all;
  for (const std::string& n : *list) all.append(n).push_back('\0');
  *length = all.size();
  std::memcpy(names, all.data(), std::min(all.size(), capacity));
  return CUDA_SUCCESS;
}

}  // namespace remora::worker
