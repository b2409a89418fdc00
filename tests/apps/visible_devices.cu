// Prints the devices a process sees through the runtime, the driver API and NVML, one line
// each, so that runs under different CUDA_VISIBLE_DEVICES values (and natively) can be
// compared (integration.visible_devices_test; tests/gpu/visible-devices.sh on a GPU):
//   runtime <count> <cudaGetDeviceCount's error name> <uuid>...
//   driver <count> <cuInit's error name> <uuid>...
//   nvml <count> <uuid>...        (NVML is not filtered by CUDA_VISIBLE_DEVICES)
// and, per visible device, "alloc <ordinal> <address of a new allocation / 2^40>".
// Exits 0 unless a call fails in a way none of the three ever should.
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace {

std::string Uuid(const unsigned char* u) {
  char s[48];
  std::snprintf(s, sizeof(s), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2],
                u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  return s;
}

int Nvml() {
  void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    std::printf("nvml unavailable\n");
    return 0;
  }
  using Init = int (*)();
  using Count = int (*)(unsigned*);
  using ByIndex = int (*)(unsigned, void**);
  using GetUuid = int (*)(void*, char*, unsigned);
  auto init = reinterpret_cast<Init>(dlsym(h, "nvmlInit_v2"));
  auto count = reinterpret_cast<Count>(dlsym(h, "nvmlDeviceGetCount_v2"));
  auto by_index = reinterpret_cast<ByIndex>(dlsym(h, "nvmlDeviceGetHandleByIndex_v2"));
  auto uuid = reinterpret_cast<GetUuid>(dlsym(h, "nvmlDeviceGetUUID"));
  if (!init || !count || !by_index || !uuid || init() != 0) {
    std::printf("nvml unavailable\n");
    return 0;
  }
  unsigned n = 0;
  if (count(&n) != 0) return 1;
  std::printf("nvml %u", n);
  for (unsigned i = 0; i < n; i++) {
    void* d = nullptr;
    char text[96] = {};
    if (by_index(i, &d) != 0 || uuid(d, text, sizeof(text)) != 0) return 1;
    std::printf(" %s", text);
  }
  std::printf("\n");
  return 0;
}

}  // namespace

int main() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  std::printf("runtime %d %s", n, cudaGetErrorName(e));
  for (int i = 0; i < n; i++) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) return 1;
    std::printf(" %s", Uuid(reinterpret_cast<const unsigned char*>(p.uuid.bytes)).c_str());
  }
  std::printf("\n");
  // Where each visible device's memory comes from (on the host-emulated backend the address
  // tells the server's GPU: 1 TiB apart), so a test can see that ordinals reach the devices
  // they name.
  for (int i = 0; i < n; i++) {
    void* p = nullptr;
    if (cudaSetDevice(i) != cudaSuccess || cudaMalloc(&p, 4096) != cudaSuccess) return 1;
    std::printf("alloc %d %llu\n", i, static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(p) >> 40));
    if (cudaFree(p) != cudaSuccess) return 1;
  }
  if (n > 0 && cudaSetDevice(0) != cudaSuccess) return 1;
  CUresult r = cuInit(0);
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  int dn = 0;
  if (r == CUDA_SUCCESS && cuDeviceGetCount(&dn) != CUDA_SUCCESS) return 1;
  std::printf("driver %d %s", dn, name ? name : "?");
  for (int i = 0; i < dn; i++) {
    CUdevice d;
    CUuuid u;
    if (cuDeviceGet(&d, i) != CUDA_SUCCESS || cuDeviceGetUuid_v2(&u, d) != CUDA_SUCCESS) return 1;
    std::printf(" %s", Uuid(reinterpret_cast<const unsigned char*>(u.bytes)).c_str());
  }
  std::printf("\n");
  return Nvml();
}
