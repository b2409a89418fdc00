#include "worker/libs/host/host_libraries.h"

namespace remora::worker {

std::shared_ptr<void> MakeHostLibrary(Domain library, EmulatedDevice& device) {
  switch (library) {
    case Domain::kCublas: return MakeHostCublas(device);
    case Domain::kCublasLt: return MakeHostCublasLt(device);
    case Domain::kCurand: return MakeHostCurand(device);
    case Domain::kCusolver: return MakeHostCusolver(device);
    case Domain::kCusparse: return MakeHostCusparse(device);
    case Domain::kCudnn: return MakeHostCudnn(device);
    case Domain::kNccl: return MakeHostNccl(device);  // (issue 44)
    default: return nullptr;
  }
}

}  // namespace remora::worker
