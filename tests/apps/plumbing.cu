// The GPU-execution path without a GPU: everything around a kernel that the host-emulated
// backend can check byte for byte - fat binaries shipped and loaded, kernels resolved and
// launched (not executed there), device variables, function attributes, occupancy, 2D/3D
// copies, stream-ordered allocation and pools, peer copies, host callbacks in stream order.
#include <atomic>
#include <thread>

#include "app_check.h"

__constant__ float c_table[64];
__device__ int d_counter[16];

struct Params {
  int a;
  double b;
  char c[7];
};

__global__ void Kernel(float* out, Params p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = c_table[i % 64] + p.a + static_cast<float>(p.b) + p.c[0] + d_counter[i % 16];
}

__global__ void Empty() {}

static void HostStep(void* arg) { static_cast<std::atomic<int>*>(arg)->fetch_add(1); }

static void CUDART_CB OldStyle(cudaStream_t, cudaError_t status, void* arg) {
  if (status == cudaSuccess) static_cast<std::atomic<int>*>(arg)->fetch_add(10);
}

int main() {
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));

  // Launches: <<<>>> (nvcc's __cudaLaunchKernel), the C API and the extended form.
  float* out;
  CHECK(cudaMalloc(&out, 1024 * sizeof(float)));
  Params p{1, 2.0, "xyz"};
  Kernel<<<4, 256>>>(out, p, 1024);
  CHECK(cudaGetLastError());
  int n = 1024;
  void* args[] = {&out, &p, &n};
  CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(Kernel), dim3(4), dim3(256), args, 0, nullptr));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(2);
  cfg.blockDim = dim3(64);
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributePriority;
  attr.val.priority = 0;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  CHECK(cudaLaunchKernelExC(&cfg, reinterpret_cast<const void*>(Kernel), args));
  Empty<<<1, 1, 0, cudaStreamPerThread>>>();
  CHECK(cudaDeviceSynchronize());
  // Configuration errors come back from the launch itself, with the codes CUDA 13 gives
  // (measured natively on the GPU host).
  Empty<<<1, 2048>>>();
  EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidValue);
  Empty<<<0, 1>>>();
  EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidValue);
  Kernel<<<1, 32, 200000>>>(out, p, 1);  // more dynamic shared memory than allowed
  EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_ERR(cudaLaunchKernel(reinterpret_cast<const void*>(&HostStep), dim3(1), dim3(1), nullptr, 0, nullptr),
             cudaErrorInvalidResourceHandle);
  EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidResourceHandle);  // and clear it

  // Function attributes and occupancy.
  cudaFuncAttributes fa;
  CHECK(cudaFuncGetAttributes(&fa, Kernel));
  REQUIRE(fa.maxThreadsPerBlock > 0, "maxThreadsPerBlock %d", fa.maxThreadsPerBlock);
  CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536));
  Kernel<<<1, 32, 60000>>>(out, p, 1);  // allowed now
  CHECK(cudaGetLastError());
  CHECK(cudaFuncGetAttributes(&fa, Kernel));
  REQUIRE(fa.maxDynamicSharedSizeBytes == 65536, "dynamic smem attribute %d", fa.maxDynamicSharedSizeBytes);
  CHECK(cudaFuncSetCacheConfig(Kernel, cudaFuncCachePreferShared));
  int blocks = 0, min_grid = 0, block = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, Kernel, 256, 0));
  REQUIRE(blocks > 0, "occupancy %d", blocks);
  CHECK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, Kernel, 0, 0));
  REQUIRE(block > 0 && min_grid > 0, "potential block size %d grid %d", block, min_grid);
  // Cluster occupancy of a launch configuration, one of whose attributes names device memory
  // (an access policy window: its address travels as a value and does not change the answer).
  cudaLaunchAttribute la[2] = {};
  la[0].id = cudaLaunchAttributeClusterDimension;
  la[0].val.clusterDim.x = 2;
  la[0].val.clusterDim.y = 1;
  la[0].val.clusterDim.z = 1;
  la[1].id = cudaLaunchAttributeAccessPolicyWindow;
  la[1].val.accessPolicyWindow.base_ptr = out;
  la[1].val.accessPolicyWindow.num_bytes = 4096;
  la[1].val.accessPolicyWindow.hitRatio = 0.5f;
  la[1].val.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
  la[1].val.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(4);
  lc.blockDim = dim3(128);
  lc.attrs = la;
  lc.numAttrs = 2;
  int clusters = 0, cluster_size = 0;
  CHECK(cudaOccupancyMaxActiveClusters(&clusters, Kernel, &lc));
  REQUIRE(clusters > 0, "active clusters %d", clusters);
  lc.numAttrs = 0;
  CHECK(cudaOccupancyMaxPotentialClusterSize(&cluster_size, Kernel, &lc));
  REQUIRE(cluster_size >= 2, "potential cluster size %d", cluster_size);

  // Device variables: write, read back, address and size.
  std::vector<float> table(64), back(64);
  for (int i = 0; i < 64; i++) table[i] = i * 0.5f;
  CHECK(cudaMemcpyToSymbol(c_table, table.data(), sizeof(float) * 64));
  CHECK(cudaMemcpyFromSymbol(back.data(), c_table, sizeof(float) * 64));
  REQUIRE(table == back, "__constant__ round trip differs");
  int counters[16];
  for (int i = 0; i < 16; i++) counters[i] = i * 3;
  CHECK(cudaMemcpyToSymbolAsync(d_counter, counters + 4, 8 * sizeof(int), 4 * sizeof(int), cudaMemcpyHostToDevice, 0));
  int all[16] = {};
  CHECK(cudaMemcpyFromSymbolAsync(all, d_counter, sizeof(all), 0, cudaMemcpyDeviceToHost, 0));
  CHECK(cudaStreamSynchronize(0));
  for (int i = 4; i < 12; i++) REQUIRE(all[i] == counters[i], "__device__ offset write: [%d]=%d", i, all[i]);
  void* addr = nullptr;
  size_t size = 0;
  CHECK(cudaGetSymbolAddress(&addr, d_counter));
  CHECK(cudaGetSymbolSize(&size, d_counter));
  REQUIRE(size == sizeof(d_counter), "symbol size %zu", size);
  int one = 0;
  CHECK(cudaMemcpy(&one, static_cast<int*>(addr) + 5, sizeof(int), cudaMemcpyDeviceToHost));
  REQUIRE(one == 15, "read through the symbol address: %d", one);
  EXPECT_ERR(cudaMemcpyToSymbol(d_counter, counters, sizeof(int), 16 * sizeof(int)), cudaErrorInvalidValue);
  EXPECT_ERR(cudaFree(addr), cudaErrorInvalidValue);

  // Pitched 2D and 3D copies and memsets.
  const size_t w = 100, h = 37;
  char* d2;
  size_t pitch = 0;
  CHECK(cudaMallocPitch(reinterpret_cast<void**>(&d2), &pitch, w, h));
  REQUIRE(pitch >= w, "pitch %zu", pitch);
  std::vector<unsigned char> img = RandomBytes(w * h, 9), img_back(w * h);
  CHECK(cudaMemset2D(d2, pitch, 0x11, w, h));
  CHECK(cudaMemcpy2D(d2, pitch, img.data(), w, w - 3, h, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy2D(img_back.data(), w, d2, pitch, w, h, cudaMemcpyDeviceToHost));
  for (size_t y = 0; y < h; y++)
    for (size_t x = 0; x < w; x++)
      REQUIRE(img_back[y * w + x] == (x < w - 3 ? img[y * w + x] : 0x11), "2D copy at (%zu,%zu)", x, y);
  cudaExtent ext = make_cudaExtent(40, 10, 6);
  cudaPitchedPtr vol;
  CHECK(cudaMalloc3D(&vol, ext));
  std::vector<unsigned char> cube = RandomBytes(40 * 10 * 6, 4), cube_back(40 * 10 * 6);
  cudaMemcpy3DParms up = {};
  up.srcPtr = make_cudaPitchedPtr(cube.data(), 40, 40, 10);
  up.dstPtr = vol;
  up.extent = ext;
  up.kind = cudaMemcpyHostToDevice;
  CHECK(cudaMemcpy3D(&up));
  cudaMemcpy3DParms down = {};
  down.srcPtr = vol;
  down.dstPtr = make_cudaPitchedPtr(cube_back.data(), 40, 40, 10);
  down.extent = ext;
  down.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3D(&down));
  REQUIRE(cube == cube_back, "3D round trip differs");
  CHECK(cudaMemset3D(vol, 0x7f, make_cudaExtent(40, 10, 2)));
  CHECK(cudaMemcpy3D(&down));
  for (size_t i = 0; i < 40 * 10 * 2; i++) REQUIRE(cube_back[i] == 0x7f, "3D memset at %zu", i);
  REQUIRE(std::memcmp(cube_back.data() + 800, cube.data() + 800, 40 * 10 * 4) == 0, "3D memset went too far");
  CHECK(cudaFree(d2));
  CHECK(cudaFree(vol.ptr));

  // Stream-ordered allocation and pools.
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  cudaMemPool_t pool;
  CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
  uint64_t threshold = 64ull << 20, got = 0;
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &got));
  REQUIRE(got == threshold, "pool threshold %llu", static_cast<unsigned long long>(got));
  void* a1;
  CHECK(cudaMallocAsync(&a1, 1 << 20, s));
  std::vector<unsigned char> buf = RandomBytes(1 << 20, 2), buf_back(1 << 20);
  CHECK(cudaMemcpyAsync(a1, buf.data(), buf.size(), cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(buf_back.data(), a1, buf.size(), cudaMemcpyDeviceToHost, s));
  CHECK(cudaFreeAsync(a1, s));
  CHECK(cudaStreamSynchronize(s));
  REQUIRE(buf == buf_back, "async allocation round trip differs");
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t mine;
  CHECK(cudaMemPoolCreate(&mine, &props));
  void* a2;
  CHECK(cudaMallocFromPoolAsync(&a2, 4096, mine, s));
  CHECK(cudaFreeAsync(a2, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemPoolDestroy(mine));

  // Peer copies (needs two devices).
  if (count >= 2) {
    int can = 0;
    CHECK(cudaDeviceCanAccessPeer(&can, 0, 1));
    void *p0, *p1;
    CHECK(cudaMalloc(&p0, 4096));
    CHECK(cudaSetDevice(1));
    CHECK(cudaMalloc(&p1, 4096));
    CHECK(cudaSetDevice(0));
    std::vector<unsigned char> x = RandomBytes(4096, 1), y(4096);
    CHECK(cudaMemcpy(p0, x.data(), 4096, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpyPeer(p1, 1, p0, 0, 4096));
    CHECK(cudaMemcpy(y.data(), p1, 4096, cudaMemcpyDeviceToHost));
    REQUIRE(x == y, "peer copy differs");
    CHECK(cudaFree(p0));
    CHECK(cudaFree(p1));
  }

  // Host callbacks run in the client, in stream order, while the application waits.
  std::atomic<int> steps{0};
  CHECK(cudaLaunchHostFunc(s, HostStep, &steps));
  CHECK(cudaStreamAddCallback(s, OldStyle, &steps, 0));
  CHECK(cudaLaunchHostFunc(s, HostStep, &steps));
  CHECK(cudaStreamSynchronize(s));
  REQUIRE(steps.load() == 12, "callbacks ran %d", steps.load());
  // ... and also while the application only watches host memory.
  std::atomic<int> flag{0};
  CHECK(cudaLaunchHostFunc(s, HostStep, &flag));
  for (int i = 0; i < 500 && flag.load() == 0; i++) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(flag.load() == 1, "a callback did not run without a synchronising call");

  int least = 0, greatest = 0;
  CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  REQUIRE(greatest <= least, "priority range %d..%d", least, greatest);
  size_t stack = 0;
  CHECK(cudaDeviceGetLimit(&stack, cudaLimitStackSize));
  CHECK(cudaDeviceSetLimit(cudaLimitStackSize, stack + 1024));
  size_t stack2 = 0;
  CHECK(cudaDeviceGetLimit(&stack2, cudaLimitStackSize));
  REQUIRE(stack2 >= stack + 1024, "stack limit %zu -> %zu", stack, stack2);

  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(out));
  CHECK(cudaDeviceSynchronize());
  std::printf("PASS plumbing\n");
  return 0;
}
