// Unified memory in several kernels and host phases, and mapped pinned memory (zero copy):
// (1) a managed array updated alternately by kernels and by the host over 20 phases, checked
// every phase; (2) a linked list built on the host in managed memory (pointers stored in the
// data) walked by a kernel; (3) a __managed__ counter incremented by kernels and the host;
// (4) prefetch, read-mostly advice and stream attachment between phases; (5) cudaHostAlloc
// (Mapped) memory read and written by a kernel through cudaHostGetDevicePointer and through the
// host pointer itself, seen by the host after synchronising.
#define GPU_TEST_NAME "managed_phases"
#include <vector>

#include "gpu_test.h"

namespace {

__managed__ int g_counter;

struct Node {
  int value;
  Node* next;
};

__global__ void step(int* x, int n, int phase) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 3 + phase;
  if (i == 0) atomicAdd(&g_counter, 1);
}
__global__ void walk(const Node* head, long long* sum) {
  long long s = 0;
  for (const Node* p = head; p != nullptr; p = p->next) s += p->value;
  *sum = s;
}
__global__ void mapped_rw(const int* in, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * 2 + 1;
}

}  // namespace

int main() {
  int v = 0;
  CK(cudaDeviceGetAttribute(&v, cudaDevAttrManagedMemory, 0));
  if (v != 1) gpu_test::fail("managedMemory is %d", v);
  const int n = 3 << 20;  // 12 MiB
  int* x;
  CK(cudaMallocManaged(&x, n * sizeof(int)));
  std::vector<int> want(n);
  for (int i = 0; i < n; i++) x[i] = want[i] = i % 1000;
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  g_counter = 100;
  for (int phase = 0; phase < 20; phase++) {
    if (phase == 5) {
      CK(cudaMemPrefetchAsync(x, n * sizeof(int), cudaMemLocation{cudaMemLocationTypeDevice, 0}, 0, s));
      CK(cudaMemAdvise(x, n * sizeof(int), cudaMemAdviseSetReadMostly, cudaMemLocation{cudaMemLocationTypeDevice, 0}));
    }
    if (phase == 10) CK(cudaStreamAttachMemAsync(s, x, 0, cudaMemAttachSingle));
    step<<<(n + 255) / 256, 256, 0, s>>>(x, n, phase);
    CK_LAUNCH("step");
    CK(cudaStreamSynchronize(s));
    for (int i = 0; i < n; i++) want[i] = want[i] * 3 + phase;
    // The host checks a sample and rewrites every 7th element (next phase's kernel reads it).
    for (int i = 0; i < n; i += 4099)
      if (x[i] != want[i]) gpu_test::fail("phase %d: x[%d] = %d, expected %d", phase, i, x[i], want[i]);
    for (int i = 0; i < n; i += 7) x[i] = want[i] = (i + phase) % 977;
    g_counter += 1000;
  }
  for (int i = 0; i < n; i++)
    if (x[i] != want[i]) gpu_test::fail("final: x[%d] = %d, expected %d", i, x[i], want[i]);
  if (g_counter != 100 + 20 * 1001) gpu_test::fail("managed counter %d, expected %d", g_counter, 100 + 20 * 1001);

  // A linked list in managed memory: host pointers are device pointers.
  const int nodes = 10000;
  Node* list;
  long long* sum;
  CK(cudaMallocManaged(&list, nodes * sizeof(Node)));
  CK(cudaMallocManaged(&sum, sizeof(long long)));
  long long expect = 0;
  for (int i = 0; i < nodes; i++) {
    int j = (i * 7919) % nodes;  // a permutation: the walk jumps around
    list[j].value = i;
    list[j].next = i + 1 < nodes ? &list[((i + 1) * 7919) % nodes] : nullptr;
    expect += i;
  }
  walk<<<1, 1>>>(&list[0], sum);
  CK_LAUNCH("walk");
  CK(cudaDeviceSynchronize());
  if (*sum != expect) gpu_test::fail("list walk summed %lld, expected %lld", *sum, expect);

  // Mapped pinned memory: the kernel reads and writes host memory directly.
  CK(cudaSetDeviceFlags(cudaDeviceMapHost));
  const int m = 1 << 20;
  int *in, *out, *din, *dout;
  CK(cudaHostAlloc(&in, m * sizeof(int), cudaHostAllocMapped));
  CK(cudaHostAlloc(&out, m * sizeof(int), cudaHostAllocMapped));
  CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&din), in, 0));
  CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dout), out, 0));
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < m; i++) in[i] = i + round;
    // Round 1 uses the host pointers themselves (unified addressing).
    if (round == 1) mapped_rw<<<(m + 255) / 256, 256>>>(in, out, m);
    else mapped_rw<<<(m + 255) / 256, 256>>>(din, dout, m);
    CK_LAUNCH("mapped_rw");
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < m; i++)
      if (out[i] != (i + round) * 2 + 1) gpu_test::fail("mapped round %d: out[%d] = %d", round, i, out[i]);
  }
  CK(cudaFreeHost(in));
  CK(cudaFreeHost(out));
  CK(cudaFree(list));
  CK(cudaFree(sum));
  CK(cudaStreamDestroy(s));
  CK(cudaFree(x));
  gpu_test::pass("20 kernel/host phases on 12 MiB of managed memory, a managed counter, a 10000-node managed list, "
                 "mapped pinned memory read and written by kernels (3 rounds)");
  return 0;
}
