// occupancy: cudaFuncGetAttributes (static smem, launch bounds, binary version), a >48 KiB
// dynamic shared memory launch that must fail before and work after
// cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize), the preferred carveout
// attribute, cudaFuncSetCacheConfig, cudaOccupancyMaxActiveBlocksPerMultiprocessor[WithFlags],
// cudaOccupancyMaxPotentialBlockSize and ...VariableSMem (templates in cuda_runtime.h),
// cudaOccupancyAvailableDynamicSMemPerBlock; all sanity-checked against cudaDeviceProp.
#define GPU_TEST_NAME "occupancy"
#include "gpu_test.h"

#include <vector>

constexpr int kStaticFloats = 1024;

__global__ void simple_kernel(const int* in, int* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * 5 - 1;
}

__global__ void static_smem_kernel(const float* in, float* out) {
  __shared__ float tile[kStaticFloats];
  for (int i = threadIdx.x; i < kStaticFloats; i += blockDim.x) tile[i] = in[i];
  __syncthreads();
  for (int i = threadIdx.x; i < kStaticFloats; i += blockDim.x)
    out[i] = tile[kStaticFloats - 1 - i];
}

__global__ void __launch_bounds__(128) bounded_kernel(int* out) {
  out[blockIdx.x * blockDim.x + threadIdx.x] = threadIdx.x;
}

// Fills `words` ints of dynamic shared memory, then reads them back reversed; every block
// covers its own slice of `in`/`out`.
__global__ void dyn_smem_kernel(const int* in, int* out, int words) {
  extern __shared__ int smem[];
  const int* src = in + size_t(blockIdx.x) * words;
  int* dst = out + size_t(blockIdx.x) * words;
  for (int i = threadIdx.x; i < words; i += blockDim.x) smem[i] = src[i];
  __syncthreads();
  for (int i = threadIdx.x; i < words; i += blockDim.x) dst[i] = smem[words - 1 - i] ^ blockIdx.x;
}

// Dynamic smem as a function of the block size, for ...VariableSMem (a __host__ __device__
// functor: the template is __host__ __device__).
struct SmemPerBlock {
  __host__ __device__ size_t operator()(int block_size) const {
    return size_t(block_size) * 32 * sizeof(int);
  }
};

int main() {
  int dev = 0;
  CK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, dev));
  const int sm_version = prop.major * 10 + prop.minor;

  // --- cudaFuncGetAttributes ----------------------------------------------------------------
  cudaFuncAttributes a_simple{}, a_static{}, a_bounded{}, a_dyn{};
  CK(cudaFuncGetAttributes(&a_simple, simple_kernel));
  CK(cudaFuncGetAttributes(&a_static, static_smem_kernel));
  CK(cudaFuncGetAttributes(&a_bounded, bounded_kernel));
  CK(cudaFuncGetAttributes(&a_dyn, dyn_smem_kernel));
  if (a_simple.maxThreadsPerBlock <= 0 || a_simple.maxThreadsPerBlock > prop.maxThreadsPerBlock)
    gpu_test::fail("simple_kernel maxThreadsPerBlock %d (device %d)", a_simple.maxThreadsPerBlock,
                   prop.maxThreadsPerBlock);
  if (a_simple.numRegs <= 0 || a_simple.numRegs > prop.regsPerBlock)
    gpu_test::fail("simple_kernel numRegs %d", a_simple.numRegs);
  if (a_simple.binaryVersion < 90 || a_simple.binaryVersion > sm_version)
    gpu_test::fail("binaryVersion %d (built for sm_90, device sm_%d)", a_simple.binaryVersion,
                   sm_version);
  if (a_simple.ptxVersion < 90 || a_simple.ptxVersion > sm_version)
    gpu_test::fail("ptxVersion %d", a_simple.ptxVersion);
  if (a_simple.sharedSizeBytes != 0)
    gpu_test::fail("simple_kernel sharedSizeBytes %zu, want 0", a_simple.sharedSizeBytes);
  if (a_static.sharedSizeBytes < kStaticFloats * sizeof(float) ||
      a_static.sharedSizeBytes > prop.sharedMemPerBlock)
    gpu_test::fail("static_smem_kernel sharedSizeBytes %zu, want >= %zu",
                   a_static.sharedSizeBytes, kStaticFloats * sizeof(float));
  if (a_bounded.maxThreadsPerBlock > 128 || a_bounded.maxThreadsPerBlock <= 0)
    gpu_test::fail("__launch_bounds__(128) kernel reports maxThreadsPerBlock %d",
                   a_bounded.maxThreadsPerBlock);
  const int default_dyn_max = a_dyn.maxDynamicSharedSizeBytes;
  if (default_dyn_max <= 0 || size_t(default_dyn_max) > prop.sharedMemPerBlock)
    gpu_test::fail("default maxDynamicSharedSizeBytes %d (sharedMemPerBlock %zu)",
                   default_dyn_max, prop.sharedMemPerBlock);

  // --- >48 KiB dynamic shared memory ---------------------------------------------------------
  const size_t optin = prop.sharedMemPerBlockOptin;
  if (optin <= 48 * 1024) gpu_test::fail("sharedMemPerBlockOptin %zu <= 48 KiB", optin);
  const int dyn_bytes = static_cast<int>(optin - a_dyn.sharedSizeBytes);
  const int words = dyn_bytes / int(sizeof(int));
  const int blocks = prop.multiProcessorCount;
  int *d_in, *d_out;
  CK(cudaMalloc(&d_in, size_t(blocks) * words * sizeof(int)));
  CK(cudaMalloc(&d_out, size_t(blocks) * words * sizeof(int)));
  std::vector<int> h_in(size_t(blocks) * words), h_out(size_t(blocks) * words);
  gpu_test::Rng rng(0x5eed0009);
  for (auto& v : h_in) v = static_cast<int>(rng.u32());
  CK(cudaMemcpy(d_in, h_in.data(), h_in.size() * sizeof(int), cudaMemcpyHostToDevice));

  // Without the attribute the launch must be refused (non-sticky).
  dyn_smem_kernel<<<blocks, 256, dyn_bytes>>>(d_in, d_out, words);
  const cudaError_t refused = cudaGetLastError();
  if (refused == cudaSuccess)
    gpu_test::fail("launch with %d B dynamic smem succeeded without the opt-in attribute",
                   dyn_bytes);
  gpu_test::info("launch with %d B dynamic smem before opt-in: %s", dyn_bytes,
                 cudaGetErrorName(refused));
  CK(cudaDeviceSynchronize());  // context still fine

  CK(cudaFuncSetAttribute(dyn_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          dyn_bytes));
  CK(cudaFuncGetAttributes(&a_dyn, dyn_smem_kernel));
  if (a_dyn.maxDynamicSharedSizeBytes != dyn_bytes)
    gpu_test::fail("maxDynamicSharedSizeBytes %d after setting %d", a_dyn.maxDynamicSharedSizeBytes,
                   dyn_bytes);
  dyn_smem_kernel<<<blocks, 256, dyn_bytes>>>(d_in, d_out, words);
  CK_LAUNCH("dyn_smem_kernel (opted in)");
  CK(cudaMemcpy(h_out.data(), d_out, h_out.size() * sizeof(int), cudaMemcpyDeviceToHost));
  for (int b = 0; b < blocks; ++b)
    for (int i = 0; i < words; ++i) {
      const int want = h_in[size_t(b) * words + (words - 1 - i)] ^ b;
      if (h_out[size_t(b) * words + i] != want)
        gpu_test::fail("dyn smem block %d word %d: %d, want %d", b, i,
                       h_out[size_t(b) * words + i], want);
    }

  // --- cache config and carveout ---------------------------------------------------------------
  CK(cudaFuncSetCacheConfig(simple_kernel, cudaFuncCachePreferShared));
  CK(cudaFuncSetCacheConfig(static_smem_kernel, cudaFuncCachePreferL1));
  CK(cudaFuncSetAttribute(simple_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 50));
  CK(cudaFuncGetAttributes(&a_simple, simple_kernel));
  if (a_simple.preferredShmemCarveout != 50)
    gpu_test::fail("preferredShmemCarveout %d after setting 50", a_simple.preferredShmemCarveout);

  // --- occupancy ------------------------------------------------------------------------------
  int occ256 = 0, occ256_flags = 0, occ_dyn = 0, occ_48k = 0, occ_bounded = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ256, simple_kernel, 256, 0));
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
      &occ256_flags, simple_kernel, 256, 0, cudaOccupancyDisableCachingOverride));
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ_dyn, dyn_smem_kernel, 256, dyn_bytes));
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ_48k, dyn_smem_kernel, 128, 48 * 1024));
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ_bounded, bounded_kernel, 128, 0));
  if (occ256 < 1 || occ256 * 256 > prop.maxThreadsPerMultiProcessor ||
      occ256 > prop.maxBlocksPerMultiProcessor)
    gpu_test::fail("occupancy(simple, 256 threads) = %d blocks/SM", occ256);
  if (occ256_flags < 1 || occ256_flags * 256 > prop.maxThreadsPerMultiProcessor)
    gpu_test::fail("occupancy WithFlags(simple, 256) = %d", occ256_flags);
  if (occ_dyn != 1)
    gpu_test::fail("occupancy with %d B dynamic smem = %d blocks/SM, want 1", dyn_bytes, occ_dyn);
  if (occ_48k < 1 || size_t(occ_48k) * 48 * 1024 > prop.sharedMemPerMultiprocessor)
    gpu_test::fail("occupancy with 48 KiB dynamic smem = %d blocks/SM (SM has %zu B)", occ_48k,
                   prop.sharedMemPerMultiprocessor);
  if (occ_bounded < 1 || occ_bounded > prop.maxBlocksPerMultiProcessor)
    gpu_test::fail("occupancy(bounded_kernel, 128) = %d", occ_bounded);

  int min_grid = 0, block = 0;
  CK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, simple_kernel, 0, 0));
  if (block <= 0 || block > prop.maxThreadsPerBlock || block % prop.warpSize != 0)
    gpu_test::fail("cudaOccupancyMaxPotentialBlockSize block %d", block);
  int occ_at_block = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ_at_block, simple_kernel, block, 0));
  if (min_grid != occ_at_block * prop.multiProcessorCount)
    gpu_test::fail("minGridSize %d != %d blocks/SM x %d SMs", min_grid, occ_at_block,
                   prop.multiProcessorCount);
  int min_grid_b = 0, block_b = 0;
  CK(cudaOccupancyMaxPotentialBlockSize(&min_grid_b, &block_b, bounded_kernel, 0, 0));
  if (block_b <= 0 || block_b > 128)
    gpu_test::fail("cudaOccupancyMaxPotentialBlockSize(bounded) block %d > 128", block_b);
  int min_grid_v = 0, block_v = 0;
  CK(cudaOccupancyMaxPotentialBlockSizeVariableSMem(
      &min_grid_v, &block_v, dyn_smem_kernel,
      SmemPerBlock{}, 0));
  if (block_v <= 0 || block_v > prop.maxThreadsPerBlock ||
      size_t(block_v) * 32 * sizeof(int) > size_t(dyn_bytes))
    gpu_test::fail("...VariableSMem block %d", block_v);
  size_t avail = 0;
  CK(cudaOccupancyAvailableDynamicSMemPerBlock(&avail, dyn_smem_kernel, 1, 256));
  if (avail < size_t(48 * 1024) || avail > optin)
    gpu_test::fail("cudaOccupancyAvailableDynamicSMemPerBlock(1 block) = %zu (optin %zu)", avail,
                   optin);

  // --- launch with the suggested configuration --------------------------------------------------
  const int n = 1000003;
  int *d_a, *d_b;
  CK(cudaMalloc(&d_a, n * sizeof(int)));
  CK(cudaMalloc(&d_b, n * sizeof(int)));
  std::vector<int> ha(n), hb(n);
  for (int i = 0; i < n; ++i) ha[i] = i - 500000;
  CK(cudaMemcpy(d_a, ha.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  simple_kernel<<<(n + block - 1) / block, block>>>(d_a, d_b, n);
  CK_LAUNCH("simple_kernel (suggested block size)");
  CK(cudaMemcpy(hb.data(), d_b, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i)
    if (hb[i] != ha[i] * 5 - 1) gpu_test::fail("simple_kernel[%d] = %d", i, hb[i]);

  CK(cudaFree(d_in));
  CK(cudaFree(d_out));
  CK(cudaFree(d_a));
  CK(cudaFree(d_b));
  gpu_test::pass("regs %d, %d B dyn smem launch after opt-in (default max %d), occupancy "
                 "256t=%d/SM, dyn=%d, 48K=%d; suggested block %d grid %d; avail dyn smem %zu",
                 a_simple.numRegs, dyn_bytes, default_dyn_max, occ256, occ_dyn, occ_48k, block,
                 min_grid, avail);
  return 0;
}
