// Device code of remora-bench (see kernels.hpp).
#include "kernels.hpp"

namespace remora::bench {

__global__ void null_kernel() {}

void launch_null_kernel(cudaStream_t stream) { null_kernel<<<1, 1, 0, stream>>>(); }

}  // namespace remora::bench
