// occupancy_memo: the answers of cudaOccupancyMaxActiveBlocksPerMultiprocessor and
// cudaOccupancyAvailableDynamicSMemPerBlock repeated in a loop stay the same, and they follow
// a change of the kernel's carveout and of the context's cache configuration. Through Remora
// (tests/integration/occupancy_census_test.sh) the call census of the interval between
// cudaProfilerStart and cudaProfilerStop shows the repeated questions answered in the client:
// a round trip only after each change (issue 45: PyTorch asks the same questions every step);
// an attribute set again to the value it has is answered in the client too.
#define GPU_TEST_NAME "occupancy_memo"
#include "gpu_test.h"

#include <cuda_profiler_api.h>

__global__ void scale_kernel(float* p, float f) { p[blockIdx.x * blockDim.x + threadIdx.x] *= f; }

int main() {
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  int first = 0;
  size_t avail_first = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&first, scale_kernel, 256, 0));
  CK(cudaOccupancyAvailableDynamicSMemPerBlock(&avail_first, scale_kernel, 1, 256));
  if (first < 1 || first > prop.maxBlocksPerMultiProcessor) gpu_test::fail("occupancy(256) = %d blocks/SM", first);

  CK(cudaProfilerStart());
  for (int i = 0; i < 100; i++) {
    int n = 0;
    size_t avail = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, scale_kernel, 256, 0));
    CK(cudaOccupancyAvailableDynamicSMemPerBlock(&avail, scale_kernel, 1, 256));
    if (n != first || avail != avail_first)
      gpu_test::fail("question %d: %d blocks/SM, %zu B available; first %d, %zu B", i, n, avail, first, avail_first);
  }
  // The kernel's configuration changes: the next answer is the device's again.
  CK(cudaFuncSetAttribute(scale_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 25));
  // Set again to the value it has: nothing changes (through Remora: no round trip).
  CK(cudaFuncSetAttribute(scale_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 25));
  int after_carveout = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&after_carveout, scale_kernel, 256, 0));
  // So does the context's.
  CK(cudaDeviceSetCacheConfig(cudaFuncCachePreferL1));
  int after_cache = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&after_cache, scale_kernel, 256, 0));
  CK(cudaProfilerStop());
  if (after_carveout < 1 || after_carveout > prop.maxBlocksPerMultiProcessor || after_cache < 1 ||
      after_cache > prop.maxBlocksPerMultiProcessor)
    gpu_test::fail("occupancy after the changes: %d, %d blocks/SM", after_carveout, after_cache);
  gpu_test::pass("%d blocks/SM at 256 threads (%d after a 25%% carveout, %d preferring L1), %zu B dynamic smem for one block",
                 first, after_carveout, after_cache, avail_first);
  return 0;
}
