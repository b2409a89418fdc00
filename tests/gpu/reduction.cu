// reduction: multi-pass integer sum (exact), with dynamic shared memory sized by the third
// launch parameter (extern __shared__) and warp shuffles. Two block-level schemes:
//   tree:    classic tree in dynamic shared memory of blockDim.x elements;
//   shuffle: __shfl_down_sync within warps, one shared slot per warp, then the first warp.
// Each pass reduces n values to ceil(n / per_block) partial sums until one value is left.
#define GPU_TEST_NAME "reduction"
#include "gpu_test.h"

#include <vector>

using i64 = long long;

// One block sums `items_per_thread * blockDim.x` consecutive inputs (grid-stride within the
// block's range). InT is int (first pass) or i64 (later passes).
template <typename InT>
__device__ i64 thread_partial(const InT* in, i64 n, int items_per_thread) {
  const i64 base = i64(blockIdx.x) * blockDim.x * items_per_thread;
  i64 s = 0;
  for (int k = 0; k < items_per_thread; ++k) {
    const i64 i = base + i64(k) * blockDim.x + threadIdx.x;
    if (i < n) s += in[i];
  }
  return s;
}

template <typename InT>
__global__ void reduce_tree(const InT* in, i64* out, i64 n, int items_per_thread) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  i64* sdata = reinterpret_cast<i64*>(smem_raw);  // blockDim.x elements
  sdata[threadIdx.x] = thread_partial(in, n, items_per_thread);
  __syncthreads();
  // Works for any blockDim.x (not only powers of two).
  for (unsigned active = blockDim.x; active > 1;) {
    const unsigned half = (active + 1) / 2;
    if (threadIdx.x < active - half) sdata[threadIdx.x] += sdata[threadIdx.x + half];
    __syncthreads();
    active = half;
  }
  if (threadIdx.x == 0) out[blockIdx.x] = sdata[0];
}

template <typename InT>
__global__ void reduce_shuffle(const InT* in, i64* out, i64 n, int items_per_thread) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  i64* warp_sums = reinterpret_cast<i64*>(smem_raw);  // one per warp
  i64 s = thread_partial(in, n, items_per_thread);
  const unsigned lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
  const unsigned nwarps = (blockDim.x + warpSize - 1) / warpSize;
  for (int off = warpSize / 2; off > 0; off /= 2) s += __shfl_down_sync(0xffffffffu, s, off);
  if (lane == 0) warp_sums[warp] = s;
  __syncthreads();
  if (warp == 0) {
    s = lane < nwarps ? warp_sums[lane] : 0;
    for (int off = warpSize / 2; off > 0; off /= 2) s += __shfl_down_sync(0xffffffffu, s, off);
    if (lane == 0) out[blockIdx.x] = s;
  }
}

// Full multi-pass reduction of d_in[0..n) on the device; returns the sum and the pass count.
static i64 device_sum(const int* d_in, i64 n, bool use_tree, int block, int items,
                      int* passes_out) {
  const i64 per_block = i64(block) * items;
  const i64 max_partials = (n + per_block - 1) / per_block;
  i64 *buf0, *buf1;
  CK(cudaMalloc(&buf0, max_partials * sizeof(i64)));
  CK(cudaMalloc(&buf1, max_partials * sizeof(i64)));
  const size_t smem =
      use_tree ? block * sizeof(i64) : ((block + 31) / 32) * sizeof(i64);
  int passes = 0;
  i64 cur = n;
  i64* out = buf0;
  const void* in = d_in;
  bool first = true;
  do {
    const unsigned grid = static_cast<unsigned>((cur + per_block - 1) / per_block);
    if (first) {
      if (use_tree)
        reduce_tree<int><<<grid, block, smem>>>(static_cast<const int*>(in), out, cur, items);
      else
        reduce_shuffle<int><<<grid, block, smem>>>(static_cast<const int*>(in), out, cur, items);
    } else {
      if (use_tree)
        reduce_tree<i64><<<grid, block, smem>>>(static_cast<const i64*>(in), out, cur, items);
      else
        reduce_shuffle<i64><<<grid, block, smem>>>(static_cast<const i64*>(in), out, cur, items);
    }
    CK_LAUNCH("reduce pass");
    ++passes;
    first = false;
    cur = grid;
    in = out;
    out = (out == buf0) ? buf1 : buf0;
  } while (cur > 1);
  i64 result = 0;
  CK(cudaMemcpy(&result, in, sizeof(i64), cudaMemcpyDeviceToHost));
  CK(cudaFree(buf0));
  CK(cudaFree(buf1));
  *passes_out = passes;
  return result;
}

int main() {
  const i64 sizes[] = {1, 33, 1000, 65536, (1 << 20) + 7, (1 << 24) + 1001};
  struct Config {
    int block, items;
  };
  const Config configs[] = {{128, 1}, {256, 4}, {96, 3}, {1024, 2}, {512, 8}};
  gpu_test::Rng rng(0x5eed0003);
  int runs = 0, max_passes = 0;
  for (i64 n : sizes) {
    std::vector<int> h(n);
    i64 want = 0;
    for (auto& x : h) {
      // Large magnitudes so the total overflows int32 (checks 64-bit accumulation).
      x = rng.range(-2000000, 2000000) + ((rng.u32() & 7) == 0 ? 1000000000 : 0);
      want += x;
    }
    int* d_in;
    CK(cudaMalloc(&d_in, n * sizeof(int)));
    CK(cudaMemcpy(d_in, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    for (const Config& c : configs) {
      for (int tree = 0; tree < 2; ++tree) {
        int passes = 0;
        const i64 got = device_sum(d_in, n, tree != 0, c.block, c.items, &passes);
        if (got != want)
          gpu_test::fail("n=%lld %s block=%d items=%d: sum %lld, want %lld", n,
                         tree ? "tree" : "shuffle", c.block, c.items, got, want);
        ++runs;
        if (passes > max_passes) max_passes = passes;
      }
    }
    CK(cudaFree(d_in));
  }
  gpu_test::pass("%d reductions exact (6 sizes up to 2^24+1001, 5 block configs, tree and "
                 "shuffle, up to %d passes)",
                 runs, max_passes);
  return 0;
}
