// The runtime functions that are generated entries (protocol/api/cudart.api: via the driver
// API, or answered in the client): each called as an application would, its answer checked
// for what CUDA promises (a value set is the value read back, ids are stable and distinct,
// bad arguments get CUDA's error). No result depends on executing a kernel, so the same
// binary runs natively, under Remora on a GPU, and on the host-emulated backend in CI.
#define GPU_TEST_NAME "runtime_api"
#include "gpu_test.h"

#include <cuda_profiler_api.h>

#include <cstring>

__global__ void Scale(float* out, const float* in, float factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * factor;
}

namespace {

#define EXPECT_ERR(call, want)                                                                      \
  do {                                                                                              \
    cudaError_t e_ = (call);                                                                        \
    if (e_ != (want)) ::gpu_test::fail("%s returned %s, expected %s", #call, cudaGetErrorName(e_), \
                                       cudaGetErrorName(want));                                     \
    (void)cudaGetLastError();                                                                       \
  } while (0)
#define REQUIRE(cond, ...)                       \
  do {                                           \
    if (!(cond)) ::gpu_test::fail(__VA_ARGS__);  \
  } while (0)

void Streams() {
  cudaStream_t a, b;
  CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CK(cudaStreamCreate(&b));
  unsigned long long ia = 0, ia2 = 0, ib = 0;
  CK(cudaStreamGetId(a, &ia));
  CK(cudaStreamGetId(a, &ia2));
  CK(cudaStreamGetId(b, &ib));
  REQUIRE(ia == ia2 && ia != ib, "stream ids %llu %llu %llu are not stable and distinct", ia, ia2, ib);
  // A launch attribute set on a stream reads back, and copies to another stream.
  cudaStreamAttrValue v{};
  v.syncPolicy = cudaSyncPolicyYield;
  CK(cudaStreamSetAttribute(a, cudaStreamAttributeSynchronizationPolicy, &v));
  cudaStreamAttrValue got{};
  CK(cudaStreamGetAttribute(a, cudaStreamAttributeSynchronizationPolicy, &got));
  REQUIRE(got.syncPolicy == cudaSyncPolicyYield, "sync policy read back as %d", static_cast<int>(got.syncPolicy));
  CK(cudaStreamCopyAttributes(b, a));
  std::memset(&got, 0, sizeof(got));
  CK(cudaStreamGetAttribute(b, cudaStreamAttributeSynchronizationPolicy, &got));
  REQUIRE(got.syncPolicy == cudaSyncPolicyYield, "copied sync policy read back as %d", static_cast<int>(got.syncPolicy));
  // Outside a capture, every stream reports none; the default streams too.
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusActive;
  CK(cudaStreamIsCapturing(a, &cs));
  REQUIRE(cs == cudaStreamCaptureStatusNone, "capture status %d", static_cast<int>(cs));
  cs = cudaStreamCaptureStatusActive;
  CK(cudaStreamIsCapturing(cudaStreamPerThread, &cs));
  REQUIRE(cs == cudaStreamCaptureStatusNone, "per-thread capture status %d", static_cast<int>(cs));
  cs = cudaStreamCaptureStatusActive;
  CK(cudaStreamGetCaptureInfo(0, &cs, nullptr, nullptr, nullptr, nullptr, nullptr));
  REQUIRE(cs == cudaStreamCaptureStatusNone, "capture info status %d", static_cast<int>(cs));
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  CK(cudaThreadExchangeStreamCaptureMode(&mode));
  REQUIRE(mode == cudaStreamCaptureModeGlobal, "the initial capture mode is %d", static_cast<int>(mode));
  CK(cudaThreadExchangeStreamCaptureMode(&mode));
  REQUIRE(mode == cudaStreamCaptureModeRelaxed, "exchanged capture mode is %d", static_cast<int>(mode));
  // Events through the generated path: record, wait, query, time.
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventRecord(e0, a));
  CK(cudaStreamWaitEvent(b, e0, 0));
  CK(cudaEventRecordWithFlags(e1, b, 0));
  CK(cudaEventSynchronize(e1));
  CK(cudaEventQuery(e1));
  float ms = -1;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  REQUIRE(ms >= 0 && ms < 60000, "elapsed time %f ms", ms);
  CK(cudaStreamQuery(a));
  CK(cudaStreamSynchronize(b));
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaStreamDestroy(a));
  CK(cudaStreamDestroy(b));
}

void DeviceSettings() {
  cudaFuncCache cc;
  CK(cudaDeviceSetCacheConfig(cudaFuncCachePreferShared));
  CK(cudaDeviceGetCacheConfig(&cc));
  REQUIRE(cc == cudaFuncCachePreferShared, "cache config read back as %d", static_cast<int>(cc));
  CK(cudaDeviceSetCacheConfig(cudaFuncCachePreferNone));
  size_t stack = 0;
  CK(cudaDeviceSetLimit(cudaLimitStackSize, 4096));
  CK(cudaDeviceGetLimit(&stack, cudaLimitStackSize));
  REQUIRE(stack >= 4096, "stack limit read back as %zu", stack);
  int least = 1, greatest = 1;
  CK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  REQUIRE(least >= greatest, "priority range %d..%d", least, greatest);
  CK(cudaDeviceGetStreamPriorityRange(nullptr, &greatest));
  CK(cudaCtxResetPersistingL2Cache());
  CK(cudaDeviceFlushGPUDirectRDMAWrites(cudaFlushGPUDirectRDMAWritesTargetCurrentDevice,
                                        cudaFlushGPUDirectRDMAWritesToOwner));
  CK(cudaProfilerStart());
  CK(cudaProfilerStop());
  cudaAtomicOperation ops[2] = {cudaAtomicOperationIntegerAdd, cudaAtomicOperationFloatAdd};
  unsigned caps[2] = {0xdead, 0xdead};
  CK(cudaDeviceGetHostAtomicCapabilities(caps, ops, 2, 0));
  REQUIRE(caps[0] != 0xdead && caps[1] != 0xdead, "host atomic capabilities were not written");
  size_t width = 0;
  cudaChannelFormatDesc f = cudaCreateChannelDesc<float>();
  CK(cudaDeviceGetTexture1DLinearMaxWidth(&width, &f, 0));
  REQUIRE(width >= (1u << 20), "1D linear texture width %zu", width);
  int count = 0;
  CK(cudaGetDeviceCount(&count));
  int p2p = -1;
  if (count > 1) {
    CK(cudaDeviceGetP2PAttribute(&p2p, cudaDevP2PAttrAccessSupported, 0, 1));
    REQUIRE(p2p == 0 || p2p == 1, "P2P access attribute %d", p2p);
  }
  EXPECT_ERR(cudaDeviceGetP2PAttribute(&p2p, cudaDevP2PAttrAccessSupported, 0, count), cudaErrorInvalidDevice);
  int can = -1;
  CK(cudaDeviceCanAccessPeer(&can, 0, 0));
  REQUIRE(can == 0, "a device is its own peer (%d)", can);
  int valid[1] = {0};
  CK(cudaSetValidDevices(valid, 1));
  int bad[1] = {count + 3};
  EXPECT_ERR(cudaSetValidDevices(bad, 1), cudaErrorInvalidDevice);
}

void Pools() {
  cudaMemPool_t def = nullptr, cur = nullptr, viaLoc = nullptr;
  CK(cudaDeviceGetDefaultMemPool(&def, 0));
  CK(cudaDeviceGetMemPool(&cur, 0));
  REQUIRE(def != nullptr && cur == def, "the current pool is not the default one");
  cudaMemLocation loc{};
  loc.type = cudaMemLocationTypeDevice;
  loc.id = 0;
  CK(cudaMemGetDefaultMemPool(&viaLoc, &loc, cudaMemAllocationTypePinned));
  REQUIRE(viaLoc == def, "cudaMemGetDefaultMemPool disagrees with cudaDeviceGetDefaultMemPool");
  CK(cudaMemGetMemPool(&cur, &loc, cudaMemAllocationTypePinned));
  REQUIRE(cur == def, "cudaMemGetMemPool disagrees");
  CK(cudaMemSetMemPool(&loc, cudaMemAllocationTypePinned, def));
  uint64_t threshold = 1 << 20, read = 0;
  CK(cudaMemPoolSetAttribute(def, cudaMemPoolAttrReleaseThreshold, &threshold));
  CK(cudaMemPoolGetAttribute(def, cudaMemPoolAttrReleaseThreshold, &read));
  REQUIRE(read == threshold, "release threshold read back as %llu", static_cast<unsigned long long>(read));
  int reuse = 0;
  CK(cudaMemPoolGetAttribute(def, cudaMemPoolReuseAllowOpportunistic, &reuse));
  REQUIRE(reuse == 0 || reuse == 1, "an int attribute read back as %d", reuse);
  CK(cudaMemPoolTrimTo(def, 0));
  cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
  CK(cudaMemPoolGetAccess(&flags, def, &loc));
  REQUIRE(flags == cudaMemAccessFlagsProtReadWrite, "a pool's own device has access %d", static_cast<int>(flags));
  cudaMemAccessDesc desc{};
  desc.location = loc;
  desc.flags = cudaMemAccessFlagsProtReadWrite;
  CK(cudaMemPoolSetAccess(def, &desc, 1));
  CK(cudaDeviceSetMemPool(0, def));
}

void Kernels() {
  const char* name = nullptr;
  CK(cudaFuncGetName(&name, reinterpret_cast<const void*>(Scale)));
  REQUIRE(name != nullptr && std::strstr(name, "Scale") != nullptr, "kernel name '%s'", name ? name : "(null)");
  cudaKernel_t k = nullptr;
  CK(cudaGetKernel(&k, reinterpret_cast<const void*>(Scale)));
  REQUIRE(k != nullptr, "no cudaKernel_t");
  cudaFunction_t fn = nullptr;
  CK(cudaGetFuncBySymbol(&fn, reinterpret_cast<const void*>(Scale)));
  REQUIRE(fn != nullptr, "no cudaFunction_t");
  CK(cudaKernelSetAttributeForDevice(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 1024, 0));
  cudaFuncAttributes fa{};
  CK(cudaFuncGetAttributes(&fa, reinterpret_cast<const void*>(Scale)));
  REQUIRE(fa.maxDynamicSharedSizeBytes == 1024, "dynamic shared memory attribute %d", fa.maxDynamicSharedSizeBytes);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(8);
  cfg.blockDim = dim3(128);
  int cluster = 0;
  CK(cudaOccupancyMaxPotentialClusterSize(&cluster, reinterpret_cast<const void*>(Scale), &cfg));
  REQUIRE(cluster >= 1, "potential cluster size %d", cluster);
  // The host-emulated backend does not read kernel images, so it knows no parameter layout.
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  bool emulated = std::strstr(prop.name, "host-emulated") != nullptr;
  size_t offsets[4], sizes[4];
  if (emulated) {
    EXPECT_ERR(cudaFuncGetParamInfo(reinterpret_cast<const void*>(Scale), 0, &offsets[0], &sizes[0]), cudaErrorInvalidValue);
    return;
  }
  for (size_t i = 0; i < 4; i++) CK(cudaFuncGetParamInfo(reinterpret_cast<const void*>(Scale), i, &offsets[i], &sizes[i]));
  REQUIRE(sizes[0] == 8 && sizes[1] == 8 && sizes[2] == 4 && sizes[3] == 4, "parameter sizes %zu %zu %zu %zu", sizes[0],
          sizes[1], sizes[2], sizes[3]);
  REQUIRE(offsets[0] == 0 && offsets[1] == 8 && offsets[2] == 16 && offsets[3] == 20, "parameter offsets %zu %zu %zu %zu",
          offsets[0], offsets[1], offsets[2], offsets[3]);
  EXPECT_ERR(cudaFuncGetParamInfo(reinterpret_cast<const void*>(Scale), 4, &offsets[0], &sizes[0]), cudaErrorInvalidValue);
}

}  // namespace

int main() {
  CK(cudaSetDevice(0));
  Streams();
  DeviceSettings();
  Pools();
  Kernels();
  CK(cudaDeviceSynchronize());
  gpu_test::pass("streams, events, device settings, pools and kernel queries through the generated entries");
  return 0;
}
