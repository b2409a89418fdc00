// tensor_map: cuTensorMapEncodeTiled on device memory, and a kernel that loads a tile with the
// Tensor Memory Accelerator (cp.async.bulk.tensor through libcu++) and writes it back out: the
// map travels by value as a __grid_constant__ parameter (128 bytes, 64-byte aligned).
#define GPU_TEST_NAME "tensor_map"
#include "gpu_test.h"

#include <cuda.h>
#include <cuda/barrier>

#include <vector>

using barrier = cuda::barrier<cuda::thread_scope_block>;
namespace cde = cuda::device::experimental;

constexpr int kW = 256, kH = 128, kTileW = 32, kTileH = 16;

__global__ void load_tile(const __grid_constant__ CUtensorMap map, float* out, int x0, int y0) {
  __shared__ alignas(128) float tile[kTileH][kTileW];
#pragma nv_diag_suppress static_var_with_dynamic_init
  __shared__ barrier bar;
  if (threadIdx.x == 0) {
    init(&bar, blockDim.x);
    cde::fence_proxy_async_shared_cta();
  }
  __syncthreads();
  barrier::arrival_token token;
  if (threadIdx.x == 0) {
    cde::cp_async_bulk_tensor_2d_global_to_shared(&tile, &map, x0, y0, bar);
    token = cuda::device::barrier_arrive_tx(bar, 1, sizeof(tile));
  } else {
    token = bar.arrive();
  }
  bar.wait(std::move(token));
  for (int i = threadIdx.x; i < kTileW * kTileH; i += blockDim.x) out[i] = tile[i / kTileW][i % kTileW];
}

int main() {
  std::vector<float> h(kW * kH);
  for (int i = 0; i < kW * kH; i++) h[i] = float(i);
  float *d = nullptr, *out = nullptr;
  CK(cudaMalloc(&d, h.size() * sizeof(float)));
  CK(cudaMalloc(&out, kTileW * kTileH * sizeof(float)));
  CK(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
  CUtensorMap map{};
  cuuint64_t dims[2] = {kW, kH};
  cuuint64_t strides[1] = {kW * sizeof(float)};
  cuuint32_t box[2] = {kTileW, kTileH};
  cuuint32_t elem[2] = {1, 1};
  CUresult r = cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, d, dims, strides, box, elem,
                                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                      CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) gpu_test::fail("cuTensorMapEncodeTiled: CUresult %d", int(r));
  const int x0 = 64, y0 = 32;
  load_tile<<<1, 128>>>(map, out, x0, y0);
  CK_LAUNCH("load_tile");
  std::vector<float> got(kTileW * kTileH);
  CK(cudaMemcpy(got.data(), out, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < kTileW * kTileH; i++) {
    float want = h[(y0 + i / kTileW) * kW + x0 + i % kTileW];
    if (got[i] != want) gpu_test::fail("tile element %d: %g, want %g", i, got[i], want);
  }
  // The address replaced in place: the same tile of a second copy.
  float* d2 = nullptr;
  CK(cudaMalloc(&d2, h.size() * sizeof(float)));
  CK(cudaMemset(d2, 0, h.size() * sizeof(float)));
  r = cuTensorMapReplaceAddress(&map, d2);
  if (r != CUDA_SUCCESS) gpu_test::fail("cuTensorMapReplaceAddress: CUresult %d", int(r));
  load_tile<<<1, 128>>>(map, out, x0, y0);
  CK_LAUNCH("load_tile (replaced address)");
  CK(cudaMemcpy(got.data(), out, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < kTileW * kTileH; i++)
    if (got[i] != 0.0f) gpu_test::fail("tile element %d after the address moved: %g, want 0", i, got[i]);
  CK(cudaFree(d));
  CK(cudaFree(d2));
  CK(cudaFree(out));
  gpu_test::pass("a %dx%d tile loaded by TMA through a tensor map, before and after its address moved", kTileW, kTileH);
  return 0;
}
