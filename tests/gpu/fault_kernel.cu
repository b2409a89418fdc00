// fault_kernel: a kernel writes through an invalid device pointer. Expected behaviour, all of
// which must be observed for exit 0:
//  1. the launch itself is accepted (or already reports the fault, it is asynchronous);
//  2. the next cudaDeviceSynchronize returns cudaErrorIllegalAddress (or
//     cudaErrorLaunchFailure);
//  3. the error is sticky: a following cudaMalloc and a following cudaMemcpy fail too;
//  4. cudaGetLastError and cudaPeekAtLastError report it.
// Whether a second cudaGetLastError still reports it is printed (sticky errors are not
// cleared) but only required to be an error or success, not a different error.
#define GPU_TEST_NAME "fault_kernel"
#include "gpu_test.h"

__global__ void good_kernel(int* p) { p[threadIdx.x] = threadIdx.x * 3; }

// The pointer comes from the host, so the compiler cannot see it is invalid.
__global__ void bad_write(int* p, int v) { p[threadIdx.x * 1024] = v; }

static bool is_fault(cudaError_t e) {
  return e == cudaErrorIllegalAddress || e == cudaErrorLaunchFailure;
}

int main() {
  // The context works before the fault.
  int* d;
  CK(cudaMalloc(&d, 64 * sizeof(int)));
  good_kernel<<<1, 64>>>(d);
  CK_LAUNCH("good_kernel");
  int h[64];
  CK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 64; ++i)
    if (h[i] != i * 3) gpu_test::fail("good_kernel before the fault: h[%d] = %d", i, h[i]);

  // An address far from any allocation (low canonical VA, never mapped for device memory).
  int* bad = reinterpret_cast<int*>(uintptr_t(0x10000));
  bad_write<<<4, 32>>>(bad, 42);
  const cudaError_t at_launch = cudaGetLastError();
  if (at_launch != cudaSuccess && !is_fault(at_launch))
    gpu_test::fail("launch of bad_write returned %s", cudaGetErrorName(at_launch));

  const cudaError_t sync = cudaDeviceSynchronize();
  if (!is_fault(sync))
    gpu_test::fail("cudaDeviceSynchronize after the faulting kernel returned %s (%s), want "
                   "cudaErrorIllegalAddress or cudaErrorLaunchFailure",
                   cudaGetErrorName(sync), cudaGetErrorString(sync));

  void* p2 = nullptr;
  const cudaError_t malloc_after = cudaMalloc(&p2, 1024);
  if (malloc_after == cudaSuccess)
    gpu_test::fail("cudaMalloc after the fault succeeded: the error is not sticky");
  const cudaError_t memcpy_after = cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  if (memcpy_after == cudaSuccess)
    gpu_test::fail("cudaMemcpy after the fault succeeded: the error is not sticky");
  if (!is_fault(malloc_after) || !is_fault(memcpy_after))
    gpu_test::fail("after %s: cudaMalloc returned %s, cudaMemcpy returned %s (want the sticky "
                   "fault error)",
                   cudaGetErrorName(sync), cudaGetErrorName(malloc_after),
                   cudaGetErrorName(memcpy_after));

  const cudaError_t peek = cudaPeekAtLastError();
  const cudaError_t last = cudaGetLastError();
  const cudaError_t last_again = cudaGetLastError();
  if (!is_fault(peek)) gpu_test::fail("cudaPeekAtLastError returned %s", cudaGetErrorName(peek));
  if (!is_fault(last)) gpu_test::fail("cudaGetLastError returned %s", cudaGetErrorName(last));
  if (last_again != cudaSuccess && !is_fault(last_again))
    gpu_test::fail("second cudaGetLastError returned %s", cudaGetErrorName(last_again));
  const cudaError_t sync_again = cudaDeviceSynchronize();
  if (!is_fault(sync_again))
    gpu_test::fail("second cudaDeviceSynchronize returned %s (sticky error lost)",
                   cudaGetErrorName(sync_again));

  gpu_test::info("launch: %s, sync: %s, cudaMalloc: %s, cudaMemcpy: %s, peek: %s, get: %s, "
                 "get again: %s, sync again: %s",
                 cudaGetErrorName(at_launch), cudaGetErrorName(sync),
                 cudaGetErrorName(malloc_after), cudaGetErrorName(memcpy_after),
                 cudaGetErrorName(peek), cudaGetErrorName(last), cudaGetErrorName(last_again),
                 cudaGetErrorName(sync_again));
  // No cleanup: the context is unusable (cudaFree would fail the same way).
  gpu_test::pass("fault reported as %s at the next synchronisation; sticky for cudaMalloc, "
                 "cudaMemcpy, cudaGetLastError, cudaDeviceSynchronize",
                 cudaGetErrorName(sync));
  return 0;
}
