#include "worker/hooks/function_hooks.h"

#include <vector>

#include "cuda_api.h"
#include "worker/calls/generated_call.h"
#include "worker/session/executor.h"

namespace remora::worker {

CUresult FuncGetAttributes(OpContext& x, CUfunction func, int* values, unsigned int count) {
  Driver& d = x.executor().driver();
  for (unsigned i = 0; i < count; i++) {
    auto v = d.FuncGetAttribute(func, static_cast<int>(i));
    values[i] = v.ok() ? *v : 0;
  }
  return CUDA_SUCCESS;
}

CUresult OccupancyClusters(OpContext& x, int* value, CUfunction func, unsigned int potential, unsigned int gridDimX,
                           unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                           unsigned int blockDimZ, unsigned int sharedMemBytes, const CUlaunchAttribute* attrs,
                           unsigned int numAttrs) {
  if (potential > 1) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUlaunchAttribute> kept;
  for (unsigned i = 0; i < numAttrs; i++) {
    switch (attrs[i].id) {
      case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
      case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT:
      case CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT:
        break;
      default:
        kept.push_back(attrs[i]);
    }
  }
  CUlaunchConfig c = {};
  c.gridDimX = gridDimX;
  c.gridDimY = gridDimY;
  c.gridDimZ = gridDimZ;
  c.blockDimX = blockDimX;
  c.blockDimY = blockDimY;
  c.blockDimZ = blockDimZ;
  c.sharedMemBytes = sharedMemBytes;
  c.attrs = kept.data();
  c.numAttrs = static_cast<unsigned>(kept.size());
  auto& api = x.Library<gen::cuda::Api>();
  return potential == 0 ? api.cuOccupancyMaxActiveClusters(value, func, &c) : api.cuOccupancyMaxPotentialClusterSize(value, func, &c);
}

}  // namespace remora::worker
