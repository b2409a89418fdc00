// migrate_loop STOPFILE [MIB] [async|pool|pinned]: a computing loop whose session an administrator may
// move to another server while it runs (remoractl session migrate; docs/ARCHITECTURE.md,
// "Planned migration"). Every result is checked, and MIB MiB written once at the start are
// checked again every 32 iterations (they must have moved with the session, at the same
// address). Runs until STOPFILE exists, then prints "PASS migrate_loop N" (N iterations).
// "async" also holds 1 MiB of stream-ordered memory (cudaMallocAsync), written once and checked
// with the kept memory, freed with cudaFreeAsync at the end, and reads each result through a
// buffer allocated and freed in stream order every iteration; it sets the release threshold
// of the device's own pool, and checks the pool still says it. "pool" holds memory of a pool it
// created (cudaMemPoolCreate), which a migration does not carry: the move is refused and the
// loop goes on where it is. "pinned": the loop's host buffers are pinned (cudaMallocHost),
// which RDMA registers with the connection (and a move re-registers).
//
// Each iteration: x (host, fresh values) -> a on a non-blocking stream; b = 3a + k by a kernel
// on a GPU, or a copy of a on the host-emulated backend (whose kernels do not run; the kernel
// is still launched, so its module and function move too); an event recorded and
// synchronised; b -> host, checked.
#include <sys/stat.h>

#include <cstdint>
#include <string>

#include "app_check.h"

namespace {

__global__ void Affine(const uint32_t* a, uint32_t* b, size_t n, uint32_t k, int apply) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (apply && i < n) b[i] = 3u * a[i] + k;
}

bool Exists(const char* path) {
  struct stat st;
  return ::stat(path, &st) == 0;
}

uint32_t KeepValue(size_t i) { return static_cast<uint32_t>(i * 2654435761u) ^ 0x5a5a5a5au; }

}  // namespace

int main(int argc, char** argv) {
  REQUIRE(argc >= 2, "usage: migrate_loop STOPFILE [MIB] [async|pool|pinned]");
  const char* stop = argv[1];
  size_t keep_bytes = (argc >= 3 ? std::stoul(argv[2]) : 8) << 20;
  bool hold_async = argc >= 4 && std::string(argv[3]) == "async";
  bool pinned = argc >= 4 && std::string(argv[3]) == "pinned";
  bool hold_pool = argc >= 4 && std::string(argv[3]) == "pool";
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  bool emulated = std::strstr(prop.name, "host-emulated") != nullptr;

  const size_t n = 1 << 18;  // 1 MiB of uint32_t
  uint32_t *a = nullptr, *b = nullptr, *keep = nullptr;
  CHECK(cudaMalloc(&a, n * sizeof(uint32_t)));
  CHECK(cudaMalloc(&b, n * sizeof(uint32_t)));
  CHECK(cudaMalloc(&keep, keep_bytes));
  std::vector<uint32_t> kept(keep_bytes / sizeof(uint32_t));
  for (size_t i = 0; i < kept.size(); i++) kept[i] = KeepValue(i);
  CHECK(cudaMemcpy(keep, kept.data(), keep_bytes, cudaMemcpyHostToDevice));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // Stream-ordered memory held for the whole run (async), or a pool's (pool).
  const size_t held_words = (1 << 20) / sizeof(uint32_t);
  std::vector<uint32_t> held_values(held_words), held_back(held_words);
  for (size_t i = 0; i < held_words; i++) held_values[i] = KeepValue(i) ^ 0x00ff00ffu;
  uint32_t* held = nullptr;
  cudaMemPool_t pool = nullptr;
  cudaMemPool_t own = nullptr;
  const uint64_t threshold = (3 << 20) + 4096;
  if (hold_async) {
    CHECK(cudaDeviceGetDefaultMemPool(&own, 0));
    uint64_t t = threshold;
    CHECK(cudaMemPoolSetAttribute(own, cudaMemPoolAttrReleaseThreshold, &t));
    CHECK(cudaMallocAsync(reinterpret_cast<void**>(&held), held_words * sizeof(uint32_t), s));
    CHECK(cudaMemcpyAsync(held, held_values.data(), held_words * sizeof(uint32_t), cudaMemcpyHostToDevice, s));
    CHECK(cudaStreamSynchronize(s));
  }
  if (hold_pool) {
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    CHECK(cudaMemPoolCreate(&pool, &props));
    CHECK(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&held), 1 << 20, pool, s));
    CHECK(cudaStreamSynchronize(s));
  }
  cudaEvent_t done;
  CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  std::printf("ready %s a=%p b=%p keep=%p\n", emulated ? "host-emulated" : "gpu", static_cast<void*>(a),
              static_cast<void*>(b), static_cast<void*>(keep));
  std::fflush(stdout);

  std::vector<uint32_t> xv, yv, back(kept.size());
  uint32_t *x = nullptr, *y = nullptr;
  if (pinned) {
    CHECK(cudaMallocHost(&x, n * sizeof(uint32_t)));
    CHECK(cudaMallocHost(&y, n * sizeof(uint32_t)));
  } else {
    xv.resize(n);
    yv.resize(n);
    x = xv.data();
    y = yv.data();
  }
  uint32_t k = 0;
  for (; !Exists(stop); k++) {
    for (size_t i = 0; i < n; i++) x[i] = static_cast<uint32_t>(i * 7u + k * 1000003u);
    CHECK(cudaMemcpyAsync(a, x, n * sizeof(uint32_t), cudaMemcpyHostToDevice, s));
    Affine<<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(a, b, n, k, emulated ? 0 : 1);
    CHECK(cudaGetLastError());
    if (emulated) CHECK(cudaMemcpyAsync(b, a, n * sizeof(uint32_t), cudaMemcpyDeviceToDevice, s));
    CHECK(cudaEventRecord(done, s));
    CHECK(cudaEventSynchronize(done));
    if (hold_async) {
      // The result read through memory allocated and freed in stream order.
      uint32_t* t = nullptr;
      CHECK(cudaMallocAsync(reinterpret_cast<void**>(&t), n * sizeof(uint32_t), s));
      CHECK(cudaMemcpyAsync(t, b, n * sizeof(uint32_t), cudaMemcpyDeviceToDevice, s));
      CHECK(cudaMemcpyAsync(y, t, n * sizeof(uint32_t), cudaMemcpyDeviceToHost, s));
      CHECK(cudaFreeAsync(t, s));
    } else {
      CHECK(cudaMemcpyAsync(y, b, n * sizeof(uint32_t), cudaMemcpyDeviceToHost, s));
    }
    CHECK(cudaStreamSynchronize(s));
    for (size_t i = 0; i < n; i++) {
      uint32_t want = emulated ? x[i] : 3u * x[i] + k;
      REQUIRE(y[i] == want, "iteration %u: element %zu is %u, expected %u", k, i, y[i], want);
    }
    // A small copy too (small device-to-pageable copies take another path).
    uint32_t first = 0;
    CHECK(cudaMemcpy(&first, b, sizeof(first), cudaMemcpyDeviceToHost));
    REQUIRE(first == (emulated ? x[0] : 3u * x[0] + k), "iteration %u: small copy read %u", k, first);
    if (k % 32 == 0) {
      CHECK(cudaMemcpy(back.data(), keep, keep_bytes, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < back.size(); i++)
        REQUIRE(back[i] == kept[i], "iteration %u: kept memory changed at word %zu (%u, expected %u)", k, i, back[i], kept[i]);
      if (hold_async) {
        CHECK(cudaMemcpy(held_back.data(), held, held_words * sizeof(uint32_t), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < held_words; i++)
          REQUIRE(held_back[i] == held_values[i], "iteration %u: stream-ordered memory changed at word %zu", k, i);
        uint64_t t = 0;
        CHECK(cudaMemPoolGetAttribute(own, cudaMemPoolAttrReleaseThreshold, &t));
        REQUIRE(t == threshold, "iteration %u: the pool's release threshold is %llu, set %llu", k,
                static_cast<unsigned long long>(t), static_cast<unsigned long long>(threshold));
      }
      std::printf("iteration %u ok\n", k);
      std::fflush(stdout);
    }
  }
  CHECK(cudaMemcpy(back.data(), keep, keep_bytes, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < back.size(); i++) REQUIRE(back[i] == kept[i], "at the end: kept memory changed at word %zu", i);
  CHECK(cudaEventDestroy(done));
  if (held != nullptr) {
    // After a move this memory is placed on the new server (the host backend: no pool holds
    // it) or its pool's (a GPU): either way the free in stream order gives it back
    // (integration.migrate_test compares the free memory reported; a GPU's pool may keep it,
    // below the release threshold set above).
    size_t free_before = 0, free_after = 0, total = 0;
    CHECK(cudaMemGetInfo(&free_before, &total));
    CHECK(cudaFreeAsync(held, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemGetInfo(&free_after, &total));
    std::printf("freed the held memory: %lld bytes more free\n",
                static_cast<long long>(free_after) - static_cast<long long>(free_before));
  }
  CHECK(cudaStreamSynchronize(s));
  if (pool != nullptr) CHECK(cudaMemPoolDestroy(pool));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(keep));
  CHECK(cudaFree(b));
  CHECK(cudaFree(a));
  if (pinned) {
    CHECK(cudaFreeHost(x));
    CHECK(cudaFreeHost(y));
  }
  std::printf("PASS migrate_loop %u\n", k);
  return 0;
}
