// The host backend's NCCL (host_lib_nccl.h): its factory.
#include "worker/libs/host/host_lib_nccl.h"

namespace remora::worker {

std::shared_ptr<void> MakeHostNccl(EmulatedDevice& device) {
  auto api = std::make_shared<emu_nccl::HostNccl>(device);
  return std::shared_ptr<void>(api, static_cast<gen::nccl::Api*>(api.get()));
}

}  // namespace remora::worker
