#include "graph_registry.h"

namespace remora::shim {

void GraphRegistry::SetBindings(uint64_t exec, std::vector<Binding> bindings) {
  std::lock_guard<std::mutex> lock(mu_);
  bindings_[exec] = std::move(bindings);
}

std::vector<GraphRegistry::Binding> GraphRegistry::Bindings(uint64_t exec) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = bindings_.find(exec);
  return it == bindings_.end() ? std::vector<Binding>{} : it->second;
}

void GraphRegistry::ForgetExec(uint64_t exec) {
  std::lock_guard<std::mutex> lock(mu_);
  bindings_.erase(exec);
}

GraphRegistry::KernelArgs& GraphRegistry::ArgsFor(uint64_t node) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& a = args_[node];
  if (!a) a = std::make_unique<KernelArgs>();
  return *a;
}

void GraphRegistry::SetCopy(uint64_t node, const CUDA_MEMCPY3D& copy) {
  std::lock_guard<std::mutex> lock(mu_);
  copies_[node] = copy;
}

std::optional<CUDA_MEMCPY3D> GraphRegistry::Copy(uint64_t node) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = copies_.find(node);
  if (it == copies_.end()) return std::nullopt;
  return it->second;
}

}  // namespace remora::shim
