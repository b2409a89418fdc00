// multi_device_compute: one computation spread over every device. Each device computes its
// slice of y = a*x + b (a kernel per device, on its own stream), the slices come back and are
// checked; then device 0's result goes to every other device with cudaMemcpyPeer and a kernel
// there squares it in place, and device k's squares come back to device 0 with
// cudaMemcpy(cudaMemcpyDefault) and are checked element by element. Runs with any number of
// devices (one device: the peer half is skipped); under Remora with REMORA_SERVER naming
// several servers, the devices are those servers' GPUs (tests/gpu/multi-server-gpu.sh) and
// the peer copies cross servers.
#define GPU_TEST_NAME "multi_device_compute"
#include "gpu_test.h"

#include <vector>

__global__ void axpb(const float* x, float* y, float a, float b, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = a * x[i] + b;
}

__global__ void square(float* v, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) v[i] = v[i] * v[i];
}

int main() {
  int count = 0;
  CK(cudaGetDeviceCount(&count));
  if (count < 1) gpu_test::fail("no device");
  const int n = 1 << 22;  // 16 MiB of floats in all
  const int slice = (n + count - 1) / count;
  std::vector<float> x(n), y(n);
  gpu_test::Rng rng(0x5eed0016);
  for (auto& v : x) v = static_cast<float>(rng.u32() % 2048) / 64.0f;
  const float a = 1.5f, b = -3.0f;

  std::vector<float*> dx(count), dy(count);
  std::vector<cudaStream_t> streams(count);
  for (int d = 0; d < count; ++d) {
    const int lo = d * slice, len = std::min(slice, n - lo);
    CK(cudaSetDevice(d));
    CK(cudaStreamCreate(&streams[d]));
    CK(cudaMalloc(&dx[d], slice * sizeof(float)));
    CK(cudaMalloc(&dy[d], slice * sizeof(float)));
    CK(cudaMemcpyAsync(dx[d], x.data() + lo, len * sizeof(float), cudaMemcpyHostToDevice, streams[d]));
    axpb<<<128, 256, 0, streams[d]>>>(dx[d], dy[d], a, b, len);
    CK_LAUNCH("axpb");
    CK(cudaMemcpyAsync(y.data() + lo, dy[d], len * sizeof(float), cudaMemcpyDeviceToHost, streams[d]));
  }
  for (int d = 0; d < count; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaStreamSynchronize(streams[d]));
  }
  for (int i = 0; i < n; ++i)
    if (y[i] != a * x[i] + b) gpu_test::fail("y[%d] = %f, want %f (device %d)", i, y[i], a * x[i] + b, i / slice);

  // Device 0's slice to every other device, squared there, and back to device 0.
  std::vector<float> back(slice);
  float* d0 = nullptr;
  CK(cudaSetDevice(0));
  CK(cudaMalloc(&d0, slice * sizeof(float)));
  for (int d = 1; d < count; ++d) {
    CK(cudaMemcpyPeer(dx[d], d, dy[0], 0, slice * sizeof(float)));
    CK(cudaSetDevice(d));
    square<<<128, 256, 0, streams[d]>>>(dx[d], slice);
    CK_LAUNCH("square");
    CK(cudaStreamSynchronize(streams[d]));
    CK(cudaSetDevice(0));
    CK(cudaMemcpy(d0, dx[d], slice * sizeof(float), cudaMemcpyDefault));
    CK(cudaMemcpy(back.data(), d0, slice * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < slice; ++i)
      if (back[i] != y[i] * y[i]) gpu_test::fail("device %d: square[%d] = %f, want %f", d, i, back[i], y[i] * y[i]);
  }
  for (int d = 0; d < count; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaFree(dx[d]));
    CK(cudaFree(dy[d]));
    CK(cudaStreamDestroy(streams[d]));
  }
  CK(cudaSetDevice(0));
  CK(cudaFree(d0));
  gpu_test::pass("%d device(s), %d elements, %d peer round trip(s) checked", count, n, count - 1);
  return 0;
}
