// multithread_streams: 6 std::threads, each calling cudaSetDevice(0) and creating its own
// stream, then issuing pinned cudaMemcpyAsync H2D + kernels + D2H concurrently with the
// others (released together by a barrier) and checking its own results every iteration; each
// thread also runs work on cudaStreamPerThread (kernel, cudaMemsetAsync, cudaMemcpyAsync,
// cudaStreamSynchronize(cudaStreamPerThread)) and checks the per-thread last-error state.
#define GPU_TEST_NAME "multithread_streams"
#include "gpu_test.h"

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

constexpr int kThreads = 6;
constexpr int kIters = 12;
constexpr int kN = 1 << 18;

__global__ void affine(const int* in, int* out, int n, int mul, int add) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = in[i] * mul + add;
}

__global__ void add_index(int* p, int n, int tid) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    p[i] += i ^ tid;
}

static gpu_test::ThreadFailure g_fail;

// Start gate: the workers set up, then start issuing work together (C++17, no std::barrier).
class StartGate {
 public:
  explicit StartGate(int n) : remaining_(n) {}
  void arrive() {  // counts this thread and waits for the others
    std::unique_lock<std::mutex> lock(mu_);
    if (--remaining_ == 0) cv_.notify_all();
    cv_.wait(lock, [this] { return remaining_ <= 0; });
  }
  void drop() {  // a thread that gave up early: counts it without waiting
    std::lock_guard<std::mutex> lock(mu_);
    if (--remaining_ == 0) cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int remaining_;
};

static bool worker(int tid, StartGate* start) {
  bool arrived = false;
  // Any early return must still count at the gate so that the other threads proceed.
  struct Arrive {
    StartGate* gate;
    bool* arrived;
    ~Arrive() {
      if (!*arrived) gate->drop();
    }
  } guard{start, &arrived};

  TCK(g_fail, tid, cudaSetDevice(0));
  int dev = -1;
  TCK(g_fail, tid, cudaGetDevice(&dev));
  if (dev != 0) {
    g_fail.set("thread " + std::to_string(tid) + ": cudaGetDevice = " + std::to_string(dev));
    return false;
  }
  cudaStream_t s;
  TCK(g_fail, tid, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int *h_in, *h_out, *d_in, *d_out;
  TCK(g_fail, tid, cudaMallocHost(&h_in, kN * sizeof(int)));
  TCK(g_fail, tid, cudaMallocHost(&h_out, kN * sizeof(int)));
  TCK(g_fail, tid, cudaMalloc(&d_in, kN * sizeof(int)));
  TCK(g_fail, tid, cudaMalloc(&d_out, kN * sizeof(int)));
  gpu_test::Rng rng(0x5eed000c + tid);

  arrived = true;
  start->arrive();

  for (int it = 0; it < kIters; ++it) {
    for (int i = 0; i < kN; ++i) h_in[i] = rng.range(-100000, 100000);
    const int mul = tid + 2, add = it * 1000 + tid;
    TCK(g_fail, tid, cudaMemcpyAsync(d_in, h_in, kN * sizeof(int), cudaMemcpyHostToDevice, s));
    affine<<<120, 256, 0, s>>>(d_in, d_out, kN, mul, add);
    TCK(g_fail, tid, cudaGetLastError());
    TCK(g_fail, tid, cudaMemcpyAsync(h_out, d_out, kN * sizeof(int), cudaMemcpyDeviceToHost, s));
    TCK(g_fail, tid, cudaStreamSynchronize(s));
    for (int i = 0; i < kN; ++i)
      if (h_out[i] != h_in[i] * mul + add) {
        g_fail.set("thread " + std::to_string(tid) + " iteration " + std::to_string(it) +
                   ": element " + std::to_string(i) + " = " + std::to_string(h_out[i]) +
                   ", want " + std::to_string(h_in[i] * mul + add));
        return false;
      }
  }

  // Per-thread default stream (explicit handle in a legacy-default-stream program).
  TCK(g_fail, tid, cudaMemsetAsync(d_out, 0, kN * sizeof(int), cudaStreamPerThread));
  add_index<<<64, 256, 0, cudaStreamPerThread>>>(d_out, kN, tid);
  TCK(g_fail, tid, cudaGetLastError());
  add_index<<<64, 256, 0, cudaStreamPerThread>>>(d_out, kN, tid);
  TCK(g_fail, tid, cudaGetLastError());
  TCK(g_fail, tid,
      cudaMemcpyAsync(h_out, d_out, kN * sizeof(int), cudaMemcpyDeviceToHost, cudaStreamPerThread));
  TCK(g_fail, tid, cudaStreamSynchronize(cudaStreamPerThread));
  for (int i = 0; i < kN; ++i)
    if (h_out[i] != 2 * (i ^ tid)) {
      g_fail.set("thread " + std::to_string(tid) + ": cudaStreamPerThread element " +
                 std::to_string(i) + " = " + std::to_string(h_out[i]));
      return false;
    }

  // The last-error state is per thread: an error provoked here is seen here only.
  if (tid == 0) {
    affine<<<1, 4096, 0, s>>>(d_in, d_out, 1, 1, 1);  // invalid block size
    const cudaError_t e = cudaPeekAtLastError();
    if (e != cudaErrorInvalidValue) {  // CUDA 13's answer to an oversized block
      g_fail.set(std::string("thread 0: bad launch left last error ") + cudaGetErrorName(e));
      return false;
    }
    (void)cudaGetLastError();
  }

  TCK(g_fail, tid, cudaStreamDestroy(s));
  TCK(g_fail, tid, cudaFree(d_in));
  TCK(g_fail, tid, cudaFree(d_out));
  TCK(g_fail, tid, cudaFreeHost(h_in));
  TCK(g_fail, tid, cudaFreeHost(h_out));
  return true;
}

int main() {
  // Initialise the context once from main, as most applications do.
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));
  StartGate start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back([t, &start] { worker(t, &start); });
  for (auto& th : threads) th.join();
  if (g_fail.failed()) gpu_test::fail("%s", g_fail.message().c_str());
  const cudaError_t main_last = cudaPeekAtLastError();
  if (main_last != cudaSuccess)
    gpu_test::fail("main thread sees last error %s set by a worker thread",
                   cudaGetErrorName(main_last));
  CK(cudaDeviceSynchronize());
  gpu_test::pass("%d threads x %d iterations on own streams + cudaStreamPerThread, %d ints each, "
                 "all exact; last error per thread",
                 kThreads, kIters, kN);
  return 0;
}
