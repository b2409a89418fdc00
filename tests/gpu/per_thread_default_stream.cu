// per_thread_default_stream: compiled with nvcc --default-stream per-thread, so plain launches
// go through __cudaLaunchKernel_ptsz and the stream-0 / synchronous runtime calls through their
// _ptsz / _ptds entry points (cudaMemcpy, cudaMemset, cudaMemcpyAsync, cudaMemsetAsync,
// cudaMemcpy2D, cudaMemcpyToSymbol/FromSymbol, cudaLaunchKernel, cudaEventRecord,
// cudaStreamSynchronize, cudaStreamQuery).
//  1. Independence: a thread keeps its default stream busy with a 300 ms kernel; the main
//     thread's own default-stream work (copies, kernel, cudaStreamSynchronize(0)) completes
//     while that kernel still runs. With a single legacy default stream it could not.
//  2. Four threads do copies + kernels on their default streams concurrently, checked.
#define GPU_TEST_NAME "per_thread_default_stream"
#include "gpu_test.h"

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#ifndef CUDA_API_PER_THREAD_DEFAULT_STREAM
#error "per_thread_default_stream.cu must be compiled with --default-stream per-thread"
#endif

constexpr int kThreads = 4;
constexpr int kIters = 8;
constexpr int kN = 1 << 17;
constexpr int kRows = 24, kCols = 300;

__device__ int g_sym[kThreads][64];

__global__ void spin_kernel(uint64_t ns, int* done) {
  if (threadIdx.x == 0) {
    gpu_test::spin_ns(ns);
    *done = 1;
  }
}

__global__ void affine(const int* in, int* out, int n, int mul, int add) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = in[i] * mul + add;
}

__global__ void accumulate(int* acc, const int* x, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    acc[i] += x[i];
}

__global__ void sym_square(int tid) {
  const int i = threadIdx.x;
  if (i < 64) g_sym[tid][i] = g_sym[tid][i] * g_sym[tid][i];
}

static gpu_test::ThreadFailure g_fail;

static bool worker(int tid) {
  int *d_in, *d_out, *d_acc, *h_in, *h_out;
  TCK(g_fail, tid, cudaMalloc(&d_in, kN * sizeof(int)));
  TCK(g_fail, tid, cudaMalloc(&d_out, kN * sizeof(int)));
  TCK(g_fail, tid, cudaMalloc(&d_acc, kN * sizeof(int)));
  TCK(g_fail, tid, cudaMallocHost(&h_in, kN * sizeof(int)));
  TCK(g_fail, tid, cudaMallocHost(&h_out, kN * sizeof(int)));
  TCK(g_fail, tid, cudaMemset(d_acc, 0, kN * sizeof(int)));  // cudaMemset_ptds
  std::vector<long long> acc_ref(kN, 0);
  gpu_test::Rng rng(0x5eed000e + tid);
  cudaEvent_t ev;
  TCK(g_fail, tid, cudaEventCreate(&ev));

  for (int it = 0; it < kIters; ++it) {
    for (int i = 0; i < kN; ++i) h_in[i] = rng.range(-1000, 1000);
    const int mul = tid + 1, add = it - tid;
    TCK(g_fail, tid, cudaMemcpy(d_in, h_in, kN * sizeof(int), cudaMemcpyHostToDevice));  // _ptds
    affine<<<64, 256>>>(d_in, d_out, kN, mul, add);                                      // _ptsz
    TCK(g_fail, tid, cudaGetLastError());
    void* args[] = {&d_acc, &d_out, const_cast<int*>(&kN)};
    TCK(g_fail, tid,
        cudaLaunchKernel(reinterpret_cast<const void*>(accumulate), dim3(64), dim3(256), args, 0,
                         0));                                                             // _ptsz
    TCK(g_fail, tid, cudaEventRecord(ev, 0));                                            // _ptsz
    TCK(g_fail, tid,
        cudaMemcpyAsync(h_out, d_out, kN * sizeof(int), cudaMemcpyDeviceToHost, 0));     // _ptsz
    const cudaError_t q = cudaStreamQuery(0);                                            // _ptsz
    if (q != cudaSuccess && q != cudaErrorNotReady) TCK(g_fail, tid, q);
    TCK(g_fail, tid, cudaStreamSynchronize(0));                                          // _ptsz
    TCK(g_fail, tid, cudaEventQuery(ev));  // recorded before the copy: complete by now
    for (int i = 0; i < kN; ++i) {
      acc_ref[i] += h_in[i] * mul + add;
      if (h_out[i] != h_in[i] * mul + add) {
        g_fail.set("thread " + std::to_string(tid) + " iteration " + std::to_string(it) +
                   ": element " + std::to_string(i) + " = " + std::to_string(h_out[i]));
        return false;
      }
    }
  }
  TCK(g_fail, tid, cudaMemcpy(h_out, d_acc, kN * sizeof(int), cudaMemcpyDeviceToHost));  // _ptds
  for (int i = 0; i < kN; ++i)
    if (h_out[i] != acc_ref[i]) {
      g_fail.set("thread " + std::to_string(tid) + ": accumulated element " + std::to_string(i) +
                 " = " + std::to_string(h_out[i]) + ", want " + std::to_string(acc_ref[i]));
      return false;
    }

  // 2D copy and memset on the default stream, then symbols (all _ptds / _ptsz).
  int* d2;
  size_t pitch = 0;
  TCK(g_fail, tid, cudaMallocPitch(reinterpret_cast<void**>(&d2), &pitch, kCols * sizeof(int), kRows));
  TCK(g_fail, tid, cudaMemset2D(d2, pitch, 0, kCols * sizeof(int), kRows));                // _ptds
  TCK(g_fail, tid, cudaMemcpy2D(d2, pitch, h_in, kCols * sizeof(int), kCols * sizeof(int), kRows,
                                cudaMemcpyHostToDevice));                                  // _ptds
  std::fill(h_out, h_out + kRows * kCols, -1);
  TCK(g_fail, tid, cudaMemcpy2DAsync(h_out, kCols * sizeof(int), d2, pitch, kCols * sizeof(int),
                                     kRows, cudaMemcpyDeviceToHost, 0));                  // _ptsz
  TCK(g_fail, tid, cudaStreamSynchronize(0));
  for (int i = 0; i < kRows * kCols; ++i)
    if (h_out[i] != h_in[i]) {
      g_fail.set("thread " + std::to_string(tid) + ": 2D copy element " + std::to_string(i));
      return false;
    }
  int sym[64], sym_back[64];
  for (int i = 0; i < 64; ++i) sym[i] = tid * 100 + i;
  TCK(g_fail, tid, cudaMemcpyToSymbol(g_sym, sym, sizeof sym, tid * sizeof sym));  // _ptds
  sym_square<<<1, 64>>>(tid);
  TCK(g_fail, tid, cudaGetLastError());
  TCK(g_fail, tid, cudaMemcpyFromSymbol(sym_back, g_sym, sizeof sym_back, tid * sizeof sym));
  for (int i = 0; i < 64; ++i)
    if (sym_back[i] != sym[i] * sym[i]) {
      g_fail.set("thread " + std::to_string(tid) + ": symbol element " + std::to_string(i));
      return false;
    }

  TCK(g_fail, tid, cudaEventDestroy(ev));
  TCK(g_fail, tid, cudaFree(d2));
  TCK(g_fail, tid, cudaFree(d_in));
  TCK(g_fail, tid, cudaFree(d_out));
  TCK(g_fail, tid, cudaFree(d_acc));
  TCK(g_fail, tid, cudaFreeHost(h_in));
  TCK(g_fail, tid, cudaFreeHost(h_out));
  return true;
}

int main() {
  CK(cudaFree(nullptr));  // context up

  // --- 1. default streams of different threads are independent --------------------------------
  int* d_done;
  CK(cudaMalloc(&d_done, sizeof(int)));
  CK(cudaMemset(d_done, 0, sizeof(int)));
  const int n = 1 << 16;
  int *d_a, *d_b, *h_a, *h_b;
  CK(cudaMalloc(&d_a, n * sizeof(int)));
  CK(cudaMalloc(&d_b, n * sizeof(int)));
  CK(cudaMallocHost(&h_a, n * sizeof(int)));
  CK(cudaMallocHost(&h_b, n * sizeof(int)));
  for (int i = 0; i < n; ++i) h_a[i] = i * 13 - 5;
  // Load both kernels now: with lazy loading, the first launch of a kernel may need a
  // context-wide synchronisation, which would wait for the spinning kernel below.
  spin_kernel<<<1, 32>>>(0, d_done);
  CK_LAUNCH("spin_kernel (warm-up)");
  affine<<<1, 32>>>(d_a, d_b, 0, 1, 0);
  CK_LAUNCH("affine (warm-up)");
  CK(cudaMemset(d_done, 0, sizeof(int)));
  CK(cudaDeviceSynchronize());

  cudaEvent_t spin_done;
  CK(cudaEventCreateWithFlags(&spin_done, cudaEventDisableTiming));
  std::atomic<int> stage{0};
  cudaError_t spinner_err = cudaSuccess;       // written before stage = 1
  cudaError_t spinner_sync_err = cudaSuccess;  // read only after join
  std::thread spinner([&] {
    spin_kernel<<<1, 32>>>(300ull * 1000 * 1000, d_done);  // this thread's default stream
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaEventRecord(spin_done, 0);
    spinner_err = e;
    stage.store(1);
    if (e == cudaSuccess) spinner_sync_err = cudaStreamSynchronize(0);
  });
  while (stage.load() == 0) std::this_thread::yield();
  if (spinner_err != cudaSuccess) {
    spinner.join();
    gpu_test::fail_cuda("spinner thread launch/record", spinner_err, __FILE__, __LINE__);
  }
  const auto t0 = std::chrono::steady_clock::now();
  CK(cudaMemcpyAsync(d_a, h_a, n * sizeof(int), cudaMemcpyHostToDevice, 0));
  affine<<<32, 256>>>(d_a, d_b, n, 2, 1);
  CK_LAUNCH("affine (main thread)");
  CK(cudaMemcpyAsync(h_b, d_b, n * sizeof(int), cudaMemcpyDeviceToHost, 0));
  CK(cudaStreamSynchronize(0));
  const double main_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const cudaError_t spin_state = cudaEventQuery(spin_done);
  for (int i = 0; i < n; ++i)
    if (h_b[i] != h_a[i] * 2 + 1) {
      spinner.join();
      gpu_test::fail("main thread default stream: element %d = %d", i, h_b[i]);
    }
  spinner.join();
  if (spinner_sync_err != cudaSuccess)
    gpu_test::fail_cuda("spinner thread cudaStreamSynchronize(0)", spinner_sync_err, __FILE__,
                        __LINE__);
  if (spin_state != cudaErrorNotReady)
    gpu_test::fail("main thread's default-stream work waited for another thread's 300 ms kernel "
                   "(took %.1f ms; event query %s): default streams are not per-thread",
                   main_ms, cudaGetErrorName(spin_state));
  int done = 0;
  CK(cudaMemcpy(&done, d_done, sizeof done, cudaMemcpyDeviceToHost));
  if (done != 1) gpu_test::fail("spin kernel did not complete");
  CK(cudaEventDestroy(spin_done));
  CK(cudaFree(d_done));
  CK(cudaFree(d_a));
  CK(cudaFree(d_b));
  CK(cudaFreeHost(h_a));
  CK(cudaFreeHost(h_b));

  // --- 2. concurrent workers ---------------------------------------------------------------------
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back([t] { worker(t); });
  for (auto& th : threads) th.join();
  if (g_fail.failed()) gpu_test::fail("%s", g_fail.message().c_str());
  CK(cudaDeviceSynchronize());
  gpu_test::pass("main default stream done in %.1f ms while another thread's 300 ms kernel ran; "
                 "%d threads x %d iterations + 2D + symbol copies on per-thread default streams",
                 main_ms, kThreads, kIters);
  return 0;
}
