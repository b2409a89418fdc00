// Device enumeration and properties, memory information, versions, pointer attributes.
#include "app_check.h"

int main(int argc, char** argv) {
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  REQUIRE(count >= 1, "no device");
  int expect = argc > 1 ? std::atoi(argv[1]) : -1;
  REQUIRE(expect < 0 || count == expect, "%d devices, expected %d", count, expect);
  for (int i = 0; i < count; i++) {
    cudaDeviceProp p;
    CHECK(cudaGetDeviceProperties(&p, i));
    int v = 0;
    CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, i));
    REQUIRE(v == p.multiProcessorCount && v > 0, "SM count %d vs %d", v, p.multiProcessorCount);
    CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, i));
    REQUIRE(v == p.major && v >= 1, "major %d vs %d", v, p.major);
    CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrWarpSize, i));
    REQUIRE(v == 32, "warp size %d", v);
    REQUIRE(p.totalGlobalMem > 0 && p.maxThreadsPerBlock >= 64, "implausible properties");
    char bus[32];
    CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus), i));
    int back = -1;
    CHECK(cudaDeviceGetByPCIBusId(&back, bus));
    REQUIRE(back == i, "PCI bus id %s maps to %d", bus, back);
    CHECK(cudaSetDevice(i));
    int cur = -1;
    CHECK(cudaGetDevice(&cur));
    REQUIRE(cur == i, "current device %d", cur);
    size_t free_b = 0, total_b = 0;
    CHECK(cudaMemGetInfo(&free_b, &total_b));
    REQUIRE(free_b <= total_b && total_b == p.totalGlobalMem, "meminfo %zu/%zu vs %zu", free_b, total_b, p.totalGlobalMem);
    // What Remora's memory model can do, told truthfully, so programs choose paths that work
    // (issue 43; the host backend's "driver" claims all of these, as an H200 with HMM does):
    // the runtime's attribute, its properties and (for the static twin, where every runtime
    // call goes through libcuda.so.1) the driver facade's attribute alike.
    struct Promise {
      cudaDeviceAttr attr;
      int prop;
      int want;
      const char* name;
    };
    const Promise promises[] = {
        {cudaDevAttrManagedMemory, p.managedMemory, 1, "managedMemory"},
        {cudaDevAttrConcurrentManagedAccess, p.concurrentManagedAccess, 0, "concurrentManagedAccess"},
        {cudaDevAttrPageableMemoryAccess, p.pageableMemoryAccess, 0, "pageableMemoryAccess"},
        {cudaDevAttrPageableMemoryAccessUsesHostPageTables, p.pageableMemoryAccessUsesHostPageTables, 0,
         "pageableMemoryAccessUsesHostPageTables"},
        {cudaDevAttrHostNativeAtomicSupported, p.hostNativeAtomicSupported, 0, "hostNativeAtomicSupported"},
        {cudaDevAttrDirectManagedMemAccessFromHost, p.directManagedMemAccessFromHost, 0, "directManagedMemAccessFromHost"},
        {cudaDevAttrCanUseHostPointerForRegisteredMem, p.canUseHostPointerForRegisteredMem, 0,
         "canUseHostPointerForRegisteredMem"},
        {cudaDevAttrGPUDirectRDMASupported, p.gpuDirectRDMASupported, 0, "gpuDirectRDMASupported"},
        {cudaDevAttrTimelineSemaphoreInteropSupported, p.timelineSemaphoreInteropSupported, 0,
         "timelineSemaphoreInteropSupported"},
        {cudaDevAttrMemoryPoolSupportedHandleTypes, static_cast<int>(p.memoryPoolSupportedHandleTypes),
         cudaMemHandleTypePosixFileDescriptor, "memoryPoolSupportedHandleTypes"},
        {cudaDevAttrHostNumaId, p.hostNumaId, -1, "hostNumaId"},
        {cudaDevAttrCanMapHostMemory, p.canMapHostMemory, 1, "canMapHostMemory"},
    };
    for (const Promise& pr : promises) {
      CHECK(cudaDeviceGetAttribute(&v, pr.attr, i));
      REQUIRE(v == pr.want && pr.prop == pr.want, "%s: attribute %d, property %d, Remora can do %d", pr.name, v, pr.prop,
              pr.want);
    }
    std::printf("device %d: %s, %d SMs, cc %d.%d, %zu MiB (%zu MiB free), bus %s\n", i, p.name,
                p.multiProcessorCount, p.major, p.minor, total_b >> 20, free_b >> 20, bus);
  }
  CHECK(cudaSetDevice(0));
  int rt = 0, drv = 0;
  CHECK(cudaRuntimeGetVersion(&rt));
  CHECK(cudaDriverGetVersion(&drv));
  REQUIRE(rt == CUDART_VERSION && drv >= 12000, "versions %d %d", rt, drv);

  void* d;
  CHECK(cudaMalloc(&d, 1000));
  cudaPointerAttributes at;
  CHECK(cudaPointerGetAttributes(&at, static_cast<char*>(d) + 10));
  REQUIRE(at.type == cudaMemoryTypeDevice && at.device == 0, "device pointer attributes");
  void* h;
  CHECK(cudaMallocHost(&h, 1000));
  CHECK(cudaPointerGetAttributes(&at, h));
  REQUIRE(at.type == cudaMemoryTypeHost && at.hostPointer == h, "pinned pointer attributes");
  int stack = 0;
  CHECK(cudaPointerGetAttributes(&at, &stack));
  REQUIRE(at.type == cudaMemoryTypeUnregistered, "pageable pointer attributes");
  unsigned fl = 99;
  CHECK(cudaHostGetFlags(&fl, h));
  CHECK(cudaFreeHost(h));
  CHECK(cudaFree(d));
  std::printf("PASS device_info\n");
  return 0;
}
