// pool_retention: a stream-ordered pool that keeps freed memory (release threshold: never)
// keeps it charged to the tenant under Remora (docs/SECURITY.md, F5). Run through the shim
// as a tenant limited to LIMIT MiB (tenancy-gpu.sh: 256):
//   1. cudaMallocAsync 3/4 of the limit, cudaFreeAsync, synchronize: the pool keeps it;
//   2. cudaMalloc of 1/2 of the limit must be refused (cudaErrorMemoryAllocation): with the
//      kept memory it would pass the limit (before the fix the free gave the charge back);
//   3. cudaMallocAsync of 1/2 again must succeed (the pool's kept memory is reused);
//   4. after freeing it and cudaMemPoolTrimTo(pool, 0), cudaMalloc of 1/2 must succeed.
// Not meaningful natively (no quota): it is not part of the native/shim suite.
#define GPU_TEST_NAME "pool_retention"
#include <cstdlib>

#include "gpu_test.h"

int main(int argc, char** argv) {
  size_t limit = (argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 256) << 20;
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  cudaMemPool_t pool;
  CK(cudaDeviceGetDefaultMemPool(&pool, 0));
  uint64_t never = UINT64_MAX;
  CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &never));
  void* a = nullptr;
  CK(cudaMallocAsync(&a, limit / 4 * 3, s));
  CK(cudaFreeAsync(a, s));
  CK(cudaStreamSynchronize(s));
  uint64_t reserved = 0;
  CK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
  void* b = nullptr;
  cudaError_t e = cudaMalloc(&b, limit / 2);
  if (e == cudaSuccess) gpu_test::fail("cudaMalloc of half the limit succeeded while the pool keeps %llu bytes",
                                       static_cast<unsigned long long>(reserved));
  if (e != cudaErrorMemoryAllocation) gpu_test::fail("cudaMalloc: %s, expected cudaErrorMemoryAllocation", cudaGetErrorName(e));
  (void)cudaGetLastError();
  void* c = nullptr;
  CK(cudaMallocAsync(&c, limit / 2, s));  // served from the kept memory
  CK(cudaFreeAsync(c, s));
  CK(cudaStreamSynchronize(s));
  CK(cudaMemPoolTrimTo(pool, 0));
  CK(cudaMalloc(&b, limit / 2));
  CK(cudaFree(b));
  gpu_test::pass("kept pool memory (%llu bytes) stayed charged; reused; trimmed and given back",
                 static_cast<unsigned long long>(reserved));
}
