// The only device code of remora-bench: a null kernel, launched the way nvcc-compiled apps
// launch (<<<>>> -> __cudaPushCallConfiguration / __cudaLaunchKernel through the runtime), so
// that under the shim the bench exercises the same path as an unmodified application.
#pragma once

#include <cuda_runtime_api.h>

namespace remora::bench {

// Enqueues the null kernel <<<1, 1, 0, stream>>>. Does not check for errors: the caller
// checks cudaGetLastError or the result of the next synchronising call.
void launch_null_kernel(cudaStream_t stream);

}  // namespace remora::bench
