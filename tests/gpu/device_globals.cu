// device_globals: __device__ variables and arrays (one statically initialised), written by
// kernels and read back with cudaMemcpyFromSymbol; cudaMemcpyToSymbol; cudaGetSymbolAddress
// then cudaMemcpy / cudaMemset / a kernel argument on that pointer; cudaGetSymbolSize.
#define GPU_TEST_NAME "device_globals"
#include "gpu_test.h"

#include <cstring>
#include <vector>

constexpr int kArray = 1000;
constexpr int kBig = 4096;

struct Stats {
  int count;
  int max_seen;
  unsigned long long sum;
};

__device__ int g_counter;
__device__ float g_array[kArray];
__device__ unsigned long long g_big[kBig];
__device__ Stats g_stats;
__device__ int g_initialised[3] = {7, -8, 9};
__device__ double g_scalar = 2.5;

__global__ void write_globals(int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    g_array[i] = 0.5f * float(i) - 3.0f;
    atomicAdd(&g_counter, 1);
    atomicMax(&g_stats.max_seen, i);
    atomicAdd(&g_stats.sum, static_cast<unsigned long long>(i));
  }
  if (i == 0) g_stats.count = n;
}

// Uses g_big by name; the host reaches the same memory through cudaGetSymbolAddress.
__global__ void transform_big() {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < kBig) g_big[i] = g_big[i] * 3 + static_cast<unsigned long long>(i);
}

// Same memory through a pointer argument (the symbol address passed from the host).
__global__ void add_through_pointer(unsigned long long* p, int n, unsigned long long v) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += v;
}

__global__ void read_scalar(double* out) { *out = g_scalar * g_initialised[1]; }

int main() {
  // Statically initialised globals come from the module image.
  int init[3] = {0, 0, 0};
  CK(cudaMemcpyFromSymbol(init, g_initialised, sizeof init));
  if (init[0] != 7 || init[1] != -8 || init[2] != 9)
    gpu_test::fail("g_initialised = {%d,%d,%d}, want {7,-8,9}", init[0], init[1], init[2]);

  // Sizes.
  size_t sz = 0;
  CK(cudaGetSymbolSize(&sz, g_big));
  if (sz != sizeof(unsigned long long) * kBig)
    gpu_test::fail("cudaGetSymbolSize(g_big) = %zu, want %zu", sz,
                   sizeof(unsigned long long) * kBig);
  CK(cudaGetSymbolSize(&sz, g_counter));
  if (sz != sizeof(int)) gpu_test::fail("cudaGetSymbolSize(g_counter) = %zu", sz);
  CK(cudaGetSymbolSize(&sz, g_stats));
  if (sz != sizeof(Stats)) gpu_test::fail("cudaGetSymbolSize(g_stats) = %zu", sz);

  // Kernel writes; host reads with cudaMemcpyFromSymbol.
  const int zero = 0;
  const Stats zs{0, -1, 0};
  CK(cudaMemcpyToSymbol(g_counter, &zero, sizeof zero));
  CK(cudaMemcpyToSymbol(g_stats, &zs, sizeof zs));
  const int n = 777;  // fewer than kArray: the tail keeps the pattern written below
  std::vector<float> pattern(kArray, -1234.5f);
  CK(cudaMemcpyToSymbol(g_array, pattern.data(), sizeof(float) * kArray));
  write_globals<<<(n + 127) / 128, 128>>>(n);
  CK_LAUNCH("write_globals");
  int counter = 0;
  Stats st{};
  std::vector<float> arr(kArray);
  CK(cudaMemcpyFromSymbol(&counter, g_counter, sizeof counter));
  CK(cudaMemcpyFromSymbol(&st, g_stats, sizeof st));
  CK(cudaMemcpyFromSymbol(arr.data(), g_array, sizeof(float) * kArray));
  if (counter != n) gpu_test::fail("g_counter = %d, want %d", counter, n);
  if (st.count != n || st.max_seen != n - 1 ||
      st.sum != static_cast<unsigned long long>(n) * (n - 1) / 2)
    gpu_test::fail("g_stats = {%d, %d, %llu}", st.count, st.max_seen, st.sum);
  for (int i = 0; i < kArray; ++i) {
    const float want = i < n ? 0.5f * float(i) - 3.0f : -1234.5f;
    if (arr[i] != want) gpu_test::fail("g_array[%d] = %g, want %g", i, arr[i], want);
  }

  // cudaGetSymbolAddress, then plain memory calls on that pointer.
  unsigned long long* p_big = nullptr;
  CK(cudaGetSymbolAddress(reinterpret_cast<void**>(&p_big), g_big));
  if (p_big == nullptr) gpu_test::fail("cudaGetSymbolAddress(g_big) returned NULL");
  cudaPointerAttributes attr{};
  CK(cudaPointerGetAttributes(&attr, p_big));
  if (attr.type != cudaMemoryTypeDevice)
    gpu_test::fail("cudaPointerGetAttributes(symbol address).type = %d, want device",
                   static_cast<int>(attr.type));
  std::vector<unsigned long long> big(kBig), back(kBig);
  gpu_test::Rng rng(0x5eed0006);
  for (auto& v : big) v = rng.next() >> 4;
  CK(cudaMemcpy(p_big, big.data(), sizeof(unsigned long long) * kBig, cudaMemcpyHostToDevice));
  transform_big<<<kBig / 256, 256>>>();
  CK_LAUNCH("transform_big");
  add_through_pointer<<<kBig / 256, 256>>>(p_big, kBig, 1000);
  CK_LAUNCH("add_through_pointer");
  CK(cudaMemcpy(back.data(), p_big, sizeof(unsigned long long) * kBig, cudaMemcpyDeviceToHost));
  for (int i = 0; i < kBig; ++i) {
    const unsigned long long want = big[i] * 3 + i + 1000;
    if (back[i] != want) gpu_test::fail("g_big[%d] = %llu, want %llu", i, back[i], want);
  }
  // cudaMemset on the symbol address, checked through cudaMemcpyFromSymbol with an offset.
  CK(cudaMemset(p_big + 100, 0xAB, sizeof(unsigned long long) * 50));
  std::vector<unsigned long long> mid(60);
  CK(cudaMemcpyFromSymbol(mid.data(), g_big, sizeof(unsigned long long) * 60,
                          sizeof(unsigned long long) * 95));
  for (int k = 0; k < 60; ++k) {
    const int i = 95 + k;
    const unsigned long long want =
        (i >= 100 && i < 150) ? 0xABABABABABABABABull : big[i] * 3 + i + 1000;
    if (mid[k] != want)
      gpu_test::fail("after cudaMemset, g_big[%d] = 0x%llx, want 0x%llx", i, mid[k], want);
  }

  // A device-to-device copy between two symbols' addresses and a kernel reading an
  // initialised double.
  float* p_array = nullptr;
  CK(cudaGetSymbolAddress(reinterpret_cast<void**>(&p_array), g_array));
  CK(cudaMemcpy(p_array, p_big, sizeof(float) * 8, cudaMemcpyDeviceToDevice));
  float first8[8];
  CK(cudaMemcpyFromSymbol(first8, g_array, sizeof first8));
  const unsigned long long b4[4] = {big[0] * 3 + 1000, big[1] * 3 + 1 + 1000,
                                    big[2] * 3 + 2 + 1000, big[3] * 3 + 3 + 1000};
  static_assert(sizeof first8 == sizeof b4);
  if (std::memcmp(first8, b4, sizeof first8) != 0)
    gpu_test::fail("device-to-device copy between symbol addresses differs");
  double* d_out;
  CK(cudaMalloc(&d_out, sizeof(double)));
  read_scalar<<<1, 1>>>(d_out);
  CK_LAUNCH("read_scalar");
  double out = 0;
  CK(cudaMemcpy(&out, d_out, sizeof out, cudaMemcpyDeviceToHost));
  if (out != -20.0) gpu_test::fail("g_scalar * g_initialised[1] = %g, want -20", out);
  CK(cudaFree(d_out));
  gpu_test::pass("6 __device__ symbols: kernel writes + cudaMemcpyFromSymbol, "
                 "cudaGetSymbolAddress + cudaMemcpy/cudaMemset/kernel arg, cudaGetSymbolSize x3, "
                 "static initialisers");
  return 0;
}
