// peer_copy: with two or more devices, cudaDeviceCanAccessPeer (both directions),
// cudaMemcpyPeer and cudaMemcpyPeerAsync (work with or without peer access), then
// cudaDeviceEnablePeerAccess and a kernel on device 0 reading device 1 memory directly,
// cudaMemcpy with cudaMemcpyDefault across devices (UVA), cudaDeviceDisablePeerAccess;
// enabling twice reports cudaErrorPeerAccessAlreadyEnabled. With fewer than two devices:
// "SKIP peer_copy: needs 2 GPUs", exit 77.
#define GPU_TEST_NAME "peer_copy"
#include "gpu_test.h"

#include <vector>

__global__ void read_remote(const int* remote, int* local, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    local[i] = remote[i] + 1;
}

int main() {
  int count = 0;
  CK(cudaGetDeviceCount(&count));
  if (count < 2) {
    std::printf("SKIP %s: needs 2 GPUs (found %d)\n", GPU_TEST_NAME, count);
    return 77;
  }
  const int n = 1 << 22;  // 16 MiB
  const size_t bytes = n * sizeof(int);
  std::vector<int> h(n), back(n);
  gpu_test::Rng rng(0x5eed000f);
  for (auto& v : h) v = static_cast<int>(rng.u32() >> 1);

  int can01 = 0, can10 = 0;
  CK(cudaDeviceCanAccessPeer(&can01, 0, 1));
  CK(cudaDeviceCanAccessPeer(&can10, 1, 0));

  int *d0, *d0b, *d1;
  CK(cudaSetDevice(0));
  CK(cudaMalloc(&d0, bytes));
  CK(cudaMalloc(&d0b, bytes));
  CK(cudaMemcpy(d0, h.data(), bytes, cudaMemcpyHostToDevice));
  CK(cudaSetDevice(1));
  CK(cudaMalloc(&d1, bytes));
  CK(cudaMemset(d1, 0, bytes));
  CK(cudaDeviceSynchronize());

  // Without peer access enabled (staged by the driver if needed).
  CK(cudaMemcpyPeer(d1, 1, d0, 0, bytes));
  CK(cudaMemcpy(back.data(), d1, bytes, cudaMemcpyDeviceToHost));
  if (back != h) gpu_test::fail("cudaMemcpyPeer 0 -> 1 differs");
  cudaStream_t s1;
  CK(cudaStreamCreate(&s1));  // on device 1
  CK(cudaSetDevice(0));
  CK(cudaMemset(d0b, 0, bytes));
  CK(cudaDeviceSynchronize());
  CK(cudaSetDevice(1));
  CK(cudaMemcpyPeerAsync(d0b, 0, d1, 1, bytes, s1));
  CK(cudaStreamSynchronize(s1));
  CK(cudaSetDevice(0));
  CK(cudaMemcpy(back.data(), d0b, bytes, cudaMemcpyDeviceToHost));
  if (back != h) gpu_test::fail("cudaMemcpyPeerAsync 1 -> 0 differs");

  // Direct access from a kernel on device 0 to device 1 memory.
  int direct_checked = 0;
  if (can01) {
    CK(cudaSetDevice(0));
    CK(cudaDeviceEnablePeerAccess(1, 0));
    const cudaError_t again = cudaDeviceEnablePeerAccess(1, 0);
    if (again != cudaErrorPeerAccessAlreadyEnabled)
      gpu_test::fail("second cudaDeviceEnablePeerAccess returned %s, want "
                     "cudaErrorPeerAccessAlreadyEnabled",
                     cudaGetErrorName(again));
    (void)cudaGetLastError();
    read_remote<<<256, 256>>>(d1, d0b, n);
    CK_LAUNCH("read_remote");
    CK(cudaMemcpy(back.data(), d0b, bytes, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i)
      if (back[i] != h[i] + 1) gpu_test::fail("peer read element %d = %d", i, back[i]);
    direct_checked = n;
    // cudaMemcpyDefault between devices (UVA resolves both sides).
    CK(cudaMemcpy(d0b, d1, bytes, cudaMemcpyDefault));
    CK(cudaMemcpy(back.data(), d0b, bytes, cudaMemcpyDeviceToHost));
    if (back != h) gpu_test::fail("cudaMemcpy(cudaMemcpyDefault) device 1 -> 0 differs");
    CK(cudaDeviceDisablePeerAccess(1));
  } else {
    gpu_test::info("devices 0 and 1 cannot access each other: direct-access part skipped");
  }

  CK(cudaSetDevice(1));
  CK(cudaStreamDestroy(s1));
  CK(cudaFree(d1));
  CK(cudaSetDevice(0));
  CK(cudaFree(d0));
  CK(cudaFree(d0b));
  gpu_test::pass("%d devices, can access peer 0->1 %d 1->0 %d, cudaMemcpyPeer[Async] 16 MiB "
                 "both ways exact, %d elements read directly",
                 count, can01, can10, direct_checked);
  return 0;
}
