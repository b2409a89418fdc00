/* driver_api: the CUDA driver API as an application uses it, through Remora's libcuda.so.1:
 * initialisation and devices, primary and created contexts (and a context pushed on another
 * thread), memory, copies both ways, memsets, streams (priorities, callbacks, capture queries),
 * events, host callbacks, modules (a fat
 * binary from a file and from memory), launches (kernelParams and the packed `extra` form),
 * occupancy, pointer attributes, a PTX module's managed variable, JIT linking of PTX, the virtual memory API, cuGetProcAddress,
 * and refusals: forged and out-of-range device pointers, a missing function, a destroyed
 * context's memory, an unsupported call.
 *
 *   driver_api              the whole tour; results of kernels are checked on a real GPU
 *   driver_api vmm-quota N  with a tenant quota of N MiB (and nothing else allocated):
 *                           cuMemCreate in 16 MiB pieces is refused exactly past the quota
 *
 * Ends with "PASS driver_api" (exit 0) or "FAIL driver_api: ..." (exit 1). */
#include <cuda.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver_kernels_fatbin.h"
#include "driver_kernels_ptx.h"

static int g_emulated;
static int g_remora; /* through Remora (else NVIDIA's driver) */
static int g_tcp;    /* through Remora over tcp: no memory shared with the server */

static void fail(const char* what, int line) {
  printf("FAIL driver_api: %s (line %d)\n", what, line);
  fflush(stdout);
  exit(1);
}

static const char* name_of(CUresult r) {
  const char* n = NULL;
  return cuGetErrorName(r, &n) == CUDA_SUCCESS && n ? n : "?";
}

#define CHECK(call)                                                          \
  do {                                                                       \
    CUresult r_ = (call);                                                    \
    if (r_ != CUDA_SUCCESS) {                                                \
      printf("FAIL driver_api: %s -> %s (line %d)\n", #call, name_of(r_), __LINE__); \
      exit(1);                                                               \
    }                                                                        \
  } while (0)

#define EXPECT_ERR(call, code)                                               \
  do {                                                                       \
    CUresult r_ = (call);                                                    \
    if (r_ != (code)) {                                                      \
      printf("FAIL driver_api: %s -> %s, expected %s (line %d)\n", #call, name_of(r_), name_of(code), __LINE__); \
      exit(1);                                                               \
    }                                                                        \
  } while (0)

#define EXPECT(cond)                     \
  do {                                   \
    if (!(cond)) fail(#cond, __LINE__);  \
  } while (0)

enum { N = 1 << 16 };

static void devices(CUdevice* dev) {
  int version = 0, count = 0, major = 0;
  char name[256];
  size_t total = 0;
  CHECK(cuDriverGetVersion(&version));
  EXPECT(version >= 12000);
  CHECK(cuDeviceGetCount(&count));
  EXPECT(count >= 1);
  CHECK(cuDeviceGet(dev, 0));
  CUdevice bad;
  EXPECT_ERR(cuDeviceGet(&bad, count + 7), CUDA_ERROR_INVALID_DEVICE);
  CHECK(cuDeviceGetName(name, sizeof(name), *dev));
  g_emulated = strstr(name, "host-emulated") != NULL;
  CHECK(cuDeviceTotalMem(&total, *dev));
  EXPECT(total > 0);
  CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, *dev));
  EXPECT(major >= 7);
  printf("device 0: %s, %zu MiB, sm_%d%s\n", name, total >> 20, major, g_emulated ? " (kernels not executed)" : "");
}

static int g_slow_ran;
static void CUDA_CB slow_host_fn(void* arg) {
  usleep(100000);
  *(int*)arg = 1;
}

/* A host function that keeps its stream busy until the host sets g_flag (3 s at most). */
static volatile int g_flag, g_flag_waited_out;
static void CUDA_CB wait_for_flag(void* arg) {
  (void)arg;
  for (int i = 0; i < 3000 && !g_flag; i++) usleep(1000);
  g_flag_waited_out = !g_flag;
}

static void memory(void) {
  CUdeviceptr d = 0, d2 = 0, base = 0;
  size_t size = 0, free_b = 0, total_b = 0;
  uint32_t* h = malloc(N * sizeof(uint32_t));
  uint32_t* back = malloc(N * sizeof(uint32_t));
  for (uint32_t i = 0; i < N; i++) h[i] = i * 2654435761u;
  CHECK(cuMemAlloc(&d, N * sizeof(uint32_t)));
  CHECK(cuMemAlloc(&d2, N * sizeof(uint32_t)));
  CHECK(cuMemcpyHtoD(d, h, N * sizeof(uint32_t)));
  CHECK(cuMemcpyDtoD(d2, d, N * sizeof(uint32_t)));
  CHECK(cuMemcpyDtoH(back, d2, N * sizeof(uint32_t)));
  EXPECT(memcmp(h, back, N * sizeof(uint32_t)) == 0);
  CHECK(cuMemsetD32(d, 0xdeadbeefu, N));
  CHECK(cuMemsetD8(d, 0x5a, 8));
  CHECK(cuCtxSynchronize());
  CHECK(cuMemcpyDtoH(back, d, N * sizeof(uint32_t)));
  EXPECT(back[0] == 0x5a5a5a5au && back[1] == 0x5a5a5a5au && back[2] == 0xdeadbeefu && back[N - 1] == 0xdeadbeefu);
  CHECK(cuMemGetAddressRange(&base, &size, d + 100));
  EXPECT(base == d && size >= N * sizeof(uint32_t));
  CHECK(cuMemGetInfo(&free_b, &total_b));
  EXPECT(free_b <= total_b && total_b > 0);

  /* Pointer attributes, from the client's tables. */
  unsigned type = 0;
  int ordinal = -1;
  CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 64));
  EXPECT(type == CU_MEMORYTYPE_DEVICE);
  CHECK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d));
  EXPECT(ordinal == 0);
  EXPECT_ERR(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)h),
             CUDA_ERROR_INVALID_VALUE);
  void* pinned = NULL;
  CHECK(cuMemAllocHost(&pinned, 4096));
  CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)pinned));
  EXPECT(type == CU_MEMORYTYPE_HOST);
  /* Memsets of pinned memory by its own address (unified addressing), in stream order, as
     XLA's autotuner fills its redzones: over tcp the worker cannot reach this memory. */
  CUstream s = NULL;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  memset(pinned, 0, 4096);
  CUdeviceptr pd = (CUdeviceptr)(uintptr_t)pinned;
  CHECK(cuMemsetD32Async(pd, 0xa5a5a5a5u, 512, s));
  CHECK(cuMemsetD16Async(pd + 2048, 0x1234, 4, s));
  CHECK(cuMemsetD8Async(pd + 4095, 0x7e, 1, s));
  CHECK(cuStreamSynchronize(s));
  const uint32_t* w = (const uint32_t*)pinned;
  const uint16_t* hw = (const uint16_t*)((const char*)pinned + 2048);
  EXPECT(w[0] == 0xa5a5a5a5u && w[511] == 0xa5a5a5a5u && hw[0] == 0x1234 && hw[3] == 0x1234 && hw[4] == 0 &&
         ((const unsigned char*)pinned)[4095] == 0x7e && ((const unsigned char*)pinned)[4094] == 0);
  EXPECT_ERR(cuMemsetD32Async(pd + 4092, 0, 2, s), CUDA_ERROR_INVALID_VALUE); /* past its end */
  /* Pinned memory is a device address too (unified addressing): device-to-device copies
     take it as either side, in stream order, as XLA copies (over tcp only the client has it). */
  CHECK(cuMemcpyHtoD(d, h, 1024));
  CHECK(cuMemcpyDtoDAsync(pd + 1024, d, 1024, s));          /* device -> pinned */
  CHECK(cuMemcpyDtoDAsync(d2 + 4096, pd + 1024, 1024, s));  /* pinned -> device */
  CHECK(cuMemcpyDtoDAsync(pd + 3072, pd + 1024, 512, s));   /* pinned -> pinned */
  CHECK(cuStreamSynchronize(s));
  EXPECT(memcmp((const char*)pinned + 1024, h, 1024) == 0);
  EXPECT(memcmp((const char*)pinned + 3072, h, 512) == 0);
  memset(back, 0, 1024);
  CHECK(cuMemcpyDtoH(back, d2 + 4096, 1024));
  EXPECT(memcmp(back, h, 1024) == 0);
  CHECK(cuMemcpyDtoD(pd + 1024, d2, 256)); /* synchronous too */
  CHECK(cuMemcpyDtoH(back, d2, 256));
  EXPECT(memcmp((const char*)pinned + 1024, back, 256) == 0);
  /* Freed while a memset of it is still queued: freeing waits for it (CUDA's does). */
  void* doomed = NULL;
  CHECK(cuMemAllocHost(&doomed, 1 << 20));
  g_slow_ran = 0;
  CHECK(cuLaunchHostFunc(s, slow_host_fn, &g_slow_ran));
  CHECK(cuMemsetD32Async((CUdeviceptr)(uintptr_t)doomed, 0x11111111u, (1 << 20) / 4, s));
  CHECK(cuMemFreeHost(doomed));
  CHECK(cuStreamSynchronize(s));
  EXPECT(g_slow_ran == 1);
  CHECK(cuStreamDestroy(s));
  CHECK(cuMemFreeHost(pinned));

  /* Application memory registered as pinned: its flags kept, registered once, unregistered once. */
  {
    void* own = aligned_alloc(4096, 1 << 16);
    unsigned hf = 99;
    EXPECT(own != NULL);
    CHECK(cuMemHostRegister(own, 1 << 16, CU_MEMHOSTREGISTER_PORTABLE));
    CHECK(cuMemHostGetFlags(&hf, own));
    EXPECT((hf & CU_MEMHOSTREGISTER_PORTABLE) != 0); /* natively DEVICEMAP may be added (unified addressing) */
    EXPECT_ERR(cuMemHostRegister(own, 1 << 16, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    CHECK(cuMemHostUnregister(own));
    EXPECT_ERR(cuMemHostUnregister(own), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    free(own);
  }

  /* Unified addressing: pinned memory is the device's at its own address. Through a transport
     without shared memory (tcp) small allocations are still (XLA hands its timer kernel a
     4-byte cuMemHostAlloc semaphore); a large one stays in this process and says so. */
  void* small = NULL;
  void* large = NULL;
  CUdeviceptr dp = 0;
  unsigned managed = 1;
  CHECK(cuMemHostAlloc(&small, 4, CU_MEMHOSTALLOC_PORTABLE));
  CUdeviceptr sp = (CUdeviceptr)(uintptr_t)small;
  CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, sp));
  EXPECT(type == CU_MEMORYTYPE_HOST);
  CHECK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, sp));
  EXPECT(managed == 0);
  CHECK(cuMemHostGetDevicePointer(&dp, small, 0));
  /* The same address natively and over tcp; over shm the worker maps the memory at the
     client's address when that is free in its own address space (not always: under TSan). */
  EXPECT(dp == sp || (g_remora && !g_tcp && dp != 0));
  *(volatile uint32_t*)small = 7u; /* the host's write reaches the device's reads */
  CHECK(cuMemcpyDtoD(d, sp, 4));
  CHECK(cuMemcpyDtoH(back, d, 4));
  EXPECT(back[0] == 7u);
  CHECK(cuMemsetD32(sp, 9u, 1)); /* and the device's write the host's */
  EXPECT(*(volatile uint32_t*)small == 9u);
  /* Host and device may use pinned memory at once: a host write while a stream is busy does
     not wait for it (XLA's timer releases a kernel that spins on such a word). */
  CUstream busy = NULL;
  CHECK(cuStreamCreate(&busy, CU_STREAM_NON_BLOCKING));
  g_flag = 0;
  g_flag_waited_out = 0;
  CHECK(cuLaunchHostFunc(busy, wait_for_flag, NULL));
  CHECK(cuMemsetD8Async(d2, 0, 4, busy)); /* device work queued behind it */
  *(volatile uint32_t*)small = 11u;
  g_flag = 1;
  CHECK(cuStreamSynchronize(busy));
  EXPECT(!g_flag_waited_out);
  CHECK(cuMemcpyDtoD(d, sp, 4));
  CHECK(cuMemcpyDtoH(back, d, 4));
  EXPECT(back[0] == 11u);
  CHECK(cuStreamDestroy(busy));
  CHECK(cuMemHostAlloc(&large, 1 << 20, CU_MEMHOSTALLOC_PORTABLE));
  if (g_tcp)
    EXPECT_ERR(cuMemHostGetDevicePointer(&dp, large, 0), CUDA_ERROR_NOT_SUPPORTED);
  else
    CHECK(cuMemHostGetDevicePointer(&dp, large, 0));
  CHECK(cuMemFreeHost(large));
  CHECK(cuMemFreeHost(small));

  /* Forged and out-of-range pointers are refused; nothing is written. */
  CUdeviceptr forged = (CUdeviceptr)0x7f1234560000ull;
  EXPECT_ERR(cuMemcpyHtoD(forged, h, 64), CUDA_ERROR_INVALID_VALUE);
  EXPECT_ERR(cuMemcpyDtoH(back, forged, 64), CUDA_ERROR_INVALID_VALUE);
  EXPECT_ERR(cuMemcpyHtoD(d + N * sizeof(uint32_t) - 8, h, 64), CUDA_ERROR_INVALID_VALUE);
  EXPECT_ERR(cuMemFree(forged), CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemFree(d));
  CHECK(cuMemFree(d2));
  EXPECT_ERR(cuMemcpyHtoD(d, h, 64), CUDA_ERROR_INVALID_VALUE); /* freed */
  free(h);
  free(back);
}

static int g_callback_ran;
static void CUDA_CB host_fn(void* arg) { *(int*)arg = 1; }

static void streams_events(CUcontext primary) {
  CUstream s = NULL;
  CUevent a = NULL, b = NULL;
  CUdeviceptr d = 0;
  unsigned flags = 0;
  CUcontext ctx = NULL;
  float ms = -1;
  static float h[N];
  for (int i = 0; i < N; i++) h[i] = (float)i;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CHECK(cuStreamGetFlags(s, &flags));
  EXPECT(flags == CU_STREAM_NON_BLOCKING);
  CHECK(cuStreamGetCtx(s, &ctx));
  EXPECT(ctx == primary);
  CHECK(cuEventCreate(&a, CU_EVENT_DEFAULT));
  CHECK(cuEventCreate(&b, CU_EVENT_DEFAULT));
  CHECK(cuMemAlloc(&d, sizeof(h)));
  CHECK(cuEventRecord(a, s));
  CHECK(cuMemcpyHtoDAsync(d, h, sizeof(h), s));
  CHECK(cuMemcpyDtoHAsync(h, d, sizeof(h), s));
  CHECK(cuLaunchHostFunc(s, host_fn, &g_callback_ran));
  CHECK(cuEventRecord(b, s));
  CHECK(cuStreamWaitEvent(NULL, b, 0));
  CHECK(cuStreamSynchronize(s));
  CHECK(cuEventSynchronize(b));
  CHECK(cuEventElapsedTime(&ms, a, b));
  EXPECT(ms >= 0);
  EXPECT(g_callback_ran == 1);
  CHECK(cuStreamQuery(s));
  CHECK(cuEventQuery(b));
  CUstreamCaptureStatus cs;
  CHECK(cuStreamIsCapturing(s, &cs));
  EXPECT(cs == CU_STREAM_CAPTURE_STATUS_NONE);
  CHECK(cuMemFree(d));
  CHECK(cuEventDestroy(a));
  CHECK(cuEventDestroy(b));
  CHECK(cuStreamDestroy(s));
  if (g_remora) /* natively undefined (NVIDIA's driver may crash) */
    EXPECT(cuStreamQuery(s) != CUDA_SUCCESS); /* a destroyed stream: refused */
}

static CUstream g_cb_stream;
static CUresult g_cb_status = CUDA_ERROR_UNKNOWN;
static int g_cb_ran;
static void CUDA_CB stream_callback(CUstream s, CUresult status, void* arg) {
  g_cb_stream = s;
  g_cb_status = status;
  *(int*)arg = 1;
}

/* A stream's priority and device, cuStreamAddCallback (the stream and CUDA_SUCCESS, once the
 * work before it is done), the thread's capture mode, and capture info outside and inside a
 * capture. */
static void stream_queries_and_callbacks(void) {
  CUstream s = NULL;
  int least = 0, greatest = 0, prio = 99;
  CUdevice dev = -1, cur = -1;
  CHECK(cuCtxGetStreamPriorityRange(&least, &greatest));
  CHECK(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, greatest));
  CHECK(cuStreamGetPriority(s, &prio));
  EXPECT(prio == greatest);
  CHECK(cuStreamGetDevice(s, &dev));
  CHECK(cuCtxGetDevice(&cur));
  EXPECT(dev == cur);
  CHECK(cuStreamAddCallback(s, stream_callback, &g_cb_ran, 0));
  CHECK(cuStreamSynchronize(s));
  EXPECT(g_cb_ran == 1 && g_cb_stream == s && g_cb_status == CUDA_SUCCESS);
  if (g_remora) { /* natively undocumented */
    EXPECT(cuStreamGetPriority(s, NULL) == CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuStreamAddCallback(s, stream_callback, &g_cb_ran, 1) == CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuStreamAddCallback(s, NULL, NULL, 0) == CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuLaunchHostFunc(s, NULL, NULL) == CUDA_ERROR_INVALID_VALUE);
  }

  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  CHECK(cuThreadExchangeStreamCaptureMode(&mode));
  EXPECT(mode == CU_STREAM_CAPTURE_MODE_GLOBAL);
  CHECK(cuThreadExchangeStreamCaptureMode(&mode));
  EXPECT(mode == CU_STREAM_CAPTURE_MODE_RELAXED);
  if (g_remora) {
    mode = (CUstreamCaptureMode)7;
    EXPECT(cuThreadExchangeStreamCaptureMode(&mode) == CUDA_ERROR_INVALID_VALUE);
  }

  CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  cuuint64_t id = 0;
  CHECK(cuStreamGetCaptureInfo(s, &cs, &id, NULL, NULL, NULL, NULL));
  EXPECT(cs == CU_STREAM_CAPTURE_STATUS_NONE);
  CUgraph g = NULL;
  CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CHECK(cuStreamGetCaptureInfo(s, &cs, &id, NULL, NULL, NULL, NULL));
  EXPECT(cs == CU_STREAM_CAPTURE_STATUS_ACTIVE && id != 0);
  CHECK(cuStreamIsCapturing(s, &cs));
  EXPECT(cs == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CHECK(cuStreamEndCapture(s, &g));
  CHECK(cuStreamIsCapturing(s, &cs));
  EXPECT(cs == CU_STREAM_CAPTURE_STATUS_NONE);
  CHECK(cuGraphDestroy(g));
  CHECK(cuStreamDestroy(s));
}

/* Strided copies through the driver's structures: a 2D host-to-device copy into pitched
 * memory and back, a 3D device-to-device copy of a sub-box, every byte checked. */
/* A 2D copy of `height` rows of `width` bytes from host memory (`src_host`) or device memory
 * (`src_dev`) to host (`dst_host`) or device memory (`dst_dev`); the NULL/0 side is unused. */
static CUDA_MEMCPY2D rows_between(const void* src_host, size_t src_pitch, CUdeviceptr src_dev, void* dst_host,
                                  CUdeviceptr dst_dev, size_t dst_pitch, size_t width, size_t height) {
  CUDA_MEMCPY2D c = {0};
  c.srcMemoryType = src_host != NULL ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
  c.srcHost = src_host;
  c.srcDevice = src_dev;
  c.srcPitch = src_pitch;
  c.dstMemoryType = dst_host != NULL ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
  c.dstHost = dst_host;
  c.dstDevice = dst_dev;
  c.dstPitch = dst_pitch;
  c.WidthInBytes = width;
  c.Height = height;
  return c;
}

static void strided_copies(void) {
  enum { W = 48, H = 20, D = 3 };
  static unsigned char host[D][H][W], back[D][H][W];
  CUdeviceptr a = 0, b = 0;
  size_t pitch = 0;
  for (int z = 0; z < D; z++)
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++) host[z][y][x] = (unsigned char)(x + 3 * y + 11 * z);
  CHECK(cuMemAllocPitch(&a, &pitch, W, H * D, 4));
  EXPECT(pitch >= W);
  CHECK(cuMemAlloc(&b, pitch * H * D));
  CUDA_MEMCPY2D c2 = rows_between(host, W, 0, NULL, a, pitch, W, H * D);
  CHECK(cuMemcpy2D(&c2));
  CUDA_MEMCPY3D c3 = {0};
  c3.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c3.srcDevice = a;
  c3.srcPitch = pitch;
  c3.srcHeight = H;
  c3.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c3.dstDevice = b;
  c3.dstPitch = pitch;
  c3.dstHeight = H;
  c3.WidthInBytes = W;
  c3.Height = H;
  c3.Depth = D;
  CHECK(cuMemcpy3D(&c3));
  CUDA_MEMCPY2D back2 = rows_between(NULL, pitch, b, back, 0, W, W, H * D);
  memset(back, 0, sizeof(back));
  CHECK(cuMemcpy2D(&back2));
  EXPECT(memcmp(host, back, sizeof(host)) == 0);
  c2.dstPitch = W - 1; /* a pitch below the width */
  EXPECT(cuMemcpy2D(&c2) != CUDA_SUCCESS);
  CHECK(cuMemFree(a));
  CHECK(cuMemFree(b));
}

/* Peer access between the primary contexts of two devices (skipped with one): enabled once,
 * twice refused, disabled once, twice refused; peer copies both ways. */
static void peers(CUdevice dev) {
  int n = 0;
  CHECK(cuDeviceGetCount(&n));
  if (n < 2) return;
  CUdevice other = dev == 0 ? 1 : 0;
  int can = 0;
  CHECK(cuDeviceCanAccessPeer(&can, dev, other));
  if (!can) return;
  CUcontext peer = NULL;
  CHECK(cuDevicePrimaryCtxRetain(&peer, other));
  CHECK(cuCtxEnablePeerAccess(peer, 0));
  EXPECT_ERR(cuCtxEnablePeerAccess(peer, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
  CHECK(cuCtxDisablePeerAccess(peer));
  EXPECT_ERR(cuCtxDisablePeerAccess(peer), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
  if (g_remora) EXPECT_ERR(cuCtxEnablePeerAccess(peer, 1), CUDA_ERROR_INVALID_VALUE); /* natively undocumented */
  /* A peer copy between the two contexts' memory (no access needed), synchronous and on a stream. */
  CUcontext mine = NULL;
  CUdeviceptr a = 0, b = 0;
  unsigned char in[4096], out[4096];
  for (int i = 0; i < 4096; i++) in[i] = (unsigned char)(i * 7 + 1);
  CHECK(cuCtxGetCurrent(&mine));
  CHECK(cuMemAlloc(&a, sizeof(in)));
  CHECK(cuCtxPushCurrent(peer));
  CHECK(cuMemAlloc(&b, sizeof(in)));
  CHECK(cuCtxPopCurrent(NULL));
  CHECK(cuMemcpyHtoD(a, in, sizeof(in)));
  CHECK(cuMemcpyPeer(b, peer, a, mine, sizeof(in)));
  memset(out, 0, sizeof(out));
  CHECK(cuMemcpyDtoH(out, b, sizeof(out)));
  EXPECT(memcmp(in, out, sizeof(in)) == 0);
  CHECK(cuMemsetD8(a, 0, sizeof(in)));
  CHECK(cuMemcpyPeerAsync(a, mine, b, peer, sizeof(in), NULL));
  CHECK(cuCtxSynchronize());
  memset(out, 0, sizeof(out));
  CHECK(cuMemcpyDtoH(out, a, sizeof(out)));
  EXPECT(memcmp(in, out, sizeof(in)) == 0);
  CHECK(cuMemFree(a));
  CHECK(cuCtxPushCurrent(peer));
  CHECK(cuMemFree(b));
  CHECK(cuCtxPopCurrent(NULL));
  CHECK(cuDevicePrimaryCtxRelease(other));
}

static void launch_vector_add(CUfunction f) {
  enum { M = 4096 };
  static float a[M], b[M], c[M];
  CUdeviceptr da, db, dc;
  int n = M;
  for (int i = 0; i < M; i++) {
    a[i] = (float)i;
    b[i] = 2.0f * (float)i;
  }
  CHECK(cuMemAlloc(&da, sizeof(a)));
  CHECK(cuMemAlloc(&db, sizeof(b)));
  CHECK(cuMemAlloc(&dc, sizeof(c)));
  CHECK(cuMemcpyHtoD(da, a, sizeof(a)));
  CHECK(cuMemcpyHtoD(db, b, sizeof(b)));
  CHECK(cuMemsetD8(dc, 0, sizeof(c)));
  void* params[] = {&da, &db, &dc, &n};
  CHECK(cuLaunchKernel(f, (M + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
  CHECK(cuCtxSynchronize());
  CHECK(cuMemcpyDtoH(c, dc, sizeof(c)));
  if (!g_emulated)
    for (int i = 0; i < M; i++)
      if (c[i] != 3.0f * (float)i) fail("vector_add result (kernelParams)", __LINE__);
  /* The packed form: one buffer laid out as the kernel's parameters. */
  struct {
    CUdeviceptr a, b, c;
    int n;
    int pad;
  } packed = {db, da, dc, n, 0};
  size_t packed_size = 3 * sizeof(CUdeviceptr) + sizeof(int); /* the kernel's: NVIDIA's driver refuses more */
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &packed_size, CU_LAUNCH_PARAM_END};
  CHECK(cuMemsetD8(dc, 0, sizeof(c)));
  CHECK(cuLaunchKernel(f, (M + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, NULL, extra));
  CHECK(cuMemcpyDtoH(c, dc, sizeof(c)));
  if (!g_emulated)
    for (int i = 0; i < M; i++)
      if (c[i] != 3.0f * (float)i) fail("vector_add result (extra)", __LINE__);
  /* A kernel writes pinned memory by its host address (unified addressing; over tcp the
     small allocation is device-visible, see memory()). */
  float* out = NULL;
  CHECK(cuMemHostAlloc((void**)&out, 64 * sizeof(float), CU_MEMHOSTALLOC_PORTABLE));
  CUdeviceptr dout = (CUdeviceptr)(uintptr_t)out;
  int n64 = 64;
  void* pinned_params[] = {&da, &db, &dout, &n64};
  CHECK(cuLaunchKernel(f, 1, 1, 1, 64, 1, 1, 0, NULL, pinned_params, NULL));
  CHECK(cuCtxSynchronize());
  if (!g_emulated)
    for (int i = 0; i < 64; i++)
      if (out[i] != 3.0f * (float)i) fail("vector_add into pinned memory", __LINE__);
  CHECK(cuMemFreeHost(out));
  /* A bad configuration is refused by the launch itself. */
  EXPECT_ERR(cuLaunchKernel(f, 1, 1, 1, 4096, 1, 1, 0, NULL, params, NULL), CUDA_ERROR_INVALID_VALUE);
  EXPECT_ERR(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, params, extra), CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemFree(da));
  CHECK(cuMemFree(db));
  CHECK(cuMemFree(dc));
}

static void modules(void) {
  char path[] = "/tmp/remora-driver-api-XXXXXX";
  int fd = mkstemp(path);
  EXPECT(fd >= 0);
  EXPECT(write(fd, driver_kernels_fatbin, sizeof(driver_kernels_fatbin)) == (ssize_t)sizeof(driver_kernels_fatbin));
  close(fd);
  CUmodule from_file = NULL, from_memory = NULL;
  CHECK(cuModuleLoad(&from_file, path));
  unlink(path);
  EXPECT_ERR(cuModuleLoad(&from_file, "/nonexistent/remora.fatbin"), CUDA_ERROR_FILE_NOT_FOUND);
  CHECK(cuModuleLoadData(&from_memory, driver_kernels_fatbin));
  EXPECT(from_file != from_memory);
  CUfunction add = NULL, add2 = NULL, missing = NULL;
  CHECK(cuModuleGetFunction(&add, from_file, "vector_add"));
  CHECK(cuModuleGetFunction(&add2, from_file, "vector_add"));
  EXPECT(add == add2);
  if (!g_emulated) /* the emulated backend does not read images: any name resolves there */
    EXPECT_ERR(cuModuleGetFunction(&missing, from_file, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  int threads = 0;
  CHECK(cuFuncGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, add));
  EXPECT(threads >= 256);
  const char* fname = NULL;
  CHECK(cuFuncGetName(&fname, add));
  EXPECT(strcmp(fname, "vector_add") == 0);
  CUmodule owner = NULL;
  CHECK(cuFuncGetModule(&owner, add));
  EXPECT(owner == from_file);
  int blocks = 0, min_grid = 0, block = 0;
  CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, add, 256, 0));
  EXPECT(blocks > 0);
  CHECK(cuOccupancyMaxPotentialBlockSize(&min_grid, &block, add, NULL, 0, 0));
  EXPECT(block > 0 && block % 32 == 0 && min_grid > 0);
  launch_vector_add(add);
  /* A kernel node of the graph API before CUDA 12.0 (parameters without kern/ctx), as
     cuGetProcAddress hands it to a program built for CUDA 11.8, and read back the same way. */
  {
    typedef CUresult (*AddV1)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, const CUDA_KERNEL_NODE_PARAMS_v1*);
    typedef CUresult (*GetV1)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS_v1*);
    AddV1 add_v1 = NULL;
    GetV1 get_v1 = NULL;
    CHECK(cuGetProcAddress("cuGraphAddKernelNode", (void**)&add_v1, 11080, 0, NULL));
    CHECK(cuGetProcAddress("cuGraphKernelNodeGetParams", (void**)&get_v1, 11080, 0, NULL));
    CUgraph g;
    CHECK(cuGraphCreate(&g, 0));
    CUdeviceptr buf;
    CHECK(cuMemAlloc(&buf, 3 * 256 * sizeof(float)));
    CUdeviceptr pa = buf, pb = buf + 256 * sizeof(float), pc = buf + 512 * sizeof(float);
    int n = 256;
    void* params[] = {&pa, &pb, &pc, &n};
    CUDA_KERNEL_NODE_PARAMS_v1 kp;
    memset(&kp, 0, sizeof(kp));
    kp.func = add;
    kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
    kp.blockDimX = 256;
    kp.blockDimY = kp.blockDimZ = 1;
    kp.kernelParams = params;
    CUgraphNode node;
    CHECK(add_v1(&node, g, NULL, 0, &kp));
    CUDA_KERNEL_NODE_PARAMS_v1 back;
    memset(&back, 0xee, sizeof(back));
    CHECK(get_v1(node, &back));
    EXPECT(back.func == add && back.blockDimX == 256 && back.gridDimX == 1 && back.extra == NULL);
    CUgraphExec exec;
    CHECK(cuGraphInstantiate(&exec, g, 0));
    CHECK(cuGraphLaunch(exec, NULL));
    CHECK(cuCtxSynchronize());
    CHECK(cuGraphExecDestroy(exec));
    CHECK(cuGraphDestroy(g));
    CHECK(cuMemFree(buf));
  }
  /* The module's kernels, enumerated: the handles cuModuleGetFunction gives. */
  unsigned nfn = 0;
  CHECK(cuModuleGetFunctionCount(&nfn, from_file));
  EXPECT(nfn >= 2 && nfn <= 16);
  CUfunction fns[16] = {0};
  CHECK(cuModuleEnumerateFunctions(fns, nfn, from_file));
  int found = 0;
  for (unsigned i = 0; i < nfn; i++) found += fns[i] == add;
  EXPECT(found == 1);
  /* A variable's size (the emulated backend reads the image's symbol table). */
  CUdeviceptr counter = 0;
  size_t bytes = 0;
  CHECK(cuModuleGetGlobal(&counter, &bytes, from_file, "counter"));
  EXPECT(bytes == sizeof(int));
  CUdeviceptr missing_var = 0; /* NVIDIA's driver writes its outputs even when it fails */
  EXPECT_ERR(cuModuleGetGlobal(&missing_var, &bytes, from_file, "no_such_variable"), CUDA_ERROR_NOT_FOUND);
  if (!g_emulated) { /* kernels run */
    CHECK(cuMemsetD32(counter, 0, 1));
    CUfunction bump = NULL;
    CHECK(cuModuleGetFunction(&bump, from_file, "bump"));
    int by = 3;
    void* args[] = {&by};
    CHECK(cuLaunchKernel(bump, 4, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
    int v = 0;
    CHECK(cuMemcpyDtoH(&v, counter, sizeof(v)));
    EXPECT(v == 3 * 4 * 32);
  }
  /* An unload while a stream is held by a host function: the driver waits for the GPU's work
     before it unloads, and the function's end reaches the server while it waits (JAX's
     autotuner unloads modules so; the session once stalled there). */
  CUstream held = NULL;
  g_slow_ran = 0;
  CHECK(cuStreamCreate(&held, CU_STREAM_NON_BLOCKING));
  CHECK(cuLaunchHostFunc(held, slow_host_fn, &g_slow_ran));
  CHECK(cuModuleUnload(from_memory));
  CHECK(cuStreamSynchronize(held));
  EXPECT(g_slow_ran == 1);
  CHECK(cuStreamDestroy(held));
  if (g_remora) /* a handle used after its end: refused (natively undefined) */
    EXPECT_ERR(cuModuleUnload(from_memory), CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuModuleUnload(from_file));
  if (g_remora) EXPECT_ERR(cuModuleGetFunction(&add, from_file, "vector_add"), CUDA_ERROR_INVALID_HANDLE);
}

/* A managed variable of a PTX module (NVVM's .attribute(.managed), as NVIDIA's uvmlite sample
 * loads one): cuModuleGetGlobal's address is managed memory, the host's pointer too, coherent
 * with the device's view at copies, memsets and synchronisations; unloading the module
 * forgets it. */
static const char k_managed_ptx[] =
    ".version 8.0\n.target sm_52\n.address_size 64\n"
    ".visible .global .attribute(.managed) .align 4 .u32 uvm_value = 10;\n"
    ".visible .global .attribute(.managed) .align 4 .u32 uvm_other = 100;\n";

static void managed_variable(void) {
  CUmodule m;
  CHECK(cuModuleLoadData(&m, k_managed_ptx));
  CUdeviceptr p = 0;
  size_t n = 0;
  CHECK(cuModuleGetGlobal(&p, &n, m, "uvm_value"));
  EXPECT(n == 4);
  unsigned managed = 0;
  CHECK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p));
  EXPECT(managed == 1);
  void* host = NULL;
  CHECK(cuPointerGetAttribute(&host, CU_POINTER_ATTRIBUTE_HOST_POINTER, p));
  EXPECT(host == (void*)(uintptr_t)p);
  volatile unsigned* v = (volatile unsigned*)host;
  if (!g_emulated) EXPECT(*v == 10); /* the PTX initializer (the host backend zero-fills) */
  *v = 11;
  unsigned got = 0;
  CHECK(cuMemcpyDtoH(&got, p, 4));
  EXPECT(got == 11);
  CHECK(cuMemsetD32(p, 77, 1));
  CHECK(cuCtxSynchronize());
  EXPECT(*v == 77);
  /* A second managed variable beside the first (uvmlite's yyy beside xxx): its bytes are the
     device's too, though its page was adopted with the first. */
  CUdeviceptr q = 0;
  CHECK(cuModuleGetGlobal(&q, &n, m, "uvm_other"));
  EXPECT(n == 4);
  CHECK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, q));
  EXPECT(managed == 1);
  volatile unsigned* w = (volatile unsigned*)(uintptr_t)q;
  if (!g_emulated) EXPECT(*w == 100);
  CHECK(cuMemsetD32(q, 55, 1));
  CHECK(cuCtxSynchronize());
  EXPECT(*w == 55);
  EXPECT(*v == 77);
  CHECK(cuModuleUnload(m));
}

static void linker(void) {
  char info[4096] = "", error[4096] = "";
  CUjit_option keys[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
                         CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_WALL_TIME, CU_JIT_OPTIMIZATION_LEVEL};
  void* values[] = {info, (void*)(uintptr_t)sizeof(info), error, (void*)(uintptr_t)sizeof(error), NULL, (void*)(uintptr_t)3};
  CUlinkState link = NULL;
  CHECK(cuLinkCreate(6, keys, values, &link));
  CHECK(cuLinkAddData(link, CU_JIT_INPUT_PTX, (void*)driver_kernels_ptx, sizeof(driver_kernels_ptx), "kernels.ptx", 0,
                      NULL, NULL));
  EXPECT_ERR(cuLinkAddData(link, CU_JIT_INPUT_PTX, NULL, 0, "empty", 0, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
  void* cubin = NULL;
  size_t size = 0;
  CHECK(cuLinkComplete(link, &cubin, &size));
  EXPECT(cubin != NULL && size > 0);
  printf("linked %zu bytes; info log: %s\n", size, info);
  CUmodule m = NULL;
  CHECK(cuModuleLoadData(&m, cubin));
  CHECK(cuLinkDestroy(link));
  if (g_remora) /* natively a second destroy frees twice (the GPU machine's heap was corrupted) */
    EXPECT_ERR(cuLinkDestroy(link), CUDA_ERROR_INVALID_HANDLE);
  CUfunction scale = NULL;
  CHECK(cuModuleGetFunction(&scale, m, "scale"));
  enum { M = 1024 };
  static float x[M];
  for (int i = 0; i < M; i++) x[i] = (float)i;
  CUdeviceptr dx;
  CHECK(cuMemAlloc(&dx, sizeof(x)));
  CHECK(cuMemcpyHtoD(dx, x, sizeof(x)));
  float factor = 0.5f;
  int n = M;
  void* args[] = {&dx, &factor, &n};
  CHECK(cuLaunchKernel(scale, M / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
  CHECK(cuMemcpyDtoH(x, dx, sizeof(x)));
  if (!g_emulated)
    for (int i = 0; i < M; i++)
      if (x[i] != 0.5f * (float)i) fail("scale result (JIT-linked PTX)", __LINE__);
  CHECK(cuMemFree(dx));
  CHECK(cuModuleUnload(m));
}

struct thread_arg {
  CUcontext ctx;
  CUdeviceptr d;
  CUresult result;
};

static void* use_context(void* p) {
  struct thread_arg* a = p;
  CUcontext cur = (CUcontext)1;
  uint32_t v = 0x600dcafe;
  a->result = cuCtxGetCurrent(&cur);
  if (a->result == CUDA_SUCCESS && cur != NULL) a->result = CUDA_ERROR_UNKNOWN; /* a new thread has none */
  if (a->result == CUDA_SUCCESS) a->result = cuCtxPushCurrent(a->ctx);
  if (a->result == CUDA_SUCCESS) a->result = cuMemcpyHtoD(a->d, &v, sizeof(v));
  CUcontext popped = NULL;
  if (a->result == CUDA_SUCCESS) a->result = cuCtxPopCurrent(&popped);
  if (a->result == CUDA_SUCCESS && popped != a->ctx) a->result = CUDA_ERROR_INVALID_CONTEXT;
  return NULL;
}

static void contexts(CUdevice dev, CUcontext primary) {
  CUcontext ctx = NULL, cur = NULL, popped = NULL;
  CHECK(cuCtxCreate(&ctx, NULL, 0, dev));
  CHECK(cuCtxGetCurrent(&cur));
  EXPECT(cur == ctx && ctx != primary);
  unsigned version = 0;
  CHECK(cuCtxGetApiVersion(ctx, &version));
  EXPECT(version >= 3020);
  CUdeviceptr d = 0;
  CHECK(cuMemAlloc(&d, 4096));
  CHECK(cuCtxPopCurrent(&popped));
  EXPECT(popped == ctx);
  CHECK(cuCtxGetCurrent(&cur));
  EXPECT(cur == primary);
  /* The context migrates to another thread, which uses it and gives it back. */
  struct thread_arg arg = {ctx, d, CUDA_ERROR_UNKNOWN};
  pthread_t t;
  EXPECT(pthread_create(&t, NULL, use_context, &arg) == 0);
  pthread_join(t, NULL);
  CHECK(arg.result);
  uint32_t v = 0;
  CHECK(cuMemcpyDtoH(&v, d, sizeof(v)));
  EXPECT(v == 0x600dcafe);
  /* Destroying it frees what it allocated. */
  CHECK(cuCtxDestroy(ctx));
  unsigned type = 0;
  EXPECT_ERR(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d), CUDA_ERROR_INVALID_VALUE);
  if (g_remora) EXPECT_ERR(cuCtxPushCurrent(ctx), CUDA_ERROR_INVALID_CONTEXT); /* natively undefined */
  EXPECT_ERR(cuCtxDestroy(primary), CUDA_ERROR_INVALID_CONTEXT);
}

static CUmemAllocationProp device_prop(CUdevice dev) {
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  return prop;
}

static void vmm(CUdevice dev) {
  CUmemAllocationProp prop = device_prop(dev);
  size_t g = 0;
  CHECK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  EXPECT(g > 0);
  CUdeviceptr va = 0;
  CHECK(cuMemAddressReserve(&va, 4 * g, 0, 0, 0));
  CUmemGenericAllocationHandle a = 0, b = 0;
  CHECK(cuMemCreate(&a, g, &prop, 0));
  CHECK(cuMemCreate(&b, g, &prop, 0));
  CHECK(cuMemMap(va, g, 0, a, 0));
  CHECK(cuMemMap(va + g, g, 0, b, 0));
  CUmemAccessDesc access;
  memset(&access, 0, sizeof(access));
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CHECK(cuMemSetAccess(va, 2 * g, &access, 1));
  /* A copy across the two mappings, and back. */
  size_t n = 8192;
  unsigned char* h = malloc(n);
  unsigned char* back = malloc(n);
  for (size_t i = 0; i < n; i++) h[i] = (unsigned char)(i * 7 + 1);
  CHECK(cuMemcpyHtoD(va + g - n / 2, h, n));
  CHECK(cuMemcpyDtoH(back, va + g - n / 2, n));
  EXPECT(memcmp(h, back, n) == 0);
  unsigned type = 0;
  CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va + g));
  EXPECT(type == CU_MEMORYTYPE_DEVICE);
  /* The unmapped half of the reservation is not memory. */
  EXPECT_ERR(cuMemcpyHtoD(va + 2 * g, h, 64), CUDA_ERROR_INVALID_VALUE);
  EXPECT_ERR(cuMemcpyHtoD(va + 2 * g - 32, h, 64), CUDA_ERROR_INVALID_VALUE);
  CUmemGenericAllocationHandle again = 0;
  CHECK(cuMemRetainAllocationHandle(&again, (void*)(uintptr_t)(va + 16)));
  EXPECT(again == a);
  CHECK(cuMemRelease(again));
  EXPECT_ERR(cuMemAddressFree(va, 4 * g), CUDA_ERROR_INVALID_VALUE); /* still mapped */
  CHECK(cuMemUnmap(va, g));
  CHECK(cuMemUnmap(va + g, g));
  CHECK(cuMemRelease(a));
  CHECK(cuMemRelease(b));
  EXPECT_ERR(cuMemRelease(a), CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemAddressFree(va, 4 * g));
  free(h);
  free(back);
}

static int vmm_quota(CUdevice dev, int quota_mib) {
  CUmemAllocationProp prop = device_prop(dev);
  size_t piece = 16u << 20;
  CUmemGenericAllocationHandle h[64];
  int made = 0;
  CUresult r = CUDA_SUCCESS;
  while (made < 64 && (r = cuMemCreate(&h[made], piece, &prop, 0)) == CUDA_SUCCESS) made++;
  printf("cuMemCreate of 16 MiB pieces: %d made, then %s\n", made, name_of(r));
  EXPECT(r == CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT(made == quota_mib / 16);
  CHECK(cuMemRelease(h[--made]));
  CHECK(cuMemCreate(&h[made++], piece, &prop, 0)); /* the release made room */
  while (made > 0) CHECK(cuMemRelease(h[--made]));
  printf("PASS driver_api: vmm-quota %d MiB\n", quota_mib);
  return 0;
}

/* NVML as a client sees it (libnvidia-ml.so.1, looked up by name the way PyTorch does): the
 * session's devices, agreeing with the driver API; topology and processes withheld. */
typedef int (*nvml_fn)();
static nvml_fn nvml_sym(void* lib, const char* name) {
  nvml_fn f = (nvml_fn)dlsym(lib, name);
  if (f == NULL) {
    printf("FAIL driver_api: libnvidia-ml.so.1 lacks %s\n", name);
    exit(1);
  }
  return f;
}

/* A query whose arguments and results are each over 512 KiB (through Remora: sent ahead in
   pieces and held by the worker, docs/PROTOCOL.md "Large arguments", "Large results"): 300,000
   operations answer as the same query of each distinct one. */
static void large_arguments(CUdevice dev) {
  enum { kMany = 300000 };
  CUatomicOperation distinct[CU_ATOMIC_OPERATION_MAX];
  unsigned int one[CU_ATOMIC_OPERATION_MAX];
  for (int op = 0; op < CU_ATOMIC_OPERATION_MAX; op++) distinct[op] = (CUatomicOperation)op;
  CHECK(cuDeviceGetHostAtomicCapabilities(one, distinct, CU_ATOMIC_OPERATION_MAX, dev));
  CUatomicOperation* ops = (CUatomicOperation*)malloc(kMany * sizeof(*ops));
  unsigned int* caps = (unsigned int*)malloc(kMany * sizeof(*caps));
  EXPECT(ops != NULL && caps != NULL);
  for (int i = 0; i < kMany; i++) {
    ops[i] = (CUatomicOperation)((i * 7) % CU_ATOMIC_OPERATION_MAX);
    caps[i] = 0xdeadbeefu;
  }
  CHECK(cuDeviceGetHostAtomicCapabilities(caps, ops, kMany, dev));
  for (int i = 0; i < kMany; i++)
    if (caps[i] != one[ops[i]]) fail("a capability of the large query differs from the small one's", __LINE__);
  free(ops);
  free(caps);
}

static void nvml(CUdevice dev) {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  EXPECT(lib != NULL);
  EXPECT(nvml_sym(lib, "nvmlInit_v2")() == 0);
  unsigned count = 0;
  int n = 0;
  EXPECT(((int (*)(unsigned*))nvml_sym(lib, "nvmlDeviceGetCount_v2"))(&count) == 0);
  CHECK(cuDeviceGetCount(&n));
  EXPECT((int)count == n);
  void *by_index = NULL, *by_bus = NULL, *by_uuid = NULL;
  EXPECT(((int (*)(unsigned, void**))nvml_sym(lib, "nvmlDeviceGetHandleByIndex_v2"))((unsigned)dev, &by_index) == 0);
  char bus[32], name[256], nname[256], uuid[96];
  CHECK(cuDeviceGetPCIBusId(bus, sizeof(bus), dev));
  EXPECT(((int (*)(const char*, void**))nvml_sym(lib, "nvmlDeviceGetHandleByPciBusId_v2"))(bus, &by_bus) == 0);
  EXPECT(by_bus == by_index);
  {
    /* A bus with no GPU gives no handle: NVML_ERROR_NOT_FOUND through Remora; NVIDIA's NVML on
       the H200 VM answered otherwise (its probe of the address), so natively any error. */
    void* none = NULL;
    const int st = ((int (*)(const char*, void**))nvml_sym(lib, "nvmlDeviceGetHandleByPciBusId_v2"))("0000:ff:1f.7", &none);
    EXPECT(g_remora ? st == 6 : st != 0);
  }
  EXPECT(((int (*)(void*, char*, unsigned))nvml_sym(lib, "nvmlDeviceGetUUID"))(by_index, uuid, sizeof(uuid)) == 0);
  EXPECT(((int (*)(const char*, void**))nvml_sym(lib, "nvmlDeviceGetHandleByUUID"))(uuid, &by_uuid) == 0);
  EXPECT(by_uuid == by_index);
  CHECK(cuDeviceGetName(name, sizeof(name), dev));
  EXPECT(((int (*)(void*, char*, unsigned))nvml_sym(lib, "nvmlDeviceGetName"))(by_index, nname, sizeof(nname)) == 0);
  EXPECT(strcmp(name, nname) == 0);
  struct { unsigned long long total, free, used; } mem;
  size_t total = 0;
  CHECK(cuDeviceTotalMem(&total, dev));
  EXPECT(((int (*)(void*, void*))nvml_sym(lib, "nvmlDeviceGetMemoryInfo"))(by_index, &mem) == 0);
  /* NVML's total counts memory the driver keeps for itself, which cuDeviceTotalMem leaves out
     (143771 against 143155 MiB on the H200); Remora's NVML answers the session's view, the
     driver's total. */
  if (!(g_remora ? mem.total == total : mem.total >= total) || mem.used + mem.free != mem.total)
    printf("nvmlDeviceGetMemoryInfo: total %llu used %llu free %llu; cuDeviceTotalMem %zu\n", mem.total, mem.used,
           mem.free, total);
  EXPECT(g_remora ? mem.total == total : mem.total >= total);
  EXPECT(mem.used + mem.free == mem.total);
  /* Natively this very process holds a context on the GPU, which NVIDIA's NVML lists (and a
     NULL array for it is an error there), and NVLink's answer is the machine's topology: only
     Remora's answers are checked - no process of the client's on a local GPU, no NVLink. */
  unsigned procs = 7;
  const int procs_st =
      ((int (*)(void*, unsigned*, void*))nvml_sym(lib, "nvmlDeviceGetComputeRunningProcesses"))(by_index, &procs, NULL);
  int type = 0;
  const int link_st = ((int (*)(void*, unsigned, int*))nvml_sym(lib, "nvmlDeviceGetNvLinkRemoteDeviceType"))(by_index, 0, &type);
  if (g_remora) {
    EXPECT(procs_st == 0 && procs == 0);
    EXPECT(link_st == 3);
  }
  int version = 0, dversion = 0;
  EXPECT(((int (*)(int*))nvml_sym(lib, "nvmlSystemGetCudaDriverVersion_v2"))(&version) == 0);
  CHECK(cuDriverGetVersion(&dversion));
  EXPECT(version == dversion);
  /* The kernel-mode driver's version, as XLA parses it: "580.159.04" (none when emulated). */
  char kmd[80] = {0};
  EXPECT(((int (*)(char*, unsigned))nvml_sym(lib, "nvmlSystemGetDriverVersion"))(kmd, sizeof(kmd)) == 0);
  if (g_emulated)
    EXPECT(strncmp(kmd, "remora-cuda-", 12) == 0);
  else
    EXPECT(kmd[0] >= '0' && kmd[0] <= '9' && strchr(kmd, '.') != NULL && strspn(kmd, "0123456789.") == strlen(kmd));
  EXPECT(nvml_sym(lib, "nvmlShutdown")() == 0);
  dlclose(lib);
}

/* A crash says where (no debugger on the GPU machines): the stack, then the signal's status. */
static void on_crash(int sig) {
  void* frames[64];
  int n = backtrace(frames, 64);
  static const char msg[] = "driver_api: crashed; stack:\n";
  (void)!write(2, msg, sizeof msg - 1);
  backtrace_symbols_fd(frames, n, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}

int main(int argc, char** argv) {
  void* warm[1];
  (void)backtrace(warm, 1); /* loads the unwinder now: in the handler it would allocate (and
                               hang in an abort of a corrupted heap) */
  signal(SIGSEGV, on_crash);
  signal(SIGBUS, on_crash);
  signal(SIGABRT, on_crash);
  CUdevice dev;
  CUcontext primary = NULL, cur = (CUcontext)1;
  CUdeviceptr d;
  const char* server = getenv("REMORA_SERVER");
  g_remora = server != NULL;
  g_tcp = g_remora && strncmp(server, "tcp", 3) == 0;
  CHECK(cuInit(0));
  devices(&dev);
  /* Nothing is current before a context is made current. */
  CHECK(cuCtxGetCurrent(&cur));
  EXPECT(cur == NULL);
  EXPECT_ERR(cuMemAlloc(&d, 16), CUDA_ERROR_INVALID_CONTEXT);
  CHECK(cuDevicePrimaryCtxRetain(&primary, dev));
  CHECK(cuCtxSetCurrent(primary));
  unsigned flags = 0;
  int active = 0;
  CHECK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
  EXPECT(active == 1);
  CUdevice cd = -1;
  CHECK(cuCtxGetDevice(&cd));
  EXPECT(cd == dev);
  if (argc == 3 && strcmp(argv[1], "vmm-quota") == 0) return vmm_quota(dev, atoi(argv[2]));

  memory();
  streams_events(primary);
  stream_queries_and_callbacks();
  modules();
  managed_variable();
  linker();
  contexts(dev, primary);
  strided_copies();
  peers(dev);
  vmm(dev);
  large_arguments(dev);
  nvml(dev);

  /* The facade's own functions through cuGetProcAddress. */
  CUresult (*alloc)(CUdeviceptr*, size_t) = NULL;
  CUdriverProcAddressQueryResult q;
  CHECK(cuGetProcAddress("cuMemAlloc", (void**)&alloc, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &q));
  EXPECT(q == CU_GET_PROC_ADDRESS_SUCCESS && alloc != NULL);
  CHECK(alloc(&d, 256));
  CHECK(cuMemFree(d));
  /* A name that is no driver function: success, a NULL pointer, the reason in the status (as
     NVIDIA's driver answers). */
  void* nothing = &q;
  CHECK(cuGetProcAddress("cuNoSuchFunction", &nothing, 13000, 0, &q));
  EXPECT(nothing == NULL && q == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  /* A function Remora does not remote says so (NVIDIA's driver serves it). */
  CUevent e;
  CHECK(cuEventCreate(&e, 0));
  if (g_remora)
    EXPECT_ERR(cuCtxRecordEvent(primary, e), CUDA_ERROR_NOT_SUPPORTED);
  else
    CHECK(cuCtxRecordEvent(primary, e));
  CHECK(cuEventDestroy(e));
  const char* s = NULL;
  CHECK(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &s));
  EXPECT(s != NULL && strlen(s) > 0);
  /* A reset of the primary context ends what the session holds on the device: memory
     allocated before it is gone, the context is usable again at once. */
  CHECK(cuMemAlloc(&d, 256));
  CHECK(cuDevicePrimaryCtxReset(dev));
  CHECK(cuCtxSetCurrent(primary));
  if (g_remora) EXPECT(cuMemFree(d) != CUDA_SUCCESS); /* natively undefined */
  CHECK(cuMemAlloc(&d, 256));
  CHECK(cuCtxSynchronize());
  CHECK(cuMemFree(d));
  CHECK(cuDevicePrimaryCtxRelease(dev));
  printf("PASS driver_api: %s\n", g_emulated ? "host-emulated (kernel results not checked)" : "kernel results checked");
  return 0;
}
