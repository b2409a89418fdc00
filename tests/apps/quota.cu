// quota LIMIT_MIB CHUNK_MIB: run as a tenant whose memory limit is LIMIT_MIB per GPU (and
// nothing else allocated). Checks the tenant's view and that every allocation path hits the
// limit exactly like a full GPU: cudaMemGetInfo/totalGlobalMem report the limit; LIMIT/CHUNK
// allocations succeed and the next one fails with cudaErrorMemoryAllocation (the application
// keeps running); pitch, 3D and stream-ordered allocations are refused too while full;
// pinned host memory is not device memory; after a free the same allocation succeeds again.
#include "app_check.h"

int main(int argc, char** argv) {
  REQUIRE(argc == 3, "usage: quota LIMIT_MIB CHUNK_MIB");
  const size_t limit = std::strtoull(argv[1], nullptr, 0) << 20;
  const size_t chunk = std::strtoull(argv[2], nullptr, 0) << 20;
  REQUIRE(chunk > 0 && limit % chunk == 0, "LIMIT must be a multiple of CHUNK");

  size_t free_b = 0, total_b = 0;
  CHECK(cudaMemGetInfo(&free_b, &total_b));
  REQUIRE(total_b == limit, "cudaMemGetInfo total %zu, expected the limit %zu", total_b, limit);
  REQUIRE(free_b == limit, "cudaMemGetInfo free %zu, expected %zu (nothing allocated yet)", free_b, limit);
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  REQUIRE(prop.totalGlobalMem == limit, "totalGlobalMem %zu, expected the limit %zu", prop.totalGlobalMem, limit);

  std::vector<void*> held;
  for (size_t i = 0; i < limit / chunk; i++) {
    void* p = nullptr;
    CHECK(cudaMalloc(&p, chunk));
    held.push_back(p);
    std::printf("allocation %zu of %zu MiB: ok\n", i + 1, chunk >> 20);
  }
  void* extra = nullptr;
  EXPECT_ERR(cudaMalloc(&extra, chunk), cudaErrorMemoryAllocation);
  std::printf("allocation %zu of %zu MiB: cudaErrorMemoryAllocation\n", held.size() + 1, chunk >> 20);
  // Not sticky: the last error is reported once, then the application carries on.
  EXPECT_ERR(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_ERR(cudaGetLastError(), cudaSuccess);
  EXPECT_ERR(cudaMalloc(&extra, 1), cudaErrorMemoryAllocation);
  CHECK(cudaMemGetInfo(&free_b, &total_b));
  REQUIRE(free_b == 0 && total_b == limit, "full: free %zu total %zu", free_b, total_b);

  // Every device allocation path is charged.
  size_t pitch = 0;
  EXPECT_ERR(cudaMallocPitch(&extra, &pitch, 4096, 16), cudaErrorMemoryAllocation);
  cudaPitchedPtr pp;
  EXPECT_ERR(cudaMalloc3D(&pp, make_cudaExtent(4096, 16, 2)), cudaErrorMemoryAllocation);
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  EXPECT_ERR(cudaMallocAsync(&extra, 1 << 20, s), cudaErrorMemoryAllocation);
  (void)cudaGetLastError();
  void* pinned = nullptr;
  CHECK(cudaMallocHost(&pinned, chunk));  // host memory: not counted
  CHECK(cudaFreeHost(pinned));

  // The data already held is intact and usable.
  std::vector<unsigned char> pattern = RandomBytes(4096, 7), back(4096);
  CHECK(cudaMemcpy(held.back(), pattern.data(), pattern.size(), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(back.data(), held.back(), back.size(), cudaMemcpyDeviceToHost));
  REQUIRE(pattern == back, "data mismatch in an allocation under a full quota");

  // A free makes room again, for every path.
  CHECK(cudaFree(held.back()));
  held.pop_back();
  CHECK(cudaMemGetInfo(&free_b, &total_b));
  REQUIRE(free_b == chunk, "after a free: free %zu, expected %zu", free_b, chunk);
  CHECK(cudaMallocPitch(&extra, &pitch, 4096, 16));
  CHECK(cudaFree(extra));
  CHECK(cudaMallocAsync(&extra, 1 << 20, s));
  CHECK(cudaFreeAsync(extra, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMalloc(&extra, chunk));
  std::printf("after a free, allocation of %zu MiB: ok\n", chunk >> 20);
  held.push_back(extra);
  EXPECT_ERR(cudaMalloc(&extra, chunk), cudaErrorMemoryAllocation);
  (void)cudaGetLastError();

  for (void* p : held) CHECK(cudaFree(p));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaMemGetInfo(&free_b, &total_b));
  REQUIRE(free_b == limit, "all freed: free %zu, expected %zu", free_b, limit);
  std::printf("PASS quota\n");
  return 0;
}
