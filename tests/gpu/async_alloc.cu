// async_alloc: stream-ordered allocation. cudaDevAttrMemoryPoolsSupported,
// cudaDeviceGetDefaultMemPool / cudaDeviceGetMemPool, cudaMemPoolSetAttribute /
// cudaMemPoolGetAttribute (release threshold, used/reserved memory), cudaMallocAsync /
// cudaFreeAsync on several streams in a loop with kernels using the memory, an allocation
// made on one stream and used + freed on another after cudaStreamWaitEvent,
// cudaMemPoolCreate + cudaMallocFromPoolAsync + cudaMemPoolDestroy, cudaMemPoolTrimTo.
#define GPU_TEST_NAME "async_alloc"
#include "gpu_test.h"

#include <vector>

constexpr int kStreams = 4;
constexpr int kIters = 16;

__global__ void fill(int* p, int n, int base) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    p[i] = base + i;
}

// out[0] = sum of p[i] * (i % 7) over the buffer, out[1] = p[n-1] (atomics: order-free).
__global__ void digest(const int* p, int n, unsigned long long* out) {
  unsigned long long s = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    s += static_cast<unsigned long long>(static_cast<unsigned>(p[i])) * (i % 7);
  atomicAdd(&out[0], s);
  if (blockIdx.x == 0 && threadIdx.x == 0) out[1] = static_cast<unsigned>(p[n - 1]);
}

static unsigned long long host_digest(int n, int base) {
  unsigned long long s = 0;
  for (int i = 0; i < n; ++i)
    s += static_cast<unsigned long long>(static_cast<unsigned>(base + i)) * (i % 7);
  return s;
}

static uint64_t pool_attr(cudaMemPool_t pool, cudaMemPoolAttr attr) {
  uint64_t v = 0;
  CK(cudaMemPoolGetAttribute(pool, attr, &v));
  return v;
}

int main() {
  int dev = 0;
  CK(cudaGetDevice(&dev));
  int pools_supported = 0;
  CK(cudaDeviceGetAttribute(&pools_supported, cudaDevAttrMemoryPoolsSupported, dev));
  if (!pools_supported) gpu_test::fail("cudaDevAttrMemoryPoolsSupported = 0");

  cudaMemPool_t pool = nullptr, current = nullptr;
  CK(cudaDeviceGetDefaultMemPool(&pool, dev));
  CK(cudaDeviceGetMemPool(&current, dev));
  if (pool == nullptr || current != pool)
    gpu_test::fail("default pool %p, current pool %p", static_cast<void*>(pool),
                   static_cast<void*>(current));
  uint64_t threshold = 64ull << 20;
  CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  if (pool_attr(pool, cudaMemPoolAttrReleaseThreshold) != threshold)
    gpu_test::fail("release threshold reads back %llu",
                   static_cast<unsigned long long>(pool_attr(pool, cudaMemPoolAttrReleaseThreshold)));

  cudaStream_t streams[kStreams];
  for (auto& s : streams) CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned long long* d_digests;  // [kStreams][kIters][2]
  CK(cudaMalloc(&d_digests, sizeof(unsigned long long) * 2 * kStreams * kIters));
  CK(cudaMemset(d_digests, 0, sizeof(unsigned long long) * 2 * kStreams * kIters));
  CK(cudaDeviceSynchronize());

  // --- per-stream alloc / use / free loops ---------------------------------------------------
  gpu_test::Rng rng(0x5eed000b);
  int sizes[kStreams][kIters];
  uint64_t peak_used = 0;
  for (int it = 0; it < kIters; ++it) {
    int* ptrs[kStreams];
    for (int s = 0; s < kStreams; ++s) {
      sizes[s][it] = 1000 + rng.range(0, 1 << 20);
      CK(cudaMallocAsync(reinterpret_cast<void**>(&ptrs[s]), sizes[s][it] * sizeof(int),
                         streams[s]));
      fill<<<128, 256, 0, streams[s]>>>(ptrs[s], sizes[s][it], s * 1000003 + it * 7919);
      CK_LAUNCH("fill");
      digest<<<64, 256, 0, streams[s]>>>(ptrs[s], sizes[s][it],
                                         d_digests + 2 * (s * kIters + it));
      CK_LAUNCH("digest");
    }
    if (it == kIters / 2) {
      // All four allocations of this iteration are live in stream order; once the streams
      // have caught up, the pool must account for at least their sizes.
      for (auto& s : streams) CK(cudaStreamSynchronize(s));
      peak_used = pool_attr(pool, cudaMemPoolAttrUsedMemCurrent);
      uint64_t want = 0;
      for (int s = 0; s < kStreams; ++s) want += sizes[s][it] * sizeof(int);
      if (peak_used < want)
        gpu_test::fail("cudaMemPoolAttrUsedMemCurrent %llu < %llu bytes live",
                       static_cast<unsigned long long>(peak_used),
                       static_cast<unsigned long long>(want));
      if (pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) < peak_used)
        gpu_test::fail("reserved < used");
    }
    for (int s = 0; s < kStreams; ++s) CK(cudaFreeAsync(ptrs[s], streams[s]));
  }

  // --- allocate on stream 0, use and free on stream 1 ----------------------------------------
  const int xn = 1 << 18;
  int* shared_buf;
  CK(cudaMallocAsync(reinterpret_cast<void**>(&shared_buf), xn * sizeof(int), streams[0]));
  fill<<<64, 256, 0, streams[0]>>>(shared_buf, xn, -777);
  CK_LAUNCH("fill (cross-stream)");
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  CK(cudaEventRecord(ev, streams[0]));
  CK(cudaStreamWaitEvent(streams[1], ev, 0));
  unsigned long long* d_x;
  CK(cudaMallocAsync(reinterpret_cast<void**>(&d_x), 2 * sizeof(unsigned long long), streams[1]));
  CK(cudaMemsetAsync(d_x, 0, 2 * sizeof(unsigned long long), streams[1]));
  digest<<<64, 256, 0, streams[1]>>>(shared_buf, xn, d_x);
  CK_LAUNCH("digest (cross-stream)");
  CK(cudaFreeAsync(shared_buf, streams[1]));
  unsigned long long x_digest[2];
  CK(cudaMemcpyAsync(x_digest, d_x, sizeof x_digest, cudaMemcpyDeviceToHost, streams[1]));
  CK(cudaFreeAsync(d_x, streams[1]));

  // --- an explicit pool ----------------------------------------------------------------------
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = dev;
  cudaMemPool_t own_pool;
  CK(cudaMemPoolCreate(&own_pool, &props));
  int* own;
  const int on = 300001;
  CK(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&own), on * sizeof(int), own_pool,
                             streams[2]));
  fill<<<64, 256, 0, streams[2]>>>(own, on, 42);
  CK_LAUNCH("fill (own pool)");
  std::vector<int> own_back(on);
  CK(cudaMemcpyAsync(own_back.data(), own, on * sizeof(int), cudaMemcpyDeviceToHost,
                     streams[2]));
  CK(cudaFreeAsync(own, streams[2]));

  for (auto& s : streams) CK(cudaStreamSynchronize(s));
  CK(cudaDeviceSynchronize());

  // --- checks -----------------------------------------------------------------------------
  std::vector<unsigned long long> digests(2 * kStreams * kIters);
  CK(cudaMemcpy(digests.data(), d_digests, digests.size() * sizeof(unsigned long long),
                cudaMemcpyDeviceToHost));
  for (int s = 0; s < kStreams; ++s)
    for (int it = 0; it < kIters; ++it) {
      const int n = sizes[s][it], base = s * 1000003 + it * 7919;
      const unsigned long long* got = &digests[2 * (s * kIters + it)];
      if (got[0] != host_digest(n, base) || got[1] != static_cast<unsigned>(base + n - 1))
        gpu_test::fail("stream %d iteration %d (%d ints): digest %llu/%llu, want %llu/%u", s, it,
                       n, got[0], got[1], host_digest(n, base),
                       static_cast<unsigned>(base + n - 1));
    }
  if (x_digest[0] != host_digest(xn, -777) || x_digest[1] != static_cast<unsigned>(-777 + xn - 1))
    gpu_test::fail("cross-stream allocation: digest %llu, want %llu", x_digest[0],
                   host_digest(xn, -777));
  for (int i = 0; i < on; ++i)
    if (own_back[i] != 42 + i) gpu_test::fail("own pool element %d = %d", i, own_back[i]);

  const uint64_t used_after = pool_attr(pool, cudaMemPoolAttrUsedMemCurrent);
  if (used_after != 0)
    gpu_test::fail("default pool still has %llu bytes in use after every cudaFreeAsync completed",
                   static_cast<unsigned long long>(used_after));
  const uint64_t reserved_before_trim = pool_attr(pool, cudaMemPoolAttrReservedMemCurrent);
  CK(cudaMemPoolTrimTo(pool, 0));
  const uint64_t reserved_after_trim = pool_attr(pool, cudaMemPoolAttrReservedMemCurrent);
  if (reserved_after_trim > reserved_before_trim)
    gpu_test::fail("cudaMemPoolTrimTo(0) grew the reserve");
  CK(cudaMemPoolDestroy(own_pool));

  CK(cudaEventDestroy(ev));
  for (auto& s : streams) CK(cudaStreamDestroy(s));
  CK(cudaFree(d_digests));
  gpu_test::pass("%d cudaMallocAsync/cudaFreeAsync on %d streams checked, cross-stream alloc, "
                 "own pool; peak used %llu B, reserve %llu -> %llu B after trim",
                 kStreams * kIters + 2, kStreams, static_cast<unsigned long long>(peak_used),
                 static_cast<unsigned long long>(reserved_before_trim),
                 static_cast<unsigned long long>(reserved_after_trim));
  return 0;
}
