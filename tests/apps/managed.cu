// Unified memory without kernels (the host backend does not run them): managed memory the
// host writes and device copies and memsets read and write, in rounds, checked on both sides;
// a __managed__ variable; prefetch, advice and range attributes; mapped pinned memory and its
// device pointer; what the device reports and what the quota counts.
#include <cstdint>

#include "app_check.h"

__managed__ int g_managed[1024];

// Never run on the host backend: its presence makes the program's module carry g_managed.
__global__ void touch() { g_managed[0] += 1; }

namespace {

void Rounds(size_t n) {
  unsigned char* m = nullptr;
  CHECK(cudaMallocManaged(&m, n));
  REQUIRE(reinterpret_cast<uintptr_t>(m) % 4096 == 0, "managed memory is not page aligned");
  cudaPointerAttributes attr{};
  CHECK(cudaPointerGetAttributes(&attr, m + 10));
  REQUIRE(attr.type == cudaMemoryTypeManaged, "pointer type %d", attr.type);
  for (size_t i = 0; i < n; i += 4096) REQUIRE(m[i] == 0, "managed memory is not zeroed at %zu", i);
  unsigned char* d;
  CHECK(cudaMalloc(&d, n));
  std::vector<unsigned char> back(n);
  for (int round = 0; round < 3; round++) {
    // The host writes; a device copy must read what it wrote.
    for (size_t i = 0; i < n; i++) m[i] = static_cast<unsigned char>(i * 13 + round);
    CHECK(cudaMemcpy(d, m, n, cudaMemcpyDefault));
    CHECK(cudaMemcpy(back.data(), d, n, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i += 331)
      REQUIRE(back[i] == static_cast<unsigned char>(i * 13 + round), "round %d: the device read %d at %zu", round, back[i], i);
    // The device writes (asynchronously); after a synchronisation the host reads it.
    CHECK(cudaMemsetAsync(m + n / 4, 0x40 + round, n / 2, 0));
    CHECK(cudaDeviceSynchronize());
    for (size_t i = 0; i < n; i += 509) {
      unsigned char want = (i >= n / 4 && i < n / 4 + n / 2) ? 0x40 + round : static_cast<unsigned char>(i * 13 + round);
      REQUIRE(m[i] == want, "round %d: the host read %d at %zu, expected %d", round, m[i], i, want);
    }
    // An explicit host-to-device copy into managed memory (synchronous: visible at once).
    std::vector<unsigned char> src(4096, static_cast<unsigned char>(0x70 + round));
    CHECK(cudaMemcpy(m + 8192, src.data(), src.size(), cudaMemcpyHostToDevice));
    REQUIRE(m[8192] == 0x70 + round && m[8192 + 4095] == 0x70 + round, "round %d: a copy into managed memory is not visible", round);
  }
  // Managed memory as the source of a copy to the host, with an explicit kind.
  m[5] = 0x99;
  unsigned char x = 0;
  CHECK(cudaMemcpy(&x, m + 5, 1, cudaMemcpyHostToHost));
  REQUIRE(x == 0x99, "host-to-host from managed memory gave %d", x);
  CHECK(cudaFree(d));
  CHECK(cudaFree(m));
}

void Hints() {
  const size_t n = 1 << 20;
  float* m;
  CHECK(cudaMallocManaged(&m, n * sizeof(float), cudaMemAttachGlobal));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CHECK(cudaStreamAttachMemAsync(s, m, 0, cudaMemAttachSingle));
  cudaMemLocation dev{cudaMemLocationTypeDevice, 0};
  cudaMemLocation host{cudaMemLocationTypeHost, 0};
  for (size_t i = 0; i < n; i++) m[i] = 1.5f;
  CHECK(cudaMemPrefetchAsync(m, n * sizeof(float), dev, 0, s));
  int loc = -5;
  CHECK(cudaMemRangeGetAttribute(&loc, sizeof(loc), cudaMemRangeAttributeLastPrefetchLocation, m, n * sizeof(float)));
  REQUIRE(loc == 0, "last prefetch location %d", loc);
  CHECK(cudaMemAdvise(m, n * sizeof(float), cudaMemAdviseSetReadMostly, dev));
  CHECK(cudaMemAdvise(m, n * sizeof(float), cudaMemAdviseSetAccessedBy, dev));
  int read_mostly = 0;
  CHECK(cudaMemRangeGetAttribute(&read_mostly, sizeof(read_mostly), cudaMemRangeAttributeReadMostly, m, n * sizeof(float)));
  REQUIRE(read_mostly == 1, "read-mostly %d", read_mostly);
  int by[4] = {};
  CHECK(cudaMemRangeGetAttribute(by, sizeof(by), cudaMemRangeAttributeAccessedBy, m, n * sizeof(float)));
  REQUIRE(by[0] == 0 && by[1] == cudaInvalidDeviceId, "accessed-by %d %d", by[0], by[1]);
  CHECK(cudaMemPrefetchAsync(m, n * sizeof(float), host, 0, s));
  CHECK(cudaStreamSynchronize(s));
  REQUIRE(m[n - 1] == 1.5f, "after the prefetches the host reads %f", m[n - 1]);
  int x = 0;
  EXPECT_ERR(cudaMemAdvise(&x, sizeof(x), cudaMemAdviseSetReadMostly, dev), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(m));
}

void ManagedVariable() {
  for (int i = 0; i < 1024; i++) g_managed[i] = i * 3;
  int* d;
  CHECK(cudaMalloc(&d, sizeof(g_managed)));
  CHECK(cudaMemcpy(d, g_managed, sizeof(g_managed), cudaMemcpyDefault));
  std::vector<int> back(1024);
  CHECK(cudaMemcpy(back.data(), d, sizeof(g_managed), cudaMemcpyDeviceToHost));
  REQUIRE(back[1000] == 3000, "the device read %d from the managed variable", back[1000]);
  CHECK(cudaMemset(g_managed, 0x01, 64));
  CHECK(cudaDeviceSynchronize());
  REQUIRE(g_managed[3] == 0x01010101 && g_managed[16] == 48, "the host reads %d, %d from the managed variable", g_managed[3],
          g_managed[16]);
  // cudaMemset of managed memory is fully synchronous: the host reads its result at once.
  CHECK(cudaMemset(g_managed + 32, 0x02, 16));
  REQUIRE(g_managed[32] == 0x02020202 && g_managed[36] == 108, "the host reads %d, %d right after cudaMemset", g_managed[32],
          g_managed[36]);
  CHECK(cudaFree(d));
}

void MappedPinned() {
  const size_t n = 256 << 10;
  CHECK(cudaSetDeviceFlags(cudaDeviceMapHost));
  unsigned char* p;
  CHECK(cudaHostAlloc(&p, n, cudaHostAllocMapped));
  unsigned char* dp = nullptr;
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dp), p, 0));
  REQUIRE(dp != nullptr, "no device pointer for mapped memory");
  for (size_t i = 0; i < n; i++) p[i] = static_cast<unsigned char>(i ^ 0x5a);
  unsigned char* d;
  CHECK(cudaMalloc(&d, n));
  CHECK(cudaMemcpy(d, dp, n, cudaMemcpyDeviceToDevice));  // the device reads the host buffer
  std::vector<unsigned char> back(n);
  CHECK(cudaMemcpy(back.data(), d, n, cudaMemcpyDeviceToHost));
  REQUIRE(back[12345] == static_cast<unsigned char>(12345 ^ 0x5a), "the device read %d through the mapped pointer", back[12345]);
  CHECK(cudaMemset(dp, 0x33, n / 2));  // the device writes the host buffer
  CHECK(cudaDeviceSynchronize());
  REQUIRE(p[0] == 0x33 && p[n / 2 - 1] == 0x33 && p[n / 2] == static_cast<unsigned char>((n / 2) ^ 0x5a),
          "the host sees %d %d %d after the device wrote", p[0], p[n / 2 - 1], p[n / 2]);
  unsigned int got = 0;
  CHECK(cudaHostGetFlags(&got, p));
  REQUIRE(got & cudaHostAllocMapped, "flags 0x%x", got);
  CHECK(cudaFree(d));
  CHECK(cudaFreeHost(p));
}

}  // namespace

// The host-emulated backend runs a kernel whose name holds remora_emulated_busy_us for
// gridDim.x microseconds: device work still running when the host touches managed memory.
extern "C" __global__ void remora_emulated_busy_us() {}

// Host and device at once (NVIDIA's systemWideAtomics does it with system-scope atomics): the
// host's first touch of managed memory while device work sent since the last wait may run
// waits for that work, then builds on what the device wrote (issue 43). Remora's rule for
// its concurrentManagedAccess = 0 devices; a GPU with concurrent access would race here.
void TouchWhileTheDeviceWorks() {
  int* m;
  CHECK(cudaMallocManaged(&m, 64 * sizeof(int)));
  for (int i = 0; i < 64; i++) m[i] = 1;
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  remora_emulated_busy_us<<<200000, 1, 0, s>>>();  // 0.2 s on the host backend
  CHECK(cudaGetLastError());
  CHECK(cudaMemsetAsync(m, 0x01, 64 * sizeof(int), s));  // after the busy kernel
  // No synchronisation: an atomic read-modify-write (as the sample's host side does) of memory
  // the device is about to change. (A plain read of a chunk the host holds clean does not
  // fault, and sees what the host last had.)
  __sync_fetch_and_add(&m[1], 5);
  REQUIRE(m[0] == 0x01010101, "the host saw %d before the device's work was done", m[0]);
  CHECK(cudaStreamSynchronize(s));
  REQUIRE(m[0] == 0x01010101 && m[1] == 0x01010101 + 5, "after the wait: %d %d (the device's memset, then the host's +5)",
          m[0], m[1]);
  int back[2] = {};
  CHECK(cudaMemcpy(back, m, sizeof(back), cudaMemcpyDefault));
  REQUIRE(back[1] == 0x01010101 + 5, "the device holds %d, not the host's write", back[1]);
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(m));
}

int main() {
  int v = -1;
  CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrManagedMemory, 0));
  REQUIRE(v == 1, "managedMemory %d", v);
  CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrConcurrentManagedAccess, 0));
  REQUIRE(v == 0, "concurrentManagedAccess %d: Remora's managed memory is coherent at synchronisations only", v);
  size_t free0 = 0, free1 = 0, total = 0;
  CHECK(cudaMemGetInfo(&free0, &total));
  void* big;
  CHECK(cudaMallocManaged(&big, 64 << 20));
  CHECK(cudaMemGetInfo(&free1, &total));
  REQUIRE(free0 - free1 >= (64u << 20), "64 MiB of managed memory took %zu bytes of the quota", free0 - free1);
  CHECK(cudaFree(big));
  Rounds(4 << 20);
  Rounds(100000);  // not a multiple of the page size
  Hints();
  ManagedVariable();
  MappedPinned();
  TouchWhileTheDeviceWorks();
  (void)touch;
  std::printf("PASS managed: host and device copies of managed memory coherent over 3 rounds, a __managed__ variable, "
              "hints, mapped pinned memory\n");
  return 0;
}
