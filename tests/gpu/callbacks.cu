// callbacks: cudaLaunchHostFunc and cudaStreamAddCallback run in stream order relative to
// kernels and copies:
//  - each of 8 steps runs a kernel that updates a buffer, copies it D2H into pinned memory,
//    then enqueues a host function (even steps) or a stream callback (odd steps) that checks
//    the copy holds exactly that step's data and records its position in a global sequence;
//  - user data pointers, the stream handle and the status reach the callbacks unchanged;
//  - a host function on a second stream, behind cudaStreamWaitEvent on the first, sees the
//    first stream's earlier callbacks done; one on the legacy default stream sees everything;
//  - a host function writes a pinned buffer that a later cudaMemcpyAsync H2D in the same
//    stream reads: the copy must see what the host function wrote (stream order applies to
//    host memory reads of copies from pinned memory too).
#define GPU_TEST_NAME "callbacks"
#include "gpu_test.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

constexpr int kSteps = 8;
constexpr int kN = 1 << 16;

std::atomic<int> g_sequence{0};
std::atomic<int> g_steps_done{0};

struct StepCtx {
  StepCtx* self;
  int step;
  const int* snapshot;  // pinned, filled by the D2H copy just before the callback
  const int* init;
  int order = -1;
  bool data_ok = false;
  int bad_index = -1;
  cudaStream_t expected_stream;
  cudaStream_t got_stream = nullptr;
  cudaError_t status = cudaErrorUnknown;
  bool via_add_callback = false;
};

__global__ void accumulate(int* d, int n, int step) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) d[i] += step + 1;
}

__global__ void scale_copy(const int* in, int* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * 2;
}

static void check_step(StepCtx* c) {
  c->order = g_sequence.fetch_add(1);
  const int add = (c->step + 1) * (c->step + 2) / 2;  // sum of (j+1) for j <= step
  c->data_ok = true;
  for (int i = 0; i < kN; ++i) {
    if (c->snapshot[i] != c->init[i] + add) {
      c->data_ok = false;
      c->bad_index = i;
      break;
    }
  }
  if (c->step == 2) std::this_thread::sleep_for(std::chrono::milliseconds(30));  // slow one
  g_steps_done.fetch_add(1);
}

static void CUDART_CB host_fn(void* user) {
  auto* c = static_cast<StepCtx*>(user);
  c->got_stream = c->expected_stream;  // cudaHostFn_t gets no stream
  c->status = cudaSuccess;
  if (c->self == c) check_step(c);
}

static void CUDART_CB stream_cb(cudaStream_t stream, cudaError_t status, void* user) {
  auto* c = static_cast<StepCtx*>(user);
  c->got_stream = stream;
  c->status = status;
  c->via_add_callback = true;
  if (c->self == c) check_step(c);
}

struct WaitCheck {
  int min_steps;
  int seen_steps = -1;
};

static void CUDART_CB observe_steps(void* user) {
  auto* w = static_cast<WaitCheck*>(user);
  w->seen_steps = g_steps_done.load();
}

struct HostWrite {
  int* pinned;
  int n;
  int value_base;
};

static void CUDART_CB write_pinned(void* user) {
  auto* h = static_cast<HostWrite*>(user);
  for (int i = 0; i < h->n; ++i) h->pinned[i] = h->value_base + i;
}

int main() {
  cudaStream_t s, s2;
  CK(cudaStreamCreate(&s));
  CK(cudaStreamCreate(&s2));

  std::vector<int> init(kN);
  gpu_test::Rng rng(0x5eed0008);
  for (auto& v : init) v = rng.range(-1000000, 1000000);
  int* d;
  CK(cudaMalloc(&d, kN * sizeof(int)));
  CK(cudaMemcpy(d, init.data(), kN * sizeof(int), cudaMemcpyHostToDevice));
  int* snaps;
  CK(cudaMallocHost(&snaps, size_t(kSteps) * kN * sizeof(int)));
  std::memset(snaps, 0, size_t(kSteps) * kN * sizeof(int));

  StepCtx ctx[kSteps];
  cudaEvent_t after_step3;
  CK(cudaEventCreateWithFlags(&after_step3, cudaEventDisableTiming));
  WaitCheck wait_s2{4};
  for (int k = 0; k < kSteps; ++k) {
    StepCtx& c = ctx[k];
    c.self = &c;
    c.step = k;
    c.snapshot = snaps + size_t(k) * kN;
    c.init = init.data();
    c.expected_stream = s;
    accumulate<<<(kN + 255) / 256, 256, 0, s>>>(d, kN, k);
    CK_LAUNCH("accumulate");
    CK(cudaMemcpyAsync(snaps + size_t(k) * kN, d, kN * sizeof(int), cudaMemcpyDeviceToHost, s));
    if (k % 2 == 0)
      CK(cudaLaunchHostFunc(s, host_fn, &c));
    else
      CK(cudaStreamAddCallback(s, stream_cb, &c, 0));
    if (k == 3) {
      CK(cudaEventRecord(after_step3, s));
      CK(cudaStreamWaitEvent(s2, after_step3, 0));
      CK(cudaLaunchHostFunc(s2, observe_steps, &wait_s2));
    }
  }
  // Everything on the blocking streams s and s2 precedes this legacy-stream host function.
  WaitCheck wait_legacy{kSteps};
  CK(cudaLaunchHostFunc(cudaStreamLegacy, observe_steps, &wait_legacy));
  CK(cudaStreamSynchronize(s));
  CK(cudaStreamSynchronize(s2));
  CK(cudaDeviceSynchronize());

  for (int k = 0; k < kSteps; ++k) {
    const StepCtx& c = ctx[k];
    if (c.order != k)
      gpu_test::fail("step %d callback ran in position %d (stream order broken)", k, c.order);
    if (!c.data_ok)
      gpu_test::fail("step %d %s saw stale/wrong data at [%d]: %d, want %d", k,
                     k % 2 ? "stream callback" : "host function", c.bad_index,
                     c.snapshot[c.bad_index],
                     c.init[c.bad_index] + (k + 1) * (k + 2) / 2);
    if (c.got_stream != s)
      gpu_test::fail("step %d: callback got stream %p, want %p", k,
                     static_cast<void*>(c.got_stream), static_cast<void*>(s));
    if (c.status != cudaSuccess)
      gpu_test::fail("step %d: callback status %s", k, cudaGetErrorName(c.status));
    if (c.via_add_callback != (k % 2 == 1))
      gpu_test::fail("step %d: the wrong kind of callback ran", k);
  }
  if (wait_s2.seen_steps < wait_s2.min_steps)
    gpu_test::fail("host function on stream 2 after cudaStreamWaitEvent saw %d steps done, "
                   "want >= %d",
                   wait_s2.seen_steps, wait_s2.min_steps);
  if (wait_legacy.seen_steps != kSteps)
    gpu_test::fail("host function on the legacy stream saw %d steps done, want %d",
                   wait_legacy.seen_steps, kSteps);

  // A host function writes pinned memory that the next H2D copy in the stream reads.
  int* pinned_src;
  int* pinned_dst;
  CK(cudaMallocHost(&pinned_src, kN * sizeof(int)));
  CK(cudaMallocHost(&pinned_dst, kN * sizeof(int)));
  for (int i = 0; i < kN; ++i) pinned_src[i] = -1;  // stale content at enqueue time
  int* d2;
  CK(cudaMalloc(&d2, kN * sizeof(int)));
  HostWrite hw{pinned_src, kN, 5000};
  // Hold the stream behind a slow callback first so the copy is surely enqueued before the
  // writer runs.
  CK(cudaLaunchHostFunc(
      s, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }, nullptr));
  CK(cudaLaunchHostFunc(s, write_pinned, &hw));
  CK(cudaMemcpyAsync(d, pinned_src, kN * sizeof(int), cudaMemcpyHostToDevice, s));
  scale_copy<<<(kN + 255) / 256, 256, 0, s>>>(d, d2, kN);
  CK_LAUNCH("scale_copy");
  CK(cudaMemcpyAsync(pinned_dst, d2, kN * sizeof(int), cudaMemcpyDeviceToHost, s));
  CK(cudaStreamSynchronize(s));
  for (int i = 0; i < kN; ++i)
    if (pinned_dst[i] != 2 * (5000 + i))
      gpu_test::fail("H2D copy after a host function read %d at [%d], want %d (the copy did "
                     "not see what the host function wrote: copied at enqueue time?)",
                     pinned_dst[i] / 2, i, 5000 + i);

  CK(cudaEventDestroy(after_step3));
  CK(cudaStreamDestroy(s));
  CK(cudaStreamDestroy(s2));
  CK(cudaFree(d));
  CK(cudaFree(d2));
  CK(cudaFreeHost(snaps));
  CK(cudaFreeHost(pinned_src));
  CK(cudaFreeHost(pinned_dst));
  gpu_test::pass("%d callbacks (cudaLaunchHostFunc + cudaStreamAddCallback) in stream order "
                 "with the preceding kernel+copy data, cross-stream and legacy-stream order, "
                 "host-function-written pinned data seen by a later H2D copy",
                 kSteps + 4);
  return 0;
}
