// device_query: cudaGetDeviceCount, cudaGetDeviceProperties cross-checked against
// cudaDeviceGetAttribute for ~60 attributes on every device, cudaMemGetInfo sanity,
// cudaRuntimeGetVersion / cudaDriverGetVersion, cudaSetDevice / cudaGetDevice,
// cudaDeviceGetPCIBusId / cudaDeviceGetByPCIBusId, cudaChooseDevice,
// cudaDeviceGetStreamPriorityRange, cudaDeviceGetLimit / cudaDeviceSetLimit, cudaGetDeviceFlags,
// and invalid ordinals -> cudaErrorInvalidDevice (non-sticky).
#define GPU_TEST_NAME "device_query"
#include "gpu_test.h"

#include <cstring>

struct AttrCheck {
  cudaDeviceAttr attr;
  const char* name;
  long long from_props;
};

static void check_device(int dev, int* attrs_checked) {
  cudaDeviceProp p{};
  CK(cudaGetDeviceProperties(&p, dev));
  if (p.name[0] == '\0') gpu_test::fail("device %d: empty name", dev);
  if (p.major < 1 || p.multiProcessorCount < 1 || p.totalGlobalMem == 0 || p.warpSize != 32)
    gpu_test::fail("device %d: implausible props (cc %d.%d, %d SMs, %zu B, warp %d)", dev,
                   p.major, p.minor, p.multiProcessorCount, p.totalGlobalMem, p.warpSize);

#define A(attr, field) {attr, #attr, static_cast<long long>(field)}
  const AttrCheck checks[] = {
      A(cudaDevAttrMaxThreadsPerBlock, p.maxThreadsPerBlock),
      A(cudaDevAttrMaxBlockDimX, p.maxThreadsDim[0]),
      A(cudaDevAttrMaxBlockDimY, p.maxThreadsDim[1]),
      A(cudaDevAttrMaxBlockDimZ, p.maxThreadsDim[2]),
      A(cudaDevAttrMaxGridDimX, p.maxGridSize[0]),
      A(cudaDevAttrMaxGridDimY, p.maxGridSize[1]),
      A(cudaDevAttrMaxGridDimZ, p.maxGridSize[2]),
      A(cudaDevAttrMaxSharedMemoryPerBlock, p.sharedMemPerBlock),
      A(cudaDevAttrTotalConstantMemory, p.totalConstMem),
      A(cudaDevAttrWarpSize, p.warpSize),
      A(cudaDevAttrMaxPitch, p.memPitch),
      A(cudaDevAttrMaxRegistersPerBlock, p.regsPerBlock),
      A(cudaDevAttrTextureAlignment, p.textureAlignment),
      A(cudaDevAttrMultiProcessorCount, p.multiProcessorCount),
      A(cudaDevAttrIntegrated, p.integrated),
      A(cudaDevAttrCanMapHostMemory, p.canMapHostMemory),
      A(cudaDevAttrMaxTexture1DWidth, p.maxTexture1D),
      A(cudaDevAttrMaxTexture2DWidth, p.maxTexture2D[0]),
      A(cudaDevAttrMaxTexture2DHeight, p.maxTexture2D[1]),
      A(cudaDevAttrMaxTexture3DWidth, p.maxTexture3D[0]),
      A(cudaDevAttrMaxTexture3DHeight, p.maxTexture3D[1]),
      A(cudaDevAttrMaxTexture3DDepth, p.maxTexture3D[2]),
      A(cudaDevAttrSurfaceAlignment, p.surfaceAlignment),
      A(cudaDevAttrConcurrentKernels, p.concurrentKernels),
      A(cudaDevAttrEccEnabled, p.ECCEnabled),
      A(cudaDevAttrPciBusId, p.pciBusID),
      A(cudaDevAttrPciDeviceId, p.pciDeviceID),
      A(cudaDevAttrPciDomainId, p.pciDomainID),
      A(cudaDevAttrTccDriver, p.tccDriver),
      A(cudaDevAttrGlobalMemoryBusWidth, p.memoryBusWidth),
      A(cudaDevAttrL2CacheSize, p.l2CacheSize),
      A(cudaDevAttrMaxThreadsPerMultiProcessor, p.maxThreadsPerMultiProcessor),
      A(cudaDevAttrAsyncEngineCount, p.asyncEngineCount),
      A(cudaDevAttrUnifiedAddressing, p.unifiedAddressing),
      A(cudaDevAttrTexturePitchAlignment, p.texturePitchAlignment),
      A(cudaDevAttrComputeCapabilityMajor, p.major),
      A(cudaDevAttrComputeCapabilityMinor, p.minor),
      A(cudaDevAttrStreamPrioritiesSupported, p.streamPrioritiesSupported),
      A(cudaDevAttrGlobalL1CacheSupported, p.globalL1CacheSupported),
      A(cudaDevAttrLocalL1CacheSupported, p.localL1CacheSupported),
      A(cudaDevAttrMaxSharedMemoryPerMultiprocessor, p.sharedMemPerMultiprocessor),
      A(cudaDevAttrMaxRegistersPerMultiprocessor, p.regsPerMultiprocessor),
      A(cudaDevAttrManagedMemory, p.managedMemory),
      A(cudaDevAttrIsMultiGpuBoard, p.isMultiGpuBoard),
      A(cudaDevAttrMultiGpuBoardGroupID, p.multiGpuBoardGroupID),
      A(cudaDevAttrHostNativeAtomicSupported, p.hostNativeAtomicSupported),
      A(cudaDevAttrPageableMemoryAccess, p.pageableMemoryAccess),
      A(cudaDevAttrConcurrentManagedAccess, p.concurrentManagedAccess),
      A(cudaDevAttrComputePreemptionSupported, p.computePreemptionSupported),
      A(cudaDevAttrCanUseHostPointerForRegisteredMem, p.canUseHostPointerForRegisteredMem),
      A(cudaDevAttrCooperativeLaunch, p.cooperativeLaunch),
      A(cudaDevAttrMaxSharedMemoryPerBlockOptin, p.sharedMemPerBlockOptin),
      A(cudaDevAttrPageableMemoryAccessUsesHostPageTables,
        p.pageableMemoryAccessUsesHostPageTables),
      A(cudaDevAttrDirectManagedMemAccessFromHost, p.directManagedMemAccessFromHost),
      A(cudaDevAttrMaxBlocksPerMultiprocessor, p.maxBlocksPerMultiProcessor),
      A(cudaDevAttrMaxPersistingL2CacheSize, p.persistingL2CacheMaxSize),
      A(cudaDevAttrMaxAccessPolicyWindowSize, p.accessPolicyMaxWindowSize),
      A(cudaDevAttrReservedSharedMemoryPerBlock, p.reservedSharedMemPerBlock),
      A(cudaDevAttrHostRegisterSupported, p.hostRegisterSupported),
      A(cudaDevAttrMemoryPoolsSupported, p.memoryPoolsSupported),
      A(cudaDevAttrClusterLaunch, p.clusterLaunch),
      A(cudaDevAttrIpcEventSupport, p.ipcEventSupported),
      A(cudaDevAttrMpsEnabled, p.mpsEnabled),
  };
#undef A
  for (const AttrCheck& c : checks) {
    int v = -12345;
    CK(cudaDeviceGetAttribute(&v, c.attr, dev));
    if (static_cast<long long>(v) != c.from_props)
      gpu_test::fail("device %d: cudaDeviceGetAttribute(%s) = %d, cudaDeviceProp says %lld", dev,
                     c.name, v, c.from_props);
    ++*attrs_checked;
  }

  // Relations that must hold between properties.
  if (p.sharedMemPerBlockOptin < p.sharedMemPerBlock ||
      p.sharedMemPerMultiprocessor < p.sharedMemPerBlockOptin)
    gpu_test::fail("device %d: shared memory sizes inconsistent (%zu / %zu / %zu)", dev,
                   p.sharedMemPerBlock, p.sharedMemPerBlockOptin, p.sharedMemPerMultiprocessor);
  if (p.maxThreadsPerBlock > p.maxThreadsPerMultiProcessor ||
      p.maxThreadsDim[0] > p.maxThreadsPerBlock)
    gpu_test::fail("device %d: thread limits inconsistent", dev);

  // PCI bus id round trip.
  char bus[64] = {0};
  CK(cudaDeviceGetPCIBusId(bus, sizeof bus, dev));
  int by_bus = -1;
  CK(cudaDeviceGetByPCIBusId(&by_bus, bus));
  if (by_bus != dev) gpu_test::fail("cudaDeviceGetByPCIBusId(%s) = %d, want %d", bus, by_bus, dev);

  gpu_test::info("device %d: %s, sm_%d%d, %d SMs, %.1f GiB, bus %s", dev, p.name, p.major,
                 p.minor, p.multiProcessorCount, double(p.totalGlobalMem) / (1 << 30), bus);
}

int main() {
  int count = 0;
  CK(cudaGetDeviceCount(&count));
  if (count < 1) gpu_test::fail("cudaGetDeviceCount = %d", count);

  int rt = 0, drv = 0;
  CK(cudaRuntimeGetVersion(&rt));
  CK(cudaDriverGetVersion(&drv));
  if (rt / 1000 != CUDART_VERSION / 1000)
    gpu_test::fail("cudaRuntimeGetVersion %d, headers are %d", rt, CUDART_VERSION);
  if (drv < rt) gpu_test::fail("driver version %d < runtime version %d", drv, rt);

  int attrs_checked = 0;
  for (int dev = 0; dev < count; ++dev) check_device(dev, &attrs_checked);

  // Current device: per-thread state, switchable.
  CK(cudaSetDevice(count - 1));
  int cur = -1;
  CK(cudaGetDevice(&cur));
  if (cur != count - 1) gpu_test::fail("cudaGetDevice = %d after cudaSetDevice(%d)", cur, count - 1);
  CK(cudaSetDevice(0));
  CK(cudaGetDevice(&cur));
  if (cur != 0) gpu_test::fail("cudaGetDevice = %d after cudaSetDevice(0)", cur);
  unsigned dflags = 0;
  CK(cudaGetDeviceFlags(&dflags));

  // cudaChooseDevice: asking for the device's own compute capability finds a device.
  cudaDeviceProp want{};
  CK(cudaGetDeviceProperties(&want, 0));
  int chosen = -1;
  CK(cudaChooseDevice(&chosen, &want));
  if (chosen < 0 || chosen >= count) gpu_test::fail("cudaChooseDevice = %d", chosen);

  int least = 0, greatest = 0;
  CK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  if (greatest > least)
    gpu_test::fail("stream priority range least %d greatest %d", least, greatest);

  size_t stack = 0, heap = 0;
  CK(cudaDeviceGetLimit(&stack, cudaLimitStackSize));
  CK(cudaDeviceGetLimit(&heap, cudaLimitMallocHeapSize));
  if (stack == 0 || heap == 0) gpu_test::fail("limits: stack %zu heap %zu", stack, heap);
  CK(cudaDeviceSetLimit(cudaLimitStackSize, stack + 1024));
  size_t stack2 = 0;
  CK(cudaDeviceGetLimit(&stack2, cudaLimitStackSize));
  if (stack2 < stack + 1024)
    gpu_test::fail("cudaLimitStackSize %zu after setting %zu", stack2, stack + 1024);

  // Memory info: a quota under the shim, the card natively. Both must be self-consistent.
  cudaDeviceProp p0{};
  CK(cudaGetDeviceProperties(&p0, 0));
  size_t free0 = 0, total0 = 0;
  CK(cudaMemGetInfo(&free0, &total0));
  if (total0 == 0 || free0 > total0 || total0 > p0.totalGlobalMem)
    gpu_test::fail("cudaMemGetInfo free %zu total %zu (totalGlobalMem %zu)", free0, total0,
                   p0.totalGlobalMem);
  void* blob;
  const size_t blob_bytes = 256ull << 20;
  CK(cudaMalloc(&blob, blob_bytes));
  size_t free1 = 0, total1 = 0;
  CK(cudaMemGetInfo(&free1, &total1));
  if (total1 != total0 || free1 > total1)
    gpu_test::fail("cudaMemGetInfo after a 256 MiB allocation: free %zu total %zu (before %zu)",
                   free1, total1, total0);
  gpu_test::info("cudaMemGetInfo: total %zu, free %zu -> %zu around a 256 MiB cudaMalloc "
                 "(informational: other processes share the GPU)",
                 total0, free0, free1);
  CK(cudaFree(blob));

  // Invalid ordinals: cudaErrorInvalidDevice, not sticky, current device unchanged.
  const int bad_ordinals[] = {count, count + 7, -1};
  int invalid_checked = 0;
  for (int bad : bad_ordinals) {
    cudaError_t e = cudaSetDevice(bad);
    if (e != cudaErrorInvalidDevice)
      gpu_test::fail("cudaSetDevice(%d) returned %s, want cudaErrorInvalidDevice", bad,
                     cudaGetErrorName(e));
    cudaDeviceProp dummy{};
    e = cudaGetDeviceProperties(&dummy, bad);
    if (e != cudaErrorInvalidDevice)
      gpu_test::fail("cudaGetDeviceProperties(%d) returned %s, want cudaErrorInvalidDevice", bad,
                     cudaGetErrorName(e));
    int v = 0;
    e = cudaDeviceGetAttribute(&v, cudaDevAttrWarpSize, bad);
    if (e != cudaErrorInvalidDevice)
      gpu_test::fail("cudaDeviceGetAttribute(dev %d) returned %s, want cudaErrorInvalidDevice",
                     bad, cudaGetErrorName(e));
    invalid_checked += 3;
  }
  const cudaError_t last = cudaGetLastError();
  if (last != cudaErrorInvalidDevice)
    gpu_test::fail("cudaGetLastError after invalid ordinals = %s, want cudaErrorInvalidDevice",
                   cudaGetErrorName(last));
  CK(cudaGetLastError());  // cleared
  CK(cudaGetDevice(&cur));
  if (cur != 0) gpu_test::fail("current device changed to %d by a failed cudaSetDevice", cur);
  CK(cudaDeviceSynchronize());  // not sticky

  gpu_test::pass("%d device(s), %d attributes match cudaDeviceProp, runtime %d driver %d, "
                 "%d invalid-ordinal calls -> cudaErrorInvalidDevice",
                 count, attrs_checked, rt, drv, invalid_checked);
  return 0;
}
