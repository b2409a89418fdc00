// What the client keeps about the session's graphs: the host memory each executable graph's
// launches move (its bindings: the client refreshes the device staging of host sources before
// a launch and drains the staging of host destinations after it, server/worker/session/graph_state.h),
// and what the application set on the nodes it built, for the getters (kernel parameters are
// returned in storage the client owns). Owned by the Runtime. Thread-safe.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "cuda_graph_wire.h"

namespace remora::shim {

class GraphRegistry {
 public:
  using Binding = api::cuda::WireBinding;

  void SetBindings(uint64_t exec, std::vector<Binding> bindings);
  std::vector<Binding> Bindings(uint64_t exec);
  void ForgetExec(uint64_t exec);

  // Storage for the parameters of a kernel node returned to the application (valid until
  // the node's parameters are asked for again).
  struct KernelArgs {
    std::vector<std::byte> bytes;
    std::vector<void*> pointers;
  };
  KernelArgs& ArgsFor(uint64_t node);

  // The copy the application set on a memcpy node it built (host addresses as it gave them).
  void SetCopy(uint64_t node, const CUDA_MEMCPY3D& copy);
  std::optional<CUDA_MEMCPY3D> Copy(uint64_t node);

 private:
  std::mutex mu_;
  std::map<uint64_t, std::vector<Binding>> bindings_;
  std::map<uint64_t, std::unique_ptr<KernelArgs>> args_;
  std::map<uint64_t, CUDA_MEMCPY3D> copies_;
};

}  // namespace remora::shim
